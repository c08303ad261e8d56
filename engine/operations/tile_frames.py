"""An upscaler's frame in tiles: padding and planning a frame, each tile's tensors and passes.

DESIGN §3: a frame is padded once to the model's multiple_of and cut into equal tiles spread
evenly with overlap; alpha goes through the model as a grey image (its own pass). The tiles'
results are written into two buffers outside ORT's arena and blended on a side thread
(`TileOverlap`) while the next tile runs. `plain_upscale` is the same walk without the
engine's bookkeeping, for the overlap's measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from engine.io.image import to_float
from engine.io.writing import GrowingFrame
from engine.models.catalog import Layout
from engine.models.contracts import Contract
from engine.operations.base import RunContext
from engine.tiling.assembly import TileAssembler
from engine.tiling.plan import Tile, TilePlan, axis_spans, pad_to_multiple, plan_tiles

T = TypeVar("T")


def model_tensor(c: Contract, h: int, w: int, *, output: bool = False) -> np.ndarray:
    """A zero image tensor for the model's input, or (`output`) a buffer for its image output."""
    dims = (1, c.channels, h, w) if c.layout is Layout.NCHW else (1, h, w, c.channels)
    if output:
        return np.empty(
            dims, np.float16 if c.tensor(c.image_output).dtype == "float16" else np.float32
        )
    return np.zeros(dims, np.float16 if c.fp16 else np.float32)


def output_hw(c: Contract, arr: np.ndarray) -> tuple[int, int]:
    return (arr.shape[2], arr.shape[3]) if c.layout is Layout.NCHW else (arr.shape[1], arr.shape[2])


def result_buffers(c: Contract, plan: TilePlan, scale: int) -> list[np.ndarray]:
    """Every tile has one shape: ORT writes each result into one of two buffers, outside its
    arena (nothing of the arena stays pinned when the last run shrinks it, M11); two, so one
    tile's result is blended while the next one runs."""
    return [model_tensor(c, plan.tile_h * scale, plan.tile_w * scale, output=True) for _ in "ab"]


class FinishedRows(GrowingFrame):
    """A frame's product read from its assemblers (one per pass, side by side in channels)
    as their rows become final, cropped to the image's size."""

    def bind(self, assemblers: list[TileAssembler]) -> None:
        self.assemblers = assemblers

    def advance(self, rows: int) -> None:
        # Final when every pass's assembler has finished the rows.
        assemblers = self.assemblers
        if assemblers:  # none once the writer let go (a tile blended after a failed write)
            super().advance(min(a.final_rows for a in assemblers))

    def let_go(self) -> None:
        """Drops the assemblers once the write has ended: they and this frame refer to each
        other, and the cycle held each frame's rows until a garbage collection — a frame more
        of peak for every few frames of a sequence."""
        self.assemblers = []


def growing_frame(height: int, width: int, channels: int, dtype: np.dtype[Any]) -> FinishedRows:
    def read(start: int, stop: int) -> np.ndarray:
        parts = [a.rows(start, stop)[:, :width] for a in frame.assemblers]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)

    def release(stop: int) -> None:
        for a in frame.assemblers:
            a.release_rows(stop)

    frame = FinishedRows((height, width, channels), dtype, read, release)
    return frame


