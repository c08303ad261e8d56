"""Where a job is queued: actions on the workspace's inputs and jobs, without widgets.

`JobsController` adds the inputs the person gives (each image its own input) to the
workspace, queues one job per input through the engine thread, follows every job to its one
terminal signal, and has the workspace turn results into versions: each input has a strip of them (the original, ×2, x4plus,
cut-out…), and a failed job is a version marked failed with its reason. It also decides what
the viewer should show, so new work is never hidden: new inputs are shown at once, and a
finished result appears unless the person has chosen to look at something else.

Chains of jobs are `gui.controllers.chains`; estimates and speed learning
`gui.controllers.job_speed`.

The state it acts on lives in `gui.workspace`; signals are QtCore's only; tests drive this
class with a real engine thread, or a fake one (tests/fake_engine.py), and no window.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Result,
    new_request_id,
)
from gui.controllers.chains import FOLLOW_AT_MOST, ChainRuns
from gui.controllers.job_speed import JobSpeed
from gui.controllers.speed import Calibrator, Estimate, Rate, SpeedBook
from gui.engine_thread import EngineThread
from gui.inputs import (
    Classified,
    InputSource,
    as_sequence,
    classify_paths,
    sequence_offer,
    too_large,
)
from gui.jobs import (
    ORIGINAL,
    Job,
    JobSettings,
    JobState,
    Version,
    job_versions,
)
from gui.messages import Notice, NoticeLevel, Topic
from gui.workspace import ClearedInputs, Workspace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AddOutcome:
    """What one drop (or open, or paste) added."""

    sources: tuple[InputSource, ...]  # the new inputs (ones already there are not repeated)
    models: tuple[Path, ...]  # .onnx files to install
    refused: tuple[str, ...]  # one reason per refused path
    sequence_offer: tuple[Path, ...] = ()  # numbered stills of one size: offer one sequence
    more: int = 0  # paths of a large add still to come, a part per turn (`addedLater`)


@dataclass(frozen=True)
class _Waiting:
    """A job of a large Run not made yet: it is made, submitted and listed in a later turn."""

    job_id: str
    source: InputSource
    start: Version
    settings: JobSettings
    rate: Rate | None


class Unread:
    """The model's speed was not read for this job yet (None: read, and not known)."""


UNREAD = Unread()

# A large add or Run does this many images at once, and the rest in parts of about PART_S
# per turn of the event loop, so the window keeps drawing while 1000 are read or queued (issue
# #21); STEP images at a time, so a part ends soon after its time is up.
ADD_CHUNK = 50
RUN_CHUNK = 50
PART_S = 0.008
STEP = 10


# Reads the headers of some paths off the GUI thread and calls back on it with what it found
# (None: the read itself failed); the inputs controller hands in the task thread's.
HeaderReader = Callable[[Sequence[Path], Callable[[Classified | None], None]], None]


