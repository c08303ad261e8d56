"""The compare view: two versions of an input with a split line, side by side, or one at a
time (Space flips to the left one and back); zoom and pan, alpha on a checkerboard.

The split line is a position in the view, not in the picture: zoomed in, it stays where the
person put it while the picture moves under it.

With Preview on, the right-hand side is the preview of the panel's operation on the left
version: the left picture scaled to the product's size and dimmed, with the preview's final
pixels drawn over it as they come (`PreviewLayer`), so what is still coming reads as such.

Each side is drawn from the picture it was given (about the view's size: `gui.widgets.images`),
stretched to the side's full size, with a `detail` over it where the view needs more pixels
than that (zoomed in: the part in view, read at the resolution it is shown at). The view never
holds a full-size copy of a large picture.
"""

from __future__ import annotations

import math
from enum import Enum

from PySide6.QtCore import (
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QImage,
    QKeyEvent,
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
    QSizePolicy,
    QWidget,
)

from gui.widgets.images import checker_brush
from gui.widgets.view_layers import (
    LARGE_CANVAS,
    PATCH_SHRINK_BELOW,
    PENDING_SHADE,
    PreviewLayer,
    draw_badge,
    draw_split,
    pixmap_bytes,
)

MIN_ZOOM = 1 / 64
MAX_ZOOM = 64.0
ZOOM_STEP = 1.25
GRIP = 8  # pixels either side of the split line that grab it instead of panning
DEFAULT_PLACEHOLDER = "Drop images here, or choose File ▸ Open."


