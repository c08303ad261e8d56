"""The viewer: before/after with a split slider, zoom and pan, alpha on a checkerboard, and a
frame scrubber for animations and sequences."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QImage,
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
    QComboBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSlider,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.widgets.images import DisplayImage, checker_brush

MIN_ZOOM = 1 / 64
MAX_ZOOM = 64.0
ZOOM_STEP = 1.25
GRIP = 8  # pixels either side of the split line that grab it instead of panning


class CompareView(QWidget):
    """Paints `before` left of the split and `after` right of it, both scaled to one canvas.

    The canvas is the after image's size when there is one (an upscale's output), so the
    before image is stretched over it and the two line up pixel for pixel.
    """

    zoomChanged = Signal(float)
    splitChanged = Signal(float)

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
        self._split = 0.5
        self._zoom = 1.0
        self._origin = QPointF(0, 0)  # widget position of the canvas's top-left corner
        self._fit = True
        self._drag: str | None = None  # "split" or "pan"
        self._last = QPointF()
        self._checker = checker_brush()
        self.placeholder = "Drop images here, or choose File ▸ Open."

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
        for pix in (self._after, self._before):
            if pix is not None:
                return pix.size()
        return QSize()

    # -- view ---------------------------------------------------------------------------------
    @property
    def zoom(self) -> float:
        return self._zoom

    @property
    def split(self) -> float:
        return self._split

    def set_split(self, fraction: float) -> None:
        self._split = min(1.0, max(0.0, fraction))
        self.splitChanged.emit(self._split)
        self.update()

    def fit(self) -> None:
        self._fit = True
        self._apply_fit()
        self.update()

    def actual_size(self) -> None:
        self._set_zoom(1.0, QPointF(self.width() / 2, self.height() / 2))

    def zoom_in(self) -> None:
        self._set_zoom(self._zoom * ZOOM_STEP, QPointF(self.width() / 2, self.height() / 2))

    def zoom_out(self) -> None:
        self._set_zoom(self._zoom / ZOOM_STEP, QPointF(self.width() / 2, self.height() / 2))

    def _apply_fit(self) -> None:
        size = self._canvas_size()
        if size.isEmpty() or not self._fit:
            return
        margin = 8
        avail_w = max(1, self.width() - 2 * margin)
        avail_h = max(1, self.height() - 2 * margin)
        self._zoom = min(avail_w / size.width(), avail_h / size.height())
        self._origin = QPointF(
            (self.width() - size.width() * self._zoom) / 2,
            (self.height() - size.height() * self._zoom) / 2,
        )
        self.zoomChanged.emit(self._zoom)

    def _set_zoom(self, zoom: float, anchor: QPointF) -> None:
        if self._canvas_size().isEmpty():
            return
        zoom = min(MAX_ZOOM, max(MIN_ZOOM, zoom))
        # keep the canvas point under `anchor` where it is
        canvas = (anchor - self._origin) / self._zoom
        self._zoom = zoom
        self._origin = anchor - canvas * zoom
        self._fit = False
        self.zoomChanged.emit(self._zoom)
        self.update()

    def _canvas_rect(self) -> QRectF:
        size = self._canvas_size()
        return QRectF(
            self._origin.x(),
            self._origin.y(),
            size.width() * self._zoom,
            size.height() * self._zoom,
        )

    def _split_x(self) -> float:
        rect = self._canvas_rect()
        return rect.left() + rect.width() * self._split

    def _comparing(self) -> bool:
        return self._before is not None and self._after is not None

    # -- painting -----------------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        size = self._canvas_size()
        if size.isEmpty():
            painter.setPen(self.palette().color(QPalette.ColorRole.BrightText))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.placeholder)
            return
        rect = self._canvas_rect()
        # Smooth when shrinking; real pixels when magnified, so an upscale can be judged.
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, self._zoom < 2)
        painter.fillRect(rect, self._checker)
        if self._comparing():
            assert self._before is not None and self._after is not None
            x = self._split_x()
            left = QRectF(rect.left(), rect.top(), max(0.0, x - rect.left()), rect.height())
            right = QRectF(x, rect.top(), max(0.0, rect.right() - x), rect.height())
            painter.save()
            painter.setClipRect(left)
            painter.drawPixmap(rect, self._before, QRectF(self._before.rect()))
            painter.restore()
            painter.save()
            painter.setClipRect(right)
            painter.drawPixmap(rect, self._after, QRectF(self._after.rect()))
            painter.restore()
            self._paint_split(painter, x)
        else:
            pix = self._after or self._before
            assert pix is not None
            painter.drawPixmap(rect, pix, QRectF(pix.rect()))

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
        metrics = painter.fontMetrics()
        for text, left in (("Before", True), ("After", False)):
            w = metrics.horizontalAdvance(text) + 12
            box = QRectF(x - w - 8 if left else x + 8, 8, w, metrics.height() + 6)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(0, 0, 0, 150))
            painter.drawRoundedRect(box, 4, 4)
            painter.setPen(QColor(255, 255, 255))
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)

    # -- interaction --------------------------------------------------------------------------
    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._apply_fit()

    def wheelEvent(self, event: QWheelEvent) -> None:
        steps = event.angleDelta().y() / 120
        if steps:
            self._set_zoom(self._zoom * ZOOM_STEP**steps, event.position())
        event.accept()

    def _near_split(self, pos: QPointF) -> bool:
        return self._comparing() and abs(pos.x() - self._split_x()) <= GRIP

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
            rect = self._canvas_rect()
            if rect.width() > 0:
                self.set_split((pos.x() - rect.left()) / rect.width())
        elif self._drag == "pan":
            self._origin += pos - self._last
            self._last = pos
            self._fit = False
            self.update()
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
            self._set_zoom(1.0, event.position())
        else:
            self.fit()
        event.accept()


class ViewerPanel(QWidget):
    """The compare view with its title, product choice, zoom buttons and frame scrubber."""

    productChosen = Signal(int)
    imagesShown = Signal()  # the view shows what the last show_images asked for

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = CompareView(self)
        self.title = QLabel("No image")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.products = QComboBox()
        self.products.setToolTip("Which result of the job to compare")
        self.products.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.products.hide()
        self.products.activated.connect(self.productChosen)
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
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.title, 1)
        top.addWidget(self.products)
        top.addWidget(self.zoom_label)
        top.addWidget(self.fit_button)
        top.addWidget(self.actual_button)

        self.scrubber = QSlider(Qt.Orientation.Horizontal)
        self.scrubber.setMinimum(0)
        self.scrubber.setToolTip("Frame")
        self.frame_label = QLabel("")
        self.scrubber.valueChanged.connect(self._show_frame)
        self.scrubber_row = QWidget()
        bottom = QHBoxLayout(self.scrubber_row)
        bottom.setContentsMargins(0, 0, 0, 0)
        bottom.addWidget(QLabel("Frame"))
        bottom.addWidget(self.scrubber, 1)
        bottom.addWidget(self.frame_label)
        self.scrubber_row.hide()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.scrubber_row)

        self.view.zoomChanged.connect(lambda z: self.zoom_label.setText(f"{z * 100:.0f} %"))
        self.before: DisplayImage | None = None
        self.after: DisplayImage | None = None

    def clear(self, message: str | None = None) -> None:
        self.before = None
        self.after = None
        self.title.setText("No image")
        self.products.hide()
        self.scrubber_row.hide()
        if message is not None:
            self.view.placeholder = message
        self.view.set_images(None, None)
        self.zoom_label.setText("")

    def show_images(self, before: DisplayImage | None, after: DisplayImage | None) -> None:
        same_before = (
            before is not None and self.before is not None and before.path == self.before.path
        )
        self.before = before
        self.after = after
        frames = max(len(before.frames) if before else 0, len(after.frames) if after else 0)
        self.scrubber.blockSignals(True)
        self.scrubber.setMaximum(max(0, frames - 1))
        self.scrubber.setValue(0)
        self.scrubber.blockSignals(False)
        self.scrubber_row.setVisible(frames > 1)
        self.title.setText(self._describe())
        self.title.setToolTip(self._describe(full=True))
        self._show_frame(0, keep_view=same_before)
        self.imagesShown.emit()

    def set_products(self, labels: list[str], current: int) -> None:
        self.products.blockSignals(True)
        self.products.clear()
        self.products.addItems(labels)
        self.products.setCurrentIndex(current)
        self.products.blockSignals(False)
        self.products.setVisible(len(labels) > 1)

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

    def _show_frame(self, index: int, keep_view: bool = True) -> None:
        def pick(image: DisplayImage | None) -> QImage | None:
            if image is None or not image.frames:
                return None
            return image.frames[min(index, len(image.frames) - 1)]

        self.view.set_images(pick(self.before), pick(self.after), keep_view=keep_view)
        total = self.scrubber.maximum() + 1
        self.frame_label.setText(f"{index + 1}/{total}")
