"""The window's state, in one place: the one writer of what the person is doing.

`Workspace` holds the inputs and their versions, the jobs, what each input's next job starts
from (its base) and the steps that made every result (its chain), what is viewed (the input
and its left/right pair), the job settings the operation panel shows, Preview on/off and the
part of the image in view, the job rows waiting to be redrawn, the inputs selected, the ones
that cannot be read, and what the last Clear took (for Undo). Every
change goes through a method here and is announced by a signal, so widgets render it and
controllers act on it without writing each other's fields (krita-ai-diffusion's `model/`,
ndv's evented models). QtCore only; touched on the GUI thread only.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from engine.operation_specs import Operation, operations
from engine.previews import Region
from engine.requests import Progress, Result
from gui.inputs import InputSource, count_words
from gui.jobs import ORIGINAL, Job, JobSettings, JobState, Version, job_versions
from gui.messages import for_window
from gui.pictures import PictureBudget


@dataclass(frozen=True)
class ClearedInputs:
    """What Clear took out of the list, kept whole for Undo (its stores, not copies: Clear of a
    thousand images stays instant)."""

    sources: dict[str, InputSource]
    versions: dict[str, list[Version]]
    bases: dict[str, str]
    pairs: dict[str, tuple[str, str]]
    broken: dict[str, str]
    made: dict[str, set[tuple[object, ...]]]
    selected: tuple[str, ...]
    viewing: tuple[str | None, str | None]


@dataclass(frozen=True)
class RunPlan:
    """What one press of Run would queue, and why the others are left out.

    Run takes the selected inputs when the person selected several, else all of them; it
    leaves out an input that cannot be read and one that already has a finished result of the
    same steps in this session, or a job for it queued or running into the same folder —
    unless every one is done and none is waiting: then it runs them all again. The button
    says which: "Run 3 images", "Run 1 image (2 done)", "Run 3 images (5 queued)", "Run 3
    images again", "Run 2 images and 1 clip", "Run selected (2)", "Run on Quick cut-out"."""

    run: tuple[InputSource, ...]  # queued, in the list's order
    done: int = 0  # left out: they have this result already
    queued: int = 0  # left out: a job for this result is queued or running
    broken: tuple[InputSource, ...] = ()  # left out: they cannot be read
    again: bool = False  # every readable one is done: Run runs them again
    selected: bool = False  # the person selected several: Run runs those
    on: str = ""  # one input, run from a result of it ("Quick cut-out"), not its original

    @property
    def label(self) -> str:
        left_out = [f"{self.queued} queued"] if self.queued else []
        if self.done and not self.again:
            left_out.append(f"{self.done} done")
        done = ", ".join(left_out)
        if not self.run:
            return f"Run ({done})" if done else "Run"
        again = " again" if self.again else ""
        if self.selected:
            if done:
                return f"Run selected ({len(self.run)}, {done})"
            return f"Run selected{again} ({len(self.run)})"
        if self.on:
            return f"Run on {self.on}{again}"
        return f"Run {count_words(self.run)}{again}" + (f" ({done})" if done else "")


ANNOUNCE_PART_S = 0.015  # a batch's announcements per turn of the event loop (issue #21)


