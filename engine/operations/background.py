"""Remove the background with BEN2 or U²-Net-p.

Both take a static square RGB input (BEN2 1024², U²-Net-p 320²), read from the session, and
give a sigmoid mask; BEN2's official export declares it float16. Pre-processing: RGB (alpha
dropped), bilinear resize to the square without keeping the aspect, normalisation from the
`normalization` option ("imagenet", the default, or "zero_one"). Post-processing as BEN2's
reference: the first output, bilinear resize back to the image size, min-max stretch.

Options: `normalization`; `refine_foreground` (default off) replaces the cut-out's colours by a
blur-fusion foreground estimate so soft edges carry no background halo; `input_size` for a
model whose input size is dynamic (default 1024).

Products: `<stem>-cutout.png` (RGBA, 16-bit for 16-bit inputs, alpha = mask × the input's own
alpha) and `<stem>-mask.png` (8-bit grey). Several frames: see engine/operations/postprocess.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from PIL import Image

from engine.errors import ModelError
from engine.io.image import DecodedImage, from_float
from engine.operations.base import OperationBase, RunContext
from engine.operations.foreground import estimate_foreground
from engine.operations.pixels import (
    alpha_float,
    flag,
    input_dtype,
    min_max,
    normalise,
    normalization,
    plane,
    quantise,
    resize_bilinear,
    resize_image,
    rgb_float,
    to_nchw,
)
from engine.operations.products import data_meta, write_frames
from engine.requests import Operation, Product, ProductKind, ProgressKind
from engine.runtime.sessions import SessionEntry

DEFAULT_SIZE = 1024  # BEN2's side, for a model whose input size the graph leaves open


@dataclass(frozen=True)
class MatteModel:
    input_name: str
    output_name: str  # the first output: BEN2's only one, U²-Net's d0
    fixed: tuple[int, int] | None  # (h, w) of a static input
    dtype: type


def describe(entry: SessionEntry) -> MatteModel:
    session = entry.session
    inputs, outputs = session.get_inputs(), session.get_outputs()
    inp = inputs[0]
    shape = list(inp.shape)
    if len(shape) != 4:
        raise ModelError(
            f"{entry.key.model.name} is not a background model: its input has rank {len(shape)}, not 4."
        )
    h, w = shape[2], shape[3]
    fixed = (h, w) if isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0 else None
    return MatteModel(inp.name, outputs[0].name, fixed, input_dtype(inp.type))


class RemoveBackground(OperationBase):
    operation: ClassVar[Operation] = Operation.REMOVE_BACKGROUND

    def minimal_feeds(self, entry: SessionEntry) -> dict[str, np.ndarray] | None:
        info = describe(entry)
        if info.fixed is not None:
            return None
        return {info.input_name: np.zeros((1, 3, 32, 32), info.dtype)}

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        info = describe(ctx.entry)
        size = info.fixed or (int(ctx.option("input_size", DEFAULT_SIZE)),) * 2
        norm = normalization(ctx)
        refine = flag(ctx.option("refine_foreground", False))
        cutouts: list[np.ndarray] = []
        masks: list[np.ndarray] = []
        n = len(image.frames)
        for index, frame in enumerate(image.frames):
            ctx.start_frame(index, n, 1)
            rgb = rgb_float(frame)
            model_in = normalise(
                resize_image(rgb, size[0], size[1], Image.Resampling.BILINEAR), norm
            )
            result = ctx.run(
                {info.input_name: to_nchw(model_in, info.dtype)}, outputs=[info.output_name]
            )[0]
            h, w = frame.shape[:2]
            matte = min_max(resize_bilinear(plane(result), h, w))
            masks.append(quantise(matte, 8))
            cutouts.append(_cutout(frame, rgb, matte, refine))
            ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
        return [
            *write_frames(ctx, image, "cutout", cutouts, ProductKind.IMAGE, image.meta),
            *write_frames(ctx, image, "mask", masks, ProductKind.MASK, data_meta(image)),
        ]


def _cutout(frame: np.ndarray, rgb: np.ndarray, matte: np.ndarray, refine: bool) -> np.ndarray:
    """RGBA at the input's bit depth: colours kept (or refined), alpha = matte × input alpha."""
    bits = 16 if frame.dtype == np.uint16 else 8
    own_alpha = alpha_float(frame)
    alpha = matte if own_alpha is None else matte * own_alpha
    if refine:
        colour = from_float(estimate_foreground(rgb, alpha), bits)
    elif frame.shape[2] >= 3:
        colour = frame[..., :3]
    else:
        colour = np.repeat(frame[..., :1], 3, axis=2)
    return np.concatenate([colour, quantise(alpha, bits)[..., None]], axis=2)
