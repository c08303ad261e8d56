"""One job: its inputs run one after the other over one session, each failure reported while
the batch goes on, and what the operation took handed back however it ended (M2, M10, M11).

The engine's façade (engine/api.py) resolves the request and owns the session cache; what a
job does with its inputs lives here, beside the operations it drives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.cancel import CancelToken
from engine.errors import Cancelled, EngineError, ErrorKind, UsageError
from engine.io.inputs import load_input, output_folder
from engine.io.reading import image_size
from engine.models.contracts import ModelSpec
from engine.operations.base import OperationBase, RunContext
from engine.operations.preview import PreviewState, tile_source
from engine.requests import InputFailure, OperationRequest, Product, Progress, ProgressKind
from engine.runtime import memory
from engine.runtime.handle import SessionHandle
from engine.runtime.sessions import SessionKey
from engine.settings import EngineSettings

log = logging.getLogger(__name__)

ProgressCallback = Callable[[Progress], None]


@dataclass
class JobWork:
    """What a request has done so far: products, failures, the last input's context."""

    products: list[Product] = field(default_factory=list)
    failures: list[InputFailure] = field(default_factory=list)
    last: RunContext | None = None
    tile: int | None = None
    io_seconds: float = 0.0


def check_before_loading(
    op: OperationBase,
    spec: ModelSpec,
    request: OperationRequest,
    groups: list[list[Path]],
    max_pixels: int,
) -> None:
    """What fails the whole request is said before the model loads: an output "folder"
    that is a file, and a product over the pixel limit (from the inputs' headers)."""
    out = request.output_dir
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"The output folder {out} is a file; give a folder with --out.")
    for group in groups:
        try:
            width, height, _ = image_size(group[0])
        except EngineError:
            continue  # the input's own failure is said when it is reached
        if width * height > max_pixels:
            continue  # so is an input over the limit itself
        name = group[0].name if len(group) == 1 else group[0].parent.name
        op.check_product_size(name, (width, height), spec, request.output, max_pixels)


def completed_spec(
    completed: dict[SessionKey, ModelSpec],
    op: OperationBase,
    spec: ModelSpec,
    session: SessionHandle,
) -> ModelSpec:
    """The model's description completed by the operation's probe, once per session key."""
    known = completed.get(session.key)
    if known is None:
        known = op.complete(spec, session)
        completed[session.key] = known
    return known


