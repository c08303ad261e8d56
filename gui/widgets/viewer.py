"""The viewer: the compare view (gui/widgets/compare_view.py) with its title, modes, zoom,
animation frames, the input's strip of versions and the result's Save as, Copy and drag-out
(gui/widgets/version_strip.py), and the Preview toggle with its status.

The viewer holds what it shows: each side's frame at about the view's size, and where the
view is zoomed past that frame's pixels, a detail of the part in view read at the resolution it
is drawn at (`detailRequested`; 1:1 shows the file's own pixels). What it holds is announced
(`picturesChanged`, `held_pictures`) for the window's picture budget, and let go on
`release_pictures` (Unload all).
"""

from __future__ import annotations

import math
from fractions import Fraction

from PySide6.QtCore import (
    QMimeData,
    QRect,
    QRectF,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QImage,
    QKeySequence,
    QPixmap,
)
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QSlider,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.previews import PreviewPatch, Region
from gui.jobs import Version
from gui.pictures import HeldPictures
from gui.widgets.clip_bar import ClipBar
from gui.widgets.compare_view import DEFAULT_PLACEHOLDER, CompareView, ViewMode
from gui.widgets.elided_label import ElidedLabel
from gui.widgets.images import Detail, DetailRequest, DisplayImage, read_full, to_qimage
from gui.widgets.version_strip import DragHandle, VersionStrip, file_mime

