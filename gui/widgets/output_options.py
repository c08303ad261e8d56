"""The output step's controls: format (PNG, JPEG, WebP), quality, a target size — the
model's own, a factor of the input ("×2 of a ×4 model") or a width in pixels — and where the
results go ("Save to": a `Tessera` folder beside each image, next to each image, or a folder);
with `clips`, what a clip's products are encoded as (codec and CRF)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QSpinBox,
    QWidget,
)

from engine.operation_specs import operations
from engine.options import (
    CRF_RANGE,
    MAX_WIDTH,
    OutputFormat,
    OutputOptions,
    VideoCodec,
    VideoOptions,
)
from engine.requests import Operation
from gui.jobs import SaveTo, has_scale
from gui.widgets.elided_label import WrappedLabel

FACTORS = (0.5, 1.0, 2.0, 3.0, 4.0)
WIDTH = "width"
CODECS = (
    (VideoCodec.AUTO, "Clip's own codec"),
    (VideoCodec.H264, "H.264"),
    (VideoCodec.HEVC, "HEVC"),
    (VideoCodec.VP9, "VP9"),
    (VideoCodec.AV1, "AV1"),
    (VideoCodec.PRORES, "ProRes"),
    (VideoCodec.FFV1, "FFV1 (lossless)"),
    (VideoCodec.PNG, "PNG frames"),
)
LOSSY_CODECS = frozenset(
    {VideoCodec.AUTO, VideoCodec.H264, VideoCodec.HEVC, VideoCodec.VP9, VideoCodec.AV1}
)


class OutputEditor(QWidget):
    changed = Signal()

    def __init__(
        self, parent: QWidget | None = None, *, compact: bool = False, clips: bool = False
    ) -> None:
        super().__init__(parent)
        self.operation = operations()[0]
        self.scale: int | None = None
        self.format = QComboBox()
        for fmt, text in (
            (OutputFormat.PNG, "PNG (lossless)"),
            (OutputFormat.JPEG, "JPEG"),
            (OutputFormat.WEBP, "WebP"),
            (OutputFormat.TIFF, "TIFF (16-bit)"),
            (OutputFormat.EXR, "EXR (float)"),
        ):
            self.format.addItem(text, fmt)
        self.quality = QSpinBox()
        self.quality.setRange(1, 100)
        self.quality.setPrefix("quality ")
        self.quality.setToolTip("JPEG and WebP quality; WebP at 100 is lossless")
        self.size_box = QComboBox()
        self.width_box = QSpinBox()
        self.width_box.setRange(16, MAX_WIDTH)
        self.width_box.setSingleStep(100)
        self.width_box.setSuffix(" px wide")
        self.width_box.setValue(1920)
        self.note = WrappedLabel()
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note.setForegroundRole(self.note.foregroundRole())
        fmt_row = QHBoxLayout()
        fmt_row.setContentsMargins(0, 0, 0, 0)
        fmt_row.addWidget(self.format, 1)
        fmt_row.addWidget(self.quality)
        size_row = QHBoxLayout()
        size_row.setContentsMargins(0, 0, 0, 0)
        size_row.addWidget(self.size_box, 1)
        size_row.addWidget(self.width_box)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Format", fmt_row)
        form.addRow("Size", size_row)
        # A clip's products (issue #23): the codec and its quality; images ignore them.
        self.codec = QComboBox()
        for codec, text in CODECS:
            self.codec.addItem(text, codec)
        self.codec.setToolTip(
            "What a clip's results are encoded as; the sound, subtitles and chapters are "
            "copied. A cut-out is VP9 with alpha (or ProRes 4444 / FFV1 when chosen)."
        )
        self.crf = QSpinBox()
        low, high = CRF_RANGE
        self.crf.setRange(low - 1, high)
        self.crf.setSpecialValueText("CRF auto")
        self.crf.setPrefix("CRF ")
        self.crf.setToolTip("The clip's quality: lower is better and larger (0: lossless)")
        self.crf.setValue(low - 1)
        clip_row = QHBoxLayout()
        clip_row.setContentsMargins(0, 0, 0, 0)
        clip_row.addWidget(self.codec, 1)
        clip_row.addWidget(self.crf)
        self.clips = clips
        if clips:
            form.addRow("Clips", clip_row)
        else:
            self.codec.hide()
            self.crf.hide()
        form.addRow("", self.note)
        self._fill_sizes()
        self.set_options(OutputOptions())
        self.format.currentIndexChanged.connect(self._changed)
        self.quality.valueChanged.connect(self._changed)
        self.size_box.currentIndexChanged.connect(self._changed)
        self.width_box.valueChanged.connect(self._changed)
        self.codec.currentIndexChanged.connect(self._changed)
        self.crf.valueChanged.connect(self._changed)

    # -- context ------------------------------------------------------------------------------
    def set_context(self, operation: Operation, scale: int | None) -> None:
        """Name the model's own size ("Model's size (×4)"); what it means differs per family."""
        options = self.options()
        self.operation, self.scale = operation, scale
        self.blockSignals(True)
        self._fill_sizes()
        self.set_options(options)
        self.blockSignals(False)
        self._update()

    def _fill_sizes(self) -> None:
        self.size_box.blockSignals(True)
        self.size_box.clear()
        if has_scale(self.operation):
            own = f"Model's size (×{self.scale})" if self.scale else "Model's size"
        else:
            own = "Same as the input"
        self.size_box.addItem(own, None)
        for factor in FACTORS:
            if has_scale(self.operation) and self.scale and factor == self.scale:
                continue
            if not has_scale(self.operation) and factor == 1.0:
                continue
            label = f"×{factor:g} of the input"
            if factor == 1.0:
                label = "×1 (the input's size)"
            self.size_box.addItem(label, factor)
        self.size_box.addItem("Width in pixels…", WIDTH)
        self.size_box.blockSignals(False)

    # -- value --------------------------------------------------------------------------------
    def options(self) -> OutputOptions:
        raw = self.format.currentData()  # Qt hands a str enum back as a plain str
        fmt = OutputFormat(raw) if isinstance(raw, str) else OutputFormat.PNG
        data = self.size_box.currentData()
        factor = float(data) if isinstance(data, float) else None
        width = self.width_box.value() if data == WIDTH else None
        video = VideoOptions()
        if self.clips:
            codec = self.codec.currentData()
            crf = self.crf.value() if self.crf.value() >= CRF_RANGE[0] else None
            video = VideoOptions(
                VideoCodec(codec) if isinstance(codec, str) else VideoCodec.AUTO, crf
            )
        return OutputOptions(fmt, self.quality.value(), factor, width, video=video)

    def set_options(self, options: OutputOptions) -> None:
        self.format.setCurrentIndex(max(0, self.format.findData(options.format.value)))
        self.quality.setValue(options.quality)
        if options.width is not None:
            self.width_box.setValue(options.width)
            self.size_box.setCurrentIndex(self.size_box.findData(WIDTH))
        elif options.factor is not None:
            index = self.size_box.findData(float(options.factor))
            if index < 0 and has_scale(self.operation) and options.factor == self.scale:
                index = 0  # ×4 of a ×4 model is its own size
            self.size_box.setCurrentIndex(max(0, index))
        else:
            self.size_box.setCurrentIndex(0)
        self.codec.setCurrentIndex(max(0, self.codec.findData(options.video.codec.value)))
        crf = options.video.crf
        self.crf.setValue(CRF_RANGE[0] - 1 if crf is None else crf)
        self._update()

    def _changed(self) -> None:
        self._update()
        self.changed.emit()

    def _update(self) -> None:
        options = self.options()
        self.quality.setEnabled(options.format.lossy)
        self.width_box.setVisible(self.size_box.currentData() == WIDTH)
        self.crf.setEnabled(options.video.codec in LOSSY_CODECS)
        notes = []
        if options.format is OutputFormat.JPEG and self.operation.main_with_alpha:
            notes.append(
                f"JPEG has no transparency: {self.operation.main_with_alpha} gets a white "
                "background."
            )
        elif options.format is OutputFormat.JPEG:
            notes.append("JPEG has no transparency (it becomes white) and holds one frame.")
        if options.format is OutputFormat.WEBP and options.quality == 100:
            notes.append("WebP at quality 100 is lossless.")
        if self.operation.kept_formats:
            clips = " (of a clip: lossless FFV1 clips)" if self.clips else ""
            exr = " EXR adds float EXR depth beside them." if options.format.value == "exr" else ""
            notes.append(self.operation.kept_formats.format(clips=clips, exr=exr))
        if (
            has_scale(self.operation)
            and options.factor is not None
            and self.scale
            and options.factor > self.scale
        ):
            notes.append(f"Beyond the model's ×{self.scale}, the rest is ordinary interpolation.")
        self.note.setText(" ".join(notes))
        self.note.setVisible(bool(notes))


