"""Watch a folder from the window: images that land in it join the inputs and run.

The looking is engine/watch.py's (`FolderWatch`: a file is taken once, when it is unchanged
over two looks and whole by its own format; products never re-enter). Here a timer asks for a
look every `POLL_MS` on the task thread — a network share's listing can take a while and must
not stall the window — and never asks again while one is under way. What arrived is handed to
`accept` (the window's intake: the files become inputs, with thumbnails, and jobs with the
current operation and output step are queued, exactly as a drop with run on). No widgets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from engine.watch import Arrival, FolderWatch
from gui.tasks import TaskOutcome, TaskThread

log = logging.getLogger(__name__)

POLL_MS = 500


class WatchController(QObject):
    watchStarted = Signal(str)  # the folder
    watchStopped = Signal(str)  # the folder
    filesArrived = Signal(list)  # the paths (str) taken by this look
    statusRequested = Signal(str)

    def __init__(
        self,
        tasks: TaskThread,
        accept: Callable[[Sequence[Path]], object],
        parent: QObject | None = None,
        *,
        interval_ms: int = POLL_MS,
    ) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.accept = accept
        self.watch: FolderWatch | None = None
        self.arrived: list[Path] = []
        self._looking = False
        self.looks = 0  # finished looks (tests wait on them)
        self._generation = 0  # a look that ends after a stop (or a new start) is dropped
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.look)
        tasks.qthread.finished.connect(self.timer.stop)  # the window shut down

    @property
    def folder(self) -> Path | None:
        return self.watch.folder if self.watch is not None else None

    def start(self, folder: Path) -> bool:
        """Watch `folder` (instead of any other); False, with a status line, if it is none."""
        try:
            watch = FolderWatch(Path(folder))
        except OSError as e:
            self.statusRequested.emit(f"Cannot watch {folder}: {e}.")
            return False
        self.stop()
        self.watch, self.arrived = watch, []
        self._generation += 1
        self.timer.start()
        self.look()
        self.watchStarted.emit(str(watch.folder))
        self.statusRequested.emit(
            f"Watching {watch.folder.name}: images that land in it are run as they arrive."
        )
        return True

    def stop(self) -> None:
        if self.watch is None:
            return
        folder = self.watch.folder
        self.timer.stop()
        self.watch = None
        self._generation += 1
        self.watchStopped.emit(str(folder))
        count = len(self.arrived)
        self.statusRequested.emit(
            f"Stopped watching {folder.name} ({count} file{'s' if count != 1 else ''} arrived)."
        )

    def look(self) -> None:
        watch = self.watch
        if watch is None or self._looking:
            return
        self._looking = True
        generation = self._generation

        def look() -> tuple[list[Arrival], list[Path]]:  # on the task thread
            return watch.poll(), list(watch.stalled)

        self.tasks.submit(look, lambda outcome: self._looked(outcome, generation))

    def _looked(self, outcome: TaskOutcome, generation: int) -> None:
        self._looking = False
        self.looks += 1
        if generation != self._generation:
            return
        if outcome.error is not None:
            log.warning("looking at the watched folder failed", exc_info=outcome.error)
            return
        arrivals: list[Arrival]
        arrivals, stalled = outcome.value
        if stalled:
            names = ", ".join(p.name for p in stalled)
            self.statusRequested.emit(f"{names}: not whole yet; waiting for the rest of the file.")
        if not arrivals:
            return
        paths = [a.path for a in arrivals]
        self.arrived.extend(paths)
        self.accept(paths)
        self.filesArrived.emit([str(p) for p in paths])
