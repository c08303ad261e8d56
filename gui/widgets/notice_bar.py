"""An inline message bar (like a browser's info bar): says why a drop was refused or a model
was not added, without a modal dialog in the way."""

from __future__ import annotations

from enum import Enum

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget


class NoticeLevel(Enum):
    INFO = "info"
    WARNING = "warning"


class NoticeBar(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.level = NoticeLevel.INFO
        self.hide()

    def show_message(self, text: str, level: NoticeLevel = NoticeLevel.INFO) -> None:
        self.level = level
        palette = self.palette()
        base = palette.color(QPalette.ColorRole.Window)
        tint = QColor(255, 200, 0) if level is NoticeLevel.WARNING else QColor(52, 152, 219)
        mixed = QColor(
            (base.red() * 3 + tint.red()) // 4,
            (base.green() * 3 + tint.green()) // 4,
            (base.blue() * 3 + tint.blue()) // 4,
        )
        palette.setColor(QPalette.ColorRole.Window, mixed)
        self.setPalette(palette)
        self.label.setText(text)
        self.show()

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""