@dataclass
class Job:
    """What the engine lends one request's job: its settings, its previews' kept pixels and its
    completed model descriptions, the request's session and callbacks, and what it has done."""

    settings: EngineSettings
    previews: PreviewState
    completed: dict[SessionKey, ModelSpec]
    session: SessionHandle
    cancel: CancelToken | None
    emit: ProgressCallback
    work: JobWork

    def run(
        self,
        op: OperationBase,
        request: OperationRequest,
        spec: ModelSpec,
        groups: list[list[Path]],
    ) -> None:
        """Every input of the request in turn; then, however that ended, what the operation
        took is handed back (M2, M10, M11)."""
        try:
            for index, group in enumerate(groups):
                spec = self.run_input(op, request, spec, group, index, len(groups))
        finally:
            hand_back(op, spec, self.session, self.work, self.settings.keep_cpu_arena)

    def run_input(
        self,
        op: OperationBase,
        request: OperationRequest,
        spec: ModelSpec,
        group: list[Path],
        index: int,
        count: int,
    ) -> ModelSpec:
        """One input of the batch: its failure is reported and the batch goes on; a cancel
        ends the request. Returns the model's description, completed once by a probe."""
        session, cancel, emit, work = self.session, self.cancel, self.emit, self.work
        source = group[0] if len(group) == 1 else group[0].parent
        ctx = RunContext(
            request=request,
            settings=self.settings,
            session=session,
            spec=spec,
            cancel=cancel,
            emit=emit,
            input_index=index,
            input_count=count,
            final_input=index == count - 1,
            sequence=len(group) > 1 or group[0].is_dir(),
        )
        if not ctx.sequence:
            ctx.tiles = tile_source(self.previews, source, session.key)
        work.last = ctx
        failure: InputFailure | None = None
        try:
            if cancel is not None:
                cancel.check()
            # Inside the input's own handling: a reload after a release (M5) that fails is this
            # input's failure, not the batch's.
            ctx.spec = spec = completed_spec(self.completed, op, spec, session)
            decode_start = time.perf_counter()
            image = load_input(
                group,
                self.settings.max_pixels,
                cancel.check if cancel is not None else None,
                skip_broken=request.output.video.skip_broken_frames,
            )
            if not self.settings.keep_cpu_arena:
                memory.trim_heap()  # the decoder's freed buffers go back before the model runs
            ctx.io_seconds += time.perf_counter() - decode_start
            ctx.out_dir = output_folder(request.output_dir, source)
            op.check_output_names(image, ctx)  # a name the folder refuses: before inference
            work.products.extend(op.process(image, ctx))
            if ctx.used_tile is not None:
                work.tile = ctx.used_tile
            emit(ctx.progress(ProgressKind.INPUT_FINISHED))
        except Cancelled:
            raise
        except EngineError as e:
            log.info("%s failed: %s", source, e)
            failure = InputFailure(source, e.kind, _name_file(source, str(e)))
        except MemoryError:
            log.warning("%s: out of memory outside the model", source, exc_info=True)
            failure = InputFailure(
                source,
                ErrorKind.RESOURCE,
                f"{source.name}: not enough memory to process this image. Close other programs "
                "or use a smaller image.",
            )
        except Exception as e:  # a bug must not take the batch (or the engine thread) down
            log.exception("unexpected error on %s", source)
            failure = InputFailure(
                source, ErrorKind.INTERNAL, f"{source.name}: unexpected error ({e}); see the log."
            )
        finally:
            work.io_seconds += ctx.io_seconds
        if failure is not None:
            work.failures.append(failure)
            emit(ctx.progress(ProgressKind.INPUT_FAILED, failure.message))
        return spec


def hand_back(
    op: OperationBase,
    spec: ModelSpec,
    session: SessionHandle,
    work: JobWork,
    keep_cpu_arena: bool,
) -> None:
    """What the operation took goes back, however it ended (M2, M10, M11).

    Its last run asked for the arena shrink when that run was the request's last and its
    outputs could be kept out of the arena. When not (a cancel, a failure, the final inputs
    failed before running, or the last run's output shapes were not known), one more run
    asks for it, its outputs in buffers of ours: the smallest input a dynamic model takes,
    or — when the operation ended by itself, not by a cancel, which must stay prompt — the
    full input a fixed-size model takes. Only for a session this request ran, that has an
    arena to shrink. Then the C heap's free pages go back to the system.
    """
    shrunk = work.last is not None and work.last.last_run_shrunk
    if not shrunk and session.loaded and session.attempted and session.shrink_target:
        cancelled = (
            work.last is not None and work.last.cancel is not None and work.last.cancel.cancelled
        )
        feeds = op.minimal_feeds(spec) or (None if cancelled else op.full_feeds(spec))
        if feeds is not None:
            try:
                buffers = op.output_buffers(spec, feeds) or session.buffers_for(feeds)
                if buffers is None:  # learn the output shapes of this input first
                    session.run(feeds, last=False, cancel=None)
                    buffers = session.buffers_for(feeds)
                # Outputs outside the arena, so no region stays pinned through the shrink.
                session.run(feeds, last=True, cancel=None, into=buffers)
            except EngineError as e:
                log.warning("the hand-back run after the job failed: %s", e)
    if not keep_cpu_arena:
        memory.trim_heap()


def _name_file(source: Path, message: str) -> str:
    return message if source.name in message else f"{source.name}: {message}"
