"""The memory panel: the loaded sessions with Unload / Unload all, and the duplicate-copy
diagnosis of DESIGN §4 (this process's GPU memory against its models' weights, and other
processes on the same GPU)."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.requests import MemoryReport
from engine.runtime.census import Census
from engine.runtime.census import report as census_report
from engine.runtime.memory import MemorySnapshot
from engine.runtime.sessions import SessionInfo, SessionKey
from gui.memory_parts import (
    MemoryParts,
    ProcessReading,
    parts_lines,
    read_parts,
    read_process,
)
from gui.widgets.vram_gauge import fmt_bytes

COLUMNS = ("Model", "Device", "Runtime", "Provider", "Weights", "Runs", "Last used")
CONTEXT_ALLOWANCE = 768 * 1024**2  # a CUDA context and cuDNN/cuBLAS handles, roughly


def ago(timestamp: float, now: float | None = None) -> str:
    seconds = max(0, int((now if now is not None else time.time()) - timestamp))
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def _provider(info: SessionInfo) -> str:
    """The provider, and on the CPU what runs the convolutions (Tessera's kernel's ISA)."""
    provider = info.provider.removesuffix("ExecutionProvider")
    if info.cpu_kernel is None or info.cpu_kernel == "onnxruntime":
        return provider
    return f"{provider} · Tessera {info.cpu_kernel}"


def _kernel_tip(info: SessionInfo) -> str:
    if info.cpu_kernel == "onnxruntime":
        why = f": {info.cpu_kernel_note}" if info.cpu_kernel_note else ""
        return f"Convolutions by ONNX Runtime's kernels{why}"
    return f"Convolutions by Tessera's kernel ({info.cpu_kernel})"


class MemoryPanel(QWidget):
    unloadRequested = Signal(object)  # SessionKey
    unloadAllRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sessions: tuple[SessionInfo, ...] = ()
        self.snapshot: MemorySnapshot | None = None
        self.parts: MemoryParts | None = None  # the last reading's parts of this process's RAM
        self._process: ProcessReading | None = None  # read with the next snapshot
        self._reading: ProcessReading | None = None  # the libraries and heap kept, now
        self.last: MemoryReport | None = None  # what the last operation did with memory
        self.census: Census | None = None  # every Tessera process of this user (M6)
        self.pictures: tuple[int, int] = (0, 0)  # the window's decoded pictures: count, bytes
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.unload_button = QPushButton("Unload")
        self.unload_button.setToolTip(
            "Release the selected model's session and its memory; the next job loads it again"
        )
        self.unload_button.clicked.connect(self._unload_selected)
        self.unload_all_button = QPushButton("Unload all")
        self.unload_all_button.setToolTip(
            "Release every model's session, and the window's pictures but those on screen"
        )
        self.unload_all_button.clicked.connect(self.unloadAllRequested)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.unload_button)
        buttons.addWidget(self.unload_all_button)
        # the diagnosis beside the table, not under it: the panel takes little of the height
        # It scrolls: at a low dock its last lines (what the RAM is made of) were cut off.
        self.summary.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        scroll = QScrollArea()
        scroll.setWidget(self.summary)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        side = QVBoxLayout()
        side.addWidget(scroll, 1)
        side.addLayout(buttons)
        layout = QHBoxLayout(self)
        layout.addWidget(self.table, 3)
        layout.addLayout(side, 2)
        self._refresh()

    def set_sessions(self, sessions: tuple[SessionInfo, ...]) -> None:
        selected = self.selected_key()
        self.sessions = tuple(sessions)
        self.table.setRowCount(len(self.sessions))
        now = time.time()
        for row, info in enumerate(self.sessions):
            values = (
                info.model_name,
                info.device,
                info.runtime,
                _provider(info),
                fmt_bytes(info.weight_bytes),
                str(info.runs),
                ago(info.last_used, now),
            )
            for col, text in enumerate(values):
                item = QTableWidgetItem(text)
                if col == 0:
                    item.setData(Qt.ItemDataRole.UserRole, info.key)
                    item.setToolTip(str(info.key.model))
                elif col == 3 and info.cpu_kernel is not None:
                    item.setToolTip(_kernel_tip(info))
                self.table.setItem(row, col, item)
            if info.key == selected:
                self.table.selectRow(row)
        self._refresh()

    def set_last_operation(self, report: MemoryReport | None) -> None:
        if report is not None:
            self.last = report
            self._refresh()

    def set_census(self, taken: Census) -> None:
        self.census = taken
        self._refresh()

    def set_pictures(self, pictures: int, nbytes: int) -> None:
        """What the window's picture budget holds (the viewer's frames, details, patches)."""
        if (pictures, nbytes) != self.pictures:
            self.pictures = (pictures, nbytes)
            self._refresh()

    def pictures_line(self) -> str:
        count, nbytes = self.pictures
        return f"Window pictures: {count} frame{'s' if count != 1 else ''} · {fmt_bytes(nbytes)}."

    def set_process(self, process: ProcessReading) -> None:
        """The libraries' pages and the heap kept, read on the task thread with the snapshot
        that follows (the memory controller's); without it the panel reads them itself."""
        self._process = process

    def set_snapshot(self, snapshot: MemorySnapshot) -> None:
        self.snapshot = snapshot
        self._reading = self._process or read_process()  # ~5 ms (smaps): once a reading
        self._process = None
        self._refresh()

    def selected_key(self) -> SessionKey | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        key = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        return key if isinstance(key, SessionKey) else None

    def _unload_selected(self) -> None:
        key = self.selected_key()
        if key is None and len(self.sessions) == 1:
            key = self.sessions[0].key
        if key is not None:
            self.unloadRequested.emit(key)

    def _update_buttons(self) -> None:
        self.unload_button.setEnabled(self.selected_key() is not None or len(self.sessions) == 1)
        # Unload all lets go of the window's pictures too: it has work with no model loaded.
        self.unload_all_button.setEnabled(bool(self.sessions) or self.pictures[1] > 0)

    def _refresh(self) -> None:
        self._update_buttons()
        self.summary.setText(self.diagnosis())

    def diagnosis(self) -> str:
        text = self._this_process()
        if self.census is None:
            return text
        # The same list and warnings as `python -m engine memory`.
        return text + "\n\n" + census_report(self.census)

    def _ram_lines(self, lines: list[str]) -> None:
        """This process's RAM and a line per part of it: what Unload all leaves is named (the
        parts come before the notes so that a low panel shows them)."""
        snap = self.snapshot
        if snap is None:
            return
        in_ram = sum(s.weight_bytes for s in self.sessions if not s.device.startswith("gpu"))
        self.parts = read_parts(snap.ram.process_rss, in_ram, self.pictures[1], self._reading)
        lines.append(f"This process uses {fmt_bytes(snap.ram.process_rss)} of RAM, of it:")
        lines.extend(parts_lines(self.parts, fmt_bytes))

    def _this_process(self) -> str:
        weights = sum(s.weight_bytes for s in self.sessions)
        count = len(self.sessions)
        lines = [
            f"{count} model{'s' if count != 1 else ''} loaded, {fmt_bytes(weights)} of weights."
            if count
            else "No model is loaded. Models load at their first job and stay loaded for the next."
        ]
        self._ram_lines(lines)
        lines.append(self.pictures_line())
        for info in self.sessions:
            if not info.shrinkable:
                lines.append(
                    f"{info.model_name} on {info.runtime}: this runtime cannot hand its working "
                    "memory back after a job (no arena shrink); Unload hands it back."
                )
        last = self.last
        if last is not None:
            held = last.rss_after - last.rss_after_load
            lines.append(
                f"The last job peaked {fmt_bytes(max(0, last.rss_peak - last.rss_after_load))} "
                f"above its loaded model and left {fmt_bytes(max(0, held))} of RAM held."
            )
            if last.gpu_used_after is not None and last.gpu_used_after_load is not None:
                gpu_held = last.gpu_used_after - last.gpu_used_after_load
                lines.append(f"  On the GPU it left {fmt_bytes(max(0, gpu_held))} held.")
        snap = self.snapshot
        if snap is None:
            return "\n".join(lines)
        if not snap.gpus:
            lines.append(f"No GPU reading: {snap.nvml_error or 'no NVIDIA GPU'}.")
            return "\n".join(lines)
        for gpu in snap.gpus:
            if gpu.own is None:
                lines.append(f"GPU {gpu.index}: the driver does not report this process's share.")
            else:
                lines.append(f"GPU {gpu.index}: this process holds {fmt_bytes(gpu.own)}.")
                gpu_weights = sum(
                    s.weight_bytes for s in self.sessions if s.device == f"gpu:{gpu.index}"
                )
                beyond = gpu.own - gpu_weights - CONTEXT_ALLOWANCE
                if gpu_weights and beyond > gpu_weights:
                    lines.append(
                        f"  That is {fmt_bytes(beyond)} beyond its models' weights — more than "
                        "another copy's worth. A cancelled job on a fixed-size model keeps its "
                        "working memory until the model is unloaded: Unload hands it back."
                    )
            for other in gpu.others:
                used = other.used or 0
                if weights and used >= 0.8 * weights:
                    lines.append(
                        f"  {other.name} (pid {other.pid}) holds {fmt_bytes(other.used)} on GPU "
                        f"{gpu.index} — as much as Tessera's models: possibly a second copy "
                        "(another Tessera or AI tool)."
                    )
                else:
                    lines.append(f"  {other.name} (pid {other.pid}): {fmt_bytes(other.used)}")
        return "\n".join(lines)


class MemoryDock(QFrame):
    """The memory panel with its title and close button, opened under the jobs beside the
    operation panel (the viewer keeps most of its height and Run stays in view)."""

    closeRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.panel = MemoryPanel()
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Hide the memory panel (Ctrl+M)")
        close.clicked.connect(self.closeRequested)
        head = QHBoxLayout()
        head.setContentsMargins(6, 2, 2, 0)
        head.addWidget(QLabel("<b>Loaded models and memory</b>"), 1)
        head.addWidget(close)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(0)
        box.addLayout(head)
        box.addWidget(self.panel)
        self.setMaximumHeight(190)
        self.hide()
