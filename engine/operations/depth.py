"""Depth with Depth Anything 3 (community ONNX exports).

Input: 1×3×H×W or 1×N×3×H×W float32 RGB with ImageNet normalisation (the `normalization`
option), H and W multiples of 14; read from the session whether H×W is fixed or dynamic.
- Dynamic: the longest side goes to `process_res` (default 504) with the aspect kept, then
  each side to the nearest multiple of 14 (upstream `upper_bound_resize`); box filter when
  shrinking, bicubic when enlarging (upstream: INTER_AREA / INTER_CUBIC).
- Fixed: the image is resized to fit inside, centred, padded with the ImageNet mean colour (0
  after normalisation); the valid region of the result is cropped back.
A fixed view count N > 1 gets the frame in every view; view 0's depth is kept.
Every map is resized back to the input size bilinearly.

DA3 depth is positive depth (exp activation): far is large. Products:
- `<stem>-depth.tif`: float32, the raw depth values.
- `<stem>-depth.png`: 16-bit grey, **near is bright**, linear in depth over the request's
  range: v = 1 + round((max − d) / (max − min) · 65534), v = 0 reserved for "no depth"
  (never used here). min and max are in the PNG's `tessera` tEXt chunk (JSON), so
  d = max − (v − 1) / 65534 · (max − min).
- `<stem>-depth-preview.png`: Turbo colours of the same normalised value (near is red).
- `<stem>-depth-conf.tif` (float32) when the model has `depth_conf`, `<stem>-sky.png` (255
  where sky ≥ 0.5) when it has `sky`.
All frames of one request share one depth range, so a sequence does not flicker: the float
products are written as each frame runs, the maps wait at the model's resolution (on disk for
a sequence, engine/io/spill.py) until every frame ran, and the 16-bit and preview products are
then made from them. Every full-size product is made a band of rows at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from PIL import Image

from engine.io.image import DecodedImage, Rows
from engine.io.spill import FrameSpill
from engine.models.contracts import Contract, ModelSpec
from engine.operations.base import OperationBase, RunContext
from engine.operations.colormap import turbo
from engine.operations.depth_codec import depth_text, encode_depth16, nearness
from engine.operations.frames_ahead import FramesAhead
from engine.operations.pixels import (
    Bilinear,
    input_dtype,
    normalise,
    plane,
    resize_planes,
)
from engine.operations.products import Products, data_meta
from engine.options import (
    DepthConfig,
    DepthOptions,
    Normalization,
    OperationOptions,
    of_type,
    settle,
)
from engine.requests import Operation, Product, ProductKind, ProgressKind

PATCH = 14


def _outputs(c: Contract) -> list[str]:
    return [n for n in (c.image_output, c.confidence_output, c.sky_output) if n is not None]


def _feed(c: Contract, chw: np.ndarray) -> np.ndarray:
    """1×3×H×W, or the frame in every view of 1×N×3×H×W."""
    if c.views is None:
        tensor = chw[None]
    else:
        tensor = np.repeat(chw[None, None], c.views, axis=1)
    return np.ascontiguousarray(tensor, dtype=input_dtype(c))


def _nearest_multiple(x: int, p: int = PATCH) -> int:
    down = (x // p) * p
    up = down + p
    return max(p, up if up - x <= x - down else down)


def upper_bound_size(height: int, width: int, process_res: int) -> tuple[int, int]:
    """Upstream upper_bound_resize: longest side to process_res, then multiples of 14."""
    longest = max(height, width)
    if longest != process_res:
        scale = process_res / longest
        height, width = max(1, round(height * scale)), max(1, round(width * scale))
    return _nearest_multiple(height), _nearest_multiple(width)


@dataclass(frozen=True)
class Placement:
    """Where the resized image lies in the model input: size (h, w) at offset (y, x)."""

    model_hw: tuple[int, int]
    image_hw: tuple[int, int]
    offset: tuple[int, int]


def placement(
    fixed: tuple[int, int] | None, height: int, width: int, process_res: int
) -> Placement:
    if fixed is None:
        hw = upper_bound_size(height, width, process_res)
        return Placement(hw, hw, (0, 0))
    fh, fw = fixed
    scale = min(fh / height, fw / width)
    h = min(fh, max(1, round(height * scale)))
    w = min(fw, max(1, round(width * scale)))
    return Placement(fixed, (h, w), ((fh - h) // 2, (fw - w) // 2))


def _model_input(frame: np.ndarray, place: Placement, norm: Normalization) -> np.ndarray:
    h, w = place.image_hw
    grows = h > frame.shape[0] or w > frame.shape[1]
    resample = Image.Resampling.BICUBIC if grows else Image.Resampling.BOX
    resized = resize_planes(frame, h, w, resample)
    # Pad value 0 after normalisation is the ImageNet mean colour.
    chw = np.zeros((3, *place.model_hw), np.float32)
    y, x = place.offset
    chw[:, y : y + h, x : x + w] = normalise(np.clip(resized, 0.0, 1.0), norm).transpose(2, 0, 1)
    return chw


class Depth(OperationBase):
    operation: ClassVar[Operation] = Operation.DEPTH
    config = DepthConfig(Normalization.IMAGENET, 504)

    def configure(self, options: OperationOptions, spec: ModelSpec) -> None:
        given = of_type(options, DepthOptions) or DepthOptions()
        self.config = settle(given, of_type(spec.defaults, DepthOptions))

    def minimal_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        if c.fixed_size is not None:
            return None
        return {c.image_input: _feed(c, np.zeros((3, PATCH, PATCH), np.float32))}

    def full_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        if c.fixed_size is None:
            return None
        return {c.image_input: _feed(c, np.zeros((3, *c.fixed_size), np.float32))}

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        outputs = _outputs(c)
        width, height = image.size
        place = placement(c.fixed_size, height, width, self.config.process_res)
        y, x = place.offset
        h, w = place.image_hw
        n = len(image.frames)
        meta = data_meta(image)
        shape = (height, width, 1)
        with (
            Products(ctx, image) as products,
            FrameSpill() as depths,
            FramesAhead(image.frames) as frames,
        ):
            # Made in this order, published in this order.
            floats = products.float_product("depth", ProductKind.DEPTH_FLOAT)
            encoded = products.image_product("depth", ProductKind.DEPTH16, meta, text={})
            previews = products.image_product("depth-preview", ProductKind.DEPTH_PREVIEW, meta)
            confs = products.float_product("depth-conf", ProductKind.CONFIDENCE)
            skies = products.image_product("sky", ProductKind.SKY, meta)
            lo, hi = np.inf, -np.inf
            for index, frame in enumerate(frames):
                ctx.start_frame(index, n, 1)
                chw = _model_input(frame, place, self.config.normalization)
                results = ctx.run({c.image_input: _feed(c, chw)}, outputs=outputs)
                # Kept at the model's resolution: small; the products are made from it band by
                # band at the image's size, in a second pass once the depth range is known.
                maps = {
                    name: plane(result)[y : y + h, x : x + w].copy()
                    for name, result in zip(outputs, results, strict=True)
                }
                depth = Bilinear(maps[c.image_output], height, width)
                products.add(floats, Rows(shape, _F32, _float_rows(depth)))
                for _, _, band in depth.bands():
                    finite = band[np.isfinite(band)]
                    if finite.size:
                        lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
                if c.confidence_output is not None:
                    conf = Bilinear(maps[c.confidence_output], height, width)
                    products.add(confs, Rows(shape, _F32, _float_rows(conf)))
                if c.sky_output is not None:
                    sky = Bilinear(maps[c.sky_output], height, width)
                    products.add(skies, Rows(shape, _U8, _sky_rows(sky)))
                depths.append(maps[c.image_output])
                ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
            if lo > hi:  # no finite depth anywhere
                lo = hi = 0.0
            encoded.text = depth_text(lo, hi, "relative")
            for small in depths:
                depth = Bilinear(small, height, width)
                products.add(encoded, Rows(shape, _U16, _encoded_rows(depth, lo, hi)))
                products.add(previews, Rows((height, width, 3), _U8, _preview_rows(depth, lo, hi)))
            return products.publish()


_F32, _U16, _U8 = np.dtype(np.float32), np.dtype(np.uint16), np.dtype(np.uint8)


RowMaker = Callable[[int, int], np.ndarray]


def _float_rows(values: Bilinear) -> RowMaker:
    return lambda start, stop: values.rows(start, stop)[..., None]


def _sky_rows(sky: Bilinear) -> RowMaker:
    return lambda start, stop: np.where(sky.rows(start, stop) >= 0.5, 255, 0).astype(np.uint8)[
        ..., None
    ]


def _encoded_rows(depth: Bilinear, lo: float, hi: float) -> RowMaker:
    return lambda start, stop: encode_depth16(depth.rows(start, stop), lo, hi)[..., None]


def _preview_rows(depth: Bilinear, lo: float, hi: float) -> RowMaker:
    return lambda start, stop: turbo(nearness(depth.rows(start, stop), lo, hi))
