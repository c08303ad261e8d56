"""Each upscaler's tile overlap, measured: the smallest that keeps tiled = whole on a probe.

DESIGN §3 asks tiled output to equal the whole-image output within 1/255. A fixed overlap (32
input pixels) is a guess at the model's receptive field: too small and seams show, too large
and every tile computes pixels twice for nothing (at 128² tiles, 32 px of overlap is 1.8× the
image's pixels). So the overlap is measured once per model file: a probe picture (edges,
texture and noise, the worst for seams) is upscaled whole and on small tiles at each candidate
overlap, and the smallest candidate whose product stays within `TOLERANCE` of the whole one is
kept, in a small file beside the model's optimised copy (engine/runtime/optimize.py's folder),
named after the file's identity, so a replaced model is measured again.

The probe's tiles are small (64², many seams and corners; larger tiles have fewer seams with
the same error at each) and the probe is sized so they overlap by exactly the candidate.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine.runtime.identity import FileIdentity
from engine.runtime.optimize import FOLDER

log = logging.getLogger(__name__)

__all__ = [
    "CANDIDATES",
    "DEFAULT_OVERLAP",
    "TOLERANCE",
    "calibrate",
    "kept_overlap",
    "probe_image",
]

CALIBRATION_VERSION = 1  # bump when the probe or the rule changes: kept results are measured again
DEFAULT_OVERLAP = 32  # input pixels, where a model is not measured
# Smallest first; past the default for a model whose reach is wider (its seams would show).
CANDIDATES = (8, 12, 16, 20, 24, 28, 32, 40, 48, 64)
# Of 8-bit levels, between the whole and the tiled probe: below the product rule (≤ 1/255) with
# a margin, since a real picture's seams can be a little worse than the probe's.
TOLERANCE = 1
PROBE_GRID = (3, 4)  # rows × columns of probe tiles: seams both ways and inner corners
PROBE_TILE = 64

# The upscaled probe at one plan: (picture, tile or None for one run, overlap) → uint8 H×W×3.
Upscaler = Callable[[np.ndarray, int | None, int], np.ndarray]


def probe_image(height: int, width: int) -> np.ndarray:
    """A deterministic photo-like uint8 RGB picture: smooth shading, hard-edged shapes, fine
    texture and noise — what makes a receptive field's reach show at a seam."""
    rng = np.random.default_rng(24)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack(
        [np.sin(x / 9) * 0.4 + 0.5, np.cos(y / 13) * 0.4 + 0.5, (x + y) / (width + height)], 2
    )
    for _ in range(12):  # rectangles and discs with hard edges
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        r = rng.uniform(6, 24)
        colour = rng.uniform(0, 1, 3).astype(np.float32)
        mask = (
            (np.abs(y - cy) < r) & (np.abs(x - cx) < r * 1.3)
            if rng.random() < 0.5
            else (y - cy) ** 2 + (x - cx) ** 2 < r * r
        )
        img[mask] = colour
    img += ((x.astype(np.int32) // 2 + y.astype(np.int32) // 2) % 2)[..., None] * 0.08  # texture
    img = img * 255 + rng.normal(0, 8, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _record(path: Path, identity: FileIdentity) -> Path:
    digest = identity.digest(CALIBRATION_VERSION)
    return path.parent / FOLDER / f"{path.stem}-{digest}.overlap.json"


def kept_overlap(path: Path, identity: FileIdentity) -> int | None:
    """The overlap measured earlier for this very file, or None."""
    try:
        data = json.loads(_record(path, identity).read_text(encoding="utf-8"))
        overlap = int(data["overlap"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return overlap if overlap > 0 else None


def calibrate(
    path: Path,
    identity: FileIdentity,
    upscale: Upscaler,
    multiple_of: int = 1,
) -> int:
    """The model's overlap: kept from an earlier measurement, or measured now and kept."""
    known = kept_overlap(path, identity)
    if known is not None:
        return known
    tried: dict[int, int] = {}

    def seams(candidate: int) -> int:
        overlap = -(-candidate // multiple_of) * multiple_of
        if overlap not in tried:
            # Sized so that the tiles overlap by exactly this much (the plan spreads tiles
            # evenly, which on another size would widen the overlaps it measures).
            tile = -(-max(PROBE_TILE, 2 * overlap) // multiple_of) * multiple_of
            step = tile - overlap
            rows, cols = PROBE_GRID
            picture = probe_image(tile + (rows - 1) * step, tile + (cols - 1) * step)
            whole = upscale(picture, None, 0).astype(np.int16)
            tiled = upscale(picture, tile, overlap).astype(np.int16)
            tried[overlap] = int(np.abs(tiled - whole).max())
        return tried[overlap]

    # From the default down while the seams stay within the tolerance (the error grows as the
    # overlap shrinks), or up until they do: two or three probes for most models.
    chosen = 0
    if seams(DEFAULT_OVERLAP) <= TOLERANCE:
        chosen = DEFAULT_OVERLAP
        for candidate in sorted((c for c in CANDIDATES if c < DEFAULT_OVERLAP), reverse=True):
            if seams(candidate) > TOLERANCE:
                break
            chosen = candidate
    else:
        for candidate in (c for c in CANDIDATES if c > DEFAULT_OVERLAP):
            if seams(candidate) <= TOLERANCE:
                chosen = candidate
                break
    if not chosen:  # none kept the seams within the tolerance: the widest tried is the closest
        chosen = min(tried, key=lambda o: (tried[o], -o))
    chosen = -(-chosen // multiple_of) * multiple_of
    log.info(
        "%s: tile overlap %d px (max |tiled − whole| by overlap: %s)", path.name, chosen, tried
    )
    _keep(_record(path, identity), chosen, tried)
    return chosen


def _keep(record: Path, overlap: int, tried: dict[int, int]) -> None:
    """Write the result atomically; where the folder cannot be written, measure at each load."""
    try:
        record.parent.mkdir(exist_ok=True)
        partial = record.with_name(f".{record.name}.partial-{os.getpid()}")
        partial.write_text(
            json.dumps({"overlap": overlap, "max_diff_by_overlap": tried}), encoding="utf-8"
        )
        os.replace(partial, record)
    except OSError as e:
        log.info("cannot keep the measured overlap of %s (%s)", record.name, e)
        return
    stem = record.name.split(".", 1)[0].rsplit("-", 1)[0]
    for old in record.parent.glob(f"{stem}-*.overlap.json"):
        if old != record and old.name.split(".", 1)[0].rsplit("-", 1)[0] == stem:
            old.unlink(missing_ok=True)
