"""The Engine: the one façade the GUI and the command line use.

`Engine.run(request, progress, cancel)` validates the request, gets the model's session from
the cache (M1), runs the operation over every input — a bad input is reported and the batch
goes on — and returns a Result. Request-level problems (unknown model, device unavailable,
cancel) raise an EngineError; the caller gets exactly one outcome per request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from engine.cancel import CancelToken
from engine.errors import (
    BadInputError,
    Cancelled,
    EngineError,
    ErrorKind,
    ModelError,
    UsageError,
)
from engine.io.image import DecodedImage
from engine.io.reading import load_image
from engine.io.sequences import list_sequence, load_sequence
from engine.models.catalog import family_of
from engine.models.contracts import ModelSpec
from engine.models.inventory import resolve_model
from engine.operations import operation_class
from engine.operations.base import OperationBase, RunContext
from engine.requests import (
    InputFailure,
    OperationRequest,
    Product,
    Progress,
    ProgressKind,
    Result,
)
from engine.runtime.arena import register_cpu_arena
from engine.runtime.providers import Device, Runtime
from engine.runtime.sessions import (
    SessionCache,
    SessionHandle,
    SessionInfo,
    SessionKey,
    SessionWrap,
)
from engine.settings import EngineSettings

log = logging.getLogger(__name__)

ProgressCallback = Callable[[Progress], None]


def _noop(_: Progress) -> None:
    pass


class Engine:
    def __init__(
        self, settings: EngineSettings | None = None, *, session_wrap: SessionWrap | None = None
    ) -> None:
        self.settings = settings or EngineSettings()
        if self.settings.cpu_mem_limit:
            register_cpu_arena(self.settings.cpu_mem_limit)
        self.sessions = SessionCache(
            gpu_mem_limit=self.settings.gpu_mem_limit,
            threads=self.settings.threads,
            wrap=session_wrap,
        )
        # Model descriptions completed by a probe run, kept per session key (the file's).
        self._completed: dict[SessionKey, ModelSpec] = {}

    # -- sessions (for the memory panel) ---------------------------------------------------
    def loaded(self) -> tuple[SessionInfo, ...]:
        return self.sessions.snapshot()

    def unload(self, key: SessionKey) -> bool:
        return self.sessions.release(key)

    def unload_all(self) -> int:
        return self.sessions.release_all()

    # -- requests --------------------------------------------------------------------------
    def resolve(self, request: OperationRequest) -> tuple[ModelSpec, SessionKey]:
        device = Device.parse(request.device)
        runtime = Runtime.parse(request.runtime)
        spec = resolve_model(request.model, self.settings.resolved_models_dir())
        wanted = family_of(request.operation)
        if spec.family is not wanted:
            raise ModelError(
                f"{spec.path.name} is a {spec.family.value} model; {request.operation.label} "
                f"needs a {wanted.value} model."
            )
        return spec, SessionKey.make(spec.path, device, runtime)

    def run(
        self,
        request: OperationRequest,
        progress: ProgressCallback | None = None,
        cancel: CancelToken | None = None,
    ) -> Result:
        emit = progress or _noop
        started = time.perf_counter()
        op: OperationBase = operation_class(request.operation)()
        op.check_request(request)
        options = request.typed_options()  # a bad option is a usage error before any work
        spec, key = self.resolve(request)
        op.configure(options, spec)
        if cancel is not None:
            cancel.check()
        groups = self._groups(request)
        emit(Progress(request.id, ProgressKind.STARTED, input_count=len(groups)))
        session = self.sessions.handle(key)
        session.entry()
        emit(Progress(request.id, ProgressKind.LOADED, input_count=len(groups)))
        products: list[Product] = []
        failures: list[InputFailure] = []
        used_tile: int | None = None
        ctx: RunContext | None = None
        io_seconds = 0.0
        for index, group in enumerate(groups):
            source = group[0] if len(group) == 1 else group[0].parent
            ctx = RunContext(
                request=request,
                settings=self.settings,
                session=session,
                spec=spec,
                cancel=cancel,
                emit=emit,
                input_index=index,
                input_count=len(groups),
                final_input=index == len(groups) - 1,
                sequence=len(group) > 1 or group[0].is_dir(),
            )
            try:
                if cancel is not None:
                    cancel.check()
                ctx.spec = spec = self._complete(op, spec, session)
                decode_start = time.perf_counter()
                image = self._load(group, cancel)
                ctx.io_seconds += time.perf_counter() - decode_start
                ctx.out_dir = self._out_dir(request, source)
                op.check_output_names(image, ctx)  # a name the folder refuses: before inference
                products.extend(op.process(image, ctx))
                used_tile = ctx.used_tile if ctx.used_tile is not None else used_tile
                io_seconds += ctx.io_seconds
                emit(ctx.progress(ProgressKind.INPUT_FINISHED))
            except Cancelled:
                self._clean_up(op, spec, session)
                raise
            except EngineError as e:
                log.info("%s failed: %s", source, e)
                failures.append(InputFailure(source, e.kind, _name_file(source, str(e))))
                emit(ctx.progress(ProgressKind.INPUT_FAILED, str(e)))
            except Exception as e:  # a bug must not take the batch (or the engine thread) down
                log.exception("unexpected error on %s", source)
                failures.append(
                    InputFailure(
                        source,
                        ErrorKind.INTERNAL,
                        f"{source.name}: unexpected error ({e}); see the log.",
                    )
                )
                emit(ctx.progress(ProgressKind.INPUT_FAILED, str(e)))
        if ctx is not None and not ctx.last_run_shrunk:
            self._clean_up(op, spec, session)
        timings: dict[str, float] = {"load_s": session.load_seconds}
        if session.first_run_at is not None:
            timings["first_run_s"] = session.first_run_at - started
        timings["io_s"] = io_seconds  # decoding inputs and writing products
        timings["total_s"] = time.perf_counter() - started
        return Result(
            request_id=request.id,
            products=tuple(products),
            failures=tuple(failures),
            runs=session.runs,
            shrinks=session.shrinks,
            sessions_created=session.created,
            sessions_reused=session.reused,
            timings=timings,
            tile=used_tile,
        )

    def _complete(self, op: OperationBase, spec: ModelSpec, session: SessionHandle) -> ModelSpec:
        """The model's description completed by the operation's probe, once per session key."""
        known = self._completed.get(session.key)
        if known is None:
            known = op.complete(spec, session)
            self._completed[session.key] = known
        return known

    def _clean_up(self, op: OperationBase, spec: ModelSpec, session: SessionHandle) -> None:
        """One smallest run with the shrink so a cancelled or failed job does not keep its
        peak (M10): only where this request ran the session and it has an arena to shrink."""
        if not session.loaded or session.attempted == 0 or session.shrink_target is None:
            return
        feeds = op.minimal_feeds(spec)
        if feeds is None:
            return
        try:
            session.run(feeds, last=True, cancel=None)
        except EngineError as e:
            log.warning("shrink run after the job failed: %s", e)

    def _groups(self, request: OperationRequest) -> list[list[Path]]:
        groups: list[list[Path]] = []
        if request.sequence:
            frames: list[Path] = []
            for p in request.inputs:
                frames.extend(list_sequence(p) if p.is_dir() else [p])
            if not frames:
                raise UsageError("The sequence has no image files.")
            return [frames]
        for p in request.inputs:
            if p.is_dir():
                frames = list_sequence(p)
                groups.append(frames if frames else [p])
            else:
                groups.append([p])
        return groups

    def _load(self, group: list[Path], cancel: CancelToken | None) -> DecodedImage:
        check = cancel.check if cancel is not None else None
        if len(group) == 1 and not group[0].is_dir():
            return load_image(group[0], self.settings.max_pixels, check)
        return load_sequence(group, self.settings.max_pixels, check)

    def _out_dir(self, request: OperationRequest, source: Path) -> Path:
        out = request.output_dir or (source if source.is_dir() else source.parent)
        if request.output_dir is not None and out.exists() and not out.is_dir():
            raise UsageError(f"The output folder {out} is a file; give a folder with --out.")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInputError(f"The output folder {out} cannot be created ({e.strerror}).") from e
        return out


def _name_file(source: Path, message: str) -> str:
    return message if source.name in message else f"{source.name}: {message}"
