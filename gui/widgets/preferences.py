"""Preferences: the models folder and the memory limits (M9). They apply at the next start: the
CPU arena limit can be registered only once per process, and loaded sessions keep theirs."""

from __future__ import annotations

from PySide6.QtWidgets import (
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

from gui.settings import AppSettings


def _limit_box(value: int) -> QSpinBox:
    box = QSpinBox()
    box.setRange(0, 1024 * 1024)
    box.setSingleStep(256)
    box.setSuffix(" MB")
    box.setSpecialValueText("No limit")
    box.setValue(value)
    return box


class PreferencesDialog(QDialog):
    def __init__(
        self, settings: AppSettings, default_models: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preferences")
        self.settings = settings
        self.models = QLineEdit(settings.models_dir)
        self.models.setPlaceholderText(default_models)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.models, 1)
        row.addWidget(browse)
        self.gpu_limit = _limit_box(settings.gpu_mem_limit_mb)
        self.gpu_limit.setToolTip("The most GPU memory ONNX Runtime may take per model (CUDA)")
        self.cpu_limit = _limit_box(settings.cpu_mem_limit_mb)
        self.cpu_limit.setToolTip("The most memory ONNX Runtime's CPU arena may take")
        form = QFormLayout()
        form.addRow("Models folder", row)
        form.addRow("GPU memory limit", self.gpu_limit)
        form.addRow("CPU memory limit", self.cpu_limit)
        note = QLabel("These take effect the next time Tessera starts.")
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

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Models folder", self.models.text())
        if folder:
            self.models.setText(folder)

    def accept(self) -> None:
        self.settings.models_dir = self.models.text().strip()
        self.settings.gpu_mem_limit_mb = self.gpu_limit.value()
        self.settings.cpu_mem_limit_mb = self.cpu_limit.value()
        self.settings.sync()
        super().accept()
