"""What the compare view draws over its pictures: the preview's layer of patches (in product
pixels, bounded by what is in view), the split line and the small labelled badges."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QPixmap

PENDING_SHADE = QColor(0, 0, 0, 110)  # over what the preview has not reached yet


PATCH_SHRINK_BELOW = 0.5  # a preview patch drawn at under half its pixels is kept at that size
LARGE_CANVAS = 4  # a product of more than this many screens' pixels keeps shrunk patches


def pixmap_bytes(pix: QPixmap | None) -> int:
    return 0 if pix is None or pix.isNull() else pix.width() * pix.height() * pix.depth() // 8


class PreviewLayer:
    """The preview's pictures, in product pixels: patches as they come, or one whole image."""

    def __init__(self, zoom: float | None = None, turned_on: bool = False) -> None:
        self.size = QSize()  # the product's size; empty until the engine says
        self.patches: list[tuple[QRect, QPixmap]] = []
        self.image: QPixmap | None = None  # a non-tiled family's whole preview
        self.pending = True  # pixels are coming: what they have not reached is dimmed
        self.zoom = zoom  # the person's zoom, shown again once the product's size is known
        self.turned_on = turned_on  # made by turning Preview on (not by a reset)

    def clear(self) -> None:
        self.patches = []
        self.image = None

    def keep_within(self, visible: QRectF) -> None:
        """Forget patches out of view: what is drawn stays bounded by what is shown."""
        self.patches = [(r, p) for r, p in self.patches if QRectF(r).intersects(visible)]

    def add(self, rect: QRect, pix: QPixmap) -> None:
        """A patch over what it covers whole (a finer one after a zoom replaces the coarse)."""
        self.patches = [(r, p) for r, p in self.patches if not rect.contains(r)]
        self.patches.append((rect, pix))

    def held(self) -> tuple[int, int]:
        """(pictures, bytes) this layer keeps."""
        total = sum(pixmap_bytes(p) for _r, p in self.patches) + pixmap_bytes(self.image)
        return len(self.patches) + (self.image is not None), total


def draw_badge(
    painter: QPainter,
    view_height: int,
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
    top = view_height - h - 8 if bottom else 8
    box = QRectF(left - w if right_align else left, top, w, h)
    painter.save()
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(0, 0, 0, 150))
    painter.drawRoundedRect(box, 4, 4)
    painter.setPen(QColor(255, 255, 255))
    painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
    painter.restore()


def draw_split(painter: QPainter, h: int, labels: tuple[str, str] | list[str], x: float) -> None:
    """The split line at `x`, its grip, and the two sides' labels beside it."""
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setPen(QPen(QColor(0, 0, 0, 140), 3))
    painter.drawLine(QPointF(x, 0), QPointF(x, h))
    painter.setPen(QPen(QColor(255, 255, 255), 1))
    painter.drawLine(QPointF(x, 0), QPointF(x, h))
    painter.setBrush(QColor(255, 255, 255))
    painter.setPen(QPen(QColor(0, 0, 0, 160), 1))
    painter.drawEllipse(QPointF(x, h / 2), 7, 7)
    draw_badge(painter, h, labels[0], x - 8, right_align=True)
    draw_badge(painter, h, labels[1], x + 8)