class ViewMode(Enum):
    SPLIT = "Split"
    SIDE_BY_SIDE = "Side by side"
    SINGLE = "One"


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
        self._sizes: list[QSize] = [QSize(), QSize()]  # each side's full size, in its pixels
        # Per side: a part of the picture at more pixels than its frame, in the side's pixels.
        self._details: list[tuple[QRectF, QPixmap] | None] = [None, None]
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
        self,
        before: QImage | None,
        after: QImage | None,
        *,
        keep_view: bool = False,
        sizes: tuple[QSize | None, QSize | None] = (None, None),
    ) -> None:
        """The two pictures, drawn at `sizes` (each side's full size; the picture's own size
        when None): a picture smaller than its side is stretched until a detail comes."""
        old = self._canvas_size()
        self._before = QPixmap.fromImage(before) if before is not None else None
        self._after = QPixmap.fromImage(after) if after is not None else None
        for side, (image, size) in enumerate(zip((before, after), sizes, strict=True)):
            full = size if size is not None else (image.size() if image is not None else QSize())
            if image is None or full != self._sizes[side]:
                self._details[side] = None
            self._sizes[side] = full
        if not keep_view or old != self._canvas_size():
            self._fit = True
        self._apply_fit()
        self.update()

    def set_detail(self, side: int, where: QRectF | None, image: QImage | None) -> None:
        """`where` (in the side's full-size pixels) drawn from `image`; None: no detail."""
        if where is None or image is None:
            self._details[side] = None
        else:
            self._details[side] = (QRectF(where), QPixmap.fromImage(image))
        self.update()

    def detail(self, side: int) -> tuple[QRectF, QPixmap] | None:
        """Where the side's detail lies (in its full-size pixels) and its pixels."""
        held = self._details[side]
        return (QRectF(held[0]), held[1]) if held is not None else None

    def held(self) -> tuple[int, int]:
        """(pictures, bytes) the view keeps: the two frames, the details, the preview's."""
        count, total = 0, 0
        pixmaps = [self._before, self._after, *(d[1] for d in self._details if d is not None)]
        for pix in pixmaps:
            if pix is not None:
                count += 1
                total += pixmap_bytes(pix)
        if self.preview is not None:
            more, size = self.preview.held()
            count, total = count + more, total + size
        return count, total

    def visible_of(self, side: int) -> QRectF:
        """The part of the side's picture its viewport shows, in the side's full-size pixels
        (the whole viewport: the split line moves without asking for more)."""
        size, full = self._canvas_size(), self._sizes[side]
        if size.isEmpty() or full.isEmpty():
            return QRectF()
        port = QRectF(0, 0, self._port_width(), self.height())
        seen = QRectF(
            (port.topLeft() - self._origin) / self._zoom,
            (port.bottomRight() - self._origin) / self._zoom,
        ).intersected(QRectF(0, 0, size.width(), size.height()))
        fx, fy = full.width() / size.width(), full.height() / size.height()
        return QRectF(seen.x() * fx, seen.y() * fy, seen.width() * fx, seen.height() * fy)

    def screen_scale(self, side: int) -> float:
        """Screen pixels per full-size pixel of the side's picture, as drawn now."""
        size, full = self._canvas_size(), self._sizes[side]
        if size.isEmpty() or full.isEmpty():
            return 0.0
        return self._zoom * self.devicePixelRatioF() * size.width() / full.width()

    def has_before(self) -> bool:
        return self._before is not None

    def has_after(self) -> bool:
        return self._after is not None

    def _canvas_size(self) -> QSize:
        if self.preview is not None and not self.preview.size.isEmpty():
            return self.preview.size
        if self._after is not None:
            return QSize(self._sizes[1])
        if self._before is not None:
            return QSize(self._sizes[0])
        return QSize()

    def canvas_size(self) -> QSize:
        return self._canvas_size()

    # -- preview ------------------------------------------------------------------------------
    def set_preview(self, on: bool, keep_zoom: bool = False) -> None:
        """Preview on (a fresh layer) or off. Off, or `keep_zoom` (nothing to preview), the
        canvas goes back to the left picture at the zoom the person sees."""
        old = self._canvas_size()
        # The zoom the person sees stays theirs: Preview on shows the product at it once its
        # size is known (a fresh layer after a reset keeps the number the last one had).
        previous = self.preview
        if previous is not None and previous.size.isEmpty():  # not shown at its size yet
            layer = PreviewLayer(previous.zoom, previous.turned_on)
        else:
            layer = PreviewLayer(self._zoom, previous is None)
        self.preview = layer if on else None
        self._canvas_changed(old, self._zoom if keep_zoom or not on else None)

    def set_preview_size(self, size: QSize) -> None:
        """The product's size: the canvas grows to it, at the person's zoom (100 % shows the
        product's pixels 1:1), the point at the view's centre kept there."""
        if self.preview is None or self.preview.size == size:
            return
        old = self._canvas_size()
        self.preview.size = size
        zoom, self.preview.zoom = self.preview.zoom, None
        self._canvas_changed(old, zoom)

    def _canvas_changed(self, old: QSize, zoom: float | None = None) -> None:
        """A new canvas size: shown at `zoom` around the view's centre, or (None) the picture
        stays where it was on screen."""
        new = self._canvas_size()
        if not old.isEmpty() and not new.isEmpty() and old != new and not self._fit:
            ratio = new.width() / old.width()
            if zoom is not None:
                centre = QPointF(self._port_width() / 2, self.height() / 2)
                self._origin = centre - (centre - self._origin) * ratio * (zoom / self._zoom)
                self._zoom = zoom
            else:
                self._zoom /= ratio
            self.zoomChanged.emit(self._zoom)
        self._apply_fit()
        self.update()
        self.viewMoved.emit()

    def add_patch(self, rect: QRect, image: QImage) -> None:
        if self.preview is None:
            return
        # Of a product far larger than the view, a patch drawn at under half its pixels is
        # kept at the pixels it is drawn with (a fit view of 12000×8000 would otherwise hold
        # all of it); otherwise its own pixels, which the preview's tests compare exactly.
        scale = self._zoom * self.devicePixelRatioF()
        canvas = self._canvas_size()
        screen = self.width() * self.height() * self.devicePixelRatioF() ** 2
        large = canvas.width() * canvas.height() > LARGE_CANVAS * screen
        if large and scale < PATCH_SHRINK_BELOW and image.width() * image.height() > 4096:
            image = image.scaled(
                max(1, math.ceil(image.width() * scale)),
                max(1, math.ceil(image.height() * scale)),
                Qt.AspectRatioMode.IgnoreAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
        self.preview.add(rect, QPixmap.fromImage(image))
        self.update()

    def set_preview_image(self, image: QImage | None, size: QSize | None = None) -> None:
        """A non-tiled family's whole preview; `size` is the product's (the picture may be
        smaller: it is drawn at the product's size)."""
        if self.preview is None:
            return
        self.preview.image = QPixmap.fromImage(image) if image is not None else None
        if image is not None:
            self.set_preview_size(size if size is not None else image.size())
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
        layer = self.preview
        if layer is not None and layer.zoom is not None:
            # Zoomed while the product's size is not known yet: after turning Preview on the
            # new number is the one to keep; in a reset's moment the view simply stays put.
            layer.zoom = zoom if layer.turned_on else None
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
            self._paint_one(painter, 0, self._canvas_rect(), self.labels[0])
        elif not self._comparing():
            if self.preview is not None:
                self._paint_after(painter, self._canvas_rect())
            else:
                self._paint_one(
                    painter, 1 if self._after is not None else 0, self._canvas_rect(), None
                )
        elif self.mode is ViewMode.SINGLE:
            self._paint_after(painter, self._canvas_rect())
            draw_badge(painter, self.height(), self.labels[1], 8)
        elif self.mode is ViewMode.SIDE_BY_SIDE:
            assert before is not None
            half = self.width() / 2
            painter.save()
            painter.setClipRect(QRectF(0, 0, half, self.height()))
            self._paint_one(painter, 0, self._canvas_rect(), None)
            painter.restore()
            draw_badge(painter, self.height(), self.labels[0], 8)
            painter.save()
            painter.setClipRect(QRectF(half, 0, half, self.height()))
            self._paint_after(painter, self._canvas_rect(half))
            painter.restore()
            draw_badge(painter, self.height(), self.labels[1], half + 8)
            painter.setPen(QPen(self.palette().color(QPalette.ColorRole.Window), 2))
            painter.drawLine(QPointF(half, 0), QPointF(half, self.height()))
        else:
            assert before is not None
            rect = self._canvas_rect()
            x = self._split_x()
            painter.fillRect(rect, self._checker)
            painter.save()
            painter.setClipRect(QRectF(0, 0, x, self.height()))
            self._draw_side(painter, 0, rect)
            painter.restore()
            painter.save()
            painter.setClipRect(QRectF(x, 0, self.width() - x, self.height()))
            self._paint_after(painter, rect)
            painter.restore()
            draw_split(painter, self.height(), self.labels, x)
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
            draw_badge(
                painter, self.height(), self.preview_note, left, bottom=True, width=room - 12
            )

    def _draw_side(self, painter: QPainter, side: int, rect: QRectF) -> None:
        """The side's frame stretched over `rect` (the canvas on screen), its detail over it."""
        pix = (self._before, self._after)[side]
        if pix is None:
            return
        painter.drawPixmap(rect, pix, QRectF(pix.rect()))
        held, full = self._details[side], self._sizes[side]
        if held is None or full.isEmpty():
            return
        where, detail = held
        sx, sy = rect.width() / full.width(), rect.height() / full.height()
        target = QRectF(
            rect.x() + where.x() * sx,
            rect.y() + where.y() * sy,
            where.width() * sx,
            where.height() * sy,
        )
        painter.drawPixmap(target, detail, QRectF(detail.rect()))

    def _paint_one(self, painter: QPainter, side: int, rect: QRectF, label: str | None) -> None:
        painter.fillRect(rect, self._checker)
        self._draw_side(painter, side, rect)
        if label:
            draw_badge(painter, self.height(), label, 8)

    def _paint_after(self, painter: QPainter, rect: QRectF) -> None:
        """The right-hand version in `rect`: the after picture, or the preview — the left
        picture dimmed where no final pixels have come yet, and those pixels over it."""
        painter.fillRect(rect, self._checker)
        layer = self.preview
        if layer is None:
            self._draw_side(painter, 1, rect)
            return
        if layer.image is not None:
            painter.drawPixmap(rect, layer.image, QRectF(layer.image.rect()))
            return
        self._draw_side(painter, 0, rect)
        if layer.pending:
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
