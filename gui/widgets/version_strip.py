"""The input's strip of versions, and the result's drag-out: what leaves the viewer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import (
    QMimeData,
    QPoint,
    Qt,
    QUrl,
    Signal,
)
from PySide6.QtGui import (
    QDrag,
    QImage,
    QMouseEvent,
    QPixmap,
)
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QMenu,
    QScrollArea,
    QSizePolicy,
    QStyle,
    QToolButton,
    QWidget,
)

from gui.jobs import Version


def file_mime(paths: list[Path], image: QImage | None = None) -> QMimeData:
    """What a drag or a copy of a result carries: the file (for file managers and editors that
    take files) and, for a copy, the picture itself."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    mime.setText("\n".join(str(p) for p in paths))
    if image is not None and not image.isNull():
        mime.setImageData(image)
    return mime


class DragHandle(QToolButton):
    """Drag this out of the viewer into a file manager, a mail or an editor: the right-hand
    version's file goes with it. `mime` and `pixmap` say what a drag carries now (the
    viewer's), so this module does not import the viewer."""

    def __init__(
        self,
        parent: QWidget,
        mime: Callable[[], QMimeData | None],
        pixmap: Callable[[], QPixmap | None],
    ) -> None:
        super().__init__(parent)
        self.mime, self.pixmap = mime, pixmap
        self.setText("⇱ Drag out")
        self.setToolTip("Drag the result into a file manager, an editor or a mail")
        self.setCursor(Qt.CursorShape.OpenHandCursor)
        self._press: QPoint | None = None
        self.last_mime: QMimeData | None = None  # what the last drag carried
        self.last_drop: Qt.DropAction | None = None

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self._press = event.position().toPoint()
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._press is not None and (
            (event.position().toPoint() - self._press).manhattanLength()
            >= QApplication.startDragDistance()
        ):
            self._press = None
            self.setDown(False)
            self.start_drag()
            return
        super().mouseMoveEvent(event)

    def start_drag(self) -> Qt.DropAction:
        mime = self.mime()
        if mime is None:
            return Qt.DropAction.IgnoreAction
        drag = QDrag(self)
        drag.setMimeData(mime)
        self.last_mime = mime
        thumb = self.pixmap()
        if thumb is not None:
            drag.setPixmap(thumb)
        self.last_drop = drag.exec(Qt.DropAction.CopyAction)
        return self.last_drop


LABEL_EM = 24  # a version button is at most this many characters wide; its tooltip says all


class VersionStrip(QScrollArea):
    """The input's versions as buttons: click one to compare it with the left one;
    Shift+click (or its menu) puts it on the left.

    Long labels (a model file's name) are shortened in the middle, so the scale at the end
    stays, and the strip is as tall as its buttons: the scroll bar's room is taken only while
    the versions do not fit (a long chain), so at 1024×640 the viewer keeps that height.
    """

    chosen = Signal(str, bool)  # version id, on the left
    openRequested = Signal(str)
    revealRequested = Signal(str)
    saveRequested = Signal(str)
    inputRequested = Signal(str)  # version id: the next step starts from it
    chainRequested = Signal(str)  # version id: its steps, on the other images

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        inner = QWidget()
        self.row = QHBoxLayout(inner)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(4)
        self.row.addStretch(1)
        self.setWidget(inner)
        self.buttons: dict[str, QToolButton] = {}
        self.versions: dict[str, Version] = {}
        self._bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        self._row_height = QToolButton().sizeHint().height() + 6
        self.setFixedHeight(self._row_height)
        self._right: str | None = None
        # New buttons have no geometry until the layout runs: when the strip's length changes,
        # make room for the scroll bar (or take it back) and scroll again so the right-hand
        # version (the newest step of a chain) is in view.
        self.horizontalScrollBar().rangeChanged.connect(self._range_changed)

    def _range_changed(self, _low: int, high: int) -> None:
        self.setFixedHeight(self._row_height + (self._bar if high > 0 else 0))
        self._reveal()

    def set_versions(self, versions: list[Version], left: str | None, right: str | None) -> None:
        for button in self.buttons.values():
            self.row.removeWidget(button)
            button.hide()  # deleteLater waits for the event loop; it must not show meanwhile
            button.deleteLater()
        self.buttons = {}
        self.versions = {v.id: v for v in versions}
        for version in versions:
            button = QToolButton()
            button.setCheckable(True)
            button.setAutoRaise(False)
            text = ("✗ " if version.failed else "") + version.label
            room = button.fontMetrics().averageCharWidth() * LABEL_EM
            button.setText(
                button.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, room)
            )
            if version.failed:
                button.setToolTip(f"{version.label}\nFailed: {version.failed}")
                button.setStyleSheet("QToolButton { color: #c0392b; }")
            else:
                where = "\n".join(str(p) for p in version.paths[:3])
                button.setToolTip(
                    f"{version.label}\n{where}\n"
                    "Click: compare with the left one. Shift+click: put it on the left."
                )
            button.clicked.connect(lambda _c=False, vid=version.id: self._clicked(vid))
            button.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            button.customContextMenuRequested.connect(
                lambda pos, vid=version.id, b=button: self._menu(vid, b.mapToGlobal(pos))
            )
            self.row.insertWidget(self.row.count() - 1, button)
            self.buttons[version.id] = button
        self.mark(left, right)

    def mark(self, left: str | None, right: str | None) -> None:
        for vid, button in self.buttons.items():
            button.setChecked(vid == right)
            font = button.font()
            font.setItalic(vid == left and left != right)
            font.setUnderline(vid == left and left != right)
            button.setFont(font)
        self._right = right
        self._reveal()

    def _reveal(self) -> None:
        button = self.buttons.get(self._right or "")
        if button is not None:
            self.ensureWidgetVisible(button, 8, 0)

    def _clicked(self, version_id: str) -> None:
        left = bool(QApplication.keyboardModifiers() & Qt.KeyboardModifier.ShiftModifier)
        self.chosen.emit(version_id, left)

    def _menu(self, version_id: str, where: QPoint) -> None:
        version = self.versions.get(version_id)
        if version is None:
            return
        menu = QMenu(self)
        if version.viewable:
            menu.addAction("Compare on the left", lambda: self.chosen.emit(version_id, True))
            menu.addAction("Compare on the right", lambda: self.chosen.emit(version_id, False))
            menu.addSeparator()
            menu.addAction("Open", lambda: self.openRequested.emit(version_id))
            menu.addAction("Show in folder", lambda: self.revealRequested.emit(version_id))
            if not version.is_original:
                menu.addAction("Save as…", lambda: self.saveRequested.emit(version_id))
            menu.addSeparator()
            if version.is_original:
                menu.addAction(
                    "Start the next step from the original",
                    lambda: self.inputRequested.emit(version_id),
                )
            else:
                menu.addAction(
                    "Use as the input of the next step",
                    lambda: self.inputRequested.emit(version_id),
                )
                menu.addAction(
                    "Run these steps on the other images",
                    lambda: self.chainRequested.emit(version_id),
                )
        menu.exec(where)
