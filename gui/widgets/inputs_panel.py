"""The inputs: a thumbnail per added image, each marked while its job runs, when it is done, in
red when its last job failed, and broken when it cannot be read (the reason in its tooltip).

A thousand images cost little more than ten (issue #21): the marks are painted over the
thumbnails by the list's delegate, so a mark is one data change of one item, and the items are
laid out in batches."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from PySide6.QtCore import (
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QFont, QIcon, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.inputs import InputSource

THUMB = 96
KEY = Qt.ItemDataRole.UserRole


class InputMark(Enum):
    NONE = "none"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    BROKEN = "broken"  # the file cannot be read: Run leaves it out


def _placeholder() -> QPixmap:
    pix = QPixmap(THUMB, THUMB)
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    painter.setPen(QColor(128, 128, 128))
    painter.drawRect(8, 8, THUMB - 17, THUMB - 17)
    painter.end()
    return pix


BADGES = {
    InputMark.RUNNING: (QColor(52, 152, 219), "…"),
    InputMark.DONE: (QColor(39, 174, 96), "✓"),
    InputMark.FAILED: (QColor(192, 57, 43), "!"),
    InputMark.BROKEN: (QColor(90, 90, 90), "✕"),
}


def paint_badge(painter: QPainter, thumb: QRect, mark: InputMark) -> None:
    """The mark in the corner of the thumbnail's square."""
    if mark is InputMark.NONE:
        return
    colour, glyph = BADGES[mark]
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(QPen(QColor(255, 255, 255), 2))
    painter.setBrush(colour)
    centre = QPointF(thumb.left() + thumb.width() - 14, thumb.top() + thumb.height() - 14)
    painter.drawEllipse(centre, 12, 12)
    font = QFont(painter.font())
    font.setBold(True)
    font.setPixelSize(15)
    painter.setFont(font)
    painter.drawText(
        QRectF(centre.x() - 12, centre.y() - 12, 24, 24), Qt.AlignmentFlag.AlignCenter, glyph
    )
    painter.restore()


