"""Where the tiles go: equal tiles spread evenly with overlap, and padding to a multiple.

Pure geometry and numpy (DESIGN §3 "Tiling rules"). Coordinates are half-open and refer to
the image after `pad_to_multiple`; the caller crops the assembled output back at the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = [
    "Span",
    "Tile",
    "TilePlan",
    "axis_spans",
    "effective_overlap",
    "pad_to_multiple",
    "plan_tiles",
]


@dataclass(frozen=True)
class Span:
    """A half-open interval [start, end) on one axis."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Tile:
    """One tile's input region (padded image coordinates, half-open); `index` is run order."""

    index: int
    row: int
    col: int
    y0: int
    y1: int
    x0: int
    x1: int

    @property
    def slices(self) -> tuple[slice, slice]:
        """Index an HW or HWC image with `image[tile.slices]` to get this tile's input."""
        return slice(self.y0, self.y1), slice(self.x0, self.x1)


@dataclass(frozen=True)
class TilePlan:
    """Equal-shaped tiles covering a `height` x `width` image (already padded to multiple_of).

    `overlap` is the overlap every adjacent pair is guaranteed to have (the request rounded up
    to multiple_of and clamped to half a tile; 0 when nothing is split). Tiled output equals the whole-image output when
    the model's receptive-field radius is at most `overlap // 4` (see `TileAssembler`).
    """

    height: int
    width: int
    tile_h: int
    tile_w: int
    overlap: int
    rows: tuple[Span, ...]
    cols: tuple[Span, ...]

    @cached_property
    def tiles(self) -> tuple[Tile, ...]:
        """All tiles in row-major order, which is also the order they must be run and added."""
        ncols = len(self.cols)
        return tuple(
            Tile(r * ncols + c, r, c, rs.start, rs.end, cs.start, cs.end)
            for r, rs in enumerate(self.rows)
            for c, cs in enumerate(self.cols)
        )

    @property
    def count(self) -> int:
        return len(self.rows) * len(self.cols)


def check_positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def effective_overlap(tile: int, overlap: int, multiple_of: int = 1) -> int:
    """The overlap `axis_spans` guarantees between neighbours for this tile edge.

    The request rounded up to `multiple_of` (starts are aligned), clamped to half the aligned
    tile so the step between tiles stays at least half a tile: a larger overlap would multiply
    the tile count for little gain.
    """
    check_positive("multiple_of", multiple_of)
    m = multiple_of
    t_units = max(1, tile // m)
    return min(-(-max(0, overlap) // m), t_units // 2) * m


def axis_spans(length: int, tile: int, overlap: int, multiple_of: int = 1) -> tuple[Span, ...]:
    """Split one axis into equal spans that overlap by at least `effective_overlap(...)`.

    The tile edge is rounded down to `multiple_of` (never below one multiple); if it covers the
    axis the result is one span over the whole axis. Otherwise `length` must be a multiple of
    `multiple_of` (pad first), `count = ceil((length - ov) / (tile - ov))` spans are spread
    evenly and every start is aligned to `multiple_of`, so each tile sees the same pixel grid
    phase as the whole-image run. The last spans are shifted inward, never shrunk.
    """
    check_positive("length", length)
    check_positive("tile", tile)
    check_positive("multiple_of", multiple_of)
    if overlap < 0:
        raise ValueError(f"overlap must not be negative, got {overlap}")
    if tile >= length:
        return (Span(0, length),)
    m = multiple_of
    if length % m:
        raise ValueError(f"length {length} is not a multiple of {m}; pad the image first")
    units = length // m
    t_units = max(1, tile // m)
    if t_units >= units:
        return (Span(0, length),)
    o_units = effective_overlap(tile, overlap, m) // m
    count = math.ceil((units - o_units) / (t_units - o_units))
    free = units - t_units
    # Rounded even spacing: each gap is floor or ceil of free/(count-1) <= t_units - o_units,
    # so every neighbour pair still overlaps by at least o_units.
    starts = [(2 * k * free + (count - 1)) // (2 * (count - 1)) for k in range(count)]
    return tuple(Span(s * m, (s + t_units) * m) for s in starts)


def plan_tiles(
    height: int, width: int, tile: int | None, overlap: int, multiple_of: int = 1
) -> TilePlan:
    """Plan equal tiles over a padded image; `tile=None` (or a tile >= the image) gives one tile."""
    check_positive("height", height)
    check_positive("width", width)
    if tile is None:
        rows: tuple[Span, ...] = (Span(0, height),)
        cols: tuple[Span, ...] = (Span(0, width),)
    else:
        rows = axis_spans(height, tile, overlap, multiple_of)
        cols = axis_spans(width, tile, overlap, multiple_of)
    split = [len(spans) > 1 for spans in (rows, cols)]
    guaranteed = effective_overlap(tile, overlap, multiple_of) if tile is not None else 0
    return TilePlan(
        height=height,
        width=width,
        tile_h=rows[0].length,
        tile_w=cols[0].length,
        overlap=guaranteed if any(split) else 0,
        rows=rows,
        cols=cols,
    )


def pad_to_multiple(image: np.ndarray, multiple: int) -> np.ndarray:
    """Pad an HW or HWC image at the bottom/right so both sides are multiples of `multiple`.

    Reflect padding (no repeated edge pixel), as a whole-image run would do; an axis too short
    to reflect that far is edge-padded instead. Returns `image` itself when nothing is padded.
    """
    check_positive("multiple", multiple)
    if image.ndim not in (2, 3):
        raise ValueError(f"expected an HW or HWC image, got shape {image.shape}")
    h, w = image.shape[:2]
    pad_h, pad_w = -h % multiple, -w % multiple
    if pad_h == 0 and pad_w == 0:
        return image
    extra = [(0, 0)] * (image.ndim - 2)
    out = image
    # One axis at a time: the reflect/edge choice depends on that axis's own length.
    for axis, (size, pad) in enumerate(((h, pad_h), (w, pad_w))):
        if pad == 0:
            continue
        widths = [(0, 0), (0, 0), *extra]
        widths[axis] = (0, pad)
        if pad < size:
            out = np.pad(out, widths, mode="reflect")
        else:
            out = np.pad(out, widths, mode="edge")
    return out
