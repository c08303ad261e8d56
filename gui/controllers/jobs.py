"""Inputs, jobs and their results, without widgets.

`JobsController` keeps the inputs the person added (each image its own input), queues one
job per input through the engine thread, follows every job to its one terminal signal, and
turns results into versions: each input has a strip of them (the original, ×2, x4plus,
cut-out…), and a failed job is a version marked failed with its reason. It also decides what
the viewer should show, so new work is never hidden: new inputs are shown at once, and a
finished result appears unless the person has chosen to look at something else.

Chains: any result can be the input of the next job (`use_as_input`), without saving and
reopening it; the new versions say what they were run on ("Quick cut-out → Anime ×2"). Every
job remembers its steps from the original (a list of JobSettings), so a chain can be run again
on other inputs as a batch (`run_chain`): each step's main product feeds the next step.

Signals are QtCore's only; tests drive this class with a real engine thread and no window.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.options import OutputOptions
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    ProductKind,
    Progress,
    Result,
)
from gui.controllers.speed import Calibrator, Estimate, SpeedBook
from gui.engine_thread import EngineThread
from gui.inputs import InputSource, as_sequence, classify_paths
from gui.jobs import (
    Job,
    JobState,
    Version,
    describe_inputs,
    fmt_duration,
    fmt_estimate,
    job_versions,
)
from gui.messages import Notice, NoticeLevel, Topic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSettings:
    """What the operation panel says when Run is pressed; every job of the batch keeps it."""

    operation: Operation
    model: str  # a catalog id or a file path
    model_label: str  # "Photo ×4"
    device: str = "cpu"
    runtime: str = "auto"
    tile: int | None = None
    output_dir: Path | None = None  # None: next to each input
    output: OutputOptions = field(default_factory=OutputOptions)


@dataclass(frozen=True)
class AddOutcome:
    """What one drop (or open, or paste) added."""

    sources: tuple[InputSource, ...]  # the new inputs (ones already there are not repeated)
    models: tuple[Path, ...]  # .onnx files to install
    refused: tuple[str, ...]  # one reason per refused path
    sequence_offer: tuple[Path, ...] = ()  # numbered stills of one size: offer one sequence


class JobsController(QObject):
    inputsChanged = Signal()  # inputs added, removed or merged
    inputChanged = Signal(str)  # an input's versions or its failure mark changed
    jobAdded = Signal(str)
    jobChanged = Signal(str)  # state or progress (progress is coalesced by the window)
    jobEnded = Signal(str)
    showRequested = Signal(str, str)  # input key, version id ("" for its newest): show it
    noticeRequested = Signal(object)  # Notice

    def __init__(
        self, engine: EngineThread, speeds: SpeedBook, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.engine = engine
        self.speeds = speeds
        self.calibrator = Calibrator(engine, speeds, self)
        self.calibrator.calibrated.connect(self._on_calibrated)
        self.sources: dict[str, InputSource] = {}  # in the order they were added
        self.jobs: dict[str, Job] = {}
        self.job_input: dict[str, str] = {}  # job id → input key
        self._versions: dict[str, list[Version]] = {}  # input key → its products, oldest first
        self._deferred: list[InputSource] = []  # to run once the model list is in
        # Chains: what the next job of an input starts from, each job's steps from the
        # original, and the steps still to run after a job of a chain run.
        self.bases: dict[str, str] = {}  # input key → version id (absent: the original)
        self.chains: dict[str, tuple[JobSettings, ...]] = {}  # job id → steps from the original
        self._then: dict[str, tuple[JobSettings, ...]] = {}  # job id → steps after it
        # What the person is looking at, and whether the window may move the view for them.
        self.viewing: tuple[str | None, str | None] = (None, None)  # (input key, version id)
        self.following = True
        engine.operationStarted.connect(self._on_started)
        engine.progressChanged.connect(self._on_progress)
        engine.operationFinished.connect(self._on_finished)
        engine.operationFailed.connect(self._on_failed)
        engine.operationCancelled.connect(self._on_cancelled)

    # -- inputs -------------------------------------------------------------------------------
    def add_paths(self, paths: Sequence[Path | str]) -> AddOutcome:
        """Add every image as its own input and show the first new one."""
        found = classify_paths([Path(p) for p in paths])
        added = [s for s in found.sources if s.key not in self.sources]
        for source in added:
            self.sources[source.key] = source
        if added:
            self.inputsChanged.emit()
            self.following = True
            self.show(added[0].key, "")
        elif found.sources:  # already there: show it anyway, the person asked for it
            self.following = True
            self.show(found.sources[0].key, "")
        offer = found.sequence_offer if len(found.sequence_offer) == len(found.sources) else ()
        return AddOutcome(tuple(added), found.models, found.refused, offer)

    def merge_as_sequence(self, paths: Sequence[Path]) -> InputSource | None:
        """The person chose "Process as one sequence": the stills become one input."""
        keys = [str(p) for p in paths]
        stills = [self.sources[k] for k in keys if k in self.sources]
        if len(stills) < 2:
            return None
        sequence = as_sequence(stills)
        for job in self.jobs.values():
            if self.job_input.get(job.id) in keys and job.state is JobState.QUEUED:
                self.cancel(job.id)
        ordered: dict[str, InputSource] = {}
        for key, source in self.sources.items():
            if key in keys:
                if sequence.key not in ordered:
                    ordered[sequence.key] = sequence
            else:
                ordered[key] = source
        self.sources = ordered
        self.inputsChanged.emit()
        self.show(sequence.key, "")
        return sequence

    def remove(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.sources.pop(key, None)
            self._versions.pop(key, None)
            self.bases.pop(key, None)
        if self.viewing[0] in keys:
            self.viewing = (None, None)
        self.inputsChanged.emit()

    def clear(self) -> None:
        self.sources.clear()
        self._versions.clear()
        self.bases.clear()
        self._deferred.clear()
        self.viewing = (None, None)
        self.following = True
        self.inputsChanged.emit()

    def source(self, key: str | None) -> InputSource | None:
        return self.sources.get(key) if key else None

    def versions(self, key: str) -> list[Version]:
        """The original first, then every product of the input's jobs, newest last."""
        source = self.sources.get(key)
        if source is None:
            return []
        original = Version(key, "Original", source.paths)
        return [original, *self._versions.get(key, [])]

    def version(self, key: str, version_id: str) -> Version | None:
        return next((v for v in self.versions(key) if v.id == version_id), None)

    def newest(self, key: str) -> Version | None:
        """The newest viewable product of the input, else its original."""
        versions = self.versions(key)
        viewable = [v for v in versions if v.viewable]
        return viewable[-1] if viewable else None

    def failure(self, key: str) -> str:
        """The reason the input's latest job failed; empty when it did not."""
        latest = [
            j for j in self.jobs.values() if self.job_input.get(j.id) == key and j.state.ended
        ]
        if not latest:
            return ""
        last = latest[-1]
        return last.message if last.state is JobState.FAILED else ""

    def running_for(self, key: str) -> bool:
        return any(self.job_input.get(j.id) == key and j.state.active for j in self.jobs.values())

    # -- what is shown ------------------------------------------------------------------------
    def show(self, key: str, version_id: str) -> None:
        self.viewing = (key, version_id or None)
        self.showRequested.emit(key, version_id)

    def person_viewed(self, key: str | None, version_id: str | None) -> None:
        """The person chose what to look at (a thumbnail, a version, a job): stop following new
        results elsewhere until they press Run or add images again."""
        self.following = False
        self.viewing = (key, version_id)

    def _show_result(self, job: Job) -> None:
        key = self.job_input.get(job.id)
        if key is None or key not in self.sources:
            return
        versions = [v for v in job_versions(job, key) if v.viewable]
        if not versions:
            return
        viewing_key, viewing_version = self.viewing
        looking_here = viewing_key == key and (
            viewing_version is None or self._is_newest_or_original(key, viewing_version, job.id)
        )
        if self.following or looking_here or viewing_key is None:
            self.viewing = (key, versions[0].id)
            self.showRequested.emit(key, versions[0].id)

    def _is_newest_or_original(self, key: str, version_id: str, new_job: str) -> bool:
        if version_id == "original":
            return True
        older = [v for v in self._versions.get(key, []) if v.job_id != new_job and v.viewable]
        return bool(older) and older[-1].id == version_id

    # -- running ------------------------------------------------------------------------------
    def targets(self, selected: Sequence[str]) -> list[InputSource]:
        """What Run runs: the selected inputs when the person selected several, else all."""
        chosen = [self.sources[k] for k in selected if k in self.sources]
        return chosen if len(chosen) >= 2 else list(self.sources.values())

    def run_label(self, selected: Sequence[str]) -> str:
        """The Run button's words: what it will do."""
        chosen = [k for k in selected if k in self.sources]
        if len(chosen) >= 2:
            return f"Run selected ({len(chosen)})"
        count = len(self.sources)
        if count == 0:
            return "Run"
        if count == 1:
            base = self.base(next(iter(self.sources)))
            return "Run 1 image" if base is None or base.is_original else f"Run on {base.label}"
        return f"Run {count} images"

    # -- chains -------------------------------------------------------------------------------
    def use_as_input(self, key: str, version_id: str) -> Version | None:
        """The input's next job starts from this version (a result; the original resets)."""
        version = self.version(key, version_id)
        if version is None or not version.viewable:
            return None
        if version.is_original:
            self.bases.pop(key, None)
        else:
            self.bases[key] = version_id
        self.inputChanged.emit(key)
        return version

    def base(self, key: str) -> Version | None:
        """What the input's next job starts from: the chosen result, else the original."""
        versions = self.versions(key)
        if not versions:
            return None
        chosen = self.bases.get(key)
        found = next((v for v in versions if v.id == chosen and v.viewable), None)
        return found or versions[0]

    def find_version(self, version_id: str) -> Version | None:
        """A result version by its id, whichever input it belongs to."""
        key = self.job_input.get(version_id.partition(":")[0])
        return self.version(key, version_id) if key is not None else None

    def chain_of(self, version: Version) -> tuple[JobSettings, ...]:
        """The steps that made `version` from its input's original."""
        return self.chains.get(version.job_id or "", ())

    def run_chain(self, steps: Sequence[JobSettings], sources: Sequence[InputSource]) -> list[str]:
        """Run `steps` in order on each input, from its original: each step's main product is
        the next step's input. Returns the first step's job ids."""
        if not steps:
            return []
        ids: list[str] = []
        for source in sources:
            original = self.versions(source.key)[0]
            job_id = self._queue_one(source, steps[0], original, ())
            self._then[job_id] = tuple(steps[1:])
            ids.append(job_id)
        if ids:
            self.following = True
        return ids

    def estimate(self, sources: Sequence[InputSource], settings: JobSettings) -> Estimate | None:
        megapixels = sum(s.megapixels for s in sources)
        frames = sum(max(s.frames, 1) for s in sources)
        return self.speeds.estimate(
            settings.operation, settings.model, settings.device, megapixels, frames
        )

    def estimate_text(
        self, sources: Sequence[InputSource], settings: JobSettings, where: str, idle: bool
    ) -> str:
        """The line above Run: "About 4 min on this CPU for 3 images." A model never measured
        on this device is measured now when the engine is idle (the calibration run)."""
        calibrator = self.calibrator
        if calibrator.needed(settings.model, settings.device):
            calibrator.calibrate(
                settings.operation, settings.model, settings.device, settings.runtime, idle
            )
        if not sources:
            return ""
        guess = self.estimate(sources, settings)
        count = len(sources)
        what = f"{count} image{'s' if count != 1 else ''}"
        if guess is not None:
            rough = " (a first rough figure)" if guess.rough else ""
            return f"{fmt_estimate(guess.seconds).capitalize()} on {where} for {what}{rough}."
        if calibrator.busy:
            return f"Measuring how fast {settings.model_label} runs on {where}…"
        return f"The first job measures how fast {settings.model_label} runs on {where}."

    def queue(self, sources: Sequence[InputSource], settings: JobSettings) -> list[str]:
        """One job per input, in order, each from its base (the original, or the result
        chosen with `use_as_input`); the view follows their results."""
        ids: list[str] = []
        for source in sources:
            start = self.base(source.key)
            if start is None:
                continue
            ids.append(self._queue_one(source, settings, start, ()))
        if ids:
            self.following = True
        return ids

    def _queue_one(
        self,
        source: InputSource,
        settings: JobSettings,
        start: Version,
        then: tuple[JobSettings, ...],
    ) -> str:
        """One job of `settings` on the version `start` of `source`."""
        inputs = start.paths
        sequence = source.sequence if start.is_original else len(inputs) > 1
        request = OperationRequest(
            operation=settings.operation,
            model=settings.model,
            inputs=inputs,
            device=settings.device,
            runtime=settings.runtime,
            output_dir=settings.output_dir,
            tile=settings.tile if settings.operation is Operation.UPSCALE else None,
            sequence=sequence,
            output=settings.output,
        )
        job = Job(
            request,
            settings.model_label,
            megapixels=source.megapixels,
            frames=source.frames,
            parent_label="" if start.is_original else start.label,
        )
        guess = self.estimate([source], settings)
        job.expected_s = guess.seconds if guess is not None else None
        self.jobs[request.id] = job
        self.job_input[request.id] = source.key
        self.chains[request.id] = (
            *(() if start.is_original else self.chain_of(start)),
            settings,
        )
        if then:
            self._then[request.id] = then
        self.engine.submit(request)
        self.jobAdded.emit(request.id)
        self.inputChanged.emit(source.key)
        return request.id

    def _on_calibrated(self, model: str, device: str) -> None:
        """A speed is known now: jobs queued before it get their estimate."""
        for job in self.jobs.values():
            request = job.request
            if job.expected_s is not None or not job.state.active:
                continue
            if (request.model, request.device) != (model, device):
                continue
            guess = self.speeds.estimate(
                request.operation, model, device, job.megapixels, job.frames
            )
            if guess is not None:
                job.expected_s = guess.seconds
                self.jobChanged.emit(job.id)

    def defer(self, sources: Sequence[InputSource]) -> None:
        """Jobs to queue once the model list is in (files given at start-up)."""
        self._deferred.extend(sources)

    def take_deferred(self) -> list[InputSource]:
        waiting, self._deferred = self._deferred, []
        return [s for s in waiting if s.key in self.sources]

    def cancel(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state.cancellable:
            job.on_cancel_requested()
            self.jobChanged.emit(job_id)
        self.engine.cancel(job_id)

    def cancel_running(self) -> None:
        running = self.engine.running_id
        if running is not None and running in self.jobs:
            self.cancel(running)

    def cancel_all(self) -> None:
        for job in list(self.jobs.values()):
            if job.state.cancellable:
                self.cancel(job.id)

    def active(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state.active]

    def forget_ended(self) -> list[str]:
        """Clear finished jobs from the list; their products stay in the strips."""
        gone = [job_id for job_id, job in self.jobs.items() if job.state.ended]
        for job_id in gone:
            del self.jobs[job_id]
        return gone

    # -- the engine's signals -----------------------------------------------------------------
    def _on_started(self, request: OperationRequest) -> None:
        job = self.jobs.get(request.id)
        if job is not None:
            job.on_started()
            self.jobChanged.emit(job.id)

    def _on_progress(self, event: Progress) -> None:
        job = self.jobs.get(event.request_id)
        if job is not None:
            job.on_progress(event)
            self.jobChanged.emit(job.id)

    def _on_finished(self, result: Result) -> None:
        job = self.jobs.get(result.request_id)
        if job is None:
            return
        job.on_finished(result)
        key = self.job_input.get(job.id, "")
        added = job_versions(job, key)
        self._versions.setdefault(key, []).extend(added)
        if job.state is JobState.FINISHED:
            self._learn(job)
            if job.message:  # some inputs of a multi-input job failed
                self.noticeRequested.emit(Notice(job.message, NoticeLevel.WARNING, Topic.JOBS))
        self._ended(job)
        self._show_result(job)
        self._next_step(job, key, added)

    def _next_step(self, job: Job, key: str, added: list[Version]) -> None:
        """A chain run goes on from the job's main product (the cut-out, the upscaled
        image), or stops with a reason when there is none."""
        then = self._then.pop(job.id, ())
        if not then:
            return
        source = self.sources.get(key)
        if source is None:
            return
        main = next((v for v in added if v.kind is ProductKind.IMAGE), None)
        main = main or next((v for v in added if v.viewable), None)
        if job.state is not JobState.FINISHED or main is None:
            self._chain_stopped(job, job.message or "it made no image")
            return
        self._queue_one(source, then[0], main, then[1:])

    def _chain_stopped(self, job: Job, why: str) -> None:
        name = describe_inputs(job.request.inputs, job.request.sequence)
        self.noticeRequested.emit(
            Notice(
                f"The chain stopped at {job.model_label} for {name}: {why}",
                NoticeLevel.WARNING,
                Topic.JOBS,
            )
        )

    def _on_failed(self, failure: OperationFailure) -> None:
        job = self.jobs.get(failure.request_id)
        if job is None:
            return
        job.on_failed(failure.message)
        key = self.job_input.get(job.id, "")
        self._versions.setdefault(key, []).extend(job_versions(job, key))
        self._ended(job)
        if self._then.pop(job.id, ()):
            self._chain_stopped(job, failure.message)

    def _on_cancelled(self, cancellation: OperationCancellation) -> None:
        job = self.jobs.get(cancellation.request_id)
        if job is None:
            return
        job.on_cancelled()
        self._ended(job)
        self._then.pop(job.id, None)  # a cancelled step ends its chain run, quietly

    def _ended(self, job: Job) -> None:
        self.jobChanged.emit(job.id)
        self.jobEnded.emit(job.id)
        key = self.job_input.get(job.id)
        if key is not None:
            self.inputChanged.emit(key)

    def _learn(self, job: Job) -> None:
        seconds = job.working_seconds()
        if seconds is None or job.result is None:
            return
        frames = sum(p.frames for p in job.result.products[:1]) or 1
        self.speeds.learn(
            job.request.operation,
            job.request.model,
            job.request.device,
            seconds,
            job.megapixels,
            frames,
        )
        log.info("%s took %s", job.title, fmt_duration(seconds))
