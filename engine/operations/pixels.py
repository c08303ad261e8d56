"""Pixels in and out of a model: float RGB from any frame, resizing, normalisation, tensors.

Numpy and Pillow only. Model inputs are resized with Pillow (antialiased, as the reference
pipelines do with PIL); model outputs are resized back with `resize_bilinear`, PyTorch's
`F.interpolate(mode="bilinear", align_corners=False)` without antialias, as the references do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image

from engine.models.contracts import Contract
from engine.options import Normalization

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


# ---------------------------------------------------------------------------------------------
# Pixels in


def top_value(frame: np.ndarray) -> float:
    return 65535.0 if frame.dtype == np.uint16 else 255.0


def rgb_float(frame: np.ndarray) -> np.ndarray:
    """H×W×3 float32 in 0…1 from any decoded frame: grey is repeated, alpha dropped (as PIL's
    convert("RGB") does in the references)."""
    colour = frame[..., :3] if frame.shape[2] >= 3 else np.repeat(frame[..., :1], 3, axis=2)
    return colour.astype(np.float32) / np.float32(top_value(frame))


def alpha_float(frame: np.ndarray) -> np.ndarray | None:
    if frame.shape[2] not in (2, 4):
        return None
    return frame[..., -1].astype(np.float32) / np.float32(top_value(frame))


def normalise(rgb: np.ndarray, mode: Normalization) -> np.ndarray:
    if mode is Normalization.IMAGENET:
        return (rgb - IMAGENET_MEAN) / IMAGENET_STD
    return rgb


def to_nchw(rgb: np.ndarray, dtype: np.dtype[Any] | type = np.float32) -> np.ndarray:
    return np.ascontiguousarray(rgb.transpose(2, 0, 1)[None], dtype=dtype)


def input_dtype(contract: Contract) -> type:
    """The numpy dtype to feed the model's image input: float16 where it declares float16."""
    return np.float16 if contract.fp16 else np.float32


# ---------------------------------------------------------------------------------------------
# Model outputs back


def plane(output: Any) -> np.ndarray:
    """A 2-D float32 map from a model output with leading unit (or view) axes: the first one."""
    arr = np.asarray(output)
    while arr.ndim > 2:
        arr = arr[0]
    return arr.astype(np.float32, copy=False)


