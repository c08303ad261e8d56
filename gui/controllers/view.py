"""What the viewer shows, without widgets: which input, which two of its versions (left and
right), and the pictures, decoded off the GUI thread.

Each input remembers its pair, so going back to an image shows what was compared there. A
request from the jobs controller (a new input, a result that came in) and a choice of the
person (a thumbnail, a version, a job) both end in one load; a newer load makes an older one
stale, so the view never flips back to what the person has left.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from gui.controllers.jobs import JobsController
from gui.jobs import ORIGINAL, Version
from gui.tasks import TaskOutcome, TaskThread

Loader = Callable[[tuple[Path, ...]], object]  # paths → a decoded picture for the viewer


class ViewController(QObject):
    selectRequested = Signal(str)  # the input the inputs panel should select
    versionsChanged = Signal(list, str, str)  # versions of the input shown, left id, right id
    loaded = Signal(object, object, tuple)  # left picture, right picture (or None), labels
    failed = Signal(str, str)  # title, why the picture cannot be shown
    cleared = Signal()

    def __init__(
        self,
        jobs: JobsController,
        tasks: TaskThread,
        loader: Loader,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.jobs = jobs
        self.tasks = tasks
        self.loader = loader
        self.pairs: dict[str, tuple[str, str]] = {}  # input key → (left, right) version ids
        self._generation = 0
        self.closed = False
        jobs.showRequested.connect(self.show)
        jobs.inputChanged.connect(self._input_changed)
        jobs.inputsChanged.connect(self._inputs_changed)

    # -- requests -----------------------------------------------------------------------------
    def show(self, key: str, version_id: str) -> None:
        """The jobs controller's request: `key`, with `version_id` on the right (its newest
        result when empty)."""
        if self.jobs.source(key) is None:
            return
        left, right = self.pairs.get(key, (ORIGINAL, ""))
        right = version_id or self._newest_id(key)
        self.jobs.viewing = (key, right)
        self.selectRequested.emit(key)
        self._load(key, left, right)

    def choose_input(self, key: str | None, by_person: bool) -> None:
        """A thumbnail became current: by the person's click, or because a list changed."""
        if key is None:
            self.cleared.emit()
            return
        if not by_person and key == self.jobs.viewing[0]:
            return  # selected by this controller for what it is loading already
        left, right = self.pairs.get(key, (ORIGINAL, ""))
        right = right or self._newest_id(key)
        if by_person:
            self.jobs.person_viewed(key, None)
        self._load(key, left, right)

    def choose_version(self, version_id: str, on_left: bool) -> str:
        """The person picked a version from the strip. Returns why it cannot be shown (a
        failed job's reason), or an empty string."""
        key = self.jobs.viewing[0]
        if key is None:
            return ""
        version = self.jobs.version(key, version_id)
        if version is None:
            return ""
        if not version.viewable:
            return f"{version.label}: {version.failed}"
        left, right = self.pairs.get(key, (ORIGINAL, ""))
        if on_left:
            left = version_id
        else:
            right = version_id
        self.jobs.person_viewed(key, right)
        self._load(key, left, right)
        return ""

    def show_job(self, job_id: str) -> str:
        """The person clicked a job: its input with its result. Returns a failure's reason."""
        key = self.jobs.job_input.get(job_id)
        job = self.jobs.jobs.get(job_id)
        if key is None or job is None or self.jobs.source(key) is None:
            return ""
        versions = [v for v in self.jobs.versions(key) if v.job_id == job_id]
        right = next((v.id for v in versions if v.viewable), None)
        self.jobs.person_viewed(key, right)
        self.selectRequested.emit(key)
        left, current = self.pairs.get(key, (ORIGINAL, ""))
        self._load(key, left, right or current or ORIGINAL)
        if versions and not versions[0].viewable:
            return f"{job.title} failed: {job.message}"
        return ""

    def viewed(self, version_id: str = "") -> Version | None:
        """The version `version_id` of the input shown, else the right-hand one."""
        key, right = self.jobs.viewing
        if key is None:
            return None
        return self.jobs.version(key, version_id or right or "")

    # -- loading ------------------------------------------------------------------------------
    def _newest_id(self, key: str) -> str:
        newest = self.jobs.newest(key)
        return newest.id if newest is not None else ORIGINAL

    def _load(self, key: str, left_id: str, right_id: str) -> None:
        versions = self.jobs.versions(key)
        by_id = {v.id: v for v in versions}
        left = by_id.get(left_id) or versions[0]
        right = by_id.get(right_id) or versions[0]
        if not right.viewable:
            right = versions[0]
        self.pairs[key] = (left.id, right.id)
        self.jobs.viewing = (key, right.id)
        self.versionsChanged.emit(versions, left.id, right.id)
        self._generation += 1
        generation = self._generation
        left_paths = left.paths
        right_paths = right.paths if right.id != left.id else ()
        labels = (left.label, right.label)
        name = left.paths[0].name if left.paths else ""

        def work() -> tuple[object, object]:
            before = self.loader(left_paths) if left_paths else None
            after = self.loader(right_paths) if right_paths else None
            return before, after

        self.tasks.submit(work, lambda o: self._loaded(generation, o, labels, name), urgent=True)

    def _loaded(
        self, generation: int, outcome: TaskOutcome, labels: tuple[str, str], name: str
    ) -> None:
        if generation != self._generation or self.closed:
            return  # the person has moved on
        if outcome.error is not None:
            self.failed.emit(
                f"{name} (cannot be shown)", f"Cannot show this image:\n{outcome.error}"
            )
            return
        before, after = outcome.value
        self.loaded.emit(before, after, labels)

    def _input_changed(self, key: str) -> None:
        if self.jobs.viewing[0] == key:
            left, right = self.pairs.get(key, (ORIGINAL, ""))
            self.versionsChanged.emit(self.jobs.versions(key), left, right)

    def _inputs_changed(self) -> None:
        for key in list(self.pairs):
            if key not in self.jobs.sources:
                del self.pairs[key]
        if not self.jobs.sources:
            self._generation += 1  # a load still under way is stale
            self.cleared.emit()
