"""The status bar's sign of a watched folder: its name, what arrived, and a Stop button."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


class WatchStatus(QWidget):
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel()
        self.stop_button = QToolButton()
        self.stop_button.setText("Stop watching")
        self.stop_button.clicked.connect(self.stopRequested)
        layout.addWidget(self.label)
        layout.addWidget(self.stop_button)
        self.folder = ""
        self.hide()

    def show_watching(self, folder: str) -> None:
        self.folder = Path(folder).name or folder  # the whole path is the tooltip
        self.label.setText(f"Watching {self.folder} · nothing arrived yet")
        self.label.setToolTip(folder)
        self.show()

    def show_arrived(self, names: list[str], total: int) -> None:
        last = names[-1] if names else ""
        self.label.setText(f"Watching {self.folder} · {total} arrived · last: {last}")

    def show_stopped(self) -> None:
        self.hide()