class JobsController(QObject):
    """Actions on the workspace's inputs and jobs, and the engine thread's job signals."""

    statusRequested = Signal(str)  # a line for the status bar
    noticeRequested = Signal(object)  # Notice
    noticeCleared = Signal(object)  # Topic: an earlier notice of it is stale
    showRequested = Signal(str, str)  # input key, version id ("" for its newest): show it
    addedLater = Signal(object)  # AddOutcome: a later part of a large add, now in the workspace
    batchQueued = Signal(object, list)  # JobSettings, [(job id, input paths)]: kept on disk

    def __init__(
        self,
        workspace: Workspace,
        engine: EngineThread,
        speeds: SpeedBook,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.workspace = workspace
        self.engine = engine
        self.speeds = speeds
        self.speed = JobSpeed(workspace, engine, speeds, self)
        self._deferred: list[InputSource] = []  # to run once the model list is in
        self.chains = ChainRuns(
            workspace,
            self._queue_one,
            self._rate,
            self.statusRequested.emit,
            lambda text: self._warn(text, Topic.JOBS),
        )
        self._adding: deque[Path] = deque()  # the rest of a large add, a part per turn
        self._adding_sources: list[InputSource] = []  # what that add brought so far
        # The rest of a large add has its headers read here, a part at a time, when set (on
        # the GUI thread they cost ~1 ms per 10 images); else a part per turn on this thread.
        self.reader: HeaderReader | None = None
        self._reading = False  # a part is being read
        self._add_generation = 0  # a new add or Clear makes the part being read stale
        self._waiting: deque[_Waiting] = deque()  # the rest of a large Run, a part per turn
        self._later = QTimer(self)
        self._later.setSingleShot(True)
        self._later.setInterval(0)
        self._later.timeout.connect(self._next_part)
        workspace.jobAdded.connect(self._on_added)
        engine.operationStarted.connect(self._on_started)
        engine.progressChanged.connect(workspace.job_progressed)
        engine.operationFinished.connect(self._on_finished)
        engine.operationFailed.connect(self._on_failed)
        engine.operationCancelled.connect(self._on_cancelled)

    # -- inputs -------------------------------------------------------------------------------
    def add_paths(self, paths: Sequence[Path | str]) -> AddOutcome:
        """Add every image as its own input and show the first new one. A large add reads
        ADD_CHUNK headers now and the rest a part per turn (`addedLater` for each part)."""
        given = [p if isinstance(p, Path) else Path(p) for p in paths]
        now, rest = given[:ADD_CHUNK], given[ADD_CHUNK:]
        return self.add_found(classify_paths(now), rest)

    def add_found(self, found: Classified, rest: Sequence[Path] = ()) -> AddOutcome:
        """Add what `classify_paths` found (clips are classified on the task thread); `rest`:
        the paths of the same add still to read, a part per turn."""
        ws = self.workspace
        added = ws.add_sources(found.sources)
        self._mark_too_large(added)
        shown = added[0] if added else (found.sources[0] if found.sources else None)
        if shown is not None:  # already there: shown anyway, the person asked for it
            ws.set_following(True)
            self.show(shown.key, "")
        if rest:
            self._adding = deque(rest)  # a new large add replaces the rest of the last one
            self._add_generation += 1
            self._reading = False
            self._adding_sources = list(found.sources)
            self._later.start()
            return AddOutcome(tuple(added), found.models, found.refused, (), len(rest))
        offer = found.sequence_offer if len(found.sequence_offer) == len(found.sources) else ()
        return AddOutcome(tuple(added), found.models, found.refused, offer)

    def _mark_too_large(self, sources: Sequence[InputSource]) -> None:
        """Inputs over the pixel limit, from their headers: marked at once as unreadable, so
        Run neither counts nor estimates them (their jobs would only fail)."""
        limit = self.engine.settings.max_pixels
        for source in sources:
            reason = too_large(source, limit)
            if reason:
                self.mark_unreadable(source.key, reason)

    def _add_part(self) -> None:
        if self.reader is not None:
            self._read_part(self.reader)
            return
        began = time.perf_counter()
        sources: list[InputSource] = []
        models: list[Path] = []
        refused: list[str] = []
        while self._adding and time.perf_counter() - began < PART_S:
            step = [self._adding.popleft() for _ in range(min(STEP, len(self._adding)))]
            found = classify_paths(step)
            sources.extend(found.sources)
            models.extend(found.models)
            refused.extend(found.refused)
        self._add_read(sources, models, refused)

    def _read_part(self, reader: HeaderReader) -> None:
        """The next ADD_CHUNK paths' headers, read by `reader`; added when they come back."""
        if self._reading:
            return
        part = [self._adding.popleft() for _ in range(min(ADD_CHUNK, len(self._adding)))]
        generation = self._add_generation
        self._reading = True

        def read(found: Classified | None) -> None:
            if generation != self._add_generation:
                return  # a new add or Clear came meanwhile
            self._reading = False
            if found is None:
                names = ", ".join(p.name for p in part[:3]) + (" …" if len(part) > 3 else "")
                found = Classified((), (), (f"{names}: could not be read.",))
            self._add_read(list(found.sources), list(found.models), list(found.refused))
            if self._adding or self._waiting:
                self._later.start()

        reader(part, read)

    def _add_read(self, sources: list[InputSource], models: list[Path], refused: list[str]) -> None:
        """One part of a large add, its headers read: into the workspace, and told."""
        added = self.workspace.add_sources(sources)
        self._mark_too_large(added)
        self._adding_sources.extend(sources)
        offer: tuple[Path, ...] = ()
        if not self._adding:  # the last part: the offer is about the whole add
            everything, self._adding_sources = self._adding_sources, []
            whole = sequence_offer(everything)
            offer = whole if len(whole) == len(everything) else ()
        self.addedLater.emit(
            AddOutcome(tuple(added), tuple(models), tuple(refused), offer, len(self._adding))
        )

    def _next_part(self) -> None:
        """One part of a large add or Run per turn of the event loop."""
        if self._adding and not self._reading:
            self._add_part()
        elif self._waiting:
            self._queue_part()
        if (self._adding and not self._reading) or self._waiting:
            self._later.start()

    def merge_as_sequence(self, paths: Sequence[Path]) -> InputSource | None:
        """The person chose "Process as one sequence": the stills become one input."""
        ws = self.workspace
        keys = [str(p) for p in paths]
        stills = [ws.sources[k] for k in keys if k in ws.sources]
        if len(stills) < 2:
            return None
        sequence = as_sequence(stills)
        self._waiting = deque(w for w in self._waiting if w.source.key not in keys)
        for job in list(ws.jobs.values()):
            if ws.job_input.get(job.id) in keys and job.state is JobState.QUEUED:
                self.cancel(job.id)
        ordered: dict[str, InputSource] = {}
        for key, source in ws.sources.items():
            if key in keys:
                ordered.setdefault(sequence.key, sequence)
            else:
                ordered[key] = source
        ws.replace_sources(ordered)
        self.show(sequence.key, "")
        return sequence

    def remove(self, keys: Sequence[str]) -> None:
        gone = set(keys)
        self._waiting = deque(w for w in self._waiting if w.source.key not in gone)
        self.workspace.remove_sources(keys)

    def clear(self) -> ClearedInputs:
        self._deferred.clear()
        self._adding.clear()
        self._adding_sources = []
        self._add_generation += 1
        self._reading = False
        self._waiting.clear()
        return self.workspace.clear_sources()

    def undo_clear(self) -> ClearedInputs | None:
        """The inputs the last Clear took, back in the list (None: nothing to undo)."""
        return self.workspace.undo_clear()

    def mark_unreadable(self, key: str, reason: str) -> None:
        """The input cannot be read: marked at once, and Run leaves it out."""
        self.workspace.set_broken(key, reason)

    def show(self, key: str, version_id: str) -> None:
        self.workspace.set_viewing(key, version_id or None)
        self.showRequested.emit(key, version_id)

    def _show_result(self, job: Job) -> None:
        ws = self.workspace
        key = ws.job_input.get(job.id)
        if key is None or key not in ws.sources:
            return
        versions = [v for v in job_versions(job, key) if v.viewable]
        if not versions:
            return
        viewing_key, viewing_version = ws.viewing
        looking_here = viewing_key == key and (
            viewing_version is None or self._is_newest_or_original(key, viewing_version, job.id)
        )
        # A few images' results each appear in turn while the person has not looked elsewhere;
        # a large batch never pulls the view from image to image (issue #21): there only the
        # image in view moves to its new result.
        if looking_here or viewing_key is None or ws.following:
            ws.set_viewing(key, versions[0].id)
            self.showRequested.emit(key, versions[0].id)

    def _is_newest_or_original(self, key: str, version_id: str, new_job: str) -> bool:
        if version_id == ORIGINAL:
            return True
        older = [v for v in self.workspace.results(key) if v.job_id != new_job and v.viewable]
        return bool(older) and older[-1].id == version_id

    # -- running ------------------------------------------------------------------------------
    def targets(self, selected: Sequence[str] | None = None) -> list[InputSource]:
        """What Run runs: the selected inputs when the person selected several, else all;
        not the unreadable ones, nor the ones done already with these settings (all of them
        again when every one is done)."""
        return list(self.workspace.run_plan(selected).run)

    def run_label(self, selected: Sequence[str] | None = None) -> str:
        """The Run button's words: what it will do."""
        return self.workspace.run_plan(selected).label

    @property
    def calibrator(self) -> Calibrator:
        return self.speed.calibrator

    def estimate(self, sources: Sequence[InputSource], settings: JobSettings) -> Estimate | None:
        return self.speed.estimate(sources, settings)

    def estimate_text(
        self, sources: Sequence[InputSource], settings: JobSettings, where: str, idle: bool
    ) -> str:
        return self.speed.estimate_text(sources, settings, where, idle)

    def estimate_line(self, where: str) -> str:
        """The estimate for what Run runs now, with the workspace's settings."""
        settings = self.workspace.settings
        if settings is None:
            return ""
        return self.estimate_text(self.targets(), settings, where, not self.engine.is_busy())

    def run_selected(self, operation: Operation | None = None) -> list[str]:
        """Run: every image, or the selected ones when several are selected."""
        plan = self.workspace.run_plan()
        sources = list(plan.run)
        if not sources and plan.queued:
            self.statusRequested.emit(
                f"Nothing new to queue: {plan.label.removeprefix('Run ').strip('()')}."
            )
            return []
        if not sources and plan.broken:
            self._warn("\n".join(self.workspace.broken[s.key] for s in plan.broken), Topic.INPUTS)
            return []
        if not sources:
            self._warn(
                "Add images first: drop them on the window or use File ▸ Open.", Topic.INPUTS
            )
            return []
        return self.queue_jobs(sources, operation)

    def run_one(self, key: str, operation: Operation | None = None) -> list[str]:
        source = self.workspace.source(key)
        return self.queue_jobs([source], operation) if source is not None else []

    def queue_jobs(
        self, sources: Sequence[InputSource], operation: Operation | None = None
    ) -> list[str]:
        """Run's work with the workspace's settings, and what to say about it."""
        settings = self.workspace.settings
        if settings is None:
            what = operation.label.lower() if operation is not None else "this operation"
            self._warn(
                f"No model for {what} is installed, so nothing was queued. "
                "Use Get… beside the model list, or drop an .onnx model file.",
                Topic.MODELS,
            )
            return []
        ids = self.queue(sources, settings)
        count = len(ids)
        self.statusRequested.emit(
            f"Queued {count} job{'s' if count != 1 else ''}: "
            f"{settings.operation.label} with {settings.model_label}."
        )
        self.noticeCleared.emit(Topic.JOBS)
        return ids

    def queue(self, sources: Sequence[InputSource], settings: JobSettings) -> list[str]:
        """One job per input, in order, each from its base (the original, or the result
        chosen with `use_as_input`); the view follows their results. The model's speed is
        read once; RUN_CHUNK jobs are made and handed to the engine (in one call) now, the
        rest a part per turn (issue #21: Run of 1000). Returns every job's id."""
        rate = self._rate(settings)
        waiting = []
        for source in sources:
            start = self.workspace.base(source.key)
            if start is not None:
                waiting.append(_Waiting(new_request_id(), source, start, settings, rate))
        if not waiting:
            return []
        self.workspace.set_following(len(waiting) <= FOLLOW_AT_MOST)
        self.batchQueued.emit(settings, [(w.job_id, w.start.paths) for w in waiting])
        self._waiting.extend(waiting)
        self._queue_some(RUN_CHUNK)
        if self._waiting:
            self._later.start()
        return [w.job_id for w in waiting]

    def _queue_part(self) -> None:
        began = time.perf_counter()
        while self._waiting and time.perf_counter() - began < PART_S:
            self._queue_some(STEP)

    def _queue_some(self, count: int) -> None:
        """Make, submit (in one engine call) and list the next `count` waiting jobs."""
        if not self.engine.is_running():
            self._waiting.clear()  # closing
            return
        part = [self._waiting.popleft() for _ in range(min(count, len(self._waiting)))]
        made = [
            self._make_job(w.source, w.settings, w.start, (), w.rate, w.job_id)
            for w in part
            if w.source.key in self.workspace.sources
        ]
        self.engine.submit_many([job.request for job, _, _ in made])
        for job, key, chain in made:
            self.workspace.add_job(job, key, chain)

    def waiting(self) -> int:
        """Jobs of a large Run not listed yet (they are, within a few turns)."""
        return len(self._waiting)

    def _rate(self, settings: JobSettings) -> Rate | None:
        return self.speed.rate(settings)

    def _queue_one(
        self,
        source: InputSource,
        settings: JobSettings,
        start: Version,
        then: tuple[JobSettings, ...],
        rate: Rate | Unread | None = UNREAD,
    ) -> str:
        """One job of `settings` on the version `start` of `source` (`rate`: the model's
        speed, when the caller read it for a whole batch)."""
        known = self._rate(settings) if isinstance(rate, Unread) else rate
        job, key, chain = self._make_job(source, settings, start, then, known)
        self.engine.submit(job.request)
        self.workspace.add_job(job, key, chain)
        return job.id

    def _make_job(
        self,
        source: InputSource,
        settings: JobSettings,
        start: Version,
        then: tuple[JobSettings, ...],
        rate: Rate | None,
        job_id: str | None = None,
    ) -> tuple[Job, str, tuple[JobSettings, ...]]:
        """The job of `settings` on the version `start` of `source`, not submitted yet."""
        ws = self.workspace
        inputs = start.paths
        sequence = source.sequence if start.is_original else len(inputs) > 1
        request = OperationRequest(
            operation=settings.operation,
            model=settings.model,
            inputs=inputs,
            device=settings.device,
            runtime=settings.runtime,
            output_dir=settings.output_folder(source.paths),
            tile=settings.job_tile,
            sequence=sequence,
            options=settings.options,
            output=settings.output,
            id=job_id or new_request_id(),
        )
        expected_s, write_s = self.speed.expect(
            settings.operation, source.megapixels, source.frames, rate
        )
        job = Job(
            request,
            settings.model_label,
            expected_s=expected_s,
            expected_write_s=write_s,
            megapixels=source.megapixels,
            frames=source.frames,
            parent_label="" if start.is_original else start.label,
        )
        chain = (*(() if start.is_original else ws.chain_of(start)), settings)
        if then:
            self.chains.remember(request.id, then)
        return job, source.key, chain

    def defer(self, sources: Sequence[InputSource]) -> None:
        """Jobs to queue once the model list is in (files given at start-up)."""
        self._deferred.extend(sources)

    def take_deferred(self) -> list[InputSource]:
        waiting, self._deferred = self._deferred, []
        return [s for s in waiting if s.key in self.workspace.sources]

    def cancel(self, job_id: str) -> None:
        if any(w.job_id == job_id for w in self._waiting):
            self._waiting = deque(w for w in self._waiting if w.job_id != job_id)
            return
        self.workspace.job_cancel_requested(job_id)
        self.engine.cancel(job_id)

    def cancel_running(self) -> None:
        running = self.engine.running_id
        if running is not None and running in self.workspace.jobs:
            self.cancel(running)

    def cancel_all(self) -> None:
        """Every queued and running job, in one engine call and one redraw: with 945 queued
        this is as quick as with one (issue #21)."""
        ws = self.workspace
        unlisted = len(self._waiting)
        self._waiting.clear()  # the part of a large Run not made yet is never made
        ids = [job.id for job in ws.jobs.values() if job.state.cancellable]
        if not ids and not unlisted:
            return
        with ws.batch():
            for job_id in ids:
                if ws.jobs[job_id].state is not JobState.QUEUED:  # a queued one just ends
                    ws.job_cancel_requested(job_id)
            self.engine.cancel_many(ids)  # the queued ones' endings arrive inside the batch
        count = len(ids) + unlisted
        self.statusRequested.emit(f"Cancelled {count} job{'s' if count != 1 else ''}.")

    def active(self) -> list[Job]:
        return self.workspace.active()

    def forget_ended(self) -> list[str]:
        return self.workspace.forget_ended()

    # -- chains -------------------------------------------------------------------------------
    def use_as_input(self, key: str, version_id: str) -> Version | None:
        return self.chains.use_as_input(key, version_id)

    def run_chain_from(self, version: Version | None) -> list[str]:
        return self.chains.run_chain_from(version)

    # -- the engine's signals -----------------------------------------------------------------
    def _on_added(self, job_id: str) -> None:
        self.speed.expect_added(job_id)

    def _on_started(self, request: OperationRequest) -> None:
        self.workspace.job_started(request.id)

    def _on_finished(self, result: Result) -> None:
        ws = self.workspace
        job = ws.jobs.get(result.request_id)
        if job is None:
            return
        added = ws.job_finished(result)
        self.speed.ended(job)
        if job.state is JobState.FINISHED:
            # A command line's job of a size unknown here (several inputs, a clip) would
            # teach its whole time as the cost of one image of no pixels.
            if not job.origin or job.megapixels > 0:
                self.speed.learn(job)
            if job.message:  # some inputs of a multi-input job failed
                self._warn(job.message, Topic.JOBS)
        ws.announce_end(job.id)
        self._show_result(job)
        self.chains.next_step(job, ws.job_input.get(job.id, ""), added)

    def _on_failed(self, failure: OperationFailure) -> None:
        if failure.request_id not in self.workspace.jobs:
            return
        self.workspace.job_failed(failure.request_id, failure.message)
        job = self.workspace.jobs[failure.request_id]
        self.speed.ended(job)
        self.chains.failed(job, job.message)

    def _on_cancelled(self, cancellation: OperationCancellation) -> None:
        self.workspace.job_cancelled(cancellation.request_id)
        self.chains.forget(cancellation.request_id)  # a cancelled step ends its chain run

    def _warn(self, text: str, topic: Topic) -> None:
        self.noticeRequested.emit(Notice(text, NoticeLevel.WARNING, topic))
