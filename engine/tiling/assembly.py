"""Putting tiles back together: overlap blending and memory-bounded assembly.

Blend weights ramp smoothly over the central half of each overlap, so tiled = whole wherever
neighbouring tiles agree. Assembly keeps float32 only for the overlap rows and one tile window,
quantising each finished band at once (`estimate_band_bytes` is its peak).
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.tiling.plan import Span, Tile, TilePlan, check_positive

__all__ = ["TileAssembler", "estimate_band_bytes"]

_OUTPUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.float32))
# Quantisation works in row chunks of about this many float32 elements (256 KiB): converting a
# whole-image tile never allocates a second full-size float32 array, and the passes over a
# chunk stay in cache (about twice as fast as 4 MiB chunks).
_QUANT_CHUNK_ELEMS = 1 << 16


# --- blending weights -------------------------------------------------------------------------


@dataclass(frozen=True)
class _AxisBlend:
    """Per-axis blend weights in output coordinates, normalised so they sum to 1 everywhere.

    Weights are separable, so the 2-D weight of tile (r, c) is rows.w[r] x cols.w[c] and the
    2-D weights also sum to 1: the assembler needs no weight accumulator.
    """

    length: int  # output length of the axis
    support: tuple[Span, ...]  # where each tile's weight is > 0, in output coordinates
    offset: tuple[int, ...]  # support start minus the tile's output start (to crop outputs)
    weight: tuple[np.ndarray, ...]  # float32 over each support

    def finalised_before(self, k: int) -> int:
        """First output coordinate that a tile after `k` still touches (axis length if none)."""
        if k + 1 >= len(self.support):
            return self.length
        return self.support[k + 1].start


def _rise(centres: np.ndarray, a: Span, b: Span, scale: int) -> np.ndarray:
    """Weight of the later span `b` in its overlap with `a` (0 -> 1); `a` gets 1 - rise.

    Dead zones of `overlap // 4` input pixels at each tile's inner edge (where its output is
    wrong for a receptive radius up to that), raised-cosine ramp over the central part.
    """
    ov = a.end - b.start
    if ov <= 0:
        return (centres > b.start * scale).astype(np.float64)
    dead = ov // 4
    r0 = (b.start + dead) * scale
    r1 = (a.end - dead) * scale
    tau = np.clip((centres - r0) / (r1 - r0), 0.0, 1.0)
    return np.asarray(np.sin(0.5 * np.pi * tau) ** 2, dtype=np.float64)


def _axis_blend(spans: tuple[Span, ...], scale: int) -> _AxisBlend:
    length = spans[-1].end * scale
    if spans[0].start != 0:
        raise ValueError("spans must start at 0")
    for a, b in itertools.pairwise(spans):
        if not (a.start < b.start and b.start <= a.end <= b.end):
            raise ValueError(f"spans must be increasing and touch or overlap: {a}, {b}")
    raw: list[np.ndarray] = []
    total = np.zeros(length, dtype=np.float64)
    for k, span in enumerate(spans):
        centres = np.arange(span.start * scale, span.end * scale, dtype=np.float64) + 0.5
        w = np.ones(centres.shape, dtype=np.float64)
        if k > 0:
            w *= _rise(centres, spans[k - 1], span, scale)
        if k + 1 < len(spans):
            w *= 1.0 - _rise(centres, span, spans[k + 1], scale)
        raw.append(w)
        total[span.start * scale : span.end * scale] += w
    support: list[Span] = []
    offset: list[int] = []
    weight: list[np.ndarray] = []
    for span, w in zip(spans, raw, strict=True):
        lo = span.start * scale
        norm = w / total[lo : lo + w.size]
        nz = np.flatnonzero(norm > 0.0)
        start, end = lo + int(nz[0]), lo + int(nz[-1]) + 1
        support.append(Span(start, end))
        offset.append(start - lo)
        weight.append(norm[nz[0] : nz[-1] + 1].astype(np.float32))
    # The banded assembly relies on supports whose starts and ends both increase.
    for a, b in itertools.pairwise(support):
        if not (a.start <= b.start and a.end <= b.end and b.start <= a.end):
            raise RuntimeError(f"blend supports out of order: {a}, {b}")
    return _AxisBlend(length, tuple(support), tuple(offset), tuple(weight))


# An output at least this large gets its own anonymous mapping, so rows a writer has taken can
# be handed back (`release_rows`); smaller ones are not worth the system calls.
_OWN_MAPPING_BYTES = 4 << 20


def _zeroed(
    shape: tuple[int, int, int], dtype: np.dtype[Any]
) -> tuple[np.ndarray, mmap.mmap | None]:
    """A zeroed array, and for a large one the mapping it lives in (pages are only taken as
    rows are written, as with calloc)."""
    size = int(np.prod(shape)) * dtype.itemsize
    if size < _OWN_MAPPING_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
        return np.zeros(shape, dtype), None
    try:
        pages = mmap.mmap(-1, size)
    except OSError as e:  # ENOMEM: what np.zeros would have raised as MemoryError
        raise MemoryError(f"cannot map {size} bytes for the assembled output") from e
    return np.frombuffer(pages, dtype).reshape(shape), pages


def _store(dst: np.ndarray, src: np.ndarray) -> None:
    """Write float values into `dst`: uint -> round(clip(v, 0, 1) * max), in row chunks."""
    if dst.dtype == np.float32:
        dst[...] = src
        return
    maxval = float(np.iinfo(dst.dtype).max)
    row_elems = max(1, int(np.prod(src.shape[1:])))
    step = max(1, _QUANT_CHUNK_ELEMS // row_elems)
    for r in range(0, src.shape[0], step):
        part = np.multiply(src[r : r + step], maxval)  # chunk-sized scratch
        np.clip(part, 0.0, maxval, out=part)
        # NaN survives clip and has no defined integer value; the sum is a cheap read pass.
        if np.isnan(part.sum()):
            np.nan_to_num(part, copy=False, nan=0.0)
        np.rint(part, out=part)
        dst[r : r + step] = part


# --- assembly ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RowBands:
    """Output rows of one tile row: `final` ones are done after it, `carry` ones are shared."""

    final: Span
    carry: Span


def _row_bands(rows: _AxisBlend) -> list[_RowBands]:
    bands = []
    for i, sup in enumerate(rows.support):
        cut = max(sup.start, min(sup.end, rows.finalised_before(i)))
        bands.append(_RowBands(Span(sup.start, cut), Span(cut, sup.end)))
    return bands


def _float_bytes(rows: int, cols: int, channels: int) -> int:
    return rows * cols * channels * 4


def estimate_band_bytes(plan: TilePlan, scale: int, channels: int) -> int:
    """Peak float32 working memory of `TileAssembler` for this plan, in bytes.

    Counts the carried row bands, the column window and the weighted copy of one tile; not
    the caller's tile output, the final output array or the small quantisation scratch.
    """
    check_positive("scale", scale)
    check_positive("channels", channels)
    if plan.count == 1:
        return 0
    rows = _axis_blend(plan.rows, scale)
    cols = _axis_blend(plan.cols, scale)
    out_w = plan.width * scale
    win_w = max(s.length for s in cols.support)
    peak = 0
    carry_in = 0
    for band, sup in zip(_row_bands(rows), rows.support, strict=True):
        carries = _float_bytes(carry_in + band.carry.length, out_w, channels)
        window = _float_bytes(band.final.length, win_w, channels)
        weighted = _float_bytes(sup.length, win_w, channels)
        peak = max(peak, carries + window + weighted)
        carry_in = band.carry.length
    return peak


class TileAssembler:
    """Blends tile outputs into the final image while holding only a band in float32.

    Blending: in each overlap of `ov` input pixels, a tile gets weight 0 within `ov // 4` of
    its inner edge, and the two tiles are mixed with a raised-cosine ramp over the central
    half; at the image border a tile has weight 1. Weights are separable and normalised to
    sum to 1, so agreeing tiles blend exactly and the result equals the whole-image result
    whenever the receptive-field radius is at most `plan.overlap // 4`.

    Memory bound: besides the final uint8/uint16/float32 output, the float32 working set is
    (a) the output rows where the current and the next tile row both have weight (plus those
    carried in from the previous row), full width; (b) a window of the current tile row's
    finished rows, one tile wide; (c) one weighted tile. Pixels only one tile covers go
    straight to the output, and the rest as soon as no later tile touches them. A carried
    band is the ramp, half of the actual row overlap `ov_r` (often more than the requested
    overlap, as tiles are spread evenly), so the peak is at most about
    `(ov_r * W + 2 * tile_h * tile_w) * scale² * channels * 4` bytes: rows of overlap, never
    the whole height. `estimate_band_bytes` gives the exact figure and `peak_working_bytes`
    the measured one.
    A single-tile plan is written straight to the output.
    """

    def __init__(
        self,
        plan: TilePlan,
        scale: int,
        channels: int,
        dtype: npt.DTypeLike,
        on_rows: Callable[[int], None] | None = None,
    ) -> None:
        check_positive("scale", scale)
        check_positive("channels", channels)
        self._dtype = np.dtype(dtype)
        if self._dtype not in _OUTPUT_DTYPES:
            raise ValueError(f"output dtype must be uint8, uint16 or float32, got {self._dtype}")
        self.plan = plan
        self.scale = scale
        self.channels = channels
        self._tiles = plan.tiles
        self._next = 0
        self._tile_shape = (plan.tile_h * scale, plan.tile_w * scale, channels)
        self._out, self._pages = _zeroed(
            (plan.height * scale, plan.width * scale, channels), self._dtype
        )
        self._released = 0  # rows [0, _released) were handed back to the system
        self._rows = _axis_blend(plan.rows, scale)
        self._cols = _axis_blend(plan.cols, scale)
        self._bands = _row_bands(self._rows)
        self._win_cap = max(s.length for s in self._cols.support)
        self._wx_flat = [np.repeat(w, channels) for w in self._cols.weight]
        # Float32 working buffers (see the class docstring).
        self._carry_in: np.ndarray | None = None  # rows [_carry_in_y0, ...) from earlier rows
        self._carry_in_y0 = 0
        self._carry_out: np.ndarray | None = None  # rows of this tile row shared with the next
        self._window: np.ndarray | None = None  # finished rows, columns [_w0, _w1)
        self._w0 = 0
        self._w1 = 0
        self.peak_working_bytes = 0
        # Output rows [0, final_rows) are finished: no later tile touches them. `on_rows` hears
        # each advance (from the thread that adds the tiles), so a writer can take them.
        self.final_rows = 0
        self._on_rows = on_rows
        self._stored = 0  # a single tile's rows stored before the tile (add_rows)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Output rows [start, stop) of the assembled image, a view; final below `final_rows`."""
        return self._out[start:stop]

    def release_rows(self, stop: int) -> None:
        """Hands the memory of output rows [0, stop) back to the system: a writer has encoded
        them and nothing reads them again (band writing), so the assembled image is never all
        in memory. `finish()` is refused afterwards. Whole pages only; a no-op for an output
        too small to have its own mapping."""
        if self._pages is None or stop <= self._released:
            return
        row_bytes = self._out.strides[0]
        end = (min(stop, self.final_rows) * row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        start = (self._released * row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > start:
            self._pages.madvise(mmap.MADV_DONTNEED, start, end - start)
        self._released = min(stop, self.final_rows)

    def _finished_to(self, rows: int) -> None:
        self.final_rows = rows
        if self._on_rows is not None:
            self._on_rows(rows)

    @property
    def working_bytes(self) -> int:
        """Bytes of float32 accumulators held right now."""
        bufs = (self._carry_in, self._carry_out, self._window)
        return sum(b.nbytes for b in bufs if b is not None)

    @property
    def done(self) -> int:
        """How many tiles have been added."""
        return self._next

    def add(self, tile: Tile, output: np.ndarray) -> None:
        """Add one tile's model output (float32 HWC at x`scale`); tiles come in plan order."""
        if self._next >= len(self._tiles):
            raise ValueError("all tiles of the plan were already added")
        expected = self._tiles[self._next]
        if tile != expected:
            raise ValueError(f"tiles must be added in plan order: expected {expected}, got {tile}")
        # float16 models: scaling by 65535 in float16 would overflow (copies only then).
        output = np.asarray(output, dtype=np.float32)
        if output.ndim == 2 and self.channels == 1:
            output = output[:, :, None]
        if output.shape != self._tile_shape:
            raise ValueError(f"tile output shape {output.shape}, expected {self._tile_shape}")
        if self.plan.count == 1:
            _store(self._out[self._stored :], output[self._stored :])
            self._next += 1
            self._finished_to(self._out.shape[0])
            return
        if tile.col == 0:
            self._start_row(tile.row)
        self._add_blended(tile, output)
        self._next += 1
        self.peak_working_bytes = max(self.peak_working_bytes, self.working_bytes)
        if tile.col == len(self.plan.cols) - 1:
            self._carry_in, self._carry_in_y0 = self._carry_out, self._bands[tile.row].carry.start
            self._carry_out = None
            self._window = None
            self._finished_to(self._bands[tile.row].final.end)

    def add_rows(self, tile: Tile, rows: np.ndarray, start: int) -> None:
        """Output rows [start, start + len(rows)) of a single-tile plan's one tile, final before
        the tile's run has ended (its rows in order, from 0); `add` then stores only the rest."""
        if self.plan.count != 1 or self._next or tile != self._tiles[0] or start != self._stored:
            raise ValueError("only a single tile's rows, in order, are added before the tile")
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim == 2 and self.channels == 1:
            rows = rows[:, :, None]
        stop = start + rows.shape[0]
        if stop > self._out.shape[0] or rows.shape[1:] != self._tile_shape[1:]:
            raise ValueError(
                f"rows of shape {rows.shape} at {start}, the tile is {self._tile_shape}"
            )
        _store(self._out[start:stop], rows)
        self._stored = stop
        self._finished_to(stop)

    def finish(self) -> np.ndarray:
        """The assembled (height*scale, width*scale, channels) image; every tile must be in."""
        if self._next != len(self._tiles):
            raise RuntimeError(f"only {self._next} of {len(self._tiles)} tiles were added")
        if self._released:
            raise RuntimeError("the assembled rows were handed back already (release_rows)")
        self._carry_in = None
        return self._out

    def _start_row(self, row: int) -> None:
        band = self._bands[row]
        width = self._out.shape[1]
        carry = np.zeros((band.carry.length, width, self.channels), np.float32)
        # Rows shared by the previous, this and the next tile row stay in the carry.
        src = self._carry_in
        if src is not None:
            lo = max(band.carry.start, self._carry_in_y0)
            hi = min(band.carry.end, self._carry_in_y0 + src.shape[0])
            if lo < hi:
                carry[lo - band.carry.start : hi - band.carry.start] = src[
                    lo - self._carry_in_y0 : hi - self._carry_in_y0
                ]
        self._carry_out = carry
        self._window = np.zeros((band.final.length, self._win_cap, self.channels), np.float32)
        self._w0 = self._w1 = 0
        self.peak_working_bytes = max(self.peak_working_bytes, self.working_bytes)

    def _add_blended(self, tile: Tile, output: np.ndarray) -> None:
        """Route one tile's support into the window, the carry, or straight to the output.

        Rows split at `a <= b <= c <= d`: [a, b) also covered by earlier tile rows, [b, c)
        finished after this row and fresh, [c, d) shared with the next row (carry). Columns
        split at `cs <= p <= q <= ce`: [p, q) covered by this column tile alone. The cell
        [b, c) x [p, q) has weight exactly 1 and no other contributor, so it is stored
        directly; that skips the float work for most of a tile.
        """
        i, j = tile.row, tile.col
        band = self._bands[i]
        rsup, csup = self._rows.support[i], self._cols.support[j]
        a, c, d = rsup.start, band.final.end, rsup.end
        b = min(max(a, self._rows.support[i - 1].end if i else a), c)
        cs, ce = csup.start, csup.end
        q = self._cols.finalised_before(j)
        p = min(max(cs, self._cols.support[j - 1].end if j else cs), q)
        roff, coff = self._rows.offset[i] - a, self._cols.offset[j] - cs

        def weighted(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
            crop = output[roff + r0 : roff + r1, coff + c0 : coff + c1]
            # Weight on (rows, cols*channels) views: numpy is several times slower when the
            # innermost broadcast axis is the 3 channels.
            flat = crop.reshape(r1 - r0, (c1 - c0) * self.channels)
            ch = self.channels
            out = flat * self._rows.weight[i][r0 - a : r1 - a, None]
            out *= self._wx_flat[j][None, (c0 - cs) * ch : (c1 - cs) * ch]
            return out.reshape(crop.shape)

        window, carry = self._window, self._carry_out
        assert window is not None and carry is not None
        if c > a:
            self._extend_window(a, b, c, ce, p, q)
            w0 = self._w0
            if b > a:
                window[: b - a, cs - w0 : ce - w0] += weighted(a, b, cs, ce)
            if c > b:
                for c0, c1 in ((cs, p), (q, ce)):
                    if c1 > c0:
                        window[b - a : c - a, c0 - w0 : c1 - w0] += weighted(b, c, c0, c1)
            self._flush_window(a, b, c, p, q)
            if c > b and q > p:
                _store(self._out[b:c, p:q], output[roff + b : roff + c, coff + p : coff + q])
        if d > c:
            carry[:, cs:ce] += weighted(c, d, cs, ce)

    def _extend_window(self, a: int, b: int, c: int, end: int, p: int, q: int) -> None:
        """Open window columns up to `end` for the finished rows [a, c).

        New columns start from what earlier tile rows carried (rows [a, b)) or zero; the
        direct cell [b, c) x [p, q) is left alone since it never goes through the window.
        """
        window = self._window
        assert window is not None
        w0, w1 = self._w0, self._w1
        if end <= w1:
            return
        if end - w0 > self._win_cap:
            raise RuntimeError("column window overflow")  # supports guarantee it cannot
        window[: b - a, w1 - w0 : end - w0] = 0.0
        for c0, c1 in ((w1, min(p, end)), (max(q, w1), end)):
            if c1 > c0:
                window[b - a : c - a, c0 - w0 : c1 - w0] = 0.0
        src = self._carry_in
        if src is not None:
            y0 = self._carry_in_y0
            r0, r1 = max(a, y0), min(c, y0 + src.shape[0])
            if r0 < r1:
                window[r0 - a : r1 - a, w1 - w0 : end - w0] = src[r0 - y0 : r1 - y0, w1:end]
        self._w1 = end

    def _flush_window(self, a: int, b: int, c: int, p: int, q: int) -> None:
        """Write finished columns [_w0, q) to the output (except the direct cell), shift left."""
        window = self._window
        assert window is not None
        w0, w1 = self._w0, self._w1
        if q <= w0:
            return
        if b > a:
            _store(self._out[a:b, w0:q], window[: b - a, : q - w0])
        if c > b and p > w0:
            _store(self._out[b:c, w0:p], window[b - a : c - a, : p - w0])
        keep = w1 - q
        if keep > 0:
            window[:, :keep] = window[:, q - w0 : w1 - w0]
        self._w0 = q