class Workspace(QObject):
    inputsChanged = Signal()  # inputs added, removed, merged or cleared
    inputChanged = Signal(str)  # an input's versions, base or failure mark changed
    selectionChanged = Signal()  # the inputs the person selected
    jobAdded = Signal(str)
    jobChanged = Signal(str)  # state or progress (rows redraw coalesced: `dirty`)
    jobEnded = Signal(str)
    jobsEnded = Signal(list)  # job ids that ended together (a batch: Cancel all)
    jobsForgotten = Signal(list)  # job ids cleared from the list
    viewingChanged = Signal(object, object)  # input key, right-hand version id (or None)
    settingsChanged = Signal()  # the job settings the panel shows
    previewChanged = Signal(bool)  # Preview on or off
    regionChanged = Signal(object)  # Region in view (in the previewed image's pixels) or None

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.sources: dict[str, InputSource] = {}  # in the order they were added
        self.selected: tuple[str, ...] = ()
        self.broken: dict[str, str] = {}  # input key → why it cannot be read (never queued)
        # input key → what each finished result of it was made with: its steps' `makes`
        self.made: dict[str, set[tuple[object, ...]]] = {}
        self.cleared: ClearedInputs | None = None  # what the last Clear took, until inputs change
        self.jobs: dict[str, Job] = {}
        # The keys of jobs asked for from outside the window (a command line's): no input of
        # the list, so removing or clearing images leaves their rows to "Clear finished".
        self.outside: set[str] = set()
        self.job_input: dict[str, str] = {}  # job id → input key
        self._versions: dict[str, list[Version]] = {}  # input key → its products, oldest first
        self.bases: dict[str, str] = {}  # input key → version id (absent: the original)
        self.chains: dict[str, tuple[JobSettings, ...]] = {}  # job id → steps from the original
        self.viewing: tuple[str | None, str | None] = (None, None)  # (input key, version id)
        self.following = True  # the view may move to new results for the person
        self.pairs: dict[str, tuple[str, str]] = {}  # input key → (left, right) version ids
        self.settings: JobSettings | None = None  # None: no model chosen
        self.operation: Operation = operations()[0]  # the operation the panel shows
        self.run_on_drop = False  # dropped files start their jobs at once
        self.clip_frame = 0  # the frame of the viewed clip on screen (0: none viewed)
        self.preview_on = False
        self.region: Region | None = None
        self.dirty: set[str] = set()  # job rows whose progress is not drawn yet
        self.pictures = PictureBudget(parent=self)  # every decoded picture the window keeps
        self._of_input: dict[str, list[str]] = {}  # input key → its job ids, oldest first
        self._batching = False  # inside `batch()`: announcements wait for its end
        self._held: dict[str, None] = {}  # jobs changed during the batch, in order
        self._held_ended: dict[str, None] = {}
        self._announcing: deque[tuple[str, str]] = deque()  # ("job" | "input", id) to announce
        self._announce_timer = QTimer(self)
        self._announce_timer.setSingleShot(True)
        self._announce_timer.setInterval(0)
        self._announce_timer.timeout.connect(self._announce_part)

    # -- inputs -------------------------------------------------------------------------------
    def add_sources(self, sources: Sequence[InputSource]) -> list[InputSource]:
        added = [s for s in sources if s.key not in self.sources]
        for source in added:
            self.sources[source.key] = source
        if added:
            self.cleared = None
            self.inputsChanged.emit()
        return added

    def replace_sources(self, ordered: dict[str, InputSource]) -> None:
        self.sources = dict(ordered)
        self.cleared = None
        self._drop_stale_pairs()
        self.inputsChanged.emit()

    def remove_sources(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.sources.pop(key, None)
            self._versions.pop(key, None)
            self.bases.pop(key, None)
            self.broken.pop(key, None)
            self.made.pop(key, None)
        self.cleared = None
        if self.viewing[0] in keys:
            self.viewing = (None, None)
        self.selected = tuple(k for k in self.selected if k in self.sources)
        self._drop_stale_pairs()
        self.inputsChanged.emit()
        self._forget_ended_of_gone()

    def clear_sources(self) -> ClearedInputs:
        """Empty the list; what it held is kept for `undo_clear` until the inputs change."""
        cleared = ClearedInputs(
            self.sources,
            self._versions,
            self.bases,
            self.pairs,
            self.broken,
            self.made,
            self.selected,
            self.viewing,
        )
        self.sources, self._versions, self.bases, self.pairs = {}, {}, {}, {}
        self.broken, self.made = {}, {}
        self.selected = ()
        self.viewing = (None, None)
        self.following = True
        self.cleared = cleared if cleared.sources else None
        self.inputsChanged.emit()
        self._forget_ended_of_gone()
        return cleared

    def undo_clear(self) -> ClearedInputs | None:
        """The list as the last Clear found it: inputs in their order, their versions, bases,
        pairs, marks and the selection; None when nothing is to undo. What is viewed is the
        caller's to show again (`ClearedInputs.viewing`)."""
        cleared, self.cleared = self.cleared, None
        if cleared is None or self.sources:
            return None
        # Jobs that ended after Clear put their results in the emptied store: they stay.
        for key, later in self._versions.items():
            cleared.versions.setdefault(key, []).extend(later)
        for key, makes in self.made.items():
            cleared.made.setdefault(key, set()).update(makes)
        self.sources, self._versions = cleared.sources, cleared.versions
        self.bases, self.pairs, self.broken = cleared.bases, cleared.pairs, cleared.broken
        self.made = cleared.made
        self.selected = cleared.selected
        self.inputsChanged.emit()
        self.selectionChanged.emit()
        return cleared

    def _drop_stale_pairs(self) -> None:
        for key in [k for k in self.pairs if k not in self.sources]:
            del self.pairs[key]

    def select(self, keys: Sequence[str]) -> None:
        chosen = tuple(keys)
        if chosen != self.selected:
            self.selected = chosen
            self.selectionChanged.emit()

    def source(self, key: str | None) -> InputSource | None:
        return self.sources.get(key) if key else None

    def set_broken(self, key: str, reason: str) -> None:
        """The input cannot be read (its thumbnail or header said why): Run leaves it out."""
        reason = for_window(reason)
        if key in self.sources and self.broken.get(key) != reason:
            self.broken[key] = reason
            self.inputChanged.emit(key)

    # -- versions -----------------------------------------------------------------------------
    def versions(self, key: str) -> list[Version]:
        """The original first, then every product of the input's jobs, newest last."""
        source = self.sources.get(key)
        if source is None:
            return []
        original = Version(key, "Original", source.paths)
        return [original, *self._versions.get(key, [])]

    def results(self, key: str) -> list[Version]:
        """The input's products only, oldest first."""
        return list(self._versions.get(key, []))

    def version(self, key: str, version_id: str) -> Version | None:
        return next((v for v in self.versions(key) if v.id == version_id), None)

    def find_version(self, version_id: str) -> Version | None:
        """A result version by its id, whichever input it belongs to."""
        key = self.job_input.get(version_id.partition(":")[0])
        return self.version(key, version_id) if key is not None else None

    def newest(self, key: str) -> Version | None:
        """The newest viewable version of the input (its original when it has no result)."""
        viewable = [v for v in self.versions(key) if v.viewable]
        return viewable[-1] if viewable else None

    def jobs_of(self, key: str) -> list[Job]:
        """The input's jobs still in the list, oldest first (without a scan of every job)."""
        return [self.jobs[i] for i in self._of_input.get(key, ()) if i in self.jobs]

    def failure(self, key: str) -> str:
        """The reason the input's latest job failed; empty when it did not."""
        latest = [j for j in self.jobs_of(key) if j.state.ended]
        if not latest:
            return ""
        last = latest[-1]
        return last.message if last.state is JobState.FAILED else ""

    def running_for(self, key: str) -> bool:
        return any(j.state.active for j in self.jobs_of(key))

    # -- bases and chains ---------------------------------------------------------------------
    def set_base(self, key: str, version_id: str) -> None:
        """The input's next job starts from `version_id` (the original resets)."""
        if version_id == ORIGINAL:
            self.bases.pop(key, None)
        else:
            self.bases[key] = version_id
        self.inputChanged.emit(key)

    def base(self, key: str) -> Version | None:
        """What the input's next job starts from: the chosen result, else the original."""
        versions = self.versions(key)
        if not versions:
            return None
        chosen = self.bases.get(key)
        found = next((v for v in versions if v.id == chosen and v.viewable), None)
        return found or versions[0]

    def chain_of(self, version: Version) -> tuple[JobSettings, ...]:
        """The steps that made `version` from its input's original."""
        return self.chains.get(version.job_id or "", ())

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(self, job: Job, key: str, chain: tuple[JobSettings, ...]) -> None:
        self.jobs[job.id] = job
        self.job_input[job.id] = key
        self.chains[job.id] = chain
        if job.origin:
            self.outside.add(key)
        self._of_input.setdefault(key, []).append(job.id)
        self.jobAdded.emit(job.id)
        self.inputChanged.emit(key)

    def job_started(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None:
            job.on_started()
            self._changed(job)

    def job_progressed(self, event: Progress) -> None:
        job = self.jobs.get(event.request_id)
        if job is not None:
            job.on_progress(event)
            self._changed(job)

    def job_cancel_requested(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state.cancellable:
            job.on_cancel_requested()
            self._changed(job)

    def job_estimated(self, job_id: str, seconds: float, write_s: float | None = None) -> None:
        job = self.jobs.get(job_id)
        if job is not None:
            job.expected_s = seconds
            if write_s is not None:
                job.expected_write_s = write_s
            self._changed(job)

    def job_finished(self, result: Result) -> list[Version]:
        """The job's products become versions of its input; returns them. The controller
        announces the end (`announce_end`) once it has learnt from the job."""
        job = self.jobs.get(result.request_id)
        if job is None:
            return []
        job.on_finished(result)
        job.message = for_window(job.message)
        key = self.job_input.get(job.id, "")
        added = job_versions(job, key)
        self._versions.setdefault(key, []).extend(added)
        if any(v.viewable for v in added):
            steps = tuple(step.makes for step in self.chains.get(job.id, ()))
            self.made.setdefault(key, set()).add(steps)
        return added

    def announce_end(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None:
            self._ended(job)

    def job_failed(self, job_id: str, message: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        job.on_failed(for_window(message))
        key = self.job_input.get(job.id, "")
        self._versions.setdefault(key, []).extend(job_versions(job, key))
        self._ended(job)

    def job_cancelled(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None:
            job.on_cancelled()
            self._ended(job)

    def _forget_ended_of_gone(self) -> list[str]:
        """The ended jobs of inputs no longer in the list leave the job list and the batch
        line's counts (a cleared image's 578 cancelled jobs are not the batch's any more);
        a job still running stays until it ends."""
        return self.forget_ended(lambda key: key not in self.sources and key not in self.outside)

    def forget_ended(self, of: Callable[[str], bool] | None = None) -> list[str]:
        """Clear finished jobs from the list (`of`: only those of the inputs it picks); their
        products stay in the strips."""
        gone = [
            job_id
            for job_id, job in self.jobs.items()
            if job.state.ended and (of is None or of(self.job_input.get(job_id, "")))
        ]
        for job_id in gone:
            del self.jobs[job_id]
            self.dirty.discard(job_id)
        for key in {self.job_input.get(j, "") for j in gone}:
            self._of_input[key] = [i for i in self._of_input.get(key, ()) if i in self.jobs]
            if key in self.outside and not self._of_input[key]:
                self.outside.discard(key)
                self._versions.pop(key, None)  # no strip shows them: their rows were all
                self.made.pop(key, None)
        if gone:
            self.jobsForgotten.emit(gone)
        return gone

    def active(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state.active]

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Many jobs change at once (Cancel all): each job's row and input are announced once,
        after it, a part of about ANNOUNCE_PART_S per turn of the event loop (the jobs' states
        are already true; only their redraws follow), and `jobsEnded` replaces a `jobEnded`
        per job."""
        if self._batching:
            yield
            return
        self._batching = True
        try:
            yield
        finally:
            self._batching = False
            changed, self._held = list(self._held), {}
            ended, self._held_ended = list(self._held_ended), {}
            keys = dict.fromkeys(self.job_input.get(j, "") for j in changed)
            self._announcing.extend(("job", j) for j in changed)
            self._announcing.extend(("input", k) for k in keys)
            self._announce_part()
            if ended:
                self.jobsEnded.emit(ended)

    def _announce_part(self) -> None:
        began = time.perf_counter()
        while self._announcing and time.perf_counter() - began < ANNOUNCE_PART_S:
            what, name = self._announcing.popleft()
            if what == "job":
                if name in self.jobs:
                    self.dirty.discard(name)
                    self.jobChanged.emit(name)
            elif name in self.sources:
                self.inputChanged.emit(name)
        if self._announcing:
            self._announce_timer.start()

    def _changed(self, job: Job) -> None:
        if self._batching:
            self._held[job.id] = None
            return
        # Rows of running jobs redraw at the list's pace; a state the person waits on, now.
        if job.state.ended or job.state in (JobState.LOADING, JobState.CANCELLING):
            self.dirty.discard(job.id)
        else:
            self.dirty.add(job.id)
        self.jobChanged.emit(job.id)

    def _ended(self, job: Job) -> None:
        self._changed(job)
        if self._batching:
            self._held_ended[job.id] = None
            return
        self.jobEnded.emit(job.id)
        key = self.job_input.get(job.id)
        if key is not None:
            self.inputChanged.emit(key)

    def take_dirty(self) -> set[str]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    # -- what is viewed -----------------------------------------------------------------------
    def set_viewing(self, key: str | None, version_id: str | None) -> None:
        if (key, version_id) != self.viewing:
            self.viewing = (key, version_id)
            self.viewingChanged.emit(key, version_id)

    def set_following(self, following: bool) -> None:
        self.following = following

    def set_pair(self, key: str, left: str, right: str) -> None:
        self.pairs[key] = (left, right)

    def pair(self, key: str) -> tuple[str, str]:
        return self.pairs.get(key, (ORIGINAL, ""))

    def viewed(self, version_id: str = "") -> Version | None:
        """The version `version_id` of the input shown, else the right-hand one."""
        key, right = self.viewing
        if key is None:
            return None
        return self.version(key, version_id or right or "")

    # -- job settings and preview -------------------------------------------------------------
    def set_settings(self, settings: JobSettings | None) -> None:
        if settings != self.settings:
            self.settings = settings
            self.settingsChanged.emit()

    def set_operation(self, operation: Operation) -> None:
        self.operation = operation

    def set_run_on_drop(self, on: bool) -> None:
        self.run_on_drop = on

    def set_clip_frame(self, index: int) -> None:
        """Frame `index` of the viewed clip is on screen (what Preview runs on)."""
        self.clip_frame = index

    def set_preview(self, on: bool) -> None:
        if on != self.preview_on:
            self.preview_on = on
            self.previewChanged.emit(on)

    def set_region(self, region: Region | None) -> None:
        if region != self.region:
            self.region = region
            self.regionChanged.emit(region)

    # -- what Run runs -------------------------------------------------------------------------
    def run_plan(self, selected: Sequence[str] | None = None) -> RunPlan:
        """What Run runs now with the workspace's settings (`selected`: instead of its selection):
        the one source of what the window counts for Run — its label, the estimate's line."""
        keys = self.selected if selected is None else selected
        chosen = [self.sources[k] for k in keys if k in self.sources]
        several = len(chosen) >= 2
        if not several:
            chosen = list(self.sources.values())
        broken = tuple(s for s in chosen if s.key in self.broken)
        readable = [s for s in chosen if s.key not in self.broken]
        settings = self.settings
        waiting = {s.key for s in readable if settings is not None and self.is_queued(s, settings)}
        todo = [
            s
            for s in readable
            if settings is None or (s.key not in waiting and not self.has_result(s.key, settings))
        ]
        again = bool(readable) and not todo and not waiting
        run = tuple(readable if again else todo)
        # "Run on Quick cut-out": the one input that runs from a result chosen with "Use as input"
        # is named by that result, whatever else runs beside it ("… and 1 image").
        from_results = [
            (s, b) for s in run if (b := self.base(s.key)) is not None and not b.is_original
        ]
        on = ""
        if len(from_results) == 1:
            source, base = from_results[0]
            others = [s for s in run if s.key != source.key]
            on = base.label + (f" and {count_words(others)}" if others else "")
        done = 0 if again else len(readable) - len(todo) - len(waiting)
        return RunPlan(run, done, len(waiting), broken, again, several, on)

    def has_result(self, key: str, settings: JobSettings) -> bool:
        """Whether the input's next job with `settings` would make a result it has already: a
        finished one whose steps (from the original) make the same pictures."""
        made = self.made.get(key)
        return made is not None and self.next_steps(key, settings) in made

    def is_queued(self, source: InputSource, settings: JobSettings) -> bool:
        """Whether a job of the input that makes what its next job would, into the same folder, is
        queued or running (a batch sent to another folder while the first runs is a new one)."""
        active = [j for j in self.jobs_of(source.key) if j.state.active]
        if not active:
            return False
        steps = self.next_steps(source.key, settings)
        folder = settings.output_folder(source.paths)
        return any(
            j.request.output_dir == folder
            and tuple(step.makes for step in self.chains.get(j.id, ())) == steps
            for j in active
        )

    def next_steps(self, key: str, settings: JobSettings) -> tuple[object, ...]:
        """The steps (from the original) that the input's next job with `settings` would make."""
        before: tuple[object, ...] = ()
        if key in self.bases:  # its next job starts from a result: that result's steps come first
            base = self.base(key)
            if base is not None and not base.is_original:
                before = tuple(step.makes for step in self.chain_of(base))
        return (*before, settings.makes)
