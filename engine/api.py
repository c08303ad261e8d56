"""The Engine: the one façade the GUI and the command line use.

`Engine.run(request, progress, cancel)` validates the request, gets the model's session from
the cache (M1), runs the operation over every input — a bad input is reported and the batch
goes on — and returns a Result. Request-level problems (unknown model, device unavailable,
cancel) raise an EngineError; the caller gets exactly one outcome per request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import replace
from pathlib import Path

from engine.cancel import CancelToken
from engine.errors import (
    BadInputError,
    EngineError,
    ModelError,
    UsageError,
)
from engine.io.image import is_video
from engine.io.inputs import input_groups
from engine.models.contracts import ModelSpec
from engine.models.inventory import resolve_model
from engine.operations.base import OperationBase, RegionDraw, RunContext
from engine.operations.job import Job, JobWork, check_before_loading, completed_spec, hand_back
from engine.operations.preview import PreviewState, WholePreview, tile_source
from engine.options import OperationOptions, OutputOptions
from engine.previews import PreviewPatch, PreviewRequest, PreviewResult
from engine.requests import (
    MemoryReport,
    OperationRequest,
    Progress,
    ProgressKind,
    Result,
)
from engine.runtime import memory
from engine.runtime.arena import register_cpu_arena
from engine.runtime.handle import SessionHandle
from engine.runtime.providers import Device, Runtime
from engine.runtime.sessions import (
    SessionCache,
    SessionInfo,
    SessionKey,
    SessionWrap,
)
from engine.settings import EngineSettings
from engine.tiling.cache import file_version

log = logging.getLogger(__name__)

ProgressCallback = Callable[[Progress], None]
PatchCallback = Callable[[PreviewPatch], None]

_RESOLVED_MAX = 16  # models a preview resolved, remembered (a few are switched between)


def _noop(_: Progress) -> None:
    pass


class Engine:
    def __init__(
        self, settings: EngineSettings | None = None, *, session_wrap: SessionWrap | None = None
    ) -> None:
        self.settings = settings or EngineSettings()
        if self.settings.cpu_mem_limit or not self.settings.keep_cpu_arena:
            # Once per process (M9, M11): the first engine's limit stays until restart.
            register_cpu_arena(self.settings.cpu_mem_limit)
        self.sessions = SessionCache(
            gpu_mem_limit=self.settings.gpu_mem_limit,
            threads=self.settings.threads,
            wrap=session_wrap,
            cpu_shrink=not self.settings.keep_cpu_arena,
            cpu_copies=self.settings.optimized_copies,
            cpu_kernels=self.settings.cpu_kernels,
        )
        # Model descriptions completed by a probe run, kept per session key (the file's).
        self._completed: dict[SessionKey, ModelSpec] = {}
        # What previews keep for the next one and the full job (engine/operations/preview.py).
        self.previews = PreviewState()
        # The models previews resolved, with their file's version (`_resolve_kept`).
        self._resolved: dict[Hashable, tuple[ModelSpec, SessionKey, Hashable]] = {}

    # -- sessions (for the memory panel) ---------------------------------------------------
    def loaded(self) -> tuple[SessionInfo, ...]:
        return self.sessions.snapshot()

    def unload(self, key: SessionKey) -> bool:
        self.previews.clear()
        self._resolved.clear()
        released = self.sessions.release(key)
        memory.trim_heap()  # the session's and the previews' freed pages go back now
        return released

    def unload_all(self) -> int:
        """Every session goes, and what the previews kept; the C heap's free pages go back to
        the system (with one heap arena, engine/runtime/memory.py, that is all of them)."""
        self.previews.clear()
        self._resolved.clear()
        released = self.sessions.release_all()
        memory.trim_heap()
        return released

    # -- requests --------------------------------------------------------------------------
    def resolve(self, request: OperationRequest) -> tuple[ModelSpec, SessionKey]:
        device = Device.parse(request.device)
        runtime = Runtime.parse(request.runtime)
        spec = resolve_model(request.model, self.settings.resolved_models_dir())
        wanted = request.operation.family
        if spec.family is not wanted:
            raise ModelError(
                f"{spec.path.name} is a {spec.family.value} model; {request.operation.label} "
                f"needs a {wanted.value} model."
            )
        return spec, SessionKey.make(spec.path, device, runtime)

    def _resolve_kept(self, request: OperationRequest) -> tuple[ModelSpec, SessionKey]:
        """`resolve`, remembered for the next preview of the same model, device and runtime:
        a pan neither looks the model up nor validates it again. A model file that changed
        since (its size or time), or a catalog model's own copy installed in the models folder
        meanwhile, is resolved again; Unload forgets them all."""
        models_dir = self.settings.resolved_models_dir()
        asked = (request.model, request.operation, request.device, request.runtime, models_dir)
        kept = self._resolved.get(asked)
        if kept is not None and self._unchanged(kept[0], kept[2], models_dir):
            return kept[0], kept[1]
        spec, key = self.resolve(request)
        if len(self._resolved) >= _RESOLVED_MAX:
            self._resolved.clear()
        self._resolved[asked] = (spec, key, file_version(spec.path))
        return spec, key

    @staticmethod
    def _unchanged(spec: ModelSpec, version: Hashable, models_dir: Path) -> bool:
        try:
            if file_version(spec.path) != version:
                return False
        except OSError:
            return False  # gone: resolving again says why
        # A bundled catalog model gives way to the person's own copy once there is one.
        own = models_dir / spec.entry.file if spec.entry is not None else None
        return own is None or own == spec.path or not own.is_file()

    def _operation(self, request: OperationRequest) -> OperationBase:
        op: OperationBase = request.operation.implementation_class()()
        op.check_request(request)
        return op

    def run(
        self,
        request: OperationRequest,
        progress: ProgressCallback | None = None,
        cancel: CancelToken | None = None,
    ) -> Result:
        return self._run(request, progress or _noop, cancel, None)

    def _run(
        self,
        request: OperationRequest,
        emit: ProgressCallback,
        cancel: CancelToken | None,
        resolved: tuple[ModelSpec, SessionKey] | None,
    ) -> Result:
        """`run`; `resolved`: the model as the preview asking for this job resolved it."""
        started = time.perf_counter()
        self.previews.job_started(request.id, request.inputs)  # its kept pixels go
        op = self._operation(request)
        options = request.typed_options()  # a bad option is a usage error before any work
        spec, key = resolved or self.resolve(request)
        op.configure(options, spec)
        if cancel is not None:
            cancel.check()
        groups = input_groups(request.inputs, request.sequence)
        check_before_loading(op, spec, request, groups, self.settings.max_pixels)
        with memory.RssPeak() as peak:
            emit(Progress(request.id, ProgressKind.STARTED, input_count=len(groups)))
            session = SessionHandle(self.sessions, key)
            session.tiled = op.operation.tiled
            session.entry()
            rss_after_load = memory.process_rss()
            gpu_after_load = self._gpu_used(key)
            emit(Progress(request.id, ProgressKind.LOADED, input_count=len(groups)))
            work = JobWork()
            job = Job(self.settings, self.previews, self._completed, session, cancel, emit, work)
            job.run(op, request, spec, groups)
        rss_after = memory.process_rss()
        report = MemoryReport(
            rss_after_load=rss_after_load,
            # VmHWM is one per process: another measurement in the process (a preview, the
            # bench) may have reset it meanwhile; the peak is at least what was seen here.
            rss_peak=max(peak.peak, rss_after_load, rss_after),
            rss_after=rss_after,
            gpu_used_after_load=gpu_after_load,
            gpu_used_after=self._gpu_used(key),
        )
        timings: dict[str, float] = {"load_s": session.load_seconds}
        if session.first_run_at is not None:
            timings["first_run_s"] = session.first_run_at - started
        timings["io_s"] = work.io_seconds  # decoding inputs and writing products
        if session.probe_seconds > 0:  # the model's once-only measurement, not this job's work
            timings["probe_s"] = session.probe_seconds
        timings["total_s"] = time.perf_counter() - started
        return Result(
            request_id=request.id,
            products=tuple(work.products),
            failures=tuple(work.failures),
            runs=session.runs,
            shrinks=session.shrinks,
            sessions_created=session.created,
            sessions_reused=session.reused,
            timings=timings,
            tile=work.tile,
            memory=report,
            cpu_kernel=session.cpu_kernel,
            runs_reused=session.runs_reused,
        )

    def preview(
        self,
        request: PreviewRequest,
        progress: ProgressCallback | None = None,
        cancel: CancelToken | None = None,
        patch: PatchCallback | None = None,
    ) -> PreviewResult:
        """The job `request.job` on the region `request.region` of its one input, with the
        product's pixels, sent to `patch` as they become final (upscale: centre first).

        The same path as a job for the memory contract: one session per model from the cache
        (M1), the cancel checked before every run (M8), the last run shrinking (M2) and the
        hand-back after a cancel or failure (M10). How the operation previews is its own
        (`OperationBase.preview`). A bad input, model or option raises an EngineError, as for
        a job; there is no batch to go on with.
        """
        job = request.job
        started = time.perf_counter()
        op = self._operation(job)
        if len(job.inputs) != 1 or job.sequence or job.inputs[0].is_dir():
            raise UsageError("A preview shows one image; run the job for a sequence or folder.")
        if is_video(job.inputs[0]):  # a clip previews the frame the viewer shows
            still = self.previews.clip_frame(job.inputs[0], request.frame, self.settings.max_pixels)
            job = replace(job, inputs=(still,))
            request = replace(request, job=job)
        options = job.typed_options()
        spec, key = self._resolve_kept(job)  # a pan: the model was resolved by the last one
        op.configure(options, spec)
        if cancel is not None:
            cancel.check()
        host = _Preview(
            self, request, op, options, spec, key, progress or _noop, cancel, patch, started
        )
        self.previews.running = request.id
        try:
            return op.preview(host)
        finally:
            self.previews.running = None

    def _gpu_used(self, key: SessionKey) -> int | None:
        return memory.gpu_used(key.device.index) if key.device.is_gpu else None


class _Preview:
    """One preview request's side of the engine, offered to its operation (`PreviewHost`)."""

    def __init__(
        self,
        engine: Engine,
        request: PreviewRequest,
        op: OperationBase,
        options: OperationOptions,
        spec: ModelSpec,
        key: SessionKey,
        emit: ProgressCallback,
        cancel: CancelToken | None,
        send: PatchCallback | None,
        started: float,
    ) -> None:
        self.engine, self.request, self.op, self.options = engine, request, op, options
        self.spec, self.key, self.emit, self.cancel = spec, key, emit, cancel
        self.send = send or _no_patch
        self.started = started

    def region(self, draw: RegionDraw) -> PreviewResult:
        engine, request, op, spec, key = self.engine, self.request, self.op, self.spec, self.key
        emit, cancel = self.emit, self.cancel
        source = request.source
        emit(Progress(request.id, ProgressKind.STARTED))
        session = SessionHandle(engine.sessions, key)
        session.tiled = op.operation.tiled
        session.entry()
        emit(Progress(request.id, ProgressKind.LOADED))
        ctx = RunContext(
            request=request.job,
            settings=engine.settings,
            session=session,
            spec=spec,
            cancel=cancel,
            emit=emit,
            tiles=tile_source(engine.previews, source, key),
        )
        work = JobWork(last=ctx)
        decode_s = 0.0
        try:
            ctx.spec = spec = completed_spec(engine._completed, op, spec, session)
            frame, decode_s = engine.previews.frame(
                source, engine.settings.max_pixels, cancel.check if cancel is not None else None
            )
            outcome = draw(frame, ctx, request, self.send)
            del frame
        finally:
            hand_back(op, spec, session, work, engine.settings.keep_cpu_arena)
        timings = {"load_s": session.load_seconds, "decode_s": decode_s}
        if outcome.first_pixels_at is not None:
            timings["first_pixels_s"] = outcome.first_pixels_at - self.started
        timings["total_s"] = time.perf_counter() - self.started
        return PreviewResult(
            request_id=request.id,
            generation=request.generation,
            size=outcome.size,
            scale=outcome.scale,
            tiles_run=outcome.tiles_run,
            tiles_cached=outcome.tiles_cached,
            tiles_needed=outcome.tiles_needed,
            truncated=outcome.truncated,
            runs=session.runs,
            shrinks=session.shrinks,
            sessions_created=session.created,
            sessions_reused=session.reused,
            held_bytes=engine.previews.held_bytes,
            timings=timings,
        )

    def whole(self) -> PreviewResult:
        """One run of the whole image whatever the view shows, so the preview is the job
        itself, written to the preview folder in the default formats. Kept until the input,
        model or options change: a pan runs nothing."""
        engine, request = self.engine, self.request
        state = engine.previews
        source = request.source
        try:
            version = file_version(source)
        except OSError as e:
            raise BadInputError(f"{source.name}: the file cannot be read ({e.strerror}).") from e
        whole_key = (version, self.key, request.job.operation, self.options)
        kept = state.whole
        if kept is None or kept.key != whole_key or not all(p.path.exists() for p in kept.products):
            state.drop_whole()
            job = replace(request.job, output_dir=state.folder(), output=OutputOptions())
            result = engine._run(job, self.emit, self.cancel, (self.spec, self.key))
            if result.failures:
                failure = result.failures[0]
                error = EngineError(failure.message)
                error.kind = failure.kind
                raise error
            kept = state.whole = WholePreview(whole_key, result.products)
            runs, shrinks = result.runs, result.shrinks
            created, reused = result.sessions_created, result.sessions_reused
        else:
            runs = shrinks = created = reused = 0
        return PreviewResult(
            request_id=request.id,
            generation=request.generation,
            products=kept.products,
            runs=runs,
            shrinks=shrinks,
            sessions_created=created,
            sessions_reused=reused,
            held_bytes=state.held_bytes,
            timings={"total_s": time.perf_counter() - self.started},
        )


def _no_patch(_: PreviewPatch) -> None:
    pass
