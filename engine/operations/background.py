"""Remove the background with BEN2 or U²-Net-p.

Both take a static square RGB input (BEN2 1024², U²-Net-p 320²), read from the session, and
give a sigmoid mask; BEN2's official export declares it float16. Pre-processing: RGB (alpha
dropped), bilinear resize to the square without keeping the aspect, normalisation from the
`normalization` option ("imagenet", the default, or "zero_one"). Post-processing as BEN2's
reference: the first output, bilinear resize back to the image size, min-max stretch.

Options (`BackgroundOptions`): `normalization`; `refine_foreground` (default off) replaces the
cut-out's colours by a blur-fusion foreground estimate so soft edges carry no background halo;
`input_size` for a model whose input size is dynamic (default 1024).

Products: `<stem>-cutout.png` (RGBA, 16-bit for 16-bit inputs, alpha = mask × the input's own
alpha) and `<stem>-mask.png` (8-bit grey). Several frames: see engine/operations/postprocess.py.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from PIL import Image

from engine.io.image import DecodedImage, from_float
from engine.models.contracts import ModelSpec
from engine.operations.base import OperationBase, RunContext
from engine.operations.foreground import estimate_foreground
from engine.operations.pixels import (
    alpha_float,
    input_dtype,
    min_max,
    normalise,
    plane,
    quantise,
    resize_bilinear,
    resize_image,
    rgb_float,
    to_nchw,
)
from engine.operations.products import data_meta, write_frames
from engine.options import (
    BackgroundConfig,
    BackgroundOptions,
    Normalization,
    OperationOptions,
    of_type,
    settle,
)
from engine.requests import Operation, Product, ProductKind, ProgressKind


class RemoveBackground(OperationBase):
    operation: ClassVar[Operation] = Operation.REMOVE_BACKGROUND
    products: ClassVar[tuple[str, ...]] = ("cutout.png", "mask.png")
    config = BackgroundConfig(Normalization.IMAGENET, 1024, refine_foreground=False)

    def configure(self, options: OperationOptions, spec: ModelSpec) -> None:
        given = of_type(options, BackgroundOptions) or BackgroundOptions()
        self.config = settle(given, of_type(spec.defaults, BackgroundOptions))

    def minimal_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        if c.fixed_size is not None:
            return None
        return {c.image_input: np.zeros((1, 3, 32, 32), input_dtype(c))}

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        size = c.fixed_size or (self.config.input_size,) * 2
        cutouts: list[np.ndarray] = []
        masks: list[np.ndarray] = []
        n = len(image.frames)
        for index, frame in enumerate(image.frames):
            ctx.start_frame(index, n, 1)
            rgb = rgb_float(frame)
            model_in = normalise(
                resize_image(rgb, size[0], size[1], Image.Resampling.BILINEAR),
                self.config.normalization,
            )
            result = ctx.run(
                {c.image_input: to_nchw(model_in, input_dtype(c))}, outputs=[c.image_output]
            )[0]
            h, w = frame.shape[:2]
            matte = min_max(resize_bilinear(plane(result), h, w))
            masks.append(quantise(matte, 8))
            cutouts.append(_cutout(frame, rgb, matte, self.config.refine_foreground))
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
