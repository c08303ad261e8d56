"""The highlight shown while files are dragged over the window: where they will land, and what."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QMimeData, QObject, QRectF, Qt
from PySide6.QtGui import (
    QColor,
    QDragMoveEvent,
    QDropEvent,
    QFont,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
)
from PySide6.QtWidgets import QWidget

from gui.controllers.inputs import drop_words


class DropOverlay(QWidget):
    def __init__(self, host: QWidget) -> None:
        super().__init__(host)
        self.host = host
        self.text = ""
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        host.installEventFilter(self)
        self.hide()

    def show_text(self, text: str) -> None:
        self.text = text
        self.setGeometry(self.host.rect())
        self.show()
        self.raise_()
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        highlight = self.palette().color(QPalette.ColorRole.Highlight)
        fill = QColor(highlight)
        fill.setAlpha(60)
        painter.fillRect(self.rect(), fill)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pen = QPen(highlight, 3, Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.drawRoundedRect(QRectF(self.rect()).adjusted(6, 6, -6, -6), 12, 12)
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        painter.setFont(font)
        painter.setPen(self.palette().color(QPalette.ColorRole.WindowText))
        painter.drawText(
            QRectF(self.rect()).adjusted(24, 24, -24, -24),
            Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
            self.text,
        )

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.host and event.type() == QEvent.Type.Resize and self.isVisible():
            self.setGeometry(self.host.rect())
        return False


class DropTarget(QObject):
    """Makes `window` take drops: the overlay while files or a picture are dragged over it,
    and `dropped(mime)` when they are let go (an event filter, so the window needs no drag
    handlers of its own)."""

    def __init__(
        self, window: QWidget, overlay: DropOverlay, dropped: Callable[[QMimeData], object]
    ) -> None:
        super().__init__(window)
        self.overlay = overlay
        self.dropped = dropped
        window.setAcceptDrops(True)
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove) and isinstance(
            event, QDragMoveEvent
        ):
            mime = event.mimeData()
            if not (mime.hasUrls() or mime.hasImage()):
                event.ignore()
                return True
            event.acceptProposedAction()
            if kind == QEvent.Type.DragEnter:
                self.overlay.show_text(drop_words(mime))
            return True
        if kind == QEvent.Type.DragLeave:
            self.overlay.hide()
            return False
        if kind == QEvent.Type.Drop and isinstance(event, QDropEvent):
            self.overlay.hide()
            self.dropped(event.mimeData())
            event.acceptProposedAction()
            return True
        return False
