"""Preferences: the models folder, the memory limits (M9) and where pasted images go. They apply
when OK is pressed — the model list is read again, and new limits unload the loaded models so
they load again under them — except a CPU limit already in force, which ONNX Runtime sets once
per process (the window says so). When TESSERA_MODELS_DIR is set it wins over the models
folder, and the dialog shows it instead of silently ignoring the field."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from gui.settings import MODELS_ENV, PIXEL_LIMIT, AppSettings


def _limit_box(value: int) -> QSpinBox:
    box = QSpinBox()
    box.setRange(0, 1024 * 1024)
    box.setSingleStep(256)
    box.setSuffix(" MB")
    box.setSpecialValueText("No limit")
    box.setValue(value)
    return box


def _folder_row(edit: QLineEdit, browse: QPushButton) -> QHBoxLayout:
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    row.addWidget(browse)
    return row


class PreferencesDialog(QDialog):
    def __init__(
        self, settings: AppSettings, default_models: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preferences")
        self.settings = settings
        self.models = QLineEdit(settings.models_dir)
        self.models.setPlaceholderText(default_models)
        self.browse_models = QPushButton("Browse…")
        self.browse_models.clicked.connect(lambda: self._browse(self.models, "Models folder"))
        self.env_note = QLabel()
        self.env_note.setWordWrap(True)
        override = settings.models_env()
        if override:
            self.env_note.setText(
                f"{MODELS_ENV} is set to {override}: Tessera uses that folder while it is set, "
                "whatever this field says."
            )
            self.models.setEnabled(False)
            self.browse_models.setEnabled(False)
        self.env_note.setVisible(bool(override))
        self.pasted = QLineEdit(str(settings.pasted_dir))
        browse_pasted = QPushButton("Browse…")
        browse_pasted.clicked.connect(lambda: self._browse(self.pasted, "Pasted images"))
        self.gpu_limit = _limit_box(settings.gpu_mem_limit_mb)
        self.gpu_limit.setToolTip("The most GPU memory ONNX Runtime may take per model (CUDA)")
        self.cpu_limit = _limit_box(settings.cpu_mem_limit_mb)
        self.cpu_limit.setToolTip("The most memory ONNX Runtime's CPU arena may take")
        self.max_pixels = QSpinBox()
        self.max_pixels.setRange(1, 100_000)
        self.max_pixels.setSingleStep(64)
        self.max_pixels.setSuffix(" Mpx")
        self.max_pixels.setValue(settings.max_megapixels)
        self.max_pixels.setToolTip(
            "Images (all frames of a clip or sequence together) larger than this are refused "
            "before they are decoded: a 16384×16384 image is 268 Mpx and needs about 1 GB"
        )
        form = QFormLayout()
        form.addRow("Models folder", _folder_row(self.models, self.browse_models))
        form.addRow("", self.env_note)
        form.addRow("Pasted images", _folder_row(self.pasted, browse_pasted))
        form.addRow("GPU memory limit", self.gpu_limit)
        form.addRow("CPU memory limit", self.cpu_limit)
        form.addRow(PIXEL_LIMIT, self.max_pixels)
        self.hand_back = QCheckBox("Hand memory back to the system after every operation")
        self.hand_back.setChecked(not settings.keep_cpu_arena)
        self.hand_back.setToolTip(
            "On: after each job Tessera keeps only its loaded models (RAM back within a few MB). "
            "Off: ONNX Runtime keeps its working memory for the next job — slightly faster "
            "repeats, more RAM held."
        )
        form.addRow("", self.hand_back)
        note = QLabel(
            "Changes apply when you press OK. New memory limits unload the loaded models; they "
            "load again with the next job. A CPU limit already in force changes only at the "
            "next start."
        )
        note.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.resize(560, self.sizeHint().height())

    def _browse(self, edit: QLineEdit, title: str) -> None:
        folder = QFileDialog.getExistingDirectory(self, title, edit.text())
        if folder:
            edit.setText(folder)

    def accept(self) -> None:
        if self.models.isEnabled():
            self.settings.models_dir = self.models.text().strip()
        self.settings.pasted_dir = self.pasted.text().strip() or str(self.settings.pasted_dir)
        self.settings.gpu_mem_limit_mb = self.gpu_limit.value()
        self.settings.cpu_mem_limit_mb = self.cpu_limit.value()
        self.settings.max_megapixels = self.max_pixels.value()
        self.settings.keep_cpu_arena = not self.hand_back.isChecked()
        self.settings.sync()
        super().accept()
