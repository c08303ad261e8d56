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
from engine.errors import Cancelled, EngineError, ErrorKind, ModelError, UsageError
from engine.io.image import DecodedImage
from engine.io.reading import load_image
from engine.io.sequences import list_sequence, load_sequence
from engine.models.catalog import Family
from engine.models.contracts import ModelRef
from engine.models.inventory import resolve_model
from engine.operations import operation_class
from engine.operations.base import OperationBase, RunContext
from engine.requests import (
    InputFailure,
    Operation,
    OperationRequest,
    Product,
    Progress,
    ProgressKind,
    Result,
)
from engine.runtime.arena import register_cpu_arena
from engine.runtime.providers import Device, Runtime
from engine.runtime.runner import Runner
from engine.runtime.sessions import (
    SessionCache,
    SessionEntry,
    SessionInfo,
    SessionKey,
    SessionWrap,
)
from engine.settings import EngineSettings

log = logging.getLogger(__name__)

FAMILY_OF: dict[Operation, Family] = {
    Operation.UPSCALE: Family.UPSCALE,
    Operation.REMOVE_BACKGROUND: Family.BACKGROUND,
    Operation.DEPTH: Family.DEPTH,
    Operation.GEOMETRY: Family.GEOMETRY,
}

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
        self.runner = Runner()

    # -- sessions (for the memory panel) ---------------------------------------------------
    def loaded(self) -> tuple[SessionInfo, ...]:
        return self.sessions.snapshot()

    def unload(self, key: SessionKey) -> bool:
        return self.sessions.release(key)

    def unload_all(self) -> int:
        return self.sessions.release_all()

    # -- requests --------------------------------------------------------------------------
    def resolve(self, request: OperationRequest) -> tuple[ModelRef, SessionKey]:
        device = Device.parse(request.device)
        runtime = Runtime.parse(request.runtime)
        ref = resolve_model(request.model, self.settings.resolved_models_dir())
        wanted = FAMILY_OF[request.operation]
        if ref.family is not wanted:
            raise ModelError(
                f"{ref.path.name} is a {ref.family.value} model; {request.operation.label} needs a "
                f"{wanted.value} model."
            )
        return ref, SessionKey.make(ref.path, device, runtime)

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
        ref, key = self.resolve(request)
        if cancel is not None:
            cancel.check()
        created_before, reused_before = self.sessions.created, self.sessions.reused
        runs_before, shrinks_before = self.runner.runs, self.runner.shrinks
        groups = self._groups(request)
        emit(Progress(request.id, ProgressKind.STARTED, input_count=len(groups)))
        entry, _ = self.sessions.get(key)
        emit(Progress(request.id, ProgressKind.LOADED, input_count=len(groups)))
        self.runner.first_start = None
        timings: dict[str, float] = {
            "load_s": entry.load_seconds if self.sessions.created > created_before else 0.0
        }
        products: list[Product] = []
        failures: list[InputFailure] = []
        options = model_options(ref)
        used_tile: int | None = None
        ctx: RunContext | None = None
        io_seconds = 0.0

        def renew() -> SessionEntry:
            self.sessions.release(key)
            return self.sessions.get(key)[0]

        def release() -> None:
            self.sessions.release(key)

        for index, group in enumerate(groups):
            source = group[0] if len(group) == 1 else group[0].parent
            if key not in self.sessions:  # released after a resource failure (M5)
                entry = self.sessions.get(key)[0]
            ctx = RunContext(
                request=request,
                settings=self.settings,
                runner=self.runner,
                entry=entry,
                cancel=cancel,
                emit=emit,
                renew_session=renew,
                release_session=release,
                model_name=ref.path.name,
                model_options=options,
                input_index=index,
                input_count=len(groups),
                final_input=index == len(groups) - 1,
                sequence=len(group) > 1 or group[0].is_dir(),
            )
            try:
                if cancel is not None:
                    cancel.check()
                decode_start = time.perf_counter()
                image = self._load(group)
                ctx.io_seconds += time.perf_counter() - decode_start
                ctx.out_dir = self._out_dir(request, source)
                products.extend(op.process(image, ctx))
                entry = ctx.entry
                used_tile = ctx.used_tile if ctx.used_tile is not None else used_tile
                io_seconds += ctx.io_seconds
                emit(ctx.progress(ProgressKind.INPUT_FINISHED))
            except Cancelled:
                self._shrink_after(op, key)
                raise
            except EngineError as e:
                entry = ctx.entry
                log.info("%s failed: %s", source, e)
                failures.append(InputFailure(source, e.kind, _name_file(source, str(e))))
                emit(ctx.progress(ProgressKind.INPUT_FAILED, str(e)))
            except Exception as e:  # a bug must not take the batch (or the engine thread) down
                entry = ctx.entry
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
            self._shrink_after(op, key)
        if self.runner.first_start is not None:
            timings["first_run_s"] = self.runner.first_start - started
        timings["io_s"] = io_seconds  # decoding inputs and writing products
        timings["total_s"] = time.perf_counter() - started
        return Result(
            request_id=request.id,
            products=tuple(products),
            failures=tuple(failures),
            runs=self.runner.runs - runs_before,
            shrinks=self.runner.shrinks - shrinks_before,
            sessions_created=self.sessions.created - created_before,
            sessions_reused=self.sessions.reused - reused_before,
            timings=timings,
            tile=used_tile,
        )

    def _shrink_after(self, op: OperationBase, key: SessionKey) -> None:
        """One smallest run with the shrink so a cancelled or failed job does not keep its peak (M10)."""
        entry = self.sessions.peek(key)
        if entry is None or entry.shrink_target is None or entry.runs == 0:
            return
        feeds = op.minimal_feeds(entry)
        if feeds is None:
            return
        try:
            self.runner.run(entry, feeds, last=True, cancel=None)
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

    def _load(self, group: list[Path]) -> DecodedImage:
        if len(group) == 1 and not group[0].is_dir():
            return load_image(group[0], self.settings.max_pixels)
        return load_sequence(group, self.settings.max_pixels)

    def _out_dir(self, request: OperationRequest, source: Path) -> Path:
        out = request.output_dir or (source if source.is_dir() else source.parent)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            from engine.errors import BadInputError

            raise BadInputError(f"The output folder {out} cannot be created ({e.strerror}).") from e
        return out


OPTION_FIELDS = (
    "normalization",
    "input_size",
    "process_res",
    "num_tokens",
    "scale",
    "tile",
    "multiple_of",
)


def model_options(ref: ModelRef) -> dict[str, object]:
    """The catalog's contract options for this model, completed by what its graph says."""
    options: dict[str, object] = {}
    if ref.entry is not None:
        for name in OPTION_FIELDS:
            value = getattr(ref.entry, name, None)
            if value is not None:
                options[name] = value.value if hasattr(value, "value") else value
    contract = ref.contract
    if contract.scale:
        options.setdefault("scale", contract.scale)
    if contract.multiple_of > 1:
        options.setdefault("multiple_of", contract.multiple_of)
    return options


def _name_file(source: Path, message: str) -> str:
    return message if source.name in message else f"{source.name}: {message}"
