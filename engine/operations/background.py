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
alpha) and `<stem>-mask.png` (8-bit grey). Several frames: see engine/operations/products.py.
Both are made a band of rows at a time from the model's small mask, so a 12 Mpx photo never
has a full-size float copy (except with `refine_foreground`, whose blur fusion needs them).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from PIL import Image

from engine.io.image import DecodedImage, Rows, from_float
from engine.models.contracts import ModelSpec
from engine.operations.base import OperationBase, RunContext
from engine.operations.foreground import estimate_foreground
from engine.operations.frames_ahead import FramesAhead
from engine.operations.pixels import (
    Bilinear,
    alpha_float,
    input_dtype,
    normalise,
    plane,
    quantise,
    resize_planes,
    rgb_float,
    to_nchw,
)
from engine.operations.products import Products, data_meta
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
    config = BackgroundConfig(Normalization.IMAGENET, 1024, refine_foreground=False)

    def configure(self, options: OperationOptions, spec: ModelSpec) -> None:
        given = of_type(options, BackgroundOptions) or BackgroundOptions()
        self.config = settle(given, of_type(spec.defaults, BackgroundOptions))

    def minimal_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        if c.fixed_size is not None:
            return None
        return {c.image_input: np.zeros((1, 3, 32, 32), input_dtype(c))}

    def full_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        if c.fixed_size is None:
            return None
        return {c.image_input: np.zeros((1, 3, *c.fixed_size), input_dtype(c))}

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        size = c.fixed_size or (self.config.input_size,) * 2
        n = len(image.frames)
        with Products(ctx, image) as products, FramesAhead(image.frames) as frames:
            cutouts = products.image_product("cutout", ProductKind.IMAGE, image.meta)
            masks = products.image_product("mask", ProductKind.MASK, data_meta(image))
            for index, frame in enumerate(frames):
                ctx.start_frame(index, n, 1)
                model_in = normalise(
                    resize_planes(frame, size[0], size[1], Image.Resampling.BILINEAR),
                    self.config.normalization,
                )
                result = ctx.run(
                    {c.image_input: to_nchw(model_in, input_dtype(c))}, outputs=[c.image_output]
                )[0]
                h, w = frame.shape[:2]
                matte = _Matte(plane(result), h, w)
                products.add(masks, Rows((h, w, 1), np.dtype(np.uint8), matte.mask_rows))
                products.add(cutouts, _cutout(frame, matte, self.config.refine_foreground))
                ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
            return products.publish()


class _Matte:
    """The model's mask at the image's size, min-max stretched as the references do, made a
    band of rows at a time (at 12 Mpx a full-size float matte would be 48 MB)."""

    def __init__(self, mask: np.ndarray, height: int, width: int) -> None:
        self.resized = Bilinear(mask, height, width)
        self.lo, self.hi = self.resized.min_max()

    def rows(self, start: int, stop: int) -> np.ndarray:
        band = self.resized.rows(start, stop)
        if self.hi - self.lo <= 1e-12:  # a flat map stays as it is (min_max's rule)
            return np.clip(band, 0.0, 1.0).astype(np.float32)
        return ((band - self.lo) / (self.hi - self.lo)).astype(np.float32)

    def mask_rows(self, start: int, stop: int) -> np.ndarray:
        return quantise(self.rows(start, stop), 8)[..., None]


def _cutout(frame: np.ndarray, matte: _Matte, refine: bool) -> Rows | np.ndarray:
    """RGBA at the input's bit depth: colours kept (or refined), alpha = matte × input alpha."""
    bits = 16 if frame.dtype == np.uint16 else 8
    if refine:  # blur fusion works on the whole image at once: it needs the full-size floats
        h = frame.shape[0]
        own = alpha_float(frame)
        alpha = matte.rows(0, h) if own is None else matte.rows(0, h) * own
        colour = from_float(estimate_foreground(rgb_float(frame), alpha), bits)
        return np.concatenate([colour, quantise(alpha, bits)[..., None]], axis=2)

    def rows(start: int, stop: int) -> np.ndarray:
        part = frame[start:stop]
        own = alpha_float(part)
        alpha = matte.rows(start, stop)
        alpha = alpha if own is None else alpha * own
        colour = part[..., :3] if part.shape[2] >= 3 else np.repeat(part[..., :1], 3, axis=2)
        return np.concatenate([colour, quantise(alpha, bits)[..., None]], axis=2)

    return Rows((*frame.shape[:2], 4), frame.dtype, rows)
