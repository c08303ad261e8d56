"""The clip bar under the compare view when a clip is viewed: play/pause, a frame slider and
"frame 120/300 · 00:04.0".

The bar holds no pixels and decodes nothing: it asks for a frame (`frameRequested`) and is
told when it is on screen (`shown`). Play runs on the clip's clock: each tick asks for the
frame due now, and while a frame is still being read the ticks in between are dropped, so a
clip that decodes slower than its rate plays at its rate with frames skipped, never late.
"""

from __future__ import annotations

import time
from fractions import Fraction

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QStyle, QToolButton, QWidget


def clock(index: int, rate: Fraction) -> str:
    """`00:04.0`: the time of frame `index` at `rate` frames per second."""
    seconds = float(index / rate) if rate else 0.0
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes):02d}:{rest:04.1f}"


class ClipBar(QWidget):
    frameRequested = Signal(int)  # the frame to show (0-based)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.frames = 0
        self.rate = Fraction(25)
        self.index = 0  # the frame on screen
        self.waiting = False  # a requested frame is not on screen yet
        self._play_start = (0.0, 0)  # monotonic time and frame where play began
        self.play_button = QToolButton()
        self.play_button.setCheckable(True)
        self._glyph(False)
        self.play_button.toggled.connect(self._play_toggled)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setMinimum(0)
        self.slider.setToolTip("Frame of the clip")
        self.slider.valueChanged.connect(self._slid)
        self.label = QLabel("")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.play_button)
        row.addWidget(self.slider, 1)
        row.addWidget(self.label)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._tick)

    def set_clip(self, frames: int, rate: Fraction) -> None:
        """A clip is viewed from its first frame (already on screen)."""
        self.play_button.setChecked(False)
        self.frames, self.rate = max(frames, 1), Fraction(rate) if rate else Fraction(25)
        self.index, self.waiting = 0, False
        self.slider.blockSignals(True)
        self.slider.setMaximum(self.frames - 1)
        self.slider.setValue(0)
        self.slider.blockSignals(False)
        self._label()

    def stop(self) -> None:
        self.play_button.setChecked(False)

    @property
    def playing(self) -> bool:
        return self.play_button.isChecked()

    def shown(self, index: int) -> None:
        """Frame `index` is on screen (or could not be read): the next one may be asked for."""
        self.index, self.waiting = index, False
        self._label()

    def _label(self) -> None:
        self.label.setText(f"frame {self.index + 1}/{self.frames} · {clock(self.index, self.rate)}")

    def _ask(self, index: int) -> None:
        self.waiting = True
        self.frameRequested.emit(index)

    def _slid(self, value: int) -> None:
        if not self.playing:
            self._ask(value)  # the reader keeps only the newest asked-for frame

    def _glyph(self, playing: bool) -> None:
        """The style's own media icons: "⏸" is missing from many fonts (an empty box)."""
        pixmap = QStyle.StandardPixmap
        icon = pixmap.SP_MediaPause if playing else pixmap.SP_MediaPlay
        self.play_button.setText("")
        self.play_button.setIcon(self.style().standardIcon(icon))
        self.play_button.setToolTip("Pause" if playing else "Play the clip")

    def _play_toggled(self, playing: bool) -> None:
        self._glyph(playing)
        if not playing:
            self.timer.stop()
            return
        start = 0 if self.index >= self.frames - 1 else self.index
        self._play_start = (time.monotonic(), start)
        self.timer.start(max(10, round(1000 / float(self.rate))))

    def _tick(self) -> None:
        if self.waiting:
            return  # still reading the last frame: this one is dropped
        began, first = self._play_start
        due = first + int((time.monotonic() - began) * float(self.rate))
        if due >= self.frames:
            self.stop()
            due = self.frames - 1
            if due == self.index:
                return
        if due == self.index:
            return
        self.slider.blockSignals(True)
        self.slider.setValue(due)
        self.slider.blockSignals(False)
        self._ask(due)
