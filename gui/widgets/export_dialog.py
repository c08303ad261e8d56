"""Save as: one result written again as PNG, JPEG or WebP, at its own size, a factor of the
input ("×2" of a ×4 result) or a width — the same output step a job takes, for a result that
is already there."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine.options import OutputOptions
from engine.requests import Operation
from gui.widgets.output_options import OutputEditor


def export_name(product: Path, options: OutputOptions) -> str:
    """`photo-realesrgan-x4plus-x2.jpg` for the product `photo-realesrgan-x4plus.png`."""
    stem = product.stem
    tag = options.size_tag()
    return f"{stem}-{tag}{options.format.suffix}" if tag else f"{stem}{options.format.suffix}"


class ExportDialog(QDialog):
    def __init__(
        self,
        product: Path,
        input_size: tuple[int, int],
        operation: Operation,
        scale: int | None,
        options: OutputOptions,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Save as")
        self.product = product
        self.input_size = input_size
        self.editor = OutputEditor()
        self.editor.set_context(operation, scale)
        self.editor.set_options(options)
        self.path = QLineEdit(str(product.with_name(export_name(product, options))))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        self.size_note = QLabel()
        form = QFormLayout()
        form.addRow("File", row)
        form.addRow("", self.size_note)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"<b>{product.name}</b>"))
        layout.addWidget(self.editor)
        layout.addLayout(form)
        layout.addStretch(1)  # a note that appears takes this room: Save stays where it is
        layout.addWidget(buttons)
        self.buttons = buttons
        self.editor.changed.connect(self._options_changed)
        self._options_changed()
        # Room for a note of up to three lines (JPEG's, a scale's) from the start, so picking
        # a format never grows the dialog under the pointer.
        room = 3 * self.fontMetrics().lineSpacing() if self.editor.note.isHidden() else 0
        self.resize(520, self.sizeHint().height() + room)

    def options(self) -> OutputOptions:
        return self.editor.options()

    def target(self) -> Path:
        return Path(self.path.text().strip()).expanduser()

    def _options_changed(self) -> None:
        options = self.options()
        current = self.target()
        self.path.setText(str(current.with_name(export_name(self.product, options))))
        size = options.target_size(*self.input_size)
        self.size_note.setText(
            f"{size[0]}×{size[1]} pixels" if size else "at the result's own size"
        )

    def _browse(self) -> None:
        options = self.options()
        name, _ = QFileDialog.getSaveFileName(
            self,
            "Save as",
            str(self.target()),
            f"{options.format.label} (*{options.format.suffix})",
        )
        if name:
            self.path.setText(name)

    def ask(self) -> tuple[Path, OutputOptions] | None:
        """Run the dialog, then "Replace the file?" where the target exists: the target and
        options chosen, or None when the person cancelled."""
        if not self.exec():
            return None
        target = self.target()
        if target.exists() and target != self.product:
            answer = QMessageBox.question(
                self.parentWidget(),
                "Replace the file?",
                f"{target.name} exists in {target.parent}. Replace it?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if answer != QMessageBox.StandardButton.Yes:
                return None
        return target, self.options()
