"""Upscale with any ONNX upscaler: scale, layout, dtype and multiple_of from the graph or a probe.

Tiles follow DESIGN §3: the image is padded once to the model's multiple_of, cut into equal
tiles spread evenly with overlap, and blended back in bands so the float copy never spans the
whole output. Alpha goes through the model as a grey image so its edges are as sharp as the
colour's. On out-of-memory the session is released (M5); with automatic tiles the frame is
retried at half the tile size on a fresh session, down to the floor.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from engine.errors import DiskFullError, InferenceError, ModelError, ResourceError
from engine.io.image import DecodedImage, to_float
from engine.io.png import FrameLike
from engine.io.writing import BackgroundWrite, GrowingFrame
from engine.models.catalog import Layout
from engine.models.contracts import Contract, ModelSpec
from engine.operations import calibration
from engine.operations.base import (
    OperationBase,
    PreviewHost,
    RegionOutcome,
    RunContext,
    model_id,
)
from engine.operations.products import Products
from engine.operations.write_behind import WriteBehind, abandoned_on_error
from engine.options import OperationOptions, UpscaleConfig, UpscaleOptions, of_type, settle
from engine.previews import PreviewPatch, PreviewRequest, PreviewResult, Region
from engine.requests import Operation, Product, ProductKind, ProgressKind
from engine.runtime import memory
from engine.runtime.arena import cpu_arena_limit
from engine.runtime.handle import SessionHandle
from engine.runtime.identity import FileIdentity
from engine.tiling.assembly import TileAssembler
from engine.tiling.cache import PlanKey
from engine.tiling.plan import Tile, TilePlan, axis_spans, pad_to_multiple, plan_tiles
from engine.tiling.region import Cell, RegionAssembler

log = logging.getLogger(__name__)

T = TypeVar("T")

PROBE_SIZES = (61, 62, 60, 56, 48, 64)  # odd first: a success there means no multiple_of


def _tensor(c: Contract, h: int, w: int, *, output: bool = False) -> np.ndarray:
    """A zero image tensor for the model's input, or (`output`) a buffer for its image output."""
    dims = (1, c.channels, h, w) if c.layout is Layout.NCHW else (1, h, w, c.channels)
    if output:
        return np.empty(
            dims, np.float16 if c.tensor(c.image_output).dtype == "float16" else np.float32
        )
    return np.zeros(dims, np.float16 if c.fp16 else np.float32)


def _out_hw(c: Contract, arr: np.ndarray) -> tuple[int, int]:
    return (arr.shape[2], arr.shape[3]) if c.layout is Layout.NCHW else (arr.shape[1], arr.shape[2])