class TileOverlap:
    """One side thread for the frames' own work beside their runs: cutting and converting the
    next tile's tensor, and blending finished tiles into their assemblers in order. It lives
    for all the frames of an input (a thread started and joined a frame cost the engine
    thread ~4 ms a frame on a busy 2-core machine); `drain` ends a frame, `abandon` gives one up.

    Measured in the bench ("overlap" row): ORT uses every core during a run, so the side work
    only fills the gaps between runs.
    """

    def __init__(self, side_thread: bool = True) -> None:
        # Off (EngineSettings.overlap_tiles): all on the engine thread, for the bench's
        # comparison.
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="tessera-tiles")
            if side_thread
            else None
        )
        self._blended: Future[None] | None = None
        self._bands: list[Future[None]] = []  # a single tile's rows stored during its run

    def __enter__(self) -> TileOverlap:
        return self

    def __exit__(self, *exc: object) -> None:
        # On a cancel or a failure nothing queued runs any more; what is running finishes.
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, fn: Callable[..., T], *args: object, now: bool = False) -> Future[T]:
        """`fn(*args)` on the side thread; `now`: on this thread, for work it would wait for
        at once (a frame's first tensor, its last blend): a hand-over and back costs more
        than it hides when the cores are busy."""
        if self._pool is not None and not now:
            return self._pool.submit(fn, *args)
        done: Future[T] = Future()
        done.set_result(fn(*args))
        return done

    def prepare(
        self, prep: FramePlan, unit: tuple[Tile, int], c: Contract, *, now: bool = False
    ) -> Future[tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]]:
        t, p = unit
        return self._submit(tile_input, prep, t, p, c, now=now)

    def blend(
        self,
        asm: TileAssembler,
        t: Tile,
        output: np.ndarray,
        *,
        wait_previous: bool = False,
        now: bool = False,
    ) -> None:
        # The result's buffer is written again two runs later: the blend before must be done.
        if wait_previous or now:
            self._wait()  # `now` keeps the order too: what was queued is stored first
        self._blended = self._submit(asm.add, t, output, now=now)

    def rows_of(
        self,
        asm: TileAssembler,
        t: Tile,
        buffer: np.ndarray,
        c: Contract,
        reduce: Callable[[np.ndarray], np.ndarray],
    ) -> Callable[[int], None]:
        """A listener for a single tile's run (finished_rows.py): each band of `buffer`'s rows
        the run makes final is stored into `asm` on the side thread, so a writer of the
        assembler's rows encodes them while the run goes on; `blend` then stores the rest."""
        done = 0

        def made(rows: int) -> None:
            nonlocal done
            band = reduce(from_tensor(buffer, c)[done:rows])
            self._bands.append(self._submit(asm.add_rows, t, band, done))
            done = rows

        return made

    def _wait(self) -> None:
        bands, self._bands = self._bands, []
        for band in bands:
            band.result()
        if self._blended is not None:
            done, self._blended = self._blended, None
            done.result()  # a failure on the side thread is raised here

    def drain(self) -> None:
        """The frame's side work done (its errors raised here)."""
        self._wait()

    def abandon(self) -> None:
        """The frame is given up (a failure, a cancel, a retry at a smaller tile): what it
        handed the side thread (a tensor and a blend or two) ends, and its errors go with it."""
        self._bands, self._blended = [], None
        if self._pool is not None:
            self._pool.submit(int).result()  # one thread, in order: all before it has ended


@dataclass(frozen=True)
class FramePlan:
    """One frame made ready for its tiles: padded once (DESIGN §3), planned, split in passes."""

    colour: np.ndarray  # padded to the model's multiple_of (and its fixed size)
    alpha: np.ndarray | None
    plan: TilePlan
    passes: list[Pass]

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(width for _, width in self.passes)


def prepare_frame(frame: np.ndarray, c: Contract, tile: int, overlap: int) -> FramePlan:
    """The full job's tile plan of a frame: the preview uses this very function, so a change
    of plan keeps preview and product identical."""
    channels = frame.shape[2]
    colour = frame[..., :3] if channels >= 3 else frame[..., :1]
    alpha = frame[..., channels - 1 :] if channels in (2, 4) else None
    padded_colour = pad_to_multiple(colour, c.multiple_of)
    padded_alpha = pad_to_multiple(alpha, c.multiple_of) if alpha is not None else None
    if c.fixed_size is not None:
        fh, fw = c.fixed_size
        padded_colour = pad_at_least(padded_colour, fh, fw)
        padded_alpha = pad_at_least(padded_alpha, fh, fw) if padded_alpha is not None else None
    ph, pw = padded_colour.shape[:2]
    if c.fixed_size is not None:
        plan = fixed_plan(ph, pw, c.fixed_size, overlap)
    else:
        plan = plan_tiles(ph, pw, tile, overlap, c.multiple_of)
    passes = channel_passes(colour.shape[2], alpha is not None, c.channels)
    return FramePlan(padded_colour, padded_alpha, plan, passes)


def tile_input(
    prep: FramePlan, t: Tile, p: int, c: Contract
) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """Pass `p` of tile `t` as the model's input tensor, and how its output is reduced back."""
    build, _ = prep.passes[p]
    region_c = prep.colour[t.y0 : t.y1, t.x0 : t.x1]
    region_a = prep.alpha[t.y0 : t.y1, t.x0 : t.x1] if prep.alpha is not None else None
    model_in, reduce = build(region_c, region_a)
    return to_tensor(to_float(model_in), c), reduce


def run_tile(
    prep: FramePlan, t: Tile, p: int, c: Contract, ctx: RunContext, buffer: np.ndarray
) -> np.ndarray:
    """One counted model run: pass `p` of tile `t`, its float32 output (a view of `buffer`)."""
    tensor, reduce = tile_input(prep, t, p, c)
    result = ctx.run(
        {c.image_input: tensor}, outputs=[c.image_output], into={c.image_output: buffer}
    )[0]
    return reduce(from_tensor(result, c))


