"""The window's pictures in one budget: every decoded picture the window keeps (the viewer's
frames and details, the preview's patches) is accounted here by its holder, against a cap.

The workspace owns it (`Workspace.pictures`). Holders report what they keep (`account`);
over the cap, or when the person lets go of memory (Unload all), the budget asks them to keep
only what is on screen (`releaseRequested`), and they account again. QtCore only; GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal


@dataclass(frozen=True)
class HeldPictures:
    """What one holder (the viewer) keeps decoded: its pictures and their bytes."""

    pictures: int
    nbytes: int


DEFAULT_CAP = 256 * 1024**2  # a few screens' worth of frames, details and preview patches
REARM_BELOW = 0.75  # of the cap


@dataclass(frozen=True)
class Holding:
    """What one holder keeps: its pictures and their bytes."""

    pictures: int
    nbytes: int


class PictureBudget(QObject):
    changed = Signal()  # a holder's account changed
    releaseRequested = Signal()  # keep only what is on screen, and account again

    def __init__(self, cap: int = DEFAULT_CAP, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.cap = cap
        self._held: dict[str, Holding] = {}
        self._releasing = False
        # Over the cap the holders are asked once; again only after the total fell well below
        # it (what is on screen, read again, must not start a release of its own).
        self._armed = True

    def account(self, holder: str, pictures: int, nbytes: int) -> None:
        """`holder` keeps `pictures` decoded pictures of `nbytes` in all now."""
        holding = Holding(pictures, nbytes)
        if self._held.get(holder) == holding:
            return
        self._held[holder] = holding
        self.changed.emit()
        total = self.total
        if total < self.cap * REARM_BELOW:
            self._armed = True
        elif total > self.cap and self._armed and not self._releasing:
            self._armed = False
            self.release()

    def release(self) -> None:
        """Ask every holder to let go of what is not on screen."""
        self._releasing = True
        try:
            self.releaseRequested.emit()
        finally:
            self._releasing = False

    @property
    def total(self) -> int:
        return sum(h.nbytes for h in self._held.values())

    @property
    def pictures(self) -> int:
        return sum(h.pictures for h in self._held.values())

    def holding(self, holder: str) -> Holding:
        return self._held.get(holder, Holding(0, 0))
