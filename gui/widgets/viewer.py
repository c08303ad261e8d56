"""The viewer: two versions of an input compared with a split line, side by side, or one at a
time (Space flips to the left one and back); zoom and pan, alpha on a checkerboard, animations
that play, the input's strip of versions, and the result's Save as, Copy and drag-out.

The split line is a position in the view, not in the picture: zoomed in, it stays where the
person put it while the picture moves under it.

With Preview on, the right-hand side is the preview of the panel's operation on the left
version: the left picture scaled to the product's size and dimmed, with the preview's final
pixels drawn over it as they come (`PreviewLayer`), so what is still coming reads as such.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path

from PySide6.QtCore import (
    QMimeData,
    QPoint,
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QColor,
    QDrag,
    QImage,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
    QResizeEvent,
    QWheelEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QButtonGroup,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSizePolicy,
    QSlider,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.previews import PreviewPatch, Region
from gui.jobs import Version
from gui.widgets.elided_label import ElidedLabel
from gui.widgets.images import DisplayImage, checker_brush, to_qimage

MIN_ZOOM = 1 / 64
MAX_ZOOM = 64.0
ZOOM_STEP = 1.25
GRIP = 8  # pixels either side of the split line that grab it instead of panning
DEFAULT_PLACEHOLDER = "Drop images here, or choose File ▸ Open."


class ViewMode(Enum):
    SPLIT = "Split"
    SIDE_BY_SIDE = "Side by side"
    SINGLE = "One"


PENDING_SHADE = QColor(0, 0, 0, 110)  # over what the preview has not reached yet


class PreviewLayer:
    """The preview's pictures, in product pixels: patches as they come, or one whole image."""

    def __init__(self) -> None:
        self.size = QSize()  # the product's size; empty until the engine says
        self.patches: list[tuple[QRect, QPixmap]] = []
        self.image: QPixmap | None = None  # a non-tiled family's whole preview

    def clear(self) -> None:
        self.patches = []
        self.image = None

    def keep_within(self, visible: QRectF) -> None:
        """Forget patches out of view: what is drawn stays bounded by what is shown."""
        self.patches = [(r, p) for r, p in self.patches if QRectF(r).intersects(visible)]

    def covered(self) -> int:
        return sum(r.width() * r.height() for r, _ in self.patches)