CHOOSE = "choose"  # the "A folder…" item: asks for a folder
SAVE_TO_TIPS = {
    SaveTo.TESSERA: "Results go into a folder named Tessera beside each image, made at the first "
    "result: they never mix with the images, so adding that folder again never takes them as "
    "inputs.",
    SaveTo.BESIDE: "Results go next to each image (a folder of frames: its Tessera folder).",
    SaveTo.FOLDER: "Every result of the batch goes into this folder.",
}


class SaveToEditor(QWidget):
    """Where a batch's results go; each job keeps the choice it was started with."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.folder: Path | None = None
        self._choice = SaveTo.TESSERA
        # What "A folder…" asks with; tests answer it without a dialog.
        self.ask_folder: Callable[[Path | None], Path | None] = self._dialog
        self.box = QComboBox()
        self.box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.box.setMinimumContentsLength(16)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.box, 1)
        self._fill()
        self.box.activated.connect(self._activated)

    def choice(self) -> SaveTo:
        return self._choice

    def chosen_folder(self) -> Path | None:
        """The folder every result goes to; None when results go beside their images."""
        return self.folder if self._choice is SaveTo.FOLDER else None

    def text(self) -> str:
        return self.box.currentText()

    def set_choice(self, choice: SaveTo, folder: Path | None = None) -> None:
        """Show `choice`; `folder` is the one chosen (kept for a later "A folder" pick)."""
        self.folder = folder if folder is not None else self.folder
        if choice is SaveTo.FOLDER and self.folder is None:
            choice = SaveTo.TESSERA  # a folder choice that lost its folder
        self._choice = choice
        self._fill()

    def set_folder(self, folder: Path) -> None:
        """The person chose `folder` for every result."""
        self.set_choice(SaveTo.FOLDER, folder)
        self.changed.emit()

    def choose_folder(self) -> None:
        """Ask for a folder; a cancelled dialog keeps the choice before it."""
        folder = self.ask_folder(self.folder)
        if folder is not None:
            self.set_folder(folder)
        else:
            self._fill()

    def _dialog(self, start: Path | None) -> Path | None:
        found = QFileDialog.getExistingDirectory(self, "Save results to", str(start or ""))
        return Path(found) if found else None

    def _fill(self) -> None:
        box = self.box
        box.blockSignals(True)
        box.clear()
        box.addItem("Tessera folder beside each image", SaveTo.TESSERA.value)
        box.addItem("Next to each image", SaveTo.BESIDE.value)
        if self.folder is not None:
            box.addItem(str(self.folder), SaveTo.FOLDER.value)
            box.setItemData(box.count() - 1, str(self.folder), Qt.ItemDataRole.ToolTipRole)
        box.addItem("A folder…", CHOOSE)
        box.setCurrentIndex(max(0, box.findData(self._choice.value)))
        box.setToolTip(SAVE_TO_TIPS[self._choice])
        box.blockSignals(False)

    def _activated(self, index: int) -> None:
        data = self.box.itemData(index)
        if data == CHOOSE:
            self.choose_folder()
            return
        chosen = SaveTo(str(data))
        if chosen is not self._choice:
            self.set_choice(chosen)
            self.changed.emit()
