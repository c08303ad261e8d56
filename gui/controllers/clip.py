"""Frames of the clip in the viewer, read on demand off the GUI thread.

One read at a time, and only the newest asked-for frame waits behind it: a slider dragged
across a long clip reads a few frames, not all of them, and the window holds only the frame
on screen (of the original and of the product clip, read alike). No widgets.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from gui.tasks import TaskOutcome, TaskThread

Reader = Callable[[object, int], object]  # (a DisplayImage, frame index) → its QImage


class ClipController(QObject):
    frameRead = Signal(int, object, object)  # index, left frame, right frame (None: not a clip)
    failed = Signal(int, str)  # index, why it cannot be shown

    def __init__(self, tasks: TaskThread, reader: Reader, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.reader = reader
        self.closed = False
        self._busy = False
        self._pending: tuple[object, object, int] | None = None
        self._generation = 0

    def request(self, before: object, after: object, index: int) -> None:
        """Show frame `index` of the clips `before` and `after` (DisplayImages; None: absent)."""
        self._pending = (before, after, index)
        if not self._busy:
            self._next()

    def forget(self) -> None:
        """Another picture is viewed: a frame still being read is not drawn."""
        self._generation += 1
        self._pending = None

    def _next(self) -> None:
        if self._pending is None or self.closed:
            return
        before, after, index = self._pending
        self._pending = None
        self._busy = True
        generation = self._generation
        read = self.reader

        def work() -> tuple[object, object]:
            return (
                read(before, index) if before is not None else None,
                read(after, index) if after is not None else None,
            )

        def done(outcome: TaskOutcome) -> None:
            self._busy = False
            if self.closed:
                return
            if generation == self._generation:
                if outcome.error is not None:
                    self.failed.emit(index, str(outcome.error))
                else:
                    left, right = outcome.value
                    self.frameRead.emit(index, left, right)
            self._next()

        self.tasks.submit(work, done, urgent=True)