Pass = tuple[
    Callable[
        [np.ndarray, np.ndarray | None], tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]
    ],
    int,
]


def channel_passes(colour_channels: int, has_alpha: bool, model_channels: int) -> list[Pass]:
    """How an image's channels go through the model: (build input, reduce output) per pass."""

    def keep(out: np.ndarray) -> np.ndarray:
        return out

    def mean(out: np.ndarray) -> np.ndarray:
        return out.mean(axis=2, keepdims=True)

    def first(out: np.ndarray) -> np.ndarray:
        return out[..., :1]

    def take3(out: np.ndarray) -> np.ndarray:
        return out[..., :3]

    def as_model(x: np.ndarray) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        if model_channels == 3:
            return (np.repeat(x, 3, axis=2), mean) if x.shape[2] == 1 else (x, keep)
        if model_channels == 1:
            return x, first
        # four-channel model: feed opaque alpha
        ones = np.full((*x.shape[:2], 1), 255 if x.dtype == np.uint8 else 65535, x.dtype)
        rgb = np.repeat(x, 3, axis=2) if x.shape[2] == 1 else x
        return np.concatenate([rgb, ones], axis=2), (take3 if x.shape[2] == 3 else mean_of3)

    def mean_of3(out: np.ndarray) -> np.ndarray:
        return out[..., :3].mean(axis=2, keepdims=True)

    passes: list[Pass] = []
    if model_channels == 1 and colour_channels == 3:
        for ch in range(3):
            passes.append((channel_pass(ch, first), 1))
    else:
        passes.append((lambda c, a: as_model(c), colour_channels))
    if has_alpha:
        passes.append((lambda c, a: as_model(a if a is not None else c[..., :1]), 1))
    return passes


def channel_pass(
    ch: int, reduce: Callable[[np.ndarray], np.ndarray]
) -> Callable[
    [np.ndarray, np.ndarray | None], tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]
]:
    def build(
        c: np.ndarray, _a: np.ndarray | None
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        return c[..., ch : ch + 1], reduce

    return build


def to_tensor(x: np.ndarray, c: Contract) -> np.ndarray:
    arr = x.transpose(2, 0, 1)[None] if c.layout is Layout.NCHW else x[None]
    return np.ascontiguousarray(arr, dtype=np.float16 if c.fp16 else np.float32)


def from_tensor(y: np.ndarray, c: Contract) -> np.ndarray:
    # A view in HWC order; the assembler clips and quantises, so no copy is made here.
    arr = y[0].transpose(1, 2, 0) if c.layout is Layout.NCHW else y[0]
    return arr.astype(np.float32, copy=False)


def pad_at_least(img: np.ndarray, h: int, w: int) -> np.ndarray:
    ph, pw = max(0, h - img.shape[0]), max(0, w - img.shape[1])
    if not ph and not pw:
        return img
    return np.pad(img, ((0, ph), (0, pw), (0, 0)), mode="edge")


def fixed_plan(h: int, w: int, fixed: tuple[int, int], overlap: int) -> TilePlan:
    fh, fw = fixed
    return TilePlan(h, w, fh, fw, overlap, axis_spans(h, fh, overlap), axis_spans(w, fw, overlap))


def tile_of(plan: TilePlan) -> int:
    """The tile that gives `plan` again (with the same overlap and image)."""
    if len(plan.rows) > 1:
        return plan.tile_h
    if len(plan.cols) > 1:
        return plan.tile_w
    return max(plan.height, plan.width)


def plain_upscale(
    picture: np.ndarray,
    c: Contract,
    tile: int | None,
    overlap: int,
    run: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """An 8-bit RGB picture upscaled through `run` on the job's own plan, padding and blending
    (no progress, no cancel: the calibration's probe)."""
    h, w = picture.shape[:2]
    scale = c.scale or 1
    prep = prepare_frame(picture, c, tile or max(h, w), overlap)
    assemblers = [TileAssembler(prep.plan, scale, n, np.dtype(np.uint8)) for _, n in prep.passes]
    for t in prep.plan.tiles:
        for p, asm in enumerate(assemblers):
            tensor, reduce = tile_input(prep, t, p, c)
            asm.add(t, reduce(from_tensor(np.asarray(run(tensor)), c)))
    parts = [asm.finish() for asm in assemblers]
    full = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)
    return np.ascontiguousarray(full[: h * scale, : w * scale])
