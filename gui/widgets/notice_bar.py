"""Notices in a bar under the images and the result, over the job list (like a browser's info
bar): why a drop was refused, a model was added, a file could not be opened — with an optional
action button.

The bar takes its own place in the layout: it never covers the viewer's toolbar (Preview,
Split, Fit, 1:1) or the picture, and opening it moves neither the toolbar nor the picture's top,
only the bottom of the view up. Information fades after a few seconds; a warning stays until it
is dismissed or a later success on the same topic makes it stale (a paste that worked takes back
"the clipboard holds no image").
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QWidget,
)

from gui.messages import Notice, NoticeLevel, Topic

INFO_MS = 8000


class NoticeBar(QFrame):
    """A bar in its parent's layout, hidden while there is nothing to say."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action_button = QPushButton()
        self.action_button.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click leaves the focus
        self.action_button.hide()
        self.action_button.clicked.connect(self._act)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss (the bar's space goes back to the viewer)")
        close.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 4, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.notice: Notice | None = None
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self.dismiss)
        self.hide()

    @property
    def level(self) -> NoticeLevel | None:
        return self.notice.level if self.notice is not None and self.isVisible() else None

    def show_notice(self, notice: Notice) -> None:
        self.notice = notice
        palette = self.palette()
        parent = self.parentWidget()
        base = (parent or self).palette().color(QPalette.ColorRole.Window)
        tint = {
            NoticeLevel.INFO: QColor(52, 152, 219),
            NoticeLevel.WARNING: QColor(255, 200, 0),
            NoticeLevel.ERROR: QColor(231, 76, 60),
        }[notice.level]
        mixed = QColor(
            (base.red() * 3 + tint.red()) // 4,
            (base.green() * 3 + tint.green()) // 4,
            (base.blue() * 3 + tint.blue()) // 4,
        )
        palette.setColor(QPalette.ColorRole.Window, mixed)
        self.setPalette(palette)
        self.label.setText(notice.text)
        self.action_button.setText(notice.action_label)
        self.action_button.setVisible(bool(notice.action_label and notice.action))
        self.timer.stop()
        if notice.level is NoticeLevel.INFO and not notice.action:
            self.timer.start(INFO_MS)
        self.show()

    def dismiss(self) -> None:
        self.timer.stop()
        self.notice = None
        self.hide()

    def clear_topic(self, topic: Topic) -> None:
        """A success on `topic`: a notice about it is stale now."""
        if self.notice is not None and self.notice.topic is topic:
            self.dismiss()

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    def _act(self) -> None:
        notice = self.notice
        self.dismiss()
        if notice is not None and notice.action is not None:
            notice.action()