DETAIL_DELAY_MS = 60  # a zoom or pan settles this long before the part in view is read
DETAIL_MARGIN = 0.25  # of the part in view, read around it so a small pan needs nothing
FOLDER_RATE = 25  # frames per second a frame folder plays at (the frames state none)
ENOUGH = 0.95  # a picture with this share of the pixels the screen shows is sharp enough


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
    clipFrameRequested = Signal(int)  # a clip is viewed: show this frame of both sides
    detailRequested = Signal(object)  # DetailRequest: a part in view needs more pixels
    picturesChanged = Signal()  # what the viewer holds changed (`held_pictures`)

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
        # A clip: frames read on demand (gui/controllers/clip.py); only the shown one is held.
        self.clip_bar = ClipBar()
        self.clip_bar.frameRequested.connect(self.clipFrameRequested)
        self.clip_bar.hide()
        self._clip_shown: tuple[QImage | None, QImage | None] | None = None
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
        self.drag_handle = DragHandle(self, self.drag_mime, self.drag_pixmap)
        self.continue_button = QToolButton()
        self.continue_button.setText("Use as input ▸")
        self.continue_button.setToolTip(
            "Make the right-hand result the input of the next operation, without saving and "
            "reopening it (remove the background, then upscale the cut-out with its alpha)"
        )
        self.continue_button.clicked.connect(self.continueRequested)
        bottom = QHBoxLayout()
        bottom.setContentsMargins(0, 0, 0, 0)
        bottom.addStretch(1)  # the strip has the row above to itself: 2–3 versions at 1024×640
        bottom.addWidget(self.continue_button)
        bottom.addWidget(self.save_button)
        bottom.addWidget(self.copy_button)
        bottom.addWidget(self.drag_handle)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.scrubber_row)
        layout.addWidget(self.clip_bar)
        layout.addWidget(self.strip)
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
        self._detail_generation = [0, 0]  # per side: the newest detail asked for
        self._detail_margin = DETAIL_MARGIN
        self.detail_timer = QTimer(self)
        self.detail_timer.setSingleShot(True)
        self.detail_timer.setInterval(DETAIL_DELAY_MS)
        self.detail_timer.timeout.connect(self.ask_details)
        self.view.viewMoved.connect(self.detail_timer.start)
        self._update_actions()

    # -- content ------------------------------------------------------------------------------
    def clear(self, message: str | None = None) -> None:
        self.before = None
        self.after = None
        self.right_version = None
        self.title.setText("No image")
        self.scrubber_row.hide()
        self._hide_clip()
        self.play_button.setChecked(False)
        self.view.placeholder = message if message is not None else DEFAULT_PLACEHOLDER
        self.view.set_images(None, None)
        self.zoom_label.setText("")
        self.strip.set_versions([], None, None)
        self._update_actions()
        self.picturesChanged.emit()

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
        self._hide_clip()
        self.view.placeholder = message
        self.view.set_images(None, None)
        self.zoom_label.setText("")
        self._update_actions()
        self.picturesChanged.emit()
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
        for side, (old, new) in enumerate(((self.before, before), (self.after, after))):
            if old is None or new is None or old.path != new.path:
                self.view.set_detail(side, None, None)
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
        self._clip_shown = None
        clip = next((i for i in (before, after) if i is not None and i.read_on_demand), None)
        if clip is not None:
            self.scrubber_row.hide()
            rate = clip.clip.rate if clip.clip is not None else Fraction(FOLDER_RATE)
            self.clip_bar.set_clip(clip.total_frames, rate)
            self.clip_bar.show()
        else:
            self._hide_clip()
        self.title.setText(self._describe(), self._describe(full=True))
        if before is None and after is None:
            self.zoom_label.setText("")
            self.view.placeholder = DEFAULT_PLACEHOLDER
        self._show_frame(0, keep_view=same_before)
        self._update_actions()
        self.detail_timer.start()
        self.picturesChanged.emit()
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
        self.picturesChanged.emit()

    def clear_preview(self, pending: bool = True) -> None:
        """Forget what the preview drew; `pending` False: nothing is coming (no model), so the
        left picture is shown as it is, not dimmed."""
        if self.view.preview is not None:
            # A fresh layer: the canvas is the left picture again (at the person's zoom when
            # nothing is coming, as with Preview off).
            self.view.set_preview(True, keep_zoom=not pending)
            if self.view.preview is not None:
                self.view.preview.pending = pending

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
        """The right-hand version's frame on screen, at full size (a still held at the view's
        size is read whole for this: Copy asks for it)."""
        image = self.after or self.before
        if image is not None and image.reduced and self._clip_shown is None:
            return read_full(image)
        return self.shown_frame()

    def shown_frame(self) -> QImage | None:
        """The right-hand version's frame as the viewer holds it."""
        image = self.after or self.before
        if image is None or not image.frames:
            return None
        if self._clip_shown is not None:
            return self._clip_shown[1 if self.after is not None else 0]
        return image.frames[min(self.scrubber.value(), len(image.frames) - 1)]

    # -- the pictures held --------------------------------------------------------------------
    def frame_size(self) -> tuple[int, int]:
        """A still's frame: the view's size in device pixels (a fit view's picture)."""
        ratio = self.view.devicePixelRatioF()
        return (
            max(512, math.ceil(self.view.width() * ratio)),
            max(384, math.ceil(self.view.height() * ratio)),
        )

    def held_pictures(self) -> HeldPictures:
        """The decoded pictures the viewer keeps (its images' frames and the view's)."""
        count, total = self.view.held()
        for image in (self.before, self.after):
            if image is not None:
                count += len(image.frames)
                total += image.nbytes
        return HeldPictures(count, total)

    def release_pictures(self) -> None:
        """Let go of every picture but what is on screen: the details (read again at the part
        in view, without margin) and the preview's patches out of view."""
        for side in (0, 1):
            self.view.set_detail(side, None, None)
        layer = self.view.preview
        if layer is not None:
            layer.keep_within(self.view.visible_after())
        self._detail_margin = 0.0
        self.ask_details()
        self._detail_margin = DETAIL_MARGIN
        self.picturesChanged.emit()

    def _sides(self) -> list[tuple[int, DisplayImage]]:
        shown: list[tuple[int, DisplayImage]] = []
        if self.before is not None:
            shown.append((0, self.before))
        if self.after is not None and not self.preview_on:
            shown.append((1, self.after))
        return shown

    def ask_details(self) -> None:
        """For each side zoomed past its frame's pixels, the part in view at the resolution it
        is drawn at, unless the detail held already covers it."""
        for side, image in self._sides():
            if not image.readable or not image.frames or self._clip_shown is not None:
                continue
            needed = min(1.0, self.view.screen_scale(side))
            held = self.view.detail(side)
            if image.frames[0].width() >= image.width * needed * ENOUGH:
                if held is not None:
                    self.view.set_detail(side, None, None)
                    self.picturesChanged.emit()
                continue
            visible = self.view.visible_of(side)
            if visible.isEmpty():
                continue
            if held is not None:
                where, pixels = held
                scale = pixels.width() / max(where.width(), 1e-9)
                if where.contains(visible) and needed * ENOUGH <= scale <= needed * 2:
                    continue
            margin_x = visible.width() * self._detail_margin
            margin_y = visible.height() * self._detail_margin
            box = visible.adjusted(-margin_x, -margin_y, margin_x, margin_y)
            self._detail_generation[side] += 1
            self.detailRequested.emit(
                DetailRequest(
                    side,
                    image.path,
                    Region(
                        max(0, math.floor(box.left())),
                        max(0, math.floor(box.top())),
                        min(image.width, math.ceil(box.right())),
                        min(image.height, math.ceil(box.bottom())),
                    ),
                    needed,
                    self._detail_generation[side],
                )
            )

    def show_detail(self, detail: Detail) -> None:
        """A detail read off the GUI thread goes on screen, if it is still of what is shown."""
        request = detail.request
        image = (self.before, self.after)[request.side]
        if image is None or image.path != request.path:
            return
        if request.generation != self._detail_generation[request.side]:
            return  # the view moved on: the next one is on its way
        box = request.box
        self.view.set_detail(
            request.side, QRectF(box.x0, box.y0, box.width, box.height), detail.image
        )
        self.picturesChanged.emit()

    def drag_mime(self) -> QMimeData | None:
        version = self.right_version
        if version is None or not version.viewable or version.is_original:
            return None
        return file_mime(list(version.paths))

    def drag_pixmap(self) -> QPixmap | None:
        image = self.shown_frame()
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
    def _hide_clip(self) -> None:
        self.clip_bar.stop()
        self.clip_bar.hide()
        self._clip_shown = None

    @property
    def clip_frame(self) -> int:
        """The frame of the clip on screen (0 when no clip is viewed)."""
        return self.clip_bar.index if self.clip_bar.isVisibleTo(self) else 0

    def show_clip_frame(self, index: int, before: QImage | None, after: QImage | None) -> None:
        """Frame `index` of the viewed clips, read off the GUI thread, goes on screen."""
        if not self.clip_bar.isVisibleTo(self):
            return
        self._clip_shown = (
            before if before is not None or self.before is None else None,
            after if after is not None or self.after is None else None,
        )
        self.clip_bar.shown(index)
        self._show_frame(0)

    def clip_frame_failed(self, index: int, message: str) -> None:
        self.clip_bar.stop()
        self.clip_bar.shown(self.clip_bar.index)
        self.title.setText(f"Frame {index + 1} cannot be shown", message)

    def _show_frame(self, index: int, keep_view: bool = True) -> None:
        shown = self._clip_shown

        def pick(image: DisplayImage | None, side: int) -> QImage | None:
            if image is None or not image.frames:
                return None
            if shown is not None and shown[side] is not None:
                return shown[side]
            return image.frames[min(index, len(image.frames) - 1)]

        after = None if self.preview_on else pick(self.after, 1)
        sizes = (
            self.before.size if self.before is not None else None,
            self.after.size if self.after is not None and after is not None else None,
        )
        self.view.set_images(pick(self.before, 0), after, keep_view=keep_view, sizes=sizes)
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