class CompareView(QWidget):
    """Paints `before` and `after`, both scaled to one canvas: the after image's size when
    there is one (an upscale's output), so the two line up pixel for pixel."""

    zoomChanged = Signal(float)
    splitChanged = Signal(float)
    flippedChanged = Signal(bool)
    viewMoved = Signal()  # zoom, pan, split, mode or size changed what is in view

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(200, 150)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.Dark)
        self._before: QPixmap | None = None
        self._after: QPixmap | None = None
        self._split = 0.5  # of the view's width
        self._zoom = 1.0
        self._origin = QPointF(0, 0)  # viewport position of the canvas's top-left corner
        self._fit = True
        self._drag: str | None = None  # "split" or "pan"
        self._last = QPointF()
        self._checker = checker_brush()
        self.mode = ViewMode.SPLIT
        self.flipped = False  # Space: the left version alone
        self.labels = ("Before", "After")
        self.placeholder = DEFAULT_PLACEHOLDER
        self.preview: PreviewLayer | None = None  # Preview on: the right side's pictures
        self.preview_note = ""  # "Previewing tile 3/8", at the bottom of the preview side

    # -- content ------------------------------------------------------------------------------
    def set_images(
        self, before: QImage | None, after: QImage | None, *, keep_view: bool = False
    ) -> None:
        old = self._canvas_size()
        self._before = QPixmap.fromImage(before) if before is not None else None
        self._after = QPixmap.fromImage(after) if after is not None else None
        if not keep_view or old != self._canvas_size():
            self._fit = True
        self._apply_fit()
        self.update()

    def has_before(self) -> bool:
        return self._before is not None

    def has_after(self) -> bool:
        return self._after is not None

    def _canvas_size(self) -> QSize:
        if self.preview is not None and not self.preview.size.isEmpty():
            return self.preview.size
        for pix in (self._after, self._before):
            if pix is not None:
                return pix.size()
        return QSize()

    def canvas_size(self) -> QSize:
        return self._canvas_size()

    # -- preview ------------------------------------------------------------------------------
    def set_preview(self, on: bool) -> None:
        old = self._canvas_size()
        self.preview = PreviewLayer() if on else None
        self._canvas_changed(old)

    def set_preview_size(self, size: QSize) -> None:
        """The product's size: the canvas grows to it and the picture stays where it was."""
        if self.preview is None or self.preview.size == size:
            return
        old = self._canvas_size()
        self.preview.size = size
        self._canvas_changed(old)

    def _canvas_changed(self, old: QSize) -> None:
        new = self._canvas_size()
        if not old.isEmpty() and not new.isEmpty() and old != new and not self._fit:
            self._zoom *= old.width() / new.width()
            self.zoomChanged.emit(self._zoom)
        self._apply_fit()
        self.update()
        self.viewMoved.emit()

    def add_patch(self, rect: QRect, image: QImage) -> None:
        if self.preview is None:
            return
        self.preview.patches.append((rect, QPixmap.fromImage(image)))
        self.update()

    def set_preview_image(self, image: QImage | None) -> None:
        if self.preview is None:
            return
        self.preview.image = QPixmap.fromImage(image) if image is not None else None
        if image is not None:
            self.set_preview_size(image.size())
        self.update()

    def clear_preview(self) -> None:
        if self.preview is not None:
            self.preview.clear()
            self.update()

    def visible_after(self) -> QRectF:
        """The part of the canvas the right-hand side shows, in canvas pixels (empty when the
        left version is shown alone)."""
        size = self._canvas_size()
        if size.isEmpty() or (self.flipped and self._before is not None):
            return QRectF()
        offset = 0.0
        x0, x1 = 0.0, float(self.width())
        if self._comparing() and self.mode is ViewMode.SPLIT:
            x0 = self._split_x()
        elif self._comparing() and self.mode is ViewMode.SIDE_BY_SIDE:
            offset = self.width() / 2
            x0 = offset
        top_left = (QPointF(x0 - offset, 0) - self._origin) / self._zoom
        bottom_right = (QPointF(x1 - offset, self.height()) - self._origin) / self._zoom
        seen = QRectF(top_left, bottom_right)
        return seen.intersected(QRectF(0, 0, size.width(), size.height()))

    # -- view ---------------------------------------------------------------------------------
    @property
    def zoom(self) -> float:
        return self._zoom

    @property
    def split(self) -> float:
        return self._split

    def set_mode(self, mode: ViewMode) -> None:
        self.mode = mode
        self._apply_fit()
        self.update()
        self.viewMoved.emit()

    def set_flipped(self, flipped: bool) -> None:
        if flipped != self.flipped:
            self.flipped = flipped
            self.flippedChanged.emit(flipped)
            self.update()
            self.viewMoved.emit()

    def flip(self) -> None:
        """Space: the left version alone, and back."""
        self.set_flipped(not self.flipped)

    def set_split(self, fraction: float) -> None:
        self._split = min(1.0, max(0.0, fraction))
        self.splitChanged.emit(self._split)
        self.update()
        self.viewMoved.emit()

    def _port_width(self) -> float:
        """Width of one viewport: half the view side by side."""
        side = self.mode is ViewMode.SIDE_BY_SIDE and self._comparing() and not self.flipped
        return self.width() / 2 if side else float(self.width())

    def fit(self) -> None:
        self._fit = True
        self._apply_fit()
        self.update()

    def actual_size(self) -> None:
        self._set_zoom(1.0, QPointF(self._port_width() / 2, self.height() / 2))

    def zoom_in(self) -> None:
        self._set_zoom(self._zoom * ZOOM_STEP, QPointF(self._port_width() / 2, self.height() / 2))

    def zoom_out(self) -> None:
        self._set_zoom(self._zoom / ZOOM_STEP, QPointF(self._port_width() / 2, self.height() / 2))

    def _apply_fit(self) -> None:
        size = self._canvas_size()
        if size.isEmpty() or not self._fit:
            return
        margin = 8
        port = self._port_width()
        avail_w = max(1.0, port - 2 * margin)
        avail_h = max(1, self.height() - 2 * margin)
        self._zoom = min(avail_w / size.width(), avail_h / size.height())
        self._origin = QPointF(
            (port - size.width() * self._zoom) / 2,
            (self.height() - size.height() * self._zoom) / 2,
        )
        self.zoomChanged.emit(self._zoom)
        self.viewMoved.emit()

    def _set_zoom(self, zoom: float, anchor: QPointF) -> None:
        if self._canvas_size().isEmpty():
            return
        zoom = min(MAX_ZOOM, max(MIN_ZOOM, zoom))
        canvas = (anchor - self._origin) / self._zoom  # keep the point under `anchor` in place
        self._zoom = zoom
        self._origin = anchor - canvas * zoom
        self._fit = False
        self.zoomChanged.emit(self._zoom)
        self.update()
        self.viewMoved.emit()

    def _canvas_rect(self, offset: float = 0.0) -> QRectF:
        size = self._canvas_size()
        return QRectF(
            self._origin.x() + offset,
            self._origin.y(),
            size.width() * self._zoom,
            size.height() * self._zoom,
        )

    def _split_x(self) -> float:
        return self.width() * self._split

    def _comparing(self) -> bool:
        return self._before is not None and (self._after is not None or self.preview is not None)

    def _local(self, pos: QPointF) -> QPointF:
        """A view position as seen in its viewport (the right half side by side)."""
        port = self._port_width()
        if port < self.width() and pos.x() >= port:
            return QPointF(pos.x() - port, pos.y())
        return pos

    # -- painting -----------------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        if self._canvas_size().isEmpty():
            painter.setPen(self.palette().color(QPalette.ColorRole.BrightText))
            painter.drawText(
                QRectF(self.rect()).adjusted(24, 24, -24, -24),
                Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                self.placeholder,
            )
            return
        # Smooth when shrinking; real pixels when magnified, so an upscale can be judged.
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, self._zoom < 2)
        before = self._before
        if self.flipped and before is not None:
            self._paint_one(painter, before, self._canvas_rect(), self.labels[0])
        elif not self._comparing():
            if self.preview is not None:
                self._paint_after(painter, self._canvas_rect())
            else:
                pix = self._after or before
                assert pix is not None
                self._paint_one(painter, pix, self._canvas_rect(), None)
        elif self.mode is ViewMode.SINGLE:
            self._paint_after(painter, self._canvas_rect())
            self._badge(painter, self.labels[1], 8)
        elif self.mode is ViewMode.SIDE_BY_SIDE:
            assert before is not None
            half = self.width() / 2
            painter.save()
            painter.setClipRect(QRectF(0, 0, half, self.height()))
            self._paint_one(painter, before, self._canvas_rect(), None)
            painter.restore()
            self._badge(painter, self.labels[0], 8)
            painter.save()
            painter.setClipRect(QRectF(half, 0, half, self.height()))
            self._paint_after(painter, self._canvas_rect(half))
            painter.restore()
            self._badge(painter, self.labels[1], half + 8)
            painter.setPen(QPen(self.palette().color(QPalette.ColorRole.Window), 2))
            painter.drawLine(QPointF(half, 0), QPointF(half, self.height()))
        else:
            assert before is not None
            rect = self._canvas_rect()
            x = self._split_x()
            painter.fillRect(rect, self._checker)
            painter.save()
            painter.setClipRect(QRectF(0, 0, x, self.height()))
            painter.drawPixmap(rect, before, QRectF(before.rect()))
            painter.restore()
            painter.save()
            painter.setClipRect(QRectF(x, 0, self.width() - x, self.height()))
            self._paint_after(painter, rect)
            painter.restore()
            self._paint_split(painter, x)
        self._paint_note(painter)

    def _paint_note(self, painter: QPainter) -> None:
        """What the preview is doing, at the bottom of the side that shows it."""
        if self.preview is None or not self.preview_note or self.flipped:
            return
        left = 8.0
        if self._comparing() and self.mode is ViewMode.SPLIT:
            left = self._split_x() + 8
        elif self._comparing() and self.mode is ViewMode.SIDE_BY_SIDE:
            left = self.width() / 2 + 8
        room = int(self.width() - left - 8)
        if room > 40:
            self._badge(painter, self.preview_note, left, bottom=True, width=room - 12)

    def _paint_one(self, painter: QPainter, pix: QPixmap, rect: QRectF, label: str | None) -> None:
        painter.fillRect(rect, self._checker)
        painter.drawPixmap(rect, pix, QRectF(pix.rect()))
        if label:
            self._badge(painter, label, 8)

    def _paint_after(self, painter: QPainter, rect: QRectF) -> None:
        """The right-hand version in `rect`: the after picture, or the preview — the left
        picture dimmed where no final pixels have come yet, and those pixels over it."""
        painter.fillRect(rect, self._checker)
        layer = self.preview
        if layer is None:
            if self._after is not None:
                painter.drawPixmap(rect, self._after, QRectF(self._after.rect()))
            return
        if layer.image is not None:
            painter.drawPixmap(rect, layer.image, QRectF(layer.image.rect()))
            return
        if self._before is not None:
            painter.drawPixmap(rect, self._before, QRectF(self._before.rect()))
        painter.fillRect(rect, PENDING_SHADE)
        size = self._canvas_size()
        if size.isEmpty():
            return
        sx = rect.width() / size.width()
        sy = rect.height() / size.height()
        for where, pix in layer.patches:
            target = QRectF(
                rect.x() + where.x() * sx,
                rect.y() + where.y() * sy,
                where.width() * sx,
                where.height() * sy,
            )
            painter.drawPixmap(target, pix, QRectF(pix.rect()))

    def _badge(
        self,
        painter: QPainter,
        text: str,
        left: float,
        right_align: bool = False,
        bottom: bool = False,
        width: int = 240,
    ) -> None:
        metrics = painter.fontMetrics()
        text = metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)
        w = metrics.horizontalAdvance(text) + 12
        h = metrics.height() + 6
        top = self.height() - h - 8 if bottom else 8
        box = QRectF(left - w if right_align else left, top, w, h)
        painter.save()
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(0, 0, 0, 150))
        painter.drawRoundedRect(box, 4, 4)
        painter.setPen(QColor(255, 255, 255))
        painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()

    def _paint_split(self, painter: QPainter, x: float) -> None:
        h = self.height()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setPen(QPen(QColor(0, 0, 0, 140), 3))
        painter.drawLine(QPointF(x, 0), QPointF(x, h))
        painter.setPen(QPen(QColor(255, 255, 255), 1))
        painter.drawLine(QPointF(x, 0), QPointF(x, h))
        painter.setBrush(QColor(255, 255, 255))
        painter.setPen(QPen(QColor(0, 0, 0, 160), 1))
        painter.drawEllipse(QPointF(x, h / 2), 7, 7)
        self._badge(painter, self.labels[0], x - 8, right_align=True)
        self._badge(painter, self.labels[1], x + 8)

    # -- interaction --------------------------------------------------------------------------
    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._apply_fit()

    def wheelEvent(self, event: QWheelEvent) -> None:
        steps = event.angleDelta().y() / 120
        if steps:
            self._set_zoom(self._zoom * ZOOM_STEP**steps, self._local(event.position()))
        event.accept()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Space and not event.isAutoRepeat():
            self.flip()
            event.accept()
            return
        super().keyPressEvent(event)

    def _near_split(self, pos: QPointF) -> bool:
        return (
            self._comparing()
            and self.mode is ViewMode.SPLIT
            and not self.flipped
            and abs(pos.x() - self._split_x()) <= GRIP
        )

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() != Qt.MouseButton.LeftButton or self._canvas_size().isEmpty():
            return super().mousePressEvent(event)
        self._drag = "split" if self._near_split(event.position()) else "pan"
        self._last = event.position()
        self.setCursor(
            Qt.CursorShape.SplitHCursor
            if self._drag == "split"
            else Qt.CursorShape.ClosedHandCursor
        )
        event.accept()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        pos = event.position()
        if self._drag == "split":
            if self.width() > 0:
                self.set_split(pos.x() / self.width())
        elif self._drag == "pan":
            self._origin += pos - self._last
            self._last = pos
            self._fit = False
            self.update()
            self.viewMoved.emit()
        else:
            self.setCursor(
                Qt.CursorShape.SplitHCursor
                if self._near_split(pos)
                else Qt.CursorShape.OpenHandCursor
            )
        event.accept()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        self._drag = None
        self.setCursor(Qt.CursorShape.OpenHandCursor)
        event.accept()

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        if self._fit:
            self._set_zoom(1.0, self._local(event.position()))
        else:
            self.fit()
        event.accept()


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
    version's file goes with it."""

    def __init__(self, panel: ViewerPanel) -> None:
        super().__init__(panel)
        self.panel = panel
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
        mime = self.panel.drag_mime()
        if mime is None:
            return Qt.DropAction.IgnoreAction
        drag = QDrag(self)
        drag.setMimeData(mime)
        self.last_mime = mime
        thumb = self.panel.drag_pixmap()
        if thumb is not None:
            drag.setPixmap(thumb)
        self.last_drop = drag.exec(Qt.DropAction.CopyAction)
        return self.last_drop


