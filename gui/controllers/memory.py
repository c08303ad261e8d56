"""The memory gauge's readings, taken off the GUI thread.

NVML and psutil can take milliseconds (the first reading, which starts NVML, a few hundred), so
`MemoryController` reads them on the task thread once a second and hands the snapshot to the
gauge and the memory panel; a reading still under way is not asked for again. It also says how
many models are loaded, from the engine thread's `sessionsChanged`. Unload all lets go of the
window's pictures too (`release_pictures`) and gives the freed heap back, again once the engine
has let go of its sessions. No widgets.
"""

from __future__ import annotations

import gc
import linecache
import logging

from PySide6.QtCore import QObject, QTimer, Signal

from engine.io.pyramid import forget_checkpoints
from engine.runtime import census, memory
from engine.runtime.memory import MemorySnapshot
from engine.runtime.sessions import SessionInfo
from gui.engine_thread import EngineThread
from gui.memory_parts import ProcessReading, read_process
from gui.pictures import PictureBudget
from gui.tasks import TaskOutcome, TaskThread

log = logging.getLogger(__name__)

POLL_MS = 1000  # the memory gauge's pace
CENSUS_EVERY = 5  # every Tessera process on the machine (M6): each fifth reading, ~35 ms


def _read() -> tuple[MemorySnapshot, ProcessReading]:
    # The parts of the RSS with it, off the GUI thread: /proc/self/smaps takes a few ms.
    return memory.snapshot(), read_process()  # looked up at each call: tests replace snapshot


def _trim() -> None:
    forget_checkpoints()  # the picture reader's row checkpoints of large PNGs
    # Cycles still holding a job's arrays go first; the source lines that Qt's signature
    # loader read into linecache (about 1 MiB, measured) can be read again when needed.
    gc.collect()
    linecache.clearcache()
    memory.trim_heap()


def _take_census() -> census.Census:
    return census.take()


class MemoryController(QObject):
    snapshotTaken = Signal(object)  # MemorySnapshot
    processRead = Signal(object)  # ProcessReading: the parts of the RSS, just before it
    censusTaken = Signal(object)  # census.Census: what every Tessera process holds
    sessionsChanged = Signal(object, str)  # tuple[SessionInfo, ...], "2 models loaded"

    def __init__(self, engine: EngineThread, tasks: TaskThread, parent: QObject | None = None):
        super().__init__(parent)
        self.engine = engine
        self.tasks = tasks
        self._pending = False
        self._census_pending = False
        self._polls = 0
        self._unloading = False  # Unload all asked: trim again once the engine let go
        self.closed = False
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        engine.sessionsChanged.connect(self._on_sessions)

    def start(self) -> None:
        """The first reading, then one a second once it is in."""
        self.poll(start_timer=True)

    def poll(self, start_timer: bool = False) -> None:
        if self._pending or self.closed:
            return
        self._pending = True
        self.tasks.submit(_read, lambda outcome: self._taken(outcome, start_timer))
        if self._polls % CENSUS_EVERY == 0 and not self._census_pending:
            self._census_pending = True
            self.tasks.submit(_take_census, self._census_taken)
        self._polls += 1

    def _census_taken(self, outcome: TaskOutcome) -> None:
        self._census_pending = False
        if self.closed:
            return
        if outcome.error is not None:
            log.error("census of Tessera's processes failed: %s", outcome.error)
        elif isinstance(outcome.value, census.Census):
            self.censusTaken.emit(outcome.value)

    def _taken(self, outcome: TaskOutcome, start_timer: bool) -> None:
        self._pending = False
        if self.closed:
            return
        if outcome.error is not None:  # a flaky driver must not break the window
            log.error("memory snapshot failed: %s", outcome.error)
        elif isinstance(outcome.value, tuple):
            snap, process = outcome.value
            self.processRead.emit(process)
            self.snapshotTaken.emit(snap)
        if start_timer:
            self.timer.start()

    def release_pictures(self, budget: PictureBudget) -> None:
        """The window keeps only the pictures on screen; the freed heap pages go back to the
        system (the pictures were freed on this thread; the trim runs on the task thread)."""
        budget.release()
        self._unloading = True
        self._give_back()

    def _give_back(self) -> None:
        if not self.closed:
            self.tasks.submit(_trim, lambda _outcome: self.poll())

    def _on_sessions(self, sessions: tuple[SessionInfo, ...]) -> None:
        # The engine thread frees the sessions after the first trim may have run: what they
        # held (a model's weights, below glibc's raised mmap threshold) would stay in the heap.
        if self._unloading and not sessions:
            self._unloading = False
            self._give_back()
        n = len(sessions)
        self.sessionsChanged.emit(sessions, f"{n} model{'s' if n != 1 else ''} loaded")

    def stop(self) -> None:
        self.closed = True
        self.timer.stop()
