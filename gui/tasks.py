"""A second long-lived QThread for the GUI's own slow chores: decoding images for the viewer and
the thumbnails, listing the models folder, installing a dropped model.

None of these touch a session, so they do not belong on the engine thread, where they would
wait behind a long job. Urgent tasks (what the person is looking at) jump the queue.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskOutcome:
    task_id: int
    value: Any
    error: BaseException | None  # the exception the task raised, if it did


@dataclass(frozen=True)
class _Task:
    task_id: int
    fn: Callable[[], Any]


class _TaskQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._urgent: deque[_Task] = deque()
        self._normal: deque[_Task] = deque()

    def put(self, task: _Task, urgent: bool) -> None:
        with self._lock:
            (self._urgent if urgent else self._normal).append(task)

    def take(self) -> _Task | None:
        with self._lock:
            if self._urgent:
                return self._urgent.popleft()
            if self._normal:
                return self._normal.popleft()
            return None

    def clear(self) -> list[int]:
        with self._lock:
            ids = [t.task_id for t in (*self._urgent, *self._normal)]
            self._urgent.clear()
            self._normal.clear()
            return ids


class _TaskWorker(QObject):
    taskFinished = Signal(object)

    def __init__(self, queue: _TaskQueue) -> None:
        super().__init__()
        self._queue = queue

    @Slot()
    def run_next(self) -> None:
        task = self._queue.take()
        if task is None:
            return
        try:
            outcome = TaskOutcome(task.task_id, task.fn(), None)
        except Exception as e:  # reported to the caller, who turns it into a message
            log.debug("task %d failed: %s", task.task_id, e)
            outcome = TaskOutcome(task.task_id, None, e)
        self.taskFinished.emit(outcome)

    @Slot()
    def shutdown(self) -> None:
        thread = self.thread()
        if thread is not None:
            thread.quit()


class TaskThread(QObject):
    """Runs callables one at a time off the GUI thread and calls back on the GUI thread."""

    _runRequested = Signal()
    _shutdownRequested = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue = _TaskQueue()
        self._callbacks: dict[int, Callable[[TaskOutcome], None]] = {}
        self._next_id = 1
        self._thread = QThread()
        self._thread.setObjectName("tessera-tasks")
        self._worker = _TaskWorker(self._queue)
        self._worker.moveToThread(self._thread)
        self._runRequested.connect(self._worker.run_next)
        self._shutdownRequested.connect(self._worker.shutdown)
        self._worker.taskFinished.connect(self._deliver)

    @property
    def qthread(self) -> QThread:
        return self._thread

    def start(self) -> None:
        if not self._thread.isRunning():
            self._thread.start()

    def submit(
        self,
        fn: Callable[[], Any],
        done: Callable[[TaskOutcome], None],
        *,
        urgent: bool = False,
    ) -> int:
        task_id = self._next_id
        self._next_id += 1
        self._callbacks[task_id] = done
        self._queue.put(_Task(task_id, fn), urgent)
        self._runRequested.emit()
        return task_id

    def pending(self) -> int:
        return len(self._callbacks)

    def stop(self) -> None:
        for task_id in self._queue.clear():
            self._callbacks.pop(task_id, None)
        if self._thread.isRunning():
            self._shutdownRequested.emit()
            self._thread.wait()
        self._callbacks.clear()

    @Slot(object)
    def _deliver(self, outcome: TaskOutcome) -> None:
        done = self._callbacks.pop(outcome.task_id, None)
        if done is not None:
            done(outcome)
