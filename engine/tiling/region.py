"""The final pixels of one region of a tiled product, from the tiles that reach it.

`TileAssembler` blends a whole frame; a preview needs only the part the viewer shows, with the
pixels of that part of the full product. `RegionAssembler` uses the same blend weights and does
the same float32 operations in the same order — each tile's output times its row weight, times
its column weight, summed from zero in plan order, then quantised by the same `_store` — so its
pixels equal the full product's bit for bit (tests/test_preview.py checks max |diff| = 0).

The region is cut into cells where the set of contributing tiles is constant. A cell is final
once all its contributors are in, so a preview draws cells as tiles finish, centre first, and
never draws a pixel that a later tile would still change.

Pure geometry and numpy, like the rest of engine/tiling.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Private to the assembly module on purpose: the weights and the quantisation must be the very
# ones the full job uses, not a copy that could drift.
from engine.tiling.assembly import _axis_blend, _AxisBlend, _store
from engine.tiling.plan import Tile, TilePlan, check_positive

__all__ = ["Cell", "RegionAssembler"]


@dataclass(frozen=True)
class Cell:
    """A rectangle of the output, half-open, in output pixels: rows [y0, y1), cols [x0, x1)."""

    y0: int
    y1: int
    x0: int
    x1: int


def _cuts(blend: _AxisBlend, lo: int, hi: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """[lo, hi) cut at every support boundary: (start, end, contributing tile indices)."""
    edges = {lo, hi}
    for s in blend.support:
        for e in (s.start, s.end):
            if lo < e < hi:
                edges.add(e)
    ordered = sorted(edges)
    cuts = []
    for a, b in itertools.pairwise(ordered):
        who = tuple(k for k, s in enumerate(blend.support) if s.start <= a and b <= s.end)
        if who:
            cuts.append((a, b, who))
    return cuts


class RegionAssembler:
    """Blends the tiles that reach `region` (output pixels, inside the cropped product) into
    that region's final pixels.

    Each tile brings one float32 H×W×C output per pass (a colour pass, an alpha pass…) with
    `channels[p]` channels; a rendered region is the passes' pixels side by side, in `dtype`.
    """

    def __init__(
        self,
        plan: TilePlan,
        scale: int,
        channels: Sequence[int],
        dtype: npt.DTypeLike,
        region: Cell,
    ) -> None:
        check_positive("scale", scale)
        if not channels:
            raise ValueError("at least one pass is needed")
        if region.y1 <= region.y0 or region.x1 <= region.x0:
            raise ValueError(f"empty region {region}")
        if region.y1 > plan.height * scale or region.x1 > plan.width * scale:
            raise ValueError(f"region {region} is outside the plan's output")
        self.plan = plan
        self.scale = scale
        self.channels = tuple(channels)
        self.dtype = np.dtype(dtype)
        self.region = region
        self._rows = _axis_blend(plan.rows, scale)
        self._cols = _axis_blend(plan.cols, scale)
        self._wx_flat = [[np.repeat(w, ch) for w in self._cols.weight] for ch in self.channels]
        self._row_cuts = _cuts(self._rows, region.y0, region.y1)
        self._col_cuts = _cuts(self._cols, region.x0, region.x1)
        ncols = len(plan.cols)
        rows = sorted({r for _, _, who in self._row_cuts for r in who})
        cols = sorted({c for _, _, who in self._col_cuts for c in who})
        by_index = plan.tiles
        self._needed = [by_index[r * ncols + c] for r in rows for c in cols]
        self._outputs: dict[int, Sequence[np.ndarray]] = {}
        self._emitted: set[tuple[int, int]] = set()

    # -- which tiles ------------------------------------------------------------------------
    def needed(self) -> list[Tile]:
        """Every tile whose blended contribution reaches the region, the region's centre first."""
        cy = (self.region.y0 + self.region.y1) / 2
        cx = (self.region.x0 + self.region.x1) / 2

        def distance(t: Tile) -> tuple[float, int]:
            ry = self._rows.support[t.row]
            rx = self._cols.support[t.col]
            ty, tx = (ry.start + ry.end) / 2, (rx.start + rx.end) / 2
            return (math.hypot(ty - cy, tx - cx), t.index)

        return sorted(self._needed, key=distance)

    # -- adding and drawing -----------------------------------------------------------------
    def add(self, tile: Tile, outputs: Sequence[np.ndarray]) -> None:
        """One tile's outputs, one per pass (float32, tile_h*scale × tile_w*scale × C)."""
        if len(outputs) != len(self.channels):
            raise ValueError(f"{len(outputs)} pass outputs, expected {len(self.channels)}")
        shape = (self.plan.tile_h * self.scale, self.plan.tile_w * self.scale)
        for out, ch in zip(outputs, self.channels, strict=True):
            if out.shape[:2] != shape or (out.shape[2] if out.ndim == 3 else 1) != ch:
                raise ValueError(f"tile output shape {out.shape}, expected {(*shape, ch)}")
        self._outputs[tile.index] = outputs

    def ready(self) -> list[Cell]:
        """The cells that became final since the last call (all their tiles are in), merged
        along each row of cells."""
        ncols = len(self.plan.cols)
        cells: list[Cell] = []
        for ri, (y0, y1, rows) in enumerate(self._row_cuts):
            run: Cell | None = None
            for ci, (x0, x1, cols) in enumerate(self._col_cuts):
                fresh = (ri, ci) not in self._emitted and all(
                    r * ncols + c in self._outputs for r in rows for c in cols
                )
                if fresh:
                    self._emitted.add((ri, ci))
                    if run is not None and run.x1 == x0:
                        run = Cell(y0, y1, run.x0, x1)
                        continue
                    if run is not None:
                        cells.append(run)
                    run = Cell(y0, y1, x0, x1)
                elif run is not None:
                    cells.append(run)
                    run = None
            if run is not None:
                cells.append(run)
        return cells

    @property
    def complete(self) -> bool:
        return len(self._emitted) == len(self._row_cuts) * len(self._col_cuts)

    def render(self, cell: Cell) -> np.ndarray:
        """The final pixels of `cell` (every tile reaching it must be in): H×W×sum(channels)."""
        h, w = cell.y1 - cell.y0, cell.x1 - cell.x0
        ncols = len(self.plan.cols)
        parts = []
        for p, ch in enumerate(self.channels):
            acc = np.zeros((h, w * ch), np.float32)
            for i, rsup in enumerate(self._rows.support):
                r0, r1 = max(cell.y0, rsup.start), min(cell.y1, rsup.end)
                if r0 >= r1:
                    continue
                for j, csup in enumerate(self._cols.support):
                    c0, c1 = max(cell.x0, csup.start), min(cell.x1, csup.end)
                    if c0 >= c1:
                        continue
                    outputs = self._outputs.get(i * ncols + j)
                    if outputs is None:
                        raise RuntimeError(f"tile {i * ncols + j} is missing for {cell}")
                    acc[r0 - cell.y0 : r1 - cell.y0, (c0 - cell.x0) * ch : (c1 - cell.x0) * ch] += (
                        self._weighted(outputs[p], p, ch, i, j, r0, r1, c0, c1)
                    )
            out = np.empty((h, w, ch), self.dtype)
            _store(out, acc.reshape(h, w, ch))
            parts.append(out)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)

    def _weighted(
        self,
        output: np.ndarray,
        p: int,
        ch: int,
        i: int,
        j: int,
        r0: int,
        r1: int,
        c0: int,
        c1: int,
    ) -> np.ndarray:
        """As TileAssembler's `weighted`: (output × row weight) × column weight, in float32."""
        oy = self.plan.rows[i].start * self.scale
        ox = self.plan.cols[j].start * self.scale
        out3 = output if output.ndim == 3 else output[:, :, None]
        crop = np.asarray(out3[r0 - oy : r1 - oy, c0 - ox : c1 - ox], dtype=np.float32)
        flat = crop.reshape(r1 - r0, (c1 - c0) * ch)
        a = self._rows.support[i].start
        cs = self._cols.support[j].start
        weighted = flat * self._rows.weight[i][r0 - a : r1 - a, None]
        weighted *= self._wx_flat[p][j][None, (c0 - cs) * ch : (c1 - cs) * ch]
        return weighted