def probe_sizes(spec: ModelSpec, run: Callable[[np.ndarray], np.ndarray]) -> ModelSpec:
    """Scale and multiple_of by running the model on tiny images, for an upscaler whose graph
    (and catalog entry) did not tell them."""
    c = spec.contract
    name = spec.path.name
    scale, multiple_of = c.scale, c.multiple_of
    if c.fixed_size is not None:
        if scale is None:
            oh, _ = _out_hw(c, run(_tensor(c, *c.fixed_size)))
            scale = max(1, oh // c.fixed_size[0])
        multiple_of = 1
    else:
        for size in PROBE_SIZES:
            try:
                result = run(_tensor(c, size, size))
            except InferenceError:  # the model refuses this size: try the next multiple
                continue
            oh, _ = _out_hw(c, result)
            multiple_of = 1 if size == 61 else {62: 2, 60: 4, 56: 8, 48: 16, 64: 32}[size]
            if oh % size == 0:
                scale = oh // size
            break
        else:
            raise ModelError(f"{name} did not run on any small test image; is it an upscaler?")
        if scale is None:
            size = max(multiple_of, 16) * max(1, math.ceil(16 / max(multiple_of, 16)))
            oh, _ = _out_hw(c, run(_tensor(c, size, size)))
            scale = oh // size
    if not scale or scale < 1:
        raise ModelError(f"{name}: could not work out the upscale factor.")
    return replace(spec, contract=replace(c, scale=int(scale), multiple_of=int(multiple_of)))


# Below this many bytes of weights an upscaler is a light, memory-bound network (the compact
# SRVGG models: ~0.6 M MACs per pixel, against x4plus's 18 M): see `auto_tile`.
LIGHT_MODEL_BYTES = 8 << 20
# On a GPU `auto` starts from at most this tile: larger ones gain nothing there, and each new
# input shape grows the CUDA arena (DESIGN §3).
GPU_MAX_TILE = 512
# Tiles the CPU plan chooses among when one run of the whole image does not fit.
CPU_TILES = (128, 192, 256, 384, 512)
# A run's fixed cost on the CPU, as input pixels' worth of work (a few ms per run).
RUN_PIXELS = 2048
# A larger tile than the smallest one's is taken only while its activations stay below this
# share of the 8-bit output (DESIGN §7: the peak of a ×4 of 2048² stays under 1.5 × the output,
# which the assembled product itself mostly is).
PEAK_SHARE = 0.25


def tile_overlap(ctx: RunContext) -> int:
    """The tile overlap of this request's plans: the engine setting where one is set, else the
    model's own, measured once (engine/operations/calibration.py) for a light model that takes
    any size, else the default. The job and its preview call this alike."""
    if ctx.settings.overlap is not None:
        return ctx.settings.overlap
    c = ctx.spec.contract
    if c.fixed_size is not None or c.scale is None:
        return calibration.DEFAULT_OVERLAP
    try:
        identity = FileIdentity.read(ctx.spec.path)
    except OSError:
        return calibration.DEFAULT_OVERLAP
    key = (ctx.spec.path, identity)
    known = _MEASURED.get(key) or calibration.kept_overlap(ctx.spec.path, identity)
    if known is None:
        # Not where a memory cap is set: the probe's whole-image runs must not be what fails.
        # Nor on a GPU: the probe's sizes would each grow the CUDA arena (DESIGN §3); a CPU
        # request measures it, for every device.
        capped = cpu_arena_limit() or ctx.settings.cpu_mem_limit or ctx.settings.gpu_mem_limit
        if identity.size >= CALIBRATE_BELOW_BYTES or capped or ctx.session.key.device.is_gpu:
            return calibration.DEFAULT_OVERLAP
        session = ctx.session

        cancel = ctx.cancel

        def run(tensor: np.ndarray) -> np.ndarray:
            # The request's cancel stops the probe too (a slow light model probes for seconds);
            # a cancelled probe keeps nothing, the next request measures again.
            out = session.run(
                {c.image_input: tensor}, last=False, cancel=cancel, outputs=[c.image_output]
            )
            return np.asarray(out[0])

        def upscale(picture: np.ndarray, tile: int | None, overlap: int) -> np.ndarray:
            return plain_upscale(picture, c, tile, overlap, run)

        counted = session.runs
        # A failing probe fails the request as its first run would (the handle has released
        # a poisoned session; out of memory retries at half the tile as usual).
        try:
            known = calibration.calibrate(ctx.spec.path, identity, upscale, c.multiple_of)
        finally:
            # The probe's runs are the engine's measurement, once per model: the request's
            # `runs` count those of its products (they still count as attempted, so the
            # arena is handed back after them as after any run).
            session.runs = counted
    _MEASURED[key] = known
    return known


# Measured at first use only below this many bytes of weights: the probe costs a light model
# about a second, x4plus (36 MFLOP per pixel) half a minute; the others keep the default.
CALIBRATE_BELOW_BYTES = LIGHT_MODEL_BYTES
_MEASURED: dict[tuple[Path, FileIdentity], int] = {}  # this process's, by file version


def auto_tile(
    ctx: RunContext,
    config: UpscaleConfig,
    size: tuple[int, int] | None = None,
    requested_max: int | None = None,
) -> int:
    """The tile `auto` starts from: the largest that fits the memory budget, and on the CPU,
    given the image's (width, height) `size`, the plan fastest for the whole request.

    Weights stand in for a network's width and depth (for a fully convolutional net, its MACs
    per input pixel ≈ its weight count), and so for its live activation bytes per pixel. On
    the CPU the cost of a run is about proportional to the pixels it computes, whatever the
    tile (measured: animevideov3 ×4 of 1024×768, one run of the whole image 1.3–1.4× faster
    than 128² or 256² tiles, which compute 1.3–1.8× its pixels with their overlaps): so one run
    of the whole image when its activations fit the budget, else the tile computing the
    fewest pixels (overlaps, and each run's fixed cost) among those whose activations also
    stay a small share of the output (`PEAK_SHARE`), never below the tile chosen without a
    size. Without a size (a preview's plan, which a job with tiles in the cache adopts): a
    light model's 128², a heavy one's largest that fits. The CPU plan is bounded by the
    request's own `max_tile` (`requested_max`), not by the catalog's preset, which is the
    GPU's. The `auto_start` option skips the estimate and starts from that tile (halving on
    out-of-memory as usual).
    """
    if config.auto_start:
        return max(config.auto_start, ctx.settings.min_tile)
    c = ctx.spec.contract
    scale = c.scale or 1
    weights = max(ctx.session.file_size, 1)
    output = scale * scale * 3 * 4 * 2  # the float output tile and its copy, per input pixel
    device = ctx.session.key.device
    budget: float
    tile = config.max_tile
    if device.is_gpu:
        # Live activation bytes per input pixel grow with the network's width and depth.
        per_pixel = min(max(weights // 16_000, 512), 8192) + output
        free = memory.free_gpu_memory(device.index)
        budget = 0.6 * free if free else 2 << 30
        if ctx.settings.gpu_mem_limit:
            budget = min(budget, 0.8 * ctx.settings.gpu_mem_limit)
        tile = min(tile, GPU_MAX_TILE)
    else:
        # Measured peak above the loaded model: x4plus (67 MB) at 256²: 877 MB ≈ weights / 5000
        # per pixel.
        per_pixel = max(weights // 5000, 1024) + output
        limit = cpu_arena_limit() or ctx.settings.cpu_mem_limit
        budget = 0.5 * limit if limit else min(memory.ram_snapshot().available / 4, 1.5 * 2**30)
        if weights < LIGHT_MODEL_BYTES:
            tile = min(tile, 128)
    while tile > ctx.settings.min_tile and tile * tile * per_pixel > budget:
        tile //= 2
    tile = max(tile, ctx.settings.min_tile)
    if device.is_gpu or size is None or c.fixed_size is not None:
        return tile
    return _cpu_plan(ctx, c, size, tile, per_pixel, budget, requested_max or 8192)


def _cpu_plan(
    ctx: RunContext,
    c: Contract,
    size: tuple[int, int],
    floor: int,
    per_pixel: int,
    budget: float,
    cap: int,
) -> int:
    """The CPU's tile for a whole `size` (width, height) image: see `auto_tile`."""
    m = c.multiple_of
    w, h = (-(-n // m) * m for n in size)
    floor = min(floor, cap)
    if h * w * per_pixel <= budget and max(h, w) <= cap:
        return max(h, w)  # one run of the whole image
    overlap = tile_overlap(ctx)
    allowance = PEAK_SHARE * size[0] * size[1] * (c.scale or 1) ** 2 * 3
    best, best_cost = floor, math.inf
    for tile in (floor, *CPU_TILES):
        if tile > cap or (tile > floor and tile * tile * per_pixel > min(budget, allowance)):
            continue
        plan = plan_tiles(h, w, tile, overlap, m)
        cost = plan.count * (plan.tile_h * plan.tile_w + RUN_PIXELS)
        if cost < best_cost:
            best, best_cost = tile, cost
    return best


class Upscale(OperationBase):
    operation: ClassVar[Operation] = Operation.UPSCALE
    config = UpscaleConfig(max_tile=512, auto_start=None)
    requested_max_tile: int | None = None  # the request's own max_tile (not the catalog's)

    def configure(self, options: OperationOptions, spec: ModelSpec) -> None:
        given = of_type(options, UpscaleOptions) or UpscaleOptions()
        self.config = settle(given, of_type(spec.defaults, UpscaleOptions))
        self.requested_max_tile = given.max_tile

    def complete(self, spec: ModelSpec, session: SessionHandle) -> ModelSpec:
        def probe(arr: np.ndarray) -> np.ndarray:
            c = spec.contract
            return np.asarray(
                session.run({c.image_input: arr}, last=False, outputs=[c.image_output])[0]
            )

        return spec if spec.contract.scale is not None else probe_sizes(spec, probe)

    def preview(self, host: PreviewHost) -> PreviewResult:
        return host.region(self.preview_region)  # only the tiles that reach the view

    def preview_region(
        self,
        frame: np.ndarray,
        ctx: RunContext,
        request: PreviewRequest,
        send: Callable[[PreviewPatch], None],
    ) -> RegionOutcome:
        """Run the tiles reaching `request.region` and send the region's final pixels, cell by
        cell as they become final. `ctx.tiles` is the engine's tile cache for this input.

        The frame is planned by the full job's own `prepare_frame`, with the tile size the full
        job would choose (`auto_tile`, or the request's tile), so the plan, the overlap and the
        blending are the product's. The tiles whose blended contribution reaches the region run
        centre first — at most as many as the tile cache holds — through the request's context
        (cancel before every run, the last run shrinks, M2), and each cell of the region is sent
        as soon as every tile reaching it is in (`RegionAssembler`: the full job's weights and
        arithmetic, so the pixels are the product's, bit for bit). Finished tiles stay in the
        engine's tile cache for the next pan and for the full job."""
        tiles = ctx.tiles
        if tiles is None:
            raise RuntimeError("a preview needs the engine's tile cache")
        c = ctx.spec.contract
        scale = c.scale or 1
        h, w = frame.shape[:2]
        tile = auto_tile(ctx, self.config) if request.job.tile is None else int(request.job.tile)
        prep = prepare_frame(frame, c, tile, tile_overlap(ctx))
        plan = prep.plan
        size = (w * scale, h * scale)
        wanted = (request.region or Region(0, 0, w, h)).scaled(scale).clipped(*size)
        if wanted.empty:
            return RegionOutcome(size, scale, 0, 0, 0, False, None)
        region = Cell(wanted.y0, wanted.y1, wanted.x0, wanted.x1)
        asm = RegionAssembler(plan, scale, prep.widths, frame.dtype, region)
        cache = tiles.cache
        key = tiles.key(0, plan, prep.widths)
        cache.keep_only(key)  # another input, model or plan: its tiles are of no use now
        needed = asm.needed()
        cap = cache.capacity(plan, scale, prep.widths)
        if request.max_tiles is not None:
            cap = min(cap, request.max_tiles)
        chosen = needed[: max(cap, 1)]
        cache.pin(key, (t.index for t in chosen))
        first: list[float] = []

        def flush() -> None:
            for cell in asm.ready():
                pixels = asm.render(cell)
                if not first:
                    first.append(time.perf_counter())
                send(
                    PreviewPatch(
                        request.id,
                        request.generation,
                        Region(cell.x0, cell.y0, cell.x1, cell.y1),
                        pixels,
                        size,
                        scale,
                    )
                )

        try:
            to_run = []
            cached = 0
            for t in chosen:
                found = cache.get(key, t.index)
                if found is None:
                    to_run.append(t)
                else:
                    asm.add(t, found)
                    cached += 1
            flush()  # what earlier previews made is drawn at once
            passes = len(prep.passes)
            ctx.start_frame(0, 1, len(to_run) * passes)
            buffer = _tensor(c, plan.tile_h * scale, plan.tile_w * scale, output=True)
            for t in to_run:
                # Each pass's output is copied out of the one result buffer before the next run.
                outputs = tuple(
                    np.array(run_tile(prep, t, p, c, ctx, buffer), dtype=np.float32)
                    for p in range(passes)
                )
                if not cache.put(key, t.index, outputs):
                    log.warning("preview tile %d did not fit in the tile cache", t.index)
                asm.add(t, outputs)
                flush()
        finally:
            cache.unpin()
        return RegionOutcome(
            size,
            scale,
            len(to_run),
            cached,
            len(needed),
            len(chosen) < len(needed),
            first[0] if first else None,
        )

    def minimal_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        if c.fixed_size is not None:
            return None
        m = max(c.multiple_of, 4)
        return {c.image_input: _tensor(c, m, m)}

    def output_buffers(
        self, spec: ModelSpec, feeds: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray] | None:
        c = spec.contract
        tensor = feeds[c.image_input]
        h, w = _out_hw(c, tensor)  # the input's H and W, read the same way as an output's
        scale = c.scale or 1
        return {c.image_output: _tensor(c, h * scale, w * scale, output=True)}

    def full_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        return None if c.fixed_size is None else {c.image_input: _tensor(c, *c.fixed_size)}

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        auto = ctx.request.tile is None
        tile = int(ctx.request.tile or 0)
        if auto:
            cached = ctx.tiles.cached_plan(0) if ctx.tiles is not None else None
            if cached is not None:  # a preview's tiles: its plan, so they are not run again
                tile = _tile_of(cached)
            else:
                tile = auto_tile(ctx, self.config, image.size, self.requested_max_tile)
        n = len(image.frames)
        band_write = ctx.settings.overlap_tiles
        # A frame's write goes on behind the next frame's runs (engine/operations/write_behind.py).
        behind = WriteBehind() if band_write else None
        with Products(ctx, image) as products, abandoned_on_error(behind):
            sink = products.image_product(model_id(ctx.spec), ProductKind.IMAGE, image.meta)
            for index, frame in enumerate(image.frames):
                while True:
                    failure: ResourceError | None = None
                    # A PNG of its own is encoded band by band while the later tiles run.
                    # (Not with `overlap_tiles` off: then all the engine's own work is on its thread.)
                    early = sink.add if band_write and sink.encodes_rows_as_read() else None
                    try:
                        out = self._frame(frame, c, tile, index, n, ctx, early, behind)
                    except DiskFullError:
                        raise  # a smaller tile frees no disk
                    except ResourceError as e:
                        failure = e  # the handle has already released the failed session (M5)
                    if failure is None:
                        break
                    next_tile = tile // 2
                    if not auto or next_tile < ctx.settings.min_tile or c.fixed_size is not None:
                        raise failure
                    log.warning(
                        "out of memory at tile %d; retrying at %d on a fresh session",
                        tile,
                        next_tile,
                    )
                    del failure
                    ctx.session.renew()
                    tile = next_tile
                if out is not None:
                    products.add(sink, out)  # encoded now: frames do not pile up in memory
                del out
                ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
            ctx.used_tile = None if c.fixed_size is None and tile >= max(image.size) else tile
            if behind is not None:
                with products.timed():
                    behind.finish()  # the last frame's rows after its last run
            return products.publish()

    def _frame(
        self,
        frame: np.ndarray,
        c: Contract,
        tile: int,
        index: int,
        count: int,
        ctx: RunContext,
        write: Callable[[FrameLike], None] | None = None,
        behind: WriteBehind | None = None,
    ) -> np.ndarray | None:
        """The frame upscaled; or, given `write` (the product's writer), None once `write` has
        taken the whole frame: it is handed the frame at the start and encodes its rows on a
        side thread as the tiles finish them, so the request ends soon after its last run."""
        scale = c.scale or 1
        h, w = frame.shape[:2]
        prep = prepare_frame(frame, c, tile, tile_overlap(ctx))
        plan, passes = prep.plan, prep.passes
        # Tiles a preview already made for this very input, model and plan are not run again
        # (engine/tiling/cache.py); they leave the cache as they are used.
        tiles = ctx.tiles
        key = tiles.key(index, plan, prep.widths) if tiles is not None else None
        reuse = tiles.cache.indices(key) if tiles is not None and key is not None else set()
        ctx.start_frame(index, count, (plan.count - len(reuse)) * len(passes))
        dtype = frame.dtype
        growing: _FinishedRows | None = None
        if write is not None:
            growing = _growing(h * scale, w * scale, sum(n for _, n in passes), np.dtype(dtype))
        assemblers = [
            TileAssembler(plan, scale, width, np.dtype(dtype), growing.advance if growing else None)
            for _, width in passes
        ]
        writer: BackgroundWrite | None = None
        if growing is not None and write is not None:
            growing.bind(assemblers)
            finished = growing

            def whole() -> None:
                try:
                    write(finished)
                finally:
                    finished.let_go()

            writer = BackgroundWrite(behind.after_previous(whole) if behind else whole, growing)
        try:
            self._run_tiles(ctx, prep, assemblers, reuse, key, writer)
        except BaseException:
            if writer is not None:
                writer.abandon()  # it removes its temp file; the frame's own error is raised
            raise
        if writer is not None and behind is not None:
            waited = time.perf_counter()
            behind.hand(writer)  # written while the next frame runs; waited on by `finish`
            ctx.io_seconds += time.perf_counter() - waited
            return None
        if writer is not None:
            waited = time.perf_counter()
            writer.result()  # the rows after the last run, and the writer's own errors
            ctx.io_seconds += time.perf_counter() - waited
            return None
        parts = [asm.finish() for asm in assemblers]
        full = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)
        return np.ascontiguousarray(full[: h * scale, : w * scale])

    def _run_tiles(
        self,
        ctx: RunContext,
        prep: FramePlan,
        assemblers: list[TileAssembler],
        reuse: set[int],
        key: PlanKey | None,
        writer: BackgroundWrite | None,
    ) -> None:
        """Every tile of the frame run (or taken from the preview's cache, `reuse` under `key`)
        and blended into `assemblers`, one per pass."""
        c = ctx.spec.contract
        plan, tiles = prep.plan, ctx.tiles
        buffers = _result_buffers(c, plan, c.scale or 1)
        units = [(t, p) for t in plan.tiles for p in range(len(prep.passes))]
        todo = [(t, p) for t, p in units if t.index not in reuse]
        with TileOverlap(ctx.settings.overlap_tiles) as overlap:
            # The next tile's tensor is cut and converted, and the last result blended, on a
            # side thread while ORT runs (it releases the GIL): the engine's own work hides
            # behind the runs. Blending keeps the tiles' order; nothing runs ahead of a cancel.
            upcoming = overlap.prepare(prep, todo[0], c) if todo else None
            turn = 0
            for t in plan.tiles:
                if t.index in reuse and tiles is not None and key is not None:
                    cached = tiles.cache.take(key, t.index)
                    assert cached is not None
                    for p, asm in enumerate(assemblers):
                        overlap.blend(asm, t, cached[p])
                    del cached
                    continue
                for asm in assemblers:
                    assert upcoming is not None
                    tensor, reduce = upcoming.result()
                    turn += 1
                    upcoming = overlap.prepare(prep, todo[turn], c) if turn < len(todo) else None
                    buffer = buffers[turn % 2]
                    if writer is not None:
                        writer.check()  # a writer that failed (a full disk) stops the runs
                    result = ctx.run(
                        {c.image_input: tensor},
                        outputs=[c.image_output],
                        into={c.image_output: buffer},
                    )[0]
                    del tensor
                    overlap.blend(asm, t, reduce(_from_tensor(result, c)), wait_previous=True)
            overlap.drain()


def _result_buffers(c: Contract, plan: TilePlan, scale: int) -> list[np.ndarray]:
    """Every tile has one shape: ORT writes each result into one of two buffers, outside its
    arena (nothing of the arena stays pinned when the last run shrinks it, M11); two, so one
    tile's result is blended while the next one runs."""
    return [_tensor(c, plan.tile_h * scale, plan.tile_w * scale, output=True) for _ in "ab"]


class _FinishedRows(GrowingFrame):
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


def _growing(height: int, width: int, channels: int, dtype: np.dtype[Any]) -> _FinishedRows:
    def read(start: int, stop: int) -> np.ndarray:
        parts = [a.rows(start, stop)[:, :width] for a in frame.assemblers]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)

    def release(stop: int) -> None:
        for a in frame.assemblers:
            a.release_rows(stop)

    frame = _FinishedRows((height, width, channels), dtype, read, release)
    return frame


class TileOverlap:
    """One side thread for a frame's own work beside its runs: cutting and converting the next
    tile's tensor, and blending finished tiles into their assemblers in order.

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

    def __enter__(self) -> TileOverlap:
        return self

    def __exit__(self, *exc: object) -> None:
        # On a cancel or a failure nothing queued runs any more; what is running finishes.
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        if self._pool is not None:
            return self._pool.submit(fn, *args)
        done: Future[T] = Future()
        done.set_result(fn(*args))
        return done

    def prepare(
        self, prep: FramePlan, unit: tuple[Tile, int], c: Contract
    ) -> Future[tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]]:
        t, p = unit
        return self._submit(tile_input, prep, t, p, c)

    def blend(
        self, asm: TileAssembler, t: Tile, output: np.ndarray, *, wait_previous: bool = False
    ) -> None:
        # The result's buffer is written again two runs later: the blend before must be done.
        if wait_previous:
            self._wait()
        self._blended = self._submit(asm.add, t, output)

    def _wait(self) -> None:
        if self._blended is not None:
            done, self._blended = self._blended, None
            done.result()  # a failure on the side thread is raised here

    def drain(self) -> None:
        self._wait()


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
        padded_colour = _pad_at_least(padded_colour, fh, fw)
        padded_alpha = _pad_at_least(padded_alpha, fh, fw) if padded_alpha is not None else None
    ph, pw = padded_colour.shape[:2]
    if c.fixed_size is not None:
        plan = _fixed_plan(ph, pw, c.fixed_size, overlap)
    else:
        plan = plan_tiles(ph, pw, tile, overlap, c.multiple_of)
    passes = _passes(colour.shape[2], alpha is not None, c.channels)
    return FramePlan(padded_colour, padded_alpha, plan, passes)


def tile_input(
    prep: FramePlan, t: Tile, p: int, c: Contract
) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """Pass `p` of tile `t` as the model's input tensor, and how its output is reduced back."""
    build, _ = prep.passes[p]
    region_c = prep.colour[t.y0 : t.y1, t.x0 : t.x1]
    region_a = prep.alpha[t.y0 : t.y1, t.x0 : t.x1] if prep.alpha is not None else None
    model_in, reduce = build(region_c, region_a)
    return _to_tensor(to_float(model_in), c), reduce


def run_tile(
    prep: FramePlan, t: Tile, p: int, c: Contract, ctx: RunContext, buffer: np.ndarray
) -> np.ndarray:
    """One counted model run: pass `p` of tile `t`, its float32 output (a view of `buffer`)."""
    tensor, reduce = tile_input(prep, t, p, c)
    result = ctx.run(
        {c.image_input: tensor}, outputs=[c.image_output], into={c.image_output: buffer}
    )[0]
    return reduce(_from_tensor(result, c))


Pass = tuple[
    Callable[
        [np.ndarray, np.ndarray | None], tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]
    ],
    int,
]


def _passes(colour_channels: int, has_alpha: bool, model_channels: int) -> list[Pass]:
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
            passes.append((_channel_pass(ch, first), 1))
    else:
        passes.append((lambda c, a: as_model(c), colour_channels))
    if has_alpha:
        passes.append((lambda c, a: as_model(a if a is not None else c[..., :1]), 1))
    return passes


def _channel_pass(
    ch: int, reduce: Callable[[np.ndarray], np.ndarray]
) -> Callable[
    [np.ndarray, np.ndarray | None], tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]
]:
    def build(
        c: np.ndarray, _a: np.ndarray | None
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        return c[..., ch : ch + 1], reduce

    return build


def _to_tensor(x: np.ndarray, c: Contract) -> np.ndarray:
    arr = x.transpose(2, 0, 1)[None] if c.layout is Layout.NCHW else x[None]
    return np.ascontiguousarray(arr, dtype=np.float16 if c.fp16 else np.float32)


def _from_tensor(y: np.ndarray, c: Contract) -> np.ndarray:
    # A view in HWC order; the assembler clips and quantises, so no copy is made here.
    arr = y[0].transpose(1, 2, 0) if c.layout is Layout.NCHW else y[0]
    return arr.astype(np.float32, copy=False)


def _pad_at_least(img: np.ndarray, h: int, w: int) -> np.ndarray:
    ph, pw = max(0, h - img.shape[0]), max(0, w - img.shape[1])
    if not ph and not pw:
        return img
    return np.pad(img, ((0, ph), (0, pw), (0, 0)), mode="edge")


def _fixed_plan(h: int, w: int, fixed: tuple[int, int], overlap: int) -> TilePlan:
    fh, fw = fixed
    return TilePlan(h, w, fh, fw, overlap, axis_spans(h, fh, overlap), axis_spans(w, fw, overlap))


def _tile_of(plan: TilePlan) -> int:
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
            asm.add(t, reduce(_from_tensor(np.asarray(run(tensor)), c)))
    parts = [asm.finish() for asm in assemblers]
    full = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)
    return np.ascontiguousarray(full[: h * scale, : w * scale])
