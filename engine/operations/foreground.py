"""Foreground colours without the background's halo: blur-fusion estimation (Photoroom, as BEN2 uses it)."""

from __future__ import annotations

import numpy as np


def box_blur(values: np.ndarray, r: int) -> np.ndarray:
    """cv2.blur(values, (r, r)): the mean over an r×r window (anchor r//2) with reflect-101
    borders, by cumulative sums along each axis in float64 (exact enough for 16 bits)."""
    out = np.asarray(values, dtype=np.float32)
    for axis in (0, 1):
        out = _box_axis(out, r, axis)
    return out


def _box_axis(values: np.ndarray, r: int, axis: int) -> np.ndarray:
    before, after = r // 2, r - 1 - r // 2
    pad = [(0, 0)] * values.ndim
    pad[axis] = (before, after)
    out = np.empty_like(values)
    # Bands keep the float64 temporaries to a few MB on large photos.
    other = 1 - axis
    step = max(1, (1 << 21) // max(1, values.shape[axis] * int(np.prod(values.shape[2:]))))
    for start in range(0, values.shape[other], step):
        index = [slice(None)] * values.ndim
        index[other] = slice(start, start + step)
        band = np.pad(values[tuple(index)].astype(np.float64), pad, mode="reflect")
        sums = np.cumsum(band, axis=axis)
        zero_shape = list(sums.shape)
        zero_shape[axis] = 1
        sums = np.concatenate([np.zeros(zero_shape), sums], axis=axis)
        n = values.shape[axis]
        upper = np.take(sums, np.arange(r, r + n), axis=axis)
        lower = np.take(sums, np.arange(0, n), axis=axis)
        out[tuple(index)] = (upper - lower) / r
    return out


def _blur_fusion(
    image: np.ndarray, fg: np.ndarray, bg: np.ndarray, alpha: np.ndarray, r: int
) -> tuple[np.ndarray, np.ndarray]:
    a = alpha[..., None]
    blurred_a = box_blur(alpha, r)[..., None]
    blurred_f = box_blur(fg * a, r) / (blurred_a + 1e-5)
    blurred_b = box_blur(bg * (1 - a), r) / ((1 - blurred_a) + 1e-5)
    f = blurred_f + a * (image - a * blurred_f - (1 - a) * blurred_b)
    return np.clip(f, 0.0, 1.0), blurred_b


def estimate_foreground(image: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Foreground colours without the background's halo: Photoroom's fast blur-fusion
    estimator as BEN2 uses it, two passes (r = 90, then r = 6)."""
    fg, blurred_b = _blur_fusion(image, image, image, alpha, 90)
    return _blur_fusion(image, fg, blurred_b, alpha, 6)[0]
