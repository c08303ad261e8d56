"""Upscale with any ONNX upscaler: scale, layout, dtype and multiple_of from the graph or a probe.

Tiles follow DESIGN §3: the image is padded once to the model's multiple_of, cut into equal
tiles spread evenly with overlap, and blended back in bands so the float copy never spans the
whole output. Alpha goes through the model as a grey image so its edges are as sharp as the
colour's. On out-of-memory the session is released (M5); with automatic tiles the frame is
retried at half the tile size on a fresh session, down to the floor. The tile is chosen in
`tile_choice`; a frame's tiles, passes and tensors are `tile_frames`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import ClassVar

import numpy as np

from engine.errors import DiskFullError, InferenceError, ModelError, ResourceError
from engine.io.image import DecodedImage
from engine.io.png import FrameLike
from engine.io.writing import BackgroundWrite
from engine.models.contracts import Contract, ModelSpec
from engine.operations.base import (
    OperationBase,
    PreviewHost,
    RegionOutcome,
    RunContext,
    model_id,
)
from engine.operations.frames_ahead import FramesAhead
from engine.operations.products import Products
from engine.operations.tile_choice import auto_tile, plan_cost, tile_overlap
from engine.operations.tile_frames import (
    FinishedRows,
    FramePlan,
    TileOverlap,
    from_tensor,
    growing_frame,
    model_tensor,
    output_hw,
    prepare_frame,
    result_buffers,
    run_tile,
    tile_of,
)
from engine.operations.write_behind import WriteBehind, abandoned_on_error
from engine.options import OperationOptions, UpscaleConfig, UpscaleOptions, of_type, settle
from engine.previews import PreviewPatch, PreviewRequest, PreviewResult, Region
from engine.requests import Operation, Product, ProductKind, ProgressKind
from engine.runtime import finished_rows
from engine.runtime.handle import SessionHandle
from engine.tiling.assembly import TileAssembler
from engine.tiling.cache import PlanKey
from engine.tiling.plan import plan_tiles
from engine.tiling.region import Cell, RegionAssembler

log = logging.getLogger(__name__)


PROBE_SIZES = (61, 62, 60, 56, 48, 64)  # odd first: a success there means no multiple_of


def probe_sizes(spec: ModelSpec, run: Callable[[np.ndarray], np.ndarray]) -> ModelSpec:
    """Scale and multiple_of by running the model on tiny images, for an upscaler whose graph
    (and catalog entry) did not tell them."""
    c = spec.contract
    name = spec.path.name
    scale, multiple_of = c.scale, c.multiple_of
    if c.fixed_size is not None:
        if scale is None:
            oh, _ = output_hw(c, run(model_tensor(c, *c.fixed_size)))
            scale = max(1, oh // c.fixed_size[0])
        multiple_of = 1
    else:
        for size in PROBE_SIZES:
            try:
                result = run(model_tensor(c, size, size))
            except InferenceError:  # the model refuses this size: try the next multiple
                continue
            oh, _ = output_hw(c, result)
            multiple_of = 1 if size == 61 else {62: 2, 60: 4, 56: 8, 48: 16, 64: 32}[size]
            if oh % size == 0:
                scale = oh // size
            break
        else:
            raise ModelError(f"{name} did not run on any small test image; is it an upscaler?")
        if scale is None:
            size = max(multiple_of, 16) * max(1, math.ceil(16 / max(multiple_of, 16)))
            oh, _ = output_hw(c, run(model_tensor(c, size, size)))
            scale = oh // size
    if not scale or scale < 1:
        raise ModelError(f"{name}: could not work out the upscale factor.")
    return replace(spec, contract=replace(c, scale=int(scale), multiple_of=int(multiple_of)))


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
        if request.job.tile is None:  # the job's fastest tiled plan: it keeps these tiles
            tile = auto_tile(ctx, self.config, (w, h), self.requested_max_tile, whole=False)
        else:
            tile = int(request.job.tile)
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
            buffer = model_tensor(c, plan.tile_h * scale, plan.tile_w * scale, output=True)
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
        return {c.image_input: model_tensor(c, m, m)}

    def output_buffers(
        self, spec: ModelSpec, feeds: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray] | None:
        c = spec.contract
        tensor = feeds[c.image_input]
        h, w = output_hw(c, tensor)  # the input's H and W, read the same way as an output's
        scale = c.scale or 1
        return {c.image_output: model_tensor(c, h * scale, w * scale, output=True)}

    def full_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        c = spec.contract
        return None if c.fixed_size is None else {c.image_input: model_tensor(c, *c.fixed_size)}

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        auto = ctx.request.tile is None
        tile = int(ctx.request.tile or 0)
        if auto:
            tile = auto_tile(ctx, self.config, image.size, self.requested_max_tile)
            tile = self._adopt_preview(ctx, image.size, tile)
        n = len(image.frames)
        band_write = ctx.settings.overlap_tiles
        # A frame's write goes on behind the next frame's runs (engine/operations/write_behind.py).
        behind = WriteBehind() if band_write else None
        with (
            Products(ctx, image) as products,
            abandoned_on_error(behind),
            TileOverlap(ctx.settings.overlap_tiles) as overlap,
            FramesAhead(image.frames) as frames,
        ):
            sink = products.image_product(model_id(ctx.spec), ProductKind.IMAGE, image.meta)
            for index, frame in enumerate(frames):
                while True:
                    failure: ResourceError | None = None
                    # A PNG of its own is encoded band by band while the later tiles run.
                    # (Not with `overlap_tiles` off: then all the engine's own work is on its thread.)
                    early = sink.add if band_write and sink.encodes_rows_as_read() else None
                    try:
                        out = self._frame(frame, c, tile, index, n, ctx, overlap, early, behind)
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

    def _adopt_preview(self, ctx: RunContext, size: tuple[int, int], tile: int) -> int:
        """The preview's plan when its tiles are in the cache and the rest of it costs no more
        than `tile`'s whole plan (the preview plans the fastest tiled plan, so for a large
        image they are the same); else `tile`: a preview must not make the job slower."""
        tiles = ctx.tiles
        cached = tiles.cached_plan(0) if tiles is not None else None
        if tiles is None or cached is None or tile_of(cached) == tile:
            return tile
        c = ctx.spec.contract
        if c.fixed_size is not None:
            return tile_of(cached)  # one plan only
        m = c.multiple_of
        w, h = (-(-n // m) * m for n in size)
        best = plan_tiles(h, w, tile, tile_overlap(ctx), m)
        if plan_cost(cached, tiles.made(0, cached)) <= plan_cost(best):
            return tile_of(cached)
        log.info("a preview's plan (tile %d) costs more than tile %d's", tile_of(cached), tile)
        return tile

    def _frame(
        self,
        frame: np.ndarray,
        c: Contract,
        tile: int,
        index: int,
        count: int,
        ctx: RunContext,
        overlap: TileOverlap,
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
        growing: FinishedRows | None = None
        if write is not None:
            growing = growing_frame(
                h * scale, w * scale, sum(n for _, n in passes), np.dtype(dtype)
            )
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

            writer = behind.start(whole, growing) if behind else BackgroundWrite(whole, growing)
        try:
            self._run_tiles(ctx, prep, assemblers, reuse, key, overlap, writer)
            # Counted once the frame is done: a failed try's tiles are gone, not reused.
            ctx.session.runs_reused += len(reuse) * len(passes)
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
        overlap: TileOverlap,
        writer: BackgroundWrite | None,
    ) -> None:
        """Every tile of the frame run (or taken from the preview's cache, `reuse` under `key`)
        and blended into `assemblers`, one per pass."""
        c = ctx.spec.contract
        plan, tiles = prep.plan, ctx.tiles
        buffers = result_buffers(c, plan, c.scale or 1)
        units = [(t, p) for t in plan.tiles for p in range(len(prep.passes))]
        todo = [(t, p) for t, p in units if t.index not in reuse]
        try:
            # The next tile's tensor is cut and converted, and the last result blended, on a
            # side thread while ORT runs (it releases the GIL): the engine's own work hides
            # behind the runs. Blending keeps the tiles' order; nothing runs ahead of a cancel.
            upcoming = overlap.prepare(prep, todo[0], c, now=True) if todo else None
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
                    # A single tile's rows are written as the kernel makes them (its chain
                    # reports them; ORT's runs do not): the PNG is not all left for after.
                    rows = (
                        overlap.rows_of(asm, t, buffer, c, reduce)
                        if writer is not None and plan.count == 1
                        else None
                    )
                    with finished_rows.reported_to(rows):
                        result = ctx.run(
                            {c.image_input: tensor},
                            outputs=[c.image_output],
                            into={c.image_output: buffer},
                        )[0]
                    del tensor
                    overlap.blend(
                        asm,
                        t,
                        reduce(from_tensor(result, c)),
                        wait_previous=True,
                        now=upcoming is None,  # the frame's last: waited for at once
                    )
            overlap.drain()
        except BaseException:
            overlap.abandon()  # the frame's queued side work does not run; the thread stays
            raise
