"""Resizing a finished image to the size a person asked for (the output step's target size).

Pillow's LANCZOS, in bands of output rows: each band is resampled from a slice of the source
that holds every pixel its filter reaches, so the result equals a whole-image resize while
Pillow's own copy (4 bytes per pixel) never spans more than a band of a 24000-pixel-wide ×4
output. Alpha is premultiplied for the filter, so colour under transparent pixels cannot bleed
into the edges. 8-bit frames stay 8-bit; 16-bit frames are filtered as 32-bit floats.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from engine.errors import PIXEL_LIMIT_LEVER, UsageError
from engine.io.image import fmt_pixels

LANCZOS_SUPPORT = 3.0  # Pillow's LANCZOS reaches 3 source pixels (× the shrink factor)
BAND_ROWS = 256  # output rows per band


def check_product_size(name: str, width: int, height: int, max_pixels: int) -> None:
    """Refuse a product over the pixel limit before anything is allocated for it: `--size
    65535` of a 64×48 image is a 3.2-gigapixel target, and the process would be killed."""
    total = width * height
    if total > max_pixels:
        raise UsageError(
            f"{name}: the product would be {width}×{height} pixels ({fmt_pixels(total)}); the "
            f"limit is {fmt_pixels(max_pixels)}. Choose a smaller output size or "
            f"{PIXEL_LIMIT_LEVER}."
        )


def resize_frame(frame: np.ndarray, width: int, height: int) -> np.ndarray:
    """An H×W×C uint8/uint16 frame (C = 1…4) resized to height×width×C, same dtype."""
    if frame.ndim != 3 or frame.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"resize_frame takes H×W×C uint8/uint16, got {frame.shape} {frame.dtype}")
    src_h, src_w, channels = frame.shape
    if (src_w, src_h) == (width, height):
        return frame
    out = np.empty((height, width, channels), frame.dtype)
    scale_y = src_h / height
    margin = math.ceil(LANCZOS_SUPPORT * max(1.0, scale_y)) + 2
    for y0 in range(0, height, BAND_ROWS):
        y1 = min(height, y0 + BAND_ROWS)
        top, bottom = y0 * scale_y, y1 * scale_y  # the band's box in source rows
        s0 = max(0, math.floor(top) - margin)
        s1 = min(src_h, math.ceil(bottom) + margin)
        box = (0.0, top - s0, float(src_w), bottom - s0)
        out[y0:y1] = _resize_band(frame[s0:s1], width, y1 - y0, box)
    return out


def _resize_band(
    part: np.ndarray, width: int, height: int, box: tuple[float, float, float, float]
) -> np.ndarray:
    channels = part.shape[2]
    if part.dtype == np.uint8 and channels in (1, 3, 4):
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
        # Pillow premultiplies RGBA itself before filtering.
        image = Image.fromarray(part[..., 0] if channels == 1 else part, mode)
        resized = np.asarray(image.resize((width, height), Image.Resampling.LANCZOS, box=box))
        return resized.reshape(height, width, channels)
    return _resize_float(part, width, height, box)


def _resize_float(
    part: np.ndarray, width: int, height: int, box: tuple[float, float, float, float]
) -> np.ndarray:
    """Channel by channel as 32-bit floats (16-bit frames, grey + alpha), alpha premultiplied."""
    top = 65535.0 if part.dtype == np.uint16 else 255.0
    values = part.astype(np.float32)
    alpha = channels_alpha(part.shape[2])
    if alpha is not None:
        weight = values[..., alpha] / top
        values[..., :alpha] *= weight[..., None]

    def plane(index: int) -> np.ndarray:
        image = Image.fromarray(np.ascontiguousarray(values[..., index]), "F")
        return np.asarray(image.resize((width, height), Image.Resampling.LANCZOS, box=box))

    planes = [plane(i) for i in range(part.shape[2])]
    result = np.stack(planes, axis=2)
    if alpha is not None:
        a = np.clip(result[..., alpha], 0.0, top)
        safe = np.where(a > 0, a / top, 1.0)
        result[..., :alpha] = np.where(a[..., None] > 0, result[..., :alpha] / safe[..., None], 0)
        result[..., alpha] = a
    return np.clip(np.rint(result), 0, top).astype(part.dtype)


def channels_alpha(channels: int) -> int | None:
    """The index of the alpha channel of an image with `channels` channels, if it has one."""
    return channels - 1 if channels in (2, 4) else None