def badged(base: QPixmap, mark: InputMark) -> QPixmap:
    """The thumbnail on a square canvas with its mark in the corner (as the list draws it)."""
    pix = QPixmap(THUMB, THUMB)
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    painter.drawPixmap((THUMB - base.width()) // 2, (THUMB - base.height()) // 2, base)
    paint_badge(painter, QRect(0, 0, THUMB, THUMB), mark)
    painter.end()
    return pix


class _BadgeDelegate(QStyledItemDelegate):
    """Draws each item's mark over its thumbnail at paint time, so a mark costs one data
    change of one item, not a new picture (a thousand marks at Run: issue #21). Painting is
    also how the panel learns which thumbnails are in view and worth making."""

    def __init__(self, panel: InputsPanel) -> None:
        super().__init__(panel)
        self.panel = panel

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        super().paint(painter, option, index)
        mark = self.panel.mark(index.data(KEY))
        if mark is InputMark.NONE:
            return
        decoration = QRect(option.rect)
        style = QStyleOptionViewItem(option)
        self.initStyleOption(style, index)
        widget = style.widget
        app_style = widget.style() if widget is not None else None
        if app_style is not None:
            decoration = app_style.subElementRect(
                QStyle.SubElement.SE_ItemViewItemDecoration, style, widget
            )
        square = QRect(0, 0, THUMB, THUMB)
        square.moveCenter(decoration.center())
        paint_badge(painter, square, mark)


class InputsPanel(QWidget):
    currentChanged = Signal(object, bool)  # input key or None; True when the person chose it
    selectionChanged = Signal()
    addRequested = Signal()
    removeRequested = Signal(list)  # keys
    clearRequested = Signal()
    runOneRequested = Signal(str)  # "Run this image only"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sources: dict[str, InputSource] = {}
        self._thumbs: dict[str, QPixmap] = {}
        self._marks: dict[str, InputMark] = {}
        self._tips: dict[str, str] = {}
        self._base_tips: dict[str, str] = {}  # the paths and the size: made once per input
        self._programmatic = False
        self.heading = QLabel("<b>Images</b>")
        self.list = QListWidget()
        self.list.setViewMode(QListWidget.ViewMode.IconMode)
        self.list.setIconSize(QSize(THUMB, THUMB))
        self.list.setGridSize(QSize(THUMB + 24, THUMB + self.fontMetrics().height() + 14))
        self.list.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.list.setMovement(QListWidget.Movement.Static)
        self.list.setWordWrap(False)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setUniformItemSizes(True)
        self.list.setLayoutMode(QListWidget.LayoutMode.Batched)  # 1000 items laid out in steps
        self.list.setBatchSize(200)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setItemDelegate(_BadgeDelegate(self))
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemPressed.connect(self._pressed)
        self.list.itemSelectionChanged.connect(self.selectionChanged)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        add = QToolButton()
        add.setText("Add…")
        add.setToolTip("Add images (Ctrl+O)")
        add.clicked.connect(self.addRequested)
        self.remove_button = QToolButton()
        self.remove_button.setText("Remove")
        self.remove_button.setToolTip("Take the selected images out of the list (files stay)")
        self.remove_button.clicked.connect(lambda: self.removeRequested.emit(self.selected_keys()))
        clear = QToolButton()
        clear.setText("Clear")
        clear.setToolTip("Take every image out of the list (files stay)")
        clear.clicked.connect(self.clearRequested)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.setSpacing(2)
        buttons.addWidget(add)
        buttons.addWidget(self.remove_button)
        buttons.addWidget(clear)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 0, 4)
        layout.addWidget(self.heading)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self._placeholder = _placeholder()
        self._placeholder_icon = QIcon(self._placeholder)  # one icon shared by every new item
        self._items: dict[str, QListWidgetItem] = {}
        needed = sum(b.sizeHint().width() for b in (add, self.remove_button, clear)) + 12
        self.setMinimumWidth(max(THUMB + 40, needed))

    # -- content ------------------------------------------------------------------------------
    def set_sources(self, sources: list[InputSource]) -> None:
        """Show exactly `sources`, in order; keeps thumbnails and the selection of the ones kept."""
        wanted = {s.key: s for s in sources}
        current = self.current_key()
        self._programmatic = True
        try:
            if not wanted:
                self.list.clear()  # one call, not one per image
            elif not self._items.keys() <= wanted.keys():  # some go: not a pure add
                for row in reversed(range(self.list.count())):
                    item = self.list.item(row)
                    if item is not None and item.data(KEY) not in wanted:
                        self.list.takeItem(row)
            present = set(self._items) & wanted.keys() if wanted else set()
            # the usual case, new ones after the kept ones: appended, no index to shift
            appended = all(s.key in present for s in sources[: len(present)])
            order = {key: index for index, key in enumerate(wanted)}
            for source in sources:
                if source.key in present:
                    continue
                item = QListWidgetItem(self._placeholder_icon, source.name)
                item.setData(KEY, source.key)
                item.setSizeHint(self.list.gridSize())
                if appended:
                    self.list.addItem(item)
                else:
                    self.list.insertItem(order[source.key], item)
                self._items[source.key] = item
                self._refresh_tip(item, source)
            self.sources = wanted
            for key in [k for k in self._items if k not in wanted]:
                del self._items[key]
            for store in (self._thumbs, self._marks, self._tips, self._base_tips):
                for key in [k for k in store if k not in wanted]:
                    del store[key]
        finally:
            self._programmatic = False
        self.heading.setText(f"<b>Images</b> ({len(sources)})")
        if current not in wanted:
            self.currentChanged.emit(self.current_key(), False)

    def set_thumbnail(self, key: str, image: QImage) -> None:
        item = self._item(key)
        if item is None or key not in self.sources:
            return
        thumb = QPixmap.fromImage(image) if not image.isNull() else self._placeholder
        self._thumbs[key] = thumb
        item.setIcon(QIcon(thumb))

    def set_mark(self, key: str, mark: InputMark, tip: str = "") -> None:
        if self._marks.get(key, InputMark.NONE) is mark and self._tips.get(key, "") == tip:
            return  # nothing to redraw (every input is told again when the list changes)
        self._marks[key] = mark
        self._tips[key] = tip
        item = self._item(key)
        source = self.sources.get(key)
        if item is not None and source is not None:
            self._refresh_tip(item, source)  # its data change redraws the item, badge and all

    def mark(self, key: str) -> InputMark:
        return self._marks.get(key, InputMark.NONE)

    def _refresh_tip(self, item: QListWidgetItem, source: InputSource) -> None:
        base = self._base_tips.get(source.key)
        if base is None:
            lines = ["\n".join(str(p) for p in source.paths[:3])]
            if source.detail:
                lines.append(source.detail)
            base = self._base_tips[source.key] = "\n".join(lines)
        tip = self._tips.get(source.key)
        item.setToolTip(f"{base}\n{tip}" if tip else base)

    def _item(self, key: str) -> QListWidgetItem | None:
        # A dict, not a scan: 1000 thumbnails and marks arrive one by one (issue #21).
        return self._items.get(key)

    def select(self, key: str) -> None:
        """Select `key` for the person (a new input, a result that came in)."""
        item = self._item(key)
        if item is None:
            return
        self._programmatic = True
        try:
            self.list.setCurrentItem(item, QItemSelectionModel.SelectionFlag.ClearAndSelect)
            self.list.scrollToItem(item)
        finally:
            self._programmatic = False

    def select_keys(self, keys: Sequence[str]) -> None:
        """Select exactly `keys` (Undo of Clear brings the selection back), in one change."""
        wanted = set(keys)
        self._programmatic = True
        blocked = self.list.blockSignals(True)
        try:
            for key, item in self._items.items():
                item.setSelected(key in wanted)
        finally:
            self.list.blockSignals(blocked)
            self._programmatic = False
        self.selectionChanged.emit()

    def current_key(self) -> str | None:
        item = self.list.currentItem()
        return item.data(KEY) if item is not None else None

    def current(self) -> InputSource | None:
        key = self.current_key()
        return self.sources.get(key) if key else None

    def selected_keys(self) -> list[str]:
        """The selected inputs in the list's order (rows from the selection model: no scan of
        every item per selected one)."""
        rows = sorted({index.row() for index in self.list.selectionModel().selectedIndexes()})
        items = (self.list.item(r) for r in rows)
        keys = (item.data(KEY) for item in items if item is not None)
        return [k for k in keys if k in self.sources]

    def _current_changed(
        self, current: QListWidgetItem | None, _previous: QListWidgetItem | None
    ) -> None:
        self.currentChanged.emit(
            current.data(KEY) if current is not None else None, not self._programmatic
        )

    def _pressed(self, item: QListWidgetItem) -> None:
        # A click on the image already shown still says "this is what I am looking at".
        if item is self.list.currentItem():
            self.currentChanged.emit(item.data(KEY), True)

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        key = item.data(KEY)
        menu = QMenu(self)
        menu.addAction("Run this image only", lambda: self.runOneRequested.emit(key))
        menu.addAction("Remove", lambda: self.removeRequested.emit(self.selected_keys() or [key]))
        menu.exec(self.list.viewport().mapToGlobal(pos))
