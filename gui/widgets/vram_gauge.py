"""The status bar's memory gauge: GPU memory from NVML (this process, other processes, free), or
RAM where there is no NVIDIA GPU."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from engine.runtime.memory import GpuSnapshot, MemorySnapshot

GB = 1024**3


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return "?"
    if value >= GB:
        return f"{value / GB:.1f} GB"
    return f"{value / 1024**2:.0f} MB"


class VramGauge(QWidget):
    """A bar with three parts: this process's share, other processes, and the rest in use.

    `set_snapshot` takes one MemorySnapshot; with GPUs it shows `gpu_index`, otherwise RAM and
    the reason there is no GPU reading (in the tooltip).
    """

    clicked = Signal()

    OWN = QColor(52, 152, 219)
    OTHERS = QColor(230, 126, 34)
    REST = QColor(149, 165, 166)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.snapshot: MemorySnapshot | None = None
        self.gpu_index = 0
        self.text = "Memory: reading…"
        self._parts: list[tuple[float, QColor]] = []
        self.setToolTip("GPU memory (NVIDIA) or RAM, read about once a second")

    def sizeHint(self) -> QSize:
        metrics = self.fontMetrics()
        width = metrics.horizontalAdvance(
            "GPU 0  88.8 / 88.8 GB · Tessera 88.8 GB · others 88.8 GB"
        )
        return QSize(width + 16, metrics.height() + 8)

    def gpu(self) -> GpuSnapshot | None:
        if self.snapshot is None or not self.snapshot.gpus:
            return None
        for g in self.snapshot.gpus:
            if g.index == self.gpu_index:
                return g
        return self.snapshot.gpus[0]

    def set_snapshot(self, snapshot: MemorySnapshot) -> None:
        self.snapshot = snapshot
        gpu = self.gpu()
        if gpu is not None:
            others = sum(p.used or 0 for p in gpu.others)
            own = gpu.own or 0
            rest = max(0, gpu.used - own - others)
            total = max(gpu.total, 1)
            self._parts = [
                (own / total, self.OWN),
                (others / total, self.OTHERS),
                (rest / total, self.REST),
            ]
            self.text = f"GPU {gpu.index}  {fmt_bytes(gpu.used)} / {fmt_bytes(gpu.total)}"
            self.text += f" · Tessera {fmt_bytes(gpu.own)}" if gpu.own is not None else ""
            if gpu.others:
                self.text += f" · others {fmt_bytes(others)}"
            lines = [
                f"{gpu.name} (GPU {gpu.index}): {fmt_bytes(gpu.used)} used of {fmt_bytes(gpu.total)}, "
                f"{fmt_bytes(gpu.free)} free",
                f"Tessera: {fmt_bytes(gpu.own)}"
                if gpu.own is not None
                else "Tessera: the driver does not report per-process memory",
            ]
            lines += [f"{p.name} (pid {p.pid}): {fmt_bytes(p.used)}" for p in gpu.others]
            self.setToolTip("\n".join(lines))
        else:
            ram = snapshot.ram
            used = ram.total - ram.available
            total = max(ram.total, 1)
            own = ram.process_rss
            self._parts = [(own / total, self.OWN), (max(0, used - own) / total, self.REST)]
            self.text = f"No NVIDIA GPU · RAM {fmt_bytes(used)} / {fmt_bytes(ram.total)}"
            self.text += f" · Tessera {fmt_bytes(own)}"
            reason = snapshot.nvml_error or "no NVIDIA GPU was found"
            self.setToolTip(
                f"No GPU memory reading: {reason}.\nRAM: {fmt_bytes(used)} used of "
                f"{fmt_bytes(ram.total)}; Tessera {fmt_bytes(own)}."
            )
        self.setAccessibleName(self.text)
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        rect = QRectF(self.rect()).adjusted(1, 2, -1, -2)
        palette = self.palette()
        painter.setPen(palette.color(QPalette.ColorRole.Mid))
        painter.setBrush(palette.color(QPalette.ColorRole.Base))
        painter.drawRoundedRect(rect, 3, 3)
        inner = rect.adjusted(1, 1, -1, -1)
        x = inner.left()
        painter.setPen(Qt.PenStyle.NoPen)
        for fraction, colour in self._parts:
            w = inner.width() * max(0.0, min(1.0, fraction))
            if w <= 0:
                continue
            fill = QColor(colour)
            fill.setAlpha(110)
            painter.setBrush(fill)
            painter.drawRect(QRectF(x, inner.top(), w, inner.height()))
            x += w
        painter.setPen(palette.color(QPalette.ColorRole.Text))
        painter.drawText(inner, Qt.AlignmentFlag.AlignCenter, self.text)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        event.accept()
