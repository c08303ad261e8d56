"""What the viewer shows, without widgets: which input, which two of its versions (left and
right), and the pictures, decoded off the GUI thread.

Each input remembers its pair, so going back to an image shows what was compared there. A
request from the jobs controller (a new input, a result that came in) and a choice of the
person (a thumbnail, a version, a job) both end in one load; a newer load makes an older one
stale, so the view never flips back to what the person has left. What is viewed (the input,
its pair) is the workspace's; this controller is the action of showing it.

Stills are decoded at the view's size (`set_frame_size`), and the parts the viewer needs at more
pixels are read on request (`read_detail`); a request the view has moved past is skipped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal

from engine.runtime.memory import trim_heap
from gui.jobs import ORIGINAL, Version
from gui.tasks import TaskOutcome, TaskThread
from gui.workspace import Workspace

Loader = Callable[..., object]  # paths (, frame_size=(w, h)) → a decoded picture for the viewer


class DetailAsk(Protocol):
    """What a detail request carries that this controller reads (the viewer's DetailRequest)."""

    @property
    def side(self) -> int: ...

    @property
    def generation(self) -> int: ...


class ViewController(QObject):
    selectRequested = Signal(str)  # the input the inputs panel should select
    versionsChanged = Signal(list, str, str)  # versions of the input shown, left id, right id
    loaded = Signal(object, object, tuple)  # left picture, right picture (or None), labels
    failed = Signal(str, str)  # title, why the picture cannot be shown
    cleared = Signal()
    detailLoaded = Signal(object)  # the viewer's Detail: a part in view at more pixels

    def __init__(
        self,
        workspace: Workspace,
        tasks: TaskThread,
        loader: Loader,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.workspace = workspace
        self.tasks = tasks
        self.loader = loader
        self._generation = 0
        self.closed = False
        self.frame_size: tuple[int, int] | None = None  # None: the loader's own default
        self.detail_reader: Callable[[Any], object] | None = None
        self._detail_wanted: dict[int, int] = {}  # side → the newest request's generation
        workspace.inputChanged.connect(self._input_changed)
        workspace.inputsChanged.connect(self._inputs_changed)

    # -- requests -----------------------------------------------------------------------------
    def show(self, key: str, version_id: str) -> None:
        """The jobs controller's request: `key`, with `version_id` on the right (its newest
        result when empty)."""
        ws = self.workspace
        if ws.source(key) is None:
            return
        left, right = ws.pair(key)
        right = version_id or self._newest_id(key)
        ws.set_viewing(key, right)
        self.selectRequested.emit(key)
        self._load(key, left, right)

    def choose_input(self, key: str | None, by_person: bool) -> None:
        """A thumbnail became current: by the person's click, or because a list changed."""
        ws = self.workspace
        if key is None or ws.source(key) is None:  # none, or one just removed or cleared
            self.cleared.emit()
            return
        if not by_person and key == ws.viewing[0]:
            return  # selected by this controller for what it is loading already
        left, right = ws.pair(key)
        right = right or self._newest_id(key)
        if by_person:
            self._person_viewed(key, None)
        self._load(key, left, right)

    def _person_viewed(self, key: str, version_id: str | None) -> None:
        """The person chose what to look at (a thumbnail, a version, a job): new results
        elsewhere do not take the view until they press Run or add images again."""
        self.workspace.set_following(False)
        self.workspace.set_viewing(key, version_id)

    def choose_version(self, version_id: str, on_left: bool) -> str:
        """The person picked a version from the strip. Returns why it cannot be shown (a
        failed job's reason), or an empty string."""
        ws = self.workspace
        key = ws.viewing[0]
        if key is None:
            return ""
        version = ws.version(key, version_id)
        if version is None:
            return ""
        if not version.viewable:
            return f"{version.label}: {version.failed}"
        left, right = ws.pair(key)
        if on_left:
            left = version_id
        else:
            right = version_id
        self._person_viewed(key, right)
        self._load(key, left, right)
        return ""

    def show_job(self, job_id: str) -> str:
        """The person clicked a job: its input with its result. Returns a failure's reason."""
        ws = self.workspace
        key = ws.job_input.get(job_id)
        job = ws.jobs.get(job_id)
        if key is None or job is None or ws.source(key) is None:
            return ""
        versions = [v for v in ws.versions(key) if v.job_id == job_id]
        right = next((v.id for v in versions if v.viewable), None)
        self._person_viewed(key, right)
        self.selectRequested.emit(key)
        left, current = ws.pair(key)
        self._load(key, left, right or current or ORIGINAL)
        if versions and not versions[0].viewable:
            return f"{job.title} failed: {job.message}"
        return ""

    def viewed(self, version_id: str = "") -> Version | None:
        """The version `version_id` of the input shown, else the right-hand one."""
        return self.workspace.viewed(version_id)

    # -- loading ------------------------------------------------------------------------------
    def _newest_id(self, key: str) -> str:
        newest = self.workspace.newest(key)
        return newest.id if newest is not None else ORIGINAL

    def _load(self, key: str, left_id: str, right_id: str) -> None:
        ws = self.workspace
        versions = ws.versions(key)
        if not versions:  # the input is gone (removed, cleared): nothing to load
            return
        by_id = {v.id: v for v in versions}
        left = by_id.get(left_id) or versions[0]
        right = by_id.get(right_id) or versions[0]
        if not right.viewable:
            right = versions[0]
        ws.set_pair(key, left.id, right.id)
        ws.set_viewing(key, right.id)
        self.versionsChanged.emit(versions, left.id, right.id)
        self._generation += 1
        generation = self._generation
        left_paths = left.paths
        right_paths = right.paths if right.id != left.id else ()
        labels = (left.label, right.label)
        name = left.paths[0].name if left.paths else ""

        size = self.frame_size
        load = self.loader if size is None else functools.partial(self.loader, frame_size=size)

        def work() -> tuple[object, object]:
            before = load(left_paths) if left_paths else None
            after = load(right_paths) if right_paths else None
            trim_heap()  # the decoder's bands are freed: their pages go back too
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

    def set_detail_reader(self, reader: Callable[[Any], object]) -> None:
        """How a detail request is read (on the task thread): the viewer's picture reader."""
        self.detail_reader = reader

    def set_frame_size(self, size: tuple[int, int]) -> None:
        """The view's size in device pixels: stills are decoded at about this size."""
        self.frame_size = size

    def read_detail(self, request: DetailAsk) -> None:
        """Read a part of a shown picture on the task thread; the newest per side wins."""
        reader = self.detail_reader
        if reader is None or self.closed:
            return
        side, generation = request.side, request.generation
        self._detail_wanted[side] = generation

        def work() -> object:
            if self._detail_wanted.get(side) != generation:
                return None  # the view moved again before this was read
            return reader(request)

        def done(outcome: TaskOutcome) -> None:
            if self.closed or outcome.value is None:
                return
            if outcome.error is not None:  # the file went away or broke: the frame stays
                return
            self.detailLoaded.emit(outcome.value)

        self.tasks.submit(work, done, urgent=True)

    def _input_changed(self, key: str) -> None:
        ws = self.workspace
        if ws.viewing[0] == key:
            left, right = ws.pair(key)
            self.versionsChanged.emit(ws.versions(key), left, right)

    def _inputs_changed(self) -> None:
        if not self.workspace.sources:
            self._generation += 1  # a load still under way is stale
            self.cleared.emit()