class VersionStrip(QScrollArea):
    """The input's versions as buttons: click one to compare it with the left one;
    Shift+click (or its menu) puts it on the left."""

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
        # Room for the scroll bar under the buttons, which a long strip (a chain) needs.
        bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        self.setFixedHeight(QToolButton().sizeHint().height() + 6 + bar)
        self._right: str | None = None
        # New buttons have no geometry until the layout runs: when the strip's length changes,
        # scroll again so the right-hand version (the newest step of a chain) is in view.
        self.horizontalScrollBar().rangeChanged.connect(lambda _lo, _hi: self._reveal())

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
            button.setText(("✗ " if version.failed else "") + version.label)
            if version.failed:
                button.setToolTip(f"Failed: {version.failed}")
                button.setStyleSheet("QToolButton { color: #c0392b; }")
            else:
                where = "\n".join(str(p) for p in version.paths[:3])
                button.setToolTip(
                    f"{where}\nClick: compare with the left one. Shift+click: put it on the left."
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


class ViewerPanel(QWidget):
    """The compare view with its title, mode, zoom, frames, versions and result actions."""

    versionChosen = Signal(str, bool)  # version id, on the left
    saveRequested = Signal(str)  # version id ("" for the right-hand one)
    copyRequested = Signal()
    openRequested = Signal(str)
    revealRequested = Signal(str)
    imagesShown = Signal()  # the view shows what the last show_images asked for
    previewToggled = Signal(bool)  # the person turned Preview on or off
    previewStopRequested = Signal()
    continueRequested = Signal()  # the right-hand result is to be the next step's input

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = CompareView(self)
        self.title = ElidedLabel("No image")
        self.mode_buttons = QButtonGroup(self)
        mode_row = QHBoxLayout()
        mode_row.setSpacing(0)
        for mode, tip in (
            (ViewMode.SPLIT, "A split line between the two versions; drag it"),
            (ViewMode.SIDE_BY_SIDE, "The two versions side by side, zoomed together"),
            (ViewMode.SINGLE, "The right-hand version alone"),
        ):
            button = QToolButton()
            button.setText(mode.value)
            button.setCheckable(True)
            button.setToolTip(tip + " (Space shows the left one alone)")
            button.setChecked(mode is ViewMode.SPLIT)
            self.mode_buttons.addButton(button)
            button.clicked.connect(lambda _c=False, m=mode: self.set_mode(m))
            mode_row.addWidget(button)
        self.zoom_label = QLabel("")
        self.zoom_label.setMinimumWidth(self.zoom_label.fontMetrics().horizontalAdvance("6400 %"))
        self.zoom_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.fit_button = QToolButton()
        self.fit_button.setText("Fit")
        self.fit_button.setToolTip("Fit the image in the view (Ctrl+0)")
        self.fit_button.clicked.connect(self.view.fit)
        self.actual_button = QToolButton()
        self.actual_button.setText("1:1")
        self.actual_button.setToolTip("Show the result's pixels at 100 % (Ctrl+1)")
        self.actual_button.clicked.connect(self.view.actual_size)
        self.preview_button = QToolButton()
        self.preview_button.setText("Preview")
        self.preview_button.setCheckable(True)
        self.preview_button.setToolTip(
            "Show what the chosen operation and model make of the part of the image in view, "
            "before running the whole job (Ctrl+P). The job then reuses what was previewed."
        )
        self.preview_button.toggled.connect(self.previewToggled)
        self.preview_stop = QToolButton()
        self.preview_stop.setText("✕")
        self.preview_stop.setAutoRaise(True)
        self.preview_stop.setToolTip("Stop the preview (Preview stays on for the next change)")
        self.preview_stop.clicked.connect(self.previewStopRequested)
        self.preview_stop.hide()
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.title, 1)
        top.addWidget(self.preview_stop)
        top.addWidget(self.preview_button)
        top.addLayout(mode_row)
        top.addWidget(self.zoom_label)
        top.addWidget(self.fit_button)
        top.addWidget(self.actual_button)

        self.play_button = QToolButton()
        self.play_button.setText("▶")
        self.play_button.setToolTip("Play the animation")
        self.play_button.setCheckable(True)
        self.play_button.toggled.connect(self._play_toggled)
        self.scrubber = QSlider(Qt.Orientation.Horizontal)
        self.scrubber.setMinimum(0)
        self.scrubber.setToolTip("Frame")
        self.frame_label = QLabel("")
        self.scrubber.valueChanged.connect(self._show_frame)
        self.scrubber_row = QWidget()
        frames = QHBoxLayout(self.scrubber_row)
        frames.setContentsMargins(0, 0, 0, 0)
        frames.addWidget(self.play_button)
        frames.addWidget(self.scrubber, 1)
        frames.addWidget(self.frame_label)
        self.scrubber_row.hide()
        self.play_timer = QTimer(self)
        self.play_timer.setSingleShot(True)
        self.play_timer.timeout.connect(self._next_frame)

        self.strip = VersionStrip()
        self.strip.chosen.connect(self.versionChosen)
        self.strip.openRequested.connect(self.openRequested)
        self.strip.revealRequested.connect(self.revealRequested)
        self.strip.saveRequested.connect(self.saveRequested)
        self.save_button = QToolButton()
        self.save_button.setText("Save as…")
        self.save_button.setToolTip(
            "Save the right-hand version as PNG, JPEG or WebP, at any size (Ctrl+Shift+S)"
        )
        self.save_button.clicked.connect(lambda: self.saveRequested.emit(""))
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setToolTip("Copy the right-hand version to the clipboard (Ctrl+C)")
        self.copy_button.clicked.connect(self.copyRequested)
        self.drag_handle = DragHandle(self)
        self.continue_button = QToolButton()
        self.continue_button.setText("Use as input ▸")
        self.continue_button.setToolTip(
            "Make the right-hand result the input of the next operation, without saving and "
            "reopening it (remove the background, then upscale the cut-out with its alpha)"
        )
        self.continue_button.clicked.connect(self.continueRequested)
        bottom = QHBoxLayout()
        bottom.setContentsMargins(0, 0, 0, 0)
        bottom.addWidget(self.strip, 1)
        bottom.addWidget(self.continue_button)
        bottom.addWidget(self.save_button)
        bottom.addWidget(self.copy_button)
        bottom.addWidget(self.drag_handle)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.scrubber_row)
        layout.addLayout(bottom)

        self.flip_action = QAction("Flip between the two versions", self)
        self.flip_action.setShortcut(QKeySequence(Qt.Key.Key_Space))
        self.flip_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.flip_action.triggered.connect(self.view.flip)
        self.addAction(self.flip_action)

        self.view.zoomChanged.connect(lambda z: self.zoom_label.setText(f"{z * 100:.0f} %"))
        self.before: DisplayImage | None = None
        self.after: DisplayImage | None = None
        self.right_version: Version | None = None
        self.labels = ("Before", "After")
        self.preview_label = ""  # "Preview · Anime ×2" while Preview is on
        self._update_actions()

    # -- content ------------------------------------------------------------------------------
    def clear(self, message: str | None = None) -> None:
        self.before = None
        self.after = None
        self.right_version = None
        self.title.setText("No image")
        self.scrubber_row.hide()
        self.play_button.setChecked(False)
        self.view.placeholder = message if message is not None else DEFAULT_PLACEHOLDER
        self.view.set_images(None, None)
        self.zoom_label.setText("")
        self.strip.set_versions([], None, None)
        self._update_actions()

    def set_versions(self, versions: list[Version], left: str | None, right: str | None) -> None:
        self.strip.set_versions(versions, left, right)
        by_id = {v.id: v for v in versions}
        self.right_version = by_id.get(right) if right else None
        self._update_actions()

    def show_error(self, title: str, message: str) -> None:
        """The input cannot be shown: say why, wrapped, in the view."""
        self.before = None
        self.after = None
        self.title.setText(title)
        self.scrubber_row.hide()
        self.view.placeholder = message
        self.view.set_images(None, None)
        self.zoom_label.setText("")
        self._update_actions()
        self.imagesShown.emit()

    def show_images(
        self,
        before: DisplayImage | None,
        after: DisplayImage | None,
        labels: tuple[str, str] = ("Before", "After"),
    ) -> None:
        same_before = (
            before is not None and self.before is not None and before.path == self.before.path
        )
        self.before = before
        self.after = after
        self.labels = labels
        self._apply_labels()
        frames = max(len(before.frames) if before else 0, len(after.frames) if after else 0)
        self.play_button.setChecked(False)
        self.scrubber.blockSignals(True)
        self.scrubber.setMaximum(max(0, frames - 1))
        self.scrubber.setValue(0)
        self.scrubber.blockSignals(False)
        self.scrubber_row.setVisible(frames > 1)
        self.title.setText(self._describe(), self._describe(full=True))
        if before is None and after is None:
            self.zoom_label.setText("")
            self.view.placeholder = DEFAULT_PLACEHOLDER
        self._show_frame(0, keep_view=same_before)
        self._update_actions()
        self.imagesShown.emit()

    def set_mode(self, mode: ViewMode) -> None:
        self.view.set_flipped(False)
        self.view.set_mode(mode)
        for button in self.mode_buttons.buttons():
            button.setChecked(button.text() == mode.value)

    def _describe(self, full: bool = False) -> str:
        parts: list[str] = []
        for image in (self.before, self.after):
            if image is None:
                continue
            name = str(image.path) if full else image.path.name
            text = f"{name} ({image.width}×{image.height}"
            if image.total_frames > 1:
                text += f", {image.total_frames} frames"
            if image.bit_depth == 16:
                text += ", 16-bit"
            parts.append(text + ")")
        return "  →  ".join(parts) if parts else "No image"

    def _update_actions(self) -> None:
        version = self.right_version
        has_result = version is not None and version.viewable and not version.is_original
        previewing = self.view.preview is not None
        self.save_button.setEnabled(has_result and not previewing)
        self.copy_button.setEnabled(self.after is not None or self.before is not None)
        self.drag_handle.setEnabled(has_result and not previewing)
        self.continue_button.setEnabled(has_result and not previewing)

    def _apply_labels(self) -> None:
        left, right = self.labels
        self.view.labels = (
            (left, self.preview_label)
            if self.view.preview is not None
            else (
                left,
                right,
            )
        )

    # -- preview ------------------------------------------------------------------------------
    @property
    def preview_on(self) -> bool:
        return self.view.preview is not None

    def set_preview_mode(self, on: bool, label: str = "") -> None:
        """Preview on: the right side is the preview of the left version; off: as before."""
        self.preview_button.blockSignals(True)
        self.preview_button.setChecked(on)
        self.preview_button.blockSignals(False)
        if on != self.preview_on:
            self.view.set_preview(on)
        self.preview_label = label
        self._apply_labels()
        if not on:
            self.set_preview_status("", False)
        self._show_frame(self.scrubber.value())
        self._update_actions()

    @property
    def preview_status(self) -> str:
        """What the preview is doing, as the view shows it under the preview."""
        return self.view.preview_note

    def set_preview_status(self, text: str, running: bool) -> None:
        self.view.preview_note = text if self.preview_on else ""
        self.view.update()
        self.preview_stop.setVisible(running and self.preview_on)

    def add_preview_patch(self, patch: PreviewPatch) -> None:
        view = self.view
        if view.preview is None:
            return
        view.set_preview_size(QSize(*patch.size))
        r = patch.region
        view.add_patch(QRect(r.x0, r.y0, r.width, r.height), to_qimage(patch.pixels))

    def clear_preview(self) -> None:
        if self.view.preview is not None:
            self.view.set_preview(True)  # a fresh layer: the canvas is the left picture again

    def preview_region(self) -> Region | None:
        """The part of the left picture the right-hand side shows, in its pixels."""
        visible = self.view.visible_after()
        before = self.before
        canvas = self.view.canvas_size()
        if before is None or canvas.isEmpty():
            return None
        if visible.isEmpty():
            return Region(0, 0, 0, 0)
        fx = before.width / canvas.width()
        fy = before.height / canvas.height()
        return Region(
            max(0, math.floor(visible.left() * fx)),
            max(0, math.floor(visible.top() * fy)),
            min(before.width, math.ceil(visible.right() * fx)),
            min(before.height, math.ceil(visible.bottom() * fy)),
        )

    # -- result actions -----------------------------------------------------------------------
    def current_image(self) -> QImage | None:
        """The right-hand version's frame on screen, at full size."""
        image = self.after or self.before
        if image is None or not image.frames:
            return None
        return image.frames[min(self.scrubber.value(), len(image.frames) - 1)]

    def drag_mime(self) -> QMimeData | None:
        version = self.right_version
        if version is None or not version.viewable or version.is_original:
            return None
        return file_mime(list(version.paths))

    def drag_pixmap(self) -> QPixmap | None:
        image = self.current_image()
        if image is None:
            return None
        return QPixmap.fromImage(
            image.scaled(
                96,
                96,
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
        )

    # -- frames -------------------------------------------------------------------------------
    def _show_frame(self, index: int, keep_view: bool = True) -> None:
        def pick(image: DisplayImage | None) -> QImage | None:
            if image is None or not image.frames:
                return None
            return image.frames[min(index, len(image.frames) - 1)]

        after = None if self.preview_on else pick(self.after)
        self.view.set_images(pick(self.before), after, keep_view=keep_view)
        total = self.scrubber.maximum() + 1
        self.frame_label.setText(f"{index + 1}/{total}")

    def _durations(self) -> tuple[int, ...]:
        for image in (self.after, self.before):
            if image is not None and image.durations:
                return image.durations
        return ()

    def _play_toggled(self, playing: bool) -> None:
        self.play_button.setText("⏸" if playing else "▶")
        self.play_button.setToolTip("Pause" if playing else "Play the animation")
        if playing:
            self._schedule()
        else:
            self.play_timer.stop()

    def _schedule(self) -> None:
        durations = self._durations()
        index = self.scrubber.value()
        delay = durations[index] if index < len(durations) else 100
        self.play_timer.start(max(20, delay))

    def _next_frame(self) -> None:
        if not self.play_button.isChecked():
            return
        total = self.scrubber.maximum() + 1
        self.scrubber.setValue((self.scrubber.value() + 1) % max(total, 1))
        self._schedule()
