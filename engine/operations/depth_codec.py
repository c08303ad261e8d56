"""How depth is written: the shared range of a request, 16-bit near-is-bright PNG and its text chunk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

DEPTH_TEXT_KEY = "tessera"  # PNG tEXt keyword of the 16-bit depth encoding


def nearness(depth: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """1 at the nearest depth `lo`, 0 at the farthest `hi`; NaN where depth is NaN."""
    span = hi - lo
    if span <= 0:
        return np.where(np.isnan(depth), np.nan, 1.0).astype(np.float32)
    return ((hi - depth) / span).astype(np.float32)


def encode_depth16(depth: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Depth → uint16, near is bright: v = 1 + round((hi − d) / (hi − lo) · 65534); v = 0 is
    reserved for "no depth" (NaN). Inverse: d = hi − (v − 1) / 65534 · (hi − lo)."""
    valid = ~np.isnan(depth)
    v = np.zeros(depth.shape, np.uint16)
    span = hi - lo
    # float64: float32 rounding alone would cost up to a step on wide ranges.
    near = (hi - depth[valid].astype(np.float64)) / span if span > 0 else np.ones(int(valid.sum()))
    v[valid] = (1 + np.rint(np.clip(near, 0.0, 1.0) * 65534)).astype(np.uint16)
    return v


def depth_text(lo: float, hi: float, units: str) -> dict[str, str]:
    """The PNG text chunk that says how a 16-bit depth PNG decodes."""
    value = json.dumps(
        {
            "quantity": "depth",
            "units": units,
            "min": lo,
            "max": hi,
            "encoding": "near is bright: v = 1 + round((max - d) / (max - min) * 65534); v = 0: no depth",
            "decode": "d = max - (v - 1) / 65534 * (max - min)",
        },
        separators=(",", ":"),
    )
    return {DEPTH_TEXT_KEY: value}


def read_depth_text(path: Path) -> dict[str, Any]:
    """The encoding of a 16-bit depth PNG written by Tessera (min, max, units)."""
    with Image.open(path) as im:
        text = getattr(im, "text", {}).get(DEPTH_TEXT_KEY)
    if text is None:
        raise ValueError(f"{Path(path).name} has no {DEPTH_TEXT_KEY} text chunk")
    parsed: dict[str, Any] = json.loads(text)
    return parsed
