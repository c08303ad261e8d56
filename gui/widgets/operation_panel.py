"""The operation panel: operation; a model picker for people (name, scale and purpose, with
Get… for what is not installed); device and runtime (only what the probe found working is
enabled; the others say why); tile size; the output step (format, quality, size, folder); the
estimate; and Run, which names what it will do."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QStandardItemModel
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import CatalogEntry, Family
from engine.operation_specs import operations, takes_option
from engine.options import OutputOptions
from engine.requests import Operation
from gui.controllers.models import (
    ModelChoice,
    ModelGroup,
    default_choice,
    find_choice,
    get_offers,
    missing_hint,
    model_groups,
)
from gui.jobs import JobSettings, is_tiled
from gui.settings import AppSettings
from gui.widgets.combo_items import DATA, add_item, first_enabled, select_data
from gui.widgets.elided_label import WrappedLabel
from gui.widgets.output_options import OutputEditor, SaveToEditor

if TYPE_CHECKING:  # the model list is read on the task thread: onnx is not loaded by the window
    from engine.models.inventory import ModelInventory
    from engine.runtime.devices import RuntimeReport


# The option a clip's per-frame point clouds are asked by (an operation whose options have it).
POINT_CLOUDS = "point_clouds"
RUNTIME_LABELS = {
    "auto": "Automatic",
    "cpu": "CPU",
    "cuda": "CUDA",
    "tensorrt": "TensorRT",
    "directml": "DirectML",
    "coreml": "CoreML",
    "openvino": "OpenVINO",
    "migraphx": "MIGraphX",
}


def _section(title: str) -> QLabel:
    label = QLabel(f"<b>{title}</b>")
    label.setContentsMargins(0, 6, 0, 0)
    return label


class OperationPanel(QWidget):
    runRequested = Signal()
    fetchRequested = Signal(object)  # CatalogEntry to download, or None for the starter models
    browseRequested = Signal()  # the model browser (OpenModelDB's models)
    addModelRequested = Signal()
    choicesChanged = Signal()
    settingsChanged = Signal(object)  # JobSettings | None: what Run would start with now

    def __init__(self, settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.inventory: ModelInventory | None = None
        self.groups: list[ModelGroup] = []
        self.reports: tuple[RuntimeReport, ...] = ()
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        self.setMinimumWidth(300)

        self.operation = QComboBox()
        for op in operations():  # the operation table, in the order it offers them
            self.operation.addItem(op.label, op)
        self.model = QComboBox()
        self.model.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.model.setMinimumContentsLength(12)
        self.get_button = QPushButton("Get…")
        self.get_button.setToolTip("Get the models that are not installed yet, or add your own")
        self.get_menu = QMenu(self.get_button)
        self.get_menu.setToolTipsVisible(True)
        self.get_button.setMenu(self.get_menu)
        self.scale_row = QWidget()
        scale_layout = QHBoxLayout(self.scale_row)
        scale_layout.setContentsMargins(0, 0, 0, 0)
        scale_layout.setSpacing(2)
        self.scale_layout = scale_layout
        self.scale_buttons = QButtonGroup(self)
        self.scale_buttons.setExclusive(True)
        self.scale_row.hide()
        self.model_hint = WrappedLabel()
        self.model_hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.model_hint.setForegroundRole(self.model_hint.foregroundRole())

        self.device = QComboBox()
        self.device.setModel(QStandardItemModel(self.device))
        self.runtime = QComboBox()
        self.runtime.setModel(QStandardItemModel(self.runtime))
        self.runtime_hint = WrappedLabel("Checking which runtimes work here…")

        self.tile = QSpinBox()
        self.tile.setRange(0, 8192)
        self.tile.setSingleStep(64)
        self.tile.setSpecialValueText("Auto")
        self.tile.setSuffix(" px")
        self.tile.setToolTip(
            "Tile edge for upscaling, in input pixels. Auto picks the largest tile that fits the "
            "free memory and halves it if the device runs out."
        )

        # Geometry on a clip: a PLY per frame is megabytes a frame, so only when asked (#23).
        self.point_clouds = QCheckBox("Point cloud for every frame of a clip")
        self.point_clouds.setToolTip(
            "Geometry on a clip writes depth, normal and mask clips; with this, also one PLY "
            "point cloud per frame, in a folder beside them. A still always gets its PLY."
        )

        self.output_editor = OutputEditor(clips=True)
        self.save_to = SaveToEditor()

        self.run_on_drop = QCheckBox("Start jobs for dropped files")
        self.run_on_drop.setToolTip(
            "Queue a job for each dropped image with the settings above. Off: dropped files are "
            "only added; press Run when ready."
        )
        self.estimate = WrappedLabel()
        self.estimate.hide()
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.setToolTip("Queue the jobs (Ctrl+Return)")
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
        form.addRow("Scale", self.scale_row)
        self.form = form
        form.addRow("", self.model_hint)
        form.addRow("Device", self.device)
        form.addRow("Runtime", self.runtime)
        form.addRow("", self.runtime_hint)
        form.addRow("Tile size", self.tile)
        form.addRow("", self.point_clouds)
        out_form = QFormLayout()
        out_form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        out_form.addRow("Save to", self.save_to)
        line = QFrame()
        line.setFrameShape(QFrame.Shape.HLine)
        line.setFrameShadow(QFrame.Shadow.Sunken)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(line)
        layout.addWidget(_section("Output"))
        layout.addWidget(self.output_editor)
        layout.addLayout(out_form)
        layout.addSpacing(6)
        layout.addWidget(self.run_on_drop)
        layout.addWidget(self.estimate)
        layout.addWidget(self.run_button)
        layout.addStretch(1)

        self._restore()
        self.operation.currentIndexChanged.connect(self._operation_changed)
        self.model.currentIndexChanged.connect(self._group_changed)
        self.scale_buttons.idClicked.connect(self._scale_chosen)
        self.device.currentIndexChanged.connect(self._device_changed)
        self.runtime.currentIndexChanged.connect(self._runtime_changed)
        self.tile.valueChanged.connect(self._tile_changed)
        self.save_to.changed.connect(self._output_changed)
        self.output_editor.changed.connect(self._output_options_changed)
        self.run_on_drop.toggled.connect(self._run_on_drop_changed)
        self.point_clouds.toggled.connect(self._settings_edited)
        # Every edit, and every refill of the lists, may change what Run starts with.
        self.choicesChanged.connect(self._settings_edited)
        self.tile.valueChanged.connect(self._settings_edited)
        self.save_to.changed.connect(self._settings_edited)

    def _settings_edited(self) -> None:
        self.settingsChanged.emit(self.job_settings())

    # -- restore and persist ------------------------------------------------------------------
    def _restore(self) -> None:
        op = self.settings.operation
        for i in range(self.operation.count()):
            if self.operation.itemData(i).value == op:
                self.operation.setCurrentIndex(i)
        self.tile.setValue(self.settings.tile)
        folder = self.settings.output_dir
        self.save_to.set_choice(self.settings.save_to, Path(folder) if folder else None)
        self.run_on_drop.setChecked(self.settings.run_on_drop)
        self.output_editor.set_options(self.settings.output_options)
        self._fill_devices()
        self._fill_models()
        self._update_tile_enabled()

    def _operation_changed(self) -> None:
        self.settings.operation = self.current_operation().value
        self._fill_models()
        self._update_tile_enabled()
        self.choicesChanged.emit()

    def _group_changed(self) -> None:
        self._fill_scales(self._remembered_scale())
        self._model_changed()

    def _group_key(self, group: ModelGroup) -> str:
        # Each group remembers its own model, so "Fast preview" comes back at the scale the
        # person chose last (across groups, operations and restarts), not at its largest.
        return f"{self.current_operation().value}:{group.label}"

    def _remembered_scale(self) -> int | None:
        group = self.current_group()
        if group is None:
            return None
        found = find_choice([group], self.settings.model_for(self._group_key(group)))
        return found[1].scale if found is not None else None

    def _scale_chosen(self, scale: int) -> None:
        self._model_changed()

    def _model_changed(self) -> None:
        choice = self.current_model()
        group = self.current_group()
        if choice is not None and group is not None:
            self.settings.set_model_for(self.current_operation().value, choice.model)
            self.settings.set_model_for(self._group_key(group), choice.model)
        self._update_model_hint()
        self._update_run()
        self.output_editor.set_context(
            self.current_operation(), choice.scale if choice is not None else None
        )
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
        self.settings.save_to = self.save_to.choice()
        if self.save_to.folder is not None:
            self.settings.output_dir = str(self.save_to.folder)

    def _output_options_changed(self) -> None:
        self.settings.output_options = self.output_editor.options()
        self.choicesChanged.emit()

    def _run_on_drop_changed(self, checked: bool) -> None:
        self.settings.run_on_drop = checked

    def _update_tile_enabled(self) -> None:
        self.form.setRowVisible(
            self.point_clouds, takes_option(self.current_operation(), POINT_CLOUDS)
        )
        upscale = is_tiled(self.current_operation())
        self.tile.setEnabled(upscale)
        self.tile.setToolTip(
            "Tile edge for upscaling, in input pixels. Auto picks the largest tile that fits the "
            "free memory and halves it if the device runs out."
            if upscale
            else "Only upscaling works in tiles; the other operations run the model at its own "
            "resolution."
        )

    def browse_output(self) -> None:
        self.save_to.choose_folder()

    # -- models -------------------------------------------------------------------------------
    def set_inventory(self, inventory: ModelInventory) -> None:
        self.inventory = inventory
        self._fill_models()
        self._settings_edited()

    def current_operation(self) -> Operation:
        data = self.operation.currentData()
        return data if isinstance(data, Operation) else operations()[0]

    def current_family(self) -> Family:
        return self.current_operation().family

    def select_operation(self, operation: Operation) -> None:
        self.operation.setCurrentIndex(operations().index(operation))

    def current_group(self) -> ModelGroup | None:
        index = self.model.currentIndex()
        return self.groups[index] if 0 <= index < len(self.groups) else None

    def current_scale(self) -> int | None:
        checked = self.scale_buttons.checkedId()
        return checked if checked > 0 else None

    def current_model(self) -> ModelChoice | None:
        group = self.current_group()
        if group is None:
            return None
        return group.choice(self.current_scale() or (group.scales[-1] if group.scales else None))

    def select_model(self, model: str) -> bool:
        found = find_choice(self.groups, model)
        if found is None:
            return False
        group, choice = found
        self.model.setCurrentIndex(self.groups.index(group))
        self._fill_scales(choice.scale)
        self._model_changed()
        return True

    def select_scale(self, scale: int) -> bool:
        button = self.scale_buttons.button(scale)
        if button is None or not self.scale_row.isVisibleTo(self):
            return False
        button.setChecked(True)
        self._model_changed()
        return True

    def _fill_models(self) -> None:
        family = self.current_family()
        self.groups = model_groups(self.inventory, family)
        self.model.blockSignals(True)
        self.model.clear()
        for group in self.groups:
            self.model.addItem(group.text)
            self.model.setItemData(
                self.model.count() - 1, group.choices[-1].tip, Qt.ItemDataRole.ToolTipRole
            )
        wanted = default_choice(
            self.groups, self.settings.model_for(self.current_operation().value)
        )
        scale = None
        if wanted is not None:
            found = find_choice(self.groups, wanted.model)
            assert found is not None
            self.model.setCurrentIndex(self.groups.index(found[0]))
            scale = wanted.scale
        self.model.setEnabled(bool(self.groups))
        self.model.blockSignals(False)
        self._fill_scales(scale)
        self._fill_get_menu(family)
        self._update_model_hint()
        self._update_run()
        choice = self.current_model()
        self.output_editor.set_context(
            self.current_operation(), choice.scale if choice is not None else None
        )

    def _fill_scales(self, scale: int | None = None) -> None:
        for button in self.scale_buttons.buttons():
            self.scale_buttons.removeButton(button)
            self.scale_layout.removeWidget(button)
            button.hide()
            button.deleteLater()
        group = self.current_group()
        scales = group.scales if group is not None else []
        for s in scales:
            button = QToolButton()
            button.setText(f"×{s}")
            button.setCheckable(True)
            button.setToolTip(group.choice(s).name if group is not None else "")
            self.scale_buttons.addButton(button, s)
            self.scale_layout.addWidget(button)
        chosen = scale if scale in scales else (scales[-1] if scales else None)
        if chosen is not None:
            button = self.scale_buttons.button(chosen)
            if button is not None:
                button.setChecked(True)
        several = len(scales) > 1
        self.scale_row.setVisible(several)
        self.form.setRowVisible(self.scale_row, several)

    def _fill_get_menu(self, family: Family) -> None:
        self.get_menu.clear()
        offers = get_offers(self.inventory, family)
        for offer in offers:
            act = QAction(offer.text, self.get_menu)
            act.setToolTip(offer.tip)
            entry: CatalogEntry | None = offer.entry
            act.triggered.connect(lambda _c=False, e=entry: self.fetchRequested.emit(e))
            self.get_menu.addAction(act)
        if offers:
            self.get_menu.addSeparator()
        if family is Family.UPSCALE:  # OpenModelDB's are all image-to-image (×1 restores)
            self.get_menu.addAction("Browse more models (OpenModelDB)…", self.browseRequested.emit)
        self.get_menu.addAction("Add a model file (.onnx)…", self.addModelRequested.emit)

    def _update_model_hint(self) -> None:
        choice = self.current_model()
        if self.inventory is None:
            text = "Looking for models…"
        elif choice is None:
            text = missing_hint(self.inventory, self.current_family())
        else:
            text = f"{choice.name} — {choice.purpose}" if choice.purpose else choice.name
            if choice.problem:
                text += f"\nProblem: {choice.problem}"
        self.model_hint.setText(text)
        self.form.setRowVisible(self.model_hint, bool(text))

    def _update_run(self) -> None:
        self.run_button.setEnabled(self.current_model() is not None)

    def set_run_text(self, text: str) -> None:
        self.run_button.setText(text)

    def set_estimate(self, text: str) -> None:
        self.estimate.setText(text)
        self.estimate.setVisible(bool(text))

    def output_options(self) -> OutputOptions:
        return self.output_editor.options()

    def job_settings(self) -> JobSettings | None:
        """What Run starts with, or None while no model is chosen."""
        choice = self.current_model()
        if choice is None:
            return None
        operation = self.current_operation()
        return JobSettings(
            operation=operation,
            model=choice.model,
            model_label=choice.label,
            device=self.current_device(),
            runtime=self.current_runtime(),
            tile=self.current_tile() if is_tiled(operation) else None,
            output_dir=self.output_dir(),
            output=self.output_options(),
            options=operation.options_type(**{POINT_CLOUDS: True})
            if takes_option(operation, POINT_CLOUDS) and self.point_clouds.isChecked()
            else None,
            save_to=self.save_to.choice(),
        )

    # -- devices and runtimes -----------------------------------------------------------------
    def set_runtimes(self, reports: tuple[RuntimeReport, ...]) -> None:
        self.reports = tuple(reports)
        self._fill_devices()
        self._settings_edited()

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
            add_item(
                self.device,
                label if works else f"{label} (unavailable)",
                dev,
                enabled=works,
                tip=tip,
            )
        if not select_data(self.device, self.settings.device):
            first_enabled(self.device)
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
        add_item(
            self.runtime,
            "Automatic",
            "auto",
            enabled=any_ok,
            tip="The best runtime that works on this device",
        )
        for r in mine:
            label = RUNTIME_LABELS.get(r.runtime, r.runtime)
            tip = f"Runs on {r.provider}" if r.ok else f"Not available: {r.detail}"
            add_item(
                self.runtime,
                label if r.ok else f"{label} (unavailable)",
                r.runtime,
                enabled=r.ok,
                tip=tip,
            )
        if not select_data(self.runtime, self.settings.runtime):
            first_enabled(self.runtime)
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
        self.form.setRowVisible(self.runtime_hint, bool(self.runtime_hint.text()))

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
        """The folder chosen for every result; None: beside each image (see `save_to`)."""
        folder = self.save_to.chosen_folder()
        return folder.expanduser() if folder is not None else None

    def device_words(self) -> str:
        """'this CPU' or 'GPU 0', for the estimate."""
        device = self.current_device()
        return "this CPU" if device == "cpu" else f"GPU {device.split(':')[-1]}"
