"""The first window's size: 1280×800 where the screen has room, else what fits its free area.

A window manager adds a title bar and borders outside the widget's geometry, and a panel or
dock takes part of the screen: the window is fitted to the screen's available geometry less
that frame, so its status bar is on screen at 1280×800 and 1024×640 (issue #35). Before the
window is shown its frame is not known yet: `FRAME` stands in for it, and `refit` corrects
the placement with the real frame once it is.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize
from PySide6.QtWidgets import QWidget

WANTED = QSize(1280, 800)
# A typical decorated frame (a title bar and thin borders), used until the real one is known.
FRAME = QMargins(4, 32, 4, 4)


def fitted(available: QRect, frame: QMargins = FRAME, wanted: QSize = WANTED) -> QRect:
    """The widget geometry of a window of `wanted` size, shrunk so that it and its `frame`
    fit `available`, centred there."""
    room = available.marginsRemoved(frame)
    size = wanted.boundedTo(room.size())
    x = room.x() + (room.width() - size.width()) // 2
    y = room.y() + (room.height() - size.height()) // 2
    return QRect(QPoint(x, y), size)


def fit_first(window: QWidget) -> None:
    """Size and place a window that has no saved geometry on the screen it opens on."""
    screen = window.screen()
    if screen is None:
        window.resize(WANTED)
        return
    window.setGeometry(fitted(screen.availableGeometry()))


def refit(window: QWidget) -> None:
    """Once shown: shrink and move the window until its real frame is on its screen."""
    screen = window.screen()
    if screen is None or window.isMaximized() or window.isFullScreen():
        return
    available = screen.availableGeometry()
    outer, inner = window.frameGeometry(), window.geometry()
    if available.contains(outer):
        return
    frame = QMargins(
        inner.left() - outer.left(),
        inner.top() - outer.top(),
        outer.right() - inner.right(),
        outer.bottom() - inner.bottom(),
    )
    window.setGeometry(fitted(available, frame, inner.size()))