def _axis_weights(src: int, dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pos = (np.arange(dst, dtype=np.float64) + 0.5) * (src / dst) - 0.5
    pos = np.maximum(pos, 0.0)
    i0 = np.minimum(pos.astype(np.int64), src - 1)
    i1 = np.minimum(i0 + 1, src - 1)
    return i0, i1, (pos - i0).astype(np.float32)


def resize_bilinear(arr: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of a 2-D (or H×W×C) float map with half-pixel centres and no antialias,
    like torch F.interpolate(mode="bilinear", align_corners=False). Separable, so the largest
    temporary is one output-sized array."""
    src = np.asarray(arr, dtype=np.float32)
    if src.shape[:2] == (height, width):
        return src.copy()
    r0, r1, ry = _axis_weights(src.shape[0], height)
    c0, c1, cx = _axis_weights(src.shape[1], width)
    extra = (None,) * (src.ndim - 2)
    ry_b = ry[(slice(None), None, *extra)]
    rows = src[r0] * (1 - ry_b) + src[r1] * ry_b
    cx_b = cx[(None, slice(None), *extra)]
    return rows[:, c0] * (1 - cx_b) + rows[:, c1] * cx_b


class Bilinear:
    """`resize_bilinear(src, height, width)` a band of output rows at a time: the same values,
    without the full-size map ever existing (products are written band by band)."""

    def __init__(self, src: np.ndarray, height: int, width: int) -> None:
        self.src = np.asarray(src, dtype=np.float32)
        self.height, self.width = height, width
        self.same = self.src.shape[:2] == (height, width)
        self._r0, self._r1, self._ry = _axis_weights(self.src.shape[0], height)
        self._c0, self._c1, self._cx = _axis_weights(self.src.shape[1], width)

    def rows(self, start: int, stop: int) -> np.ndarray:
        if self.same:
            return self.src[start:stop].copy()
        extra = (None,) * (self.src.ndim - 2)
        ry = self._ry[start:stop][(slice(None), None, *extra)]
        rows = self.src[self._r0[start:stop]] * (1 - ry) + self.src[self._r1[start:stop]] * ry
        cx = self._cx[(None, slice(None), *extra)]
        out: np.ndarray = rows[:, self._c0] * (1 - cx) + rows[:, self._c1] * cx
        return out

    def bands(self, rows: int = 64) -> Iterator[tuple[int, int, np.ndarray]]:
        for start in range(0, self.height, rows):
            stop = min(self.height, start + rows)
            yield start, stop, self.rows(start, stop)

    def min_max(self) -> tuple[float, float]:
        """Of the whole resized map, band by band."""
        lo, hi = np.inf, -np.inf
        for _, _, band in self.bands():
            lo, hi = min(lo, float(band.min())), max(hi, float(band.max()))
        return lo, hi


REDUCING_GAP = 1.5  # shrink by whole boxes first where the image is this many times larger


def resize_planes(
    frame: np.ndarray, height: int, width: int, resample: Image.Resampling, channels: int = 3
) -> np.ndarray:
    """The RGB of `frame` as float 0…1 at height×width, one colour plane at a time.

    Like resizing `rgb_float(frame)` with Pillow's filter, without its full-size float RGB copy: where the
    frame is more than 1.5× the target in both directions it is first averaged over whole
    boxes, a band of rows at a time (Pillow's `reducing_gap` idea: the filter then runs on an
    image a few times the target, and no full-size float plane exists); otherwise it is that
    exact computation, one plane at a time."""
    top = np.float32(top_value(frame))
    fy = max(1, int(frame.shape[0] / (height * REDUCING_GAP)))
    fx = max(1, int(frame.shape[1] / (width * REDUCING_GAP)))
    boxes = fy > 1 and fx > 1
    planes = []
    for c in range(channels):
        source = frame[..., min(c, frame.shape[2] - 1) if frame.shape[2] < 3 else c]
        plane = _box_mean(source, fy, fx) / top if boxes else source.astype(np.float32) / top
        if plane.shape != (height, width):
            plane = np.asarray(Image.fromarray(plane).resize((width, height), resample))
        planes.append(plane)
    return np.stack(planes, axis=2).astype(np.float32, copy=False)


def _box_mean(plane: np.ndarray, fy: int, fx: int) -> np.ndarray:
    """Means over fy×fx boxes (the last row and column of boxes may be smaller), in float32,
    a band of boxes at a time."""
    h, w = plane.shape
    cols = np.arange(0, w, fx)
    widths = np.diff(np.append(cols, w)).astype(np.float32)
    out = np.empty((-(-h // fy), len(cols)), np.float32)
    step = fy * max(1, (1 << 20) // max(1, w * fy))  # whole boxes, about 4 MB of float rows
    for start in range(0, h, step):
        band = plane[start : start + step].astype(np.float32)
        rows = np.arange(0, band.shape[0], fy)
        heights = np.diff(np.append(rows, band.shape[0])).astype(np.float32)
        sums = np.add.reduceat(np.add.reduceat(band, rows, axis=0), cols, axis=1)
        out[start // fy : start // fy + len(rows)] = sums / heights[:, None] / widths[None, :]
    return out


def min_max(values: np.ndarray) -> np.ndarray:
    """(x − min) / (max − min) as the BEN2 and rembg references do; a flat map stays as it is,
    clipped to 0…1, rather than dividing by zero."""
    lo, hi = float(values.min()), float(values.max())
    if hi - lo <= 1e-12:
        return np.clip(values, 0.0, 1.0).astype(np.float32)
    return ((values - lo) / (hi - lo)).astype(np.float32)


def quantise(values: np.ndarray, bits: int) -> np.ndarray:
    """0…1 → uint8/uint16 by truncation, as the references' `(x * 255).astype(uint8)`."""
    top, dtype = (255.0, np.uint8) if bits == 8 else (65535.0, np.uint16)
    return (np.clip(values, 0.0, 1.0) * np.float32(top)).astype(dtype)
