"""The main window: inputs on the left, the viewer in the middle, the operation panel on the
right, the job list below, and the status bar with the memory gauge and the loaded models."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QMimeData, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDesktopServices,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QGuiApplication,
    QImage,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QFrame,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import CatalogEntry
from engine.models.contracts import ModelSpec
from engine.models.inventory import ModelInventory, discover, install_model
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    Result,
)
from engine.runtime import memory
from engine.runtime.memory import MemorySnapshot
from engine.runtime.sessions import SessionInfo
from engine.settings import EngineSettings, default_data_dir
from gui.engine_thread import EngineThread
from gui.fetcher import FetchOutcome, ModelFetcher
from gui.inputs import classify_paths
from gui.jobs import PRODUCT_LABELS, Job, JobState, fmt_duration
from gui.settings import AppSettings
from gui.tasks import TaskOutcome, TaskThread
from gui.widgets.images import DisplayImage, load_display, load_display_paths, make_thumbnail
from gui.widgets.inputs_panel import THUMB, InputSource, InputsPanel
from gui.widgets.job_list import JobList
from gui.widgets.memory_panel import MemoryPanel
from gui.widgets.notice_bar import NoticeBar, NoticeLevel
from gui.widgets.operation_panel import OperationPanel
from gui.widgets.preferences import PreferencesDialog
from gui.widgets.viewer import ViewerPanel
from gui.widgets.vram_gauge import VramGauge

log = logging.getLogger(__name__)

POLL_MS = 1000  # the memory gauge's pace
STATUS_MS = 10_000
PROGRESS_REDRAW_MS = 50  # rows redraw at most this often, however fast tiles finish


@dataclass(frozen=True)
class DropOutcome:
    """What one drop (or open, or paste) did."""

    sources: tuple[InputSource, ...]
    jobs: tuple[str, ...]  # request ids queued
    models: tuple[Path, ...]  # .onnx files sent to installation
    refused: tuple[str, ...]  # the reasons, one per refused path


def _local_paths(mime: QMimeData) -> tuple[list[Path], list[str]]:
    paths: list[Path] = []
    remote: list[str] = []
    for url in mime.urls():
        if url.isLocalFile():
            paths.append(Path(url.toLocalFile()))
        else:
            remote.append(url.toString())
    return paths, remote


class MainWindow(QMainWindow):
    def __init__(
        self,
        settings: AppSettings | None = None,
        *,
        engine_settings: EngineSettings | None = None,
        data_dir: Path | None = None,
        start: bool = True,
        probe_runtimes: bool = True,
    ) -> None:
        super().__init__()
        self.setWindowTitle("Tessera")
        self.setObjectName("TesseraMainWindow")
        self.setAcceptDrops(True)
        self.settings = settings or AppSettings()
        self.data_dir = data_dir or default_data_dir()
        self.confirm_close = True  # tests set False to skip the question when closing mid-job
        self.jobs: dict[str, Job] = {}
        self.job_sources: dict[str, InputSource] = {}
        self.latest_job: dict[str, str] = {}  # input key → its newest finished job
        self.inventory: ModelInventory | None = None
        # Files given at start-up (or dropped at once) arrive before the models are listed:
        # their jobs are queued as soon as the inventory is in.
        self._waiting_for_models: list[InputSource] = []
        self.shown: tuple[str | None, str | None] = (None, None)  # (input key, job id)
        self._view_gen = 0
        self._dirty: set[str] = set()
        self._probe = probe_runtimes
        self._closed = False

        self.engine = EngineThread(engine_settings or self.settings.engine_settings(), self)
        self.tasks = TaskThread(self)
        self.fetcher = ModelFetcher(self)

        self._build_widgets()
        self._build_menus()
        self._wire()
        geometry = self.settings.geometry()
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(1280, 820)
        state = self.settings.window_state()
        if state is not None:
            self.restoreState(state)
        if start:
            self.start()

    # -- construction -------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.notice = NoticeBar()
        self.inputs = InputsPanel()
        self.viewer = ViewerPanel()
        self.panel = OperationPanel(self.settings)
        self.job_list = JobList()
        self.h_split = QSplitter(Qt.Orientation.Horizontal)
        self.h_split.addWidget(self.inputs)
        self.h_split.addWidget(self.viewer)
        # scrolls rather than clips when the job list or the memory panel takes the height
        self.panel_scroll = QScrollArea()
        self.panel_scroll.setWidgetResizable(True)
        self.panel_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.panel_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.panel_scroll.setWidget(self.panel)
        self.panel_scroll.setMinimumWidth(self.panel.minimumWidth() + 16)
        self.h_split.addWidget(self.panel_scroll)
        self.h_split.setStretchFactor(0, 0)
        self.h_split.setStretchFactor(1, 1)
        self.h_split.setStretchFactor(2, 0)
        self.h_split.setSizes([270, 650, 360])
        self.h_split.setCollapsible(1, False)
        self.v_split = QSplitter(Qt.Orientation.Vertical)
        self.v_split.addWidget(self.h_split)
        self.v_split.addWidget(self.job_list)
        self.v_split.setStretchFactor(0, 1)
        self.v_split.setStretchFactor(1, 0)
        self.v_split.setSizes([560, 220])
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(4, 4, 4, 0)
        layout.addWidget(self.notice)
        layout.addWidget(self.v_split, 1)
        self.setCentralWidget(central)

        self.memory_panel = MemoryPanel()
        self.memory_dock = QDockWidget("Loaded models and memory", self)
        self.memory_dock.setObjectName("memoryDock")
        self.memory_dock.setWidget(self.memory_panel)
        # at the bottom: the table needs width more than height
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.memory_dock)
        self.memory_dock.hide()

        self.models_button = QToolButton()
        self.models_button.setAutoRaise(True)
        self.models_button.setText("0 models loaded")
        self.models_button.setToolTip(
            "Show the loaded models and their memory (Unload, Unload all)"
        )
        self.gauge = VramGauge()
        self.statusBar().addPermanentWidget(self.models_button)
        self.statusBar().addPermanentWidget(self.gauge)
        self.statusBar().setSizeGripEnabled(True)

        self.memory_timer = QTimer(self)
        self.memory_timer.setInterval(POLL_MS)
        self.memory_timer.timeout.connect(self.poll_memory)
        self.redraw_timer = QTimer(self)
        self.redraw_timer.setSingleShot(True)
        self.redraw_timer.setInterval(PROGRESS_REDRAW_MS)
        self.redraw_timer.timeout.connect(self._redraw_rows)

    def _action(
        self,
        text: str,
        slot: object,
        keys: Sequence[QKeySequence | QKeySequence.StandardKey | str] = (),
        tip: str = "",
    ) -> QAction:
        action = QAction(text, self)
        shortcuts = [k if isinstance(k, QKeySequence) else QKeySequence(k) for k in keys]
        shortcuts = [k for k in shortcuts if not k.isEmpty()]
        if shortcuts:
            action.setShortcuts(shortcuts)
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(slot)
        self.addAction(action)  # shortcuts work even with the menu bar hidden
        return action

    def _build_menus(self) -> None:
        key = QKeySequence.StandardKey
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self.open_action = self._action("&Open images…", self.open_dialog, [key.Open])
        file.addAction(self.open_action)
        file.addAction(self._action("Open a &folder of frames…", self.open_folder_dialog))
        self.paste_action = self._action(
            "&Paste image", self.paste, [key.Paste], "Add the image (or files) on the clipboard"
        )
        file.addAction(self.paste_action)
        file.addSeparator()
        file.addAction(self._action("&Add a model file…", self.add_model_dialog))
        file.addAction(self._action("Refresh the &model list", self.refresh_models))
        file.addSeparator()
        file.addAction(self._action("Pr&eferences…", self.preferences, [key.Preferences]))
        file.addSeparator()
        file.addAction(self._action("&Quit", self.close, [key.Quit]))

        view = bar.addMenu("&View")
        view.addAction(self._action("Zoom &in", self.viewer.view.zoom_in, [key.ZoomIn, "Ctrl+="]))
        view.addAction(self._action("Zoom &out", self.viewer.view.zoom_out, [key.ZoomOut]))
        view.addAction(self._action("&Fit", self.viewer.view.fit, ["Ctrl+0"]))
        view.addAction(self._action("&Actual size", self.viewer.view.actual_size, ["Ctrl+1"]))
        view.addSeparator()
        toggle = self.memory_dock.toggleViewAction()
        toggle.setText("&Memory panel")
        toggle.setShortcut(QKeySequence("Ctrl+M"))
        view.addAction(toggle)

        jobs = bar.addMenu("&Jobs")
        self.run_action = self._action(
            "&Run",
            self.run_selected,
            ["Ctrl+Return", "Ctrl+Enter"],
            "Queue a job for the selected inputs, or for all of them",
        )
        jobs.addAction(self.run_action)
        self.cancel_action = self._action(
            "&Cancel the running job", self.cancel_running, [key.Cancel]
        )
        jobs.addAction(self.cancel_action)
        jobs.addAction(self._action("Cancel &all jobs", self.cancel_all))
        jobs.addAction(self._action("C&lear finished jobs", self.job_list.clear_ended))

        helpmenu = bar.addMenu("&Help")
        helpmenu.addAction(self._action("Open the &log folder", self.open_log_folder))
        helpmenu.addAction(self._action("&About Tessera", self.about))

    def _wire(self) -> None:
        e = self.engine
        e.operationStarted.connect(self._on_started)
        e.progressChanged.connect(self._on_progress)
        e.operationFinished.connect(self._on_finished)
        e.operationFailed.connect(self._on_failed)
        e.operationCancelled.connect(self._on_cancelled)
        e.sessionsChanged.connect(self._on_sessions)
        e.runtimesProbed.connect(self.panel.set_runtimes)
        self.panel.runRequested.connect(self.run_selected)
        self.panel.fetchRequested.connect(self.fetch_models)
        self.panel.addModelRequested.connect(self.add_model_dialog)
        self.inputs.inputSelected.connect(self._on_input_selected)
        self.inputs.addRequested.connect(self.open_dialog)
        self.inputs.starterRequested.connect(lambda: self.fetch_models(None))
        self.job_list.cancelRequested.connect(self.cancel_job)
        self.job_list.cancelAllRequested.connect(self.cancel_all)
        self.job_list.showRequested.connect(self.show_job)
        self.viewer.productChosen.connect(self._on_product_chosen)
        self.memory_panel.unloadRequested.connect(self.engine.unload)
        self.memory_panel.unloadAllRequested.connect(self.engine.unload_all)
        self.models_button.clicked.connect(self.show_memory_panel)
        self.gauge.clicked.connect(self.show_memory_panel)
        self.fetcher.fetchProgressed.connect(self._on_fetch_progress)
        self.fetcher.fetchFinished.connect(self._on_fetch_finished)

    def start(self) -> None:
        self.engine.start(probe_runtimes=self._probe)
        self.tasks.start()
        self.refresh_models()
        # The first reading imports psutil and starts NVML (a few hundred ms): off this thread.
        self.tasks.submit(memory.snapshot, self._first_snapshot)

    def drop_target(self) -> QWidget:
        return self

    def models_dir(self) -> Path:
        return self.engine.settings.resolved_models_dir()

    # -- messages -----------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.statusBar().showMessage(text, STATUS_MS)

    def warn(self, text: str) -> None:
        log.info("notice: %s", text)
        self.notice.show_message(text, NoticeLevel.WARNING)
        self.statusBar().showMessage(text.splitlines()[0], STATUS_MS)

    def inform(self, text: str) -> None:
        self.notice.show_message(text, NoticeLevel.INFO)
        self.statusBar().showMessage(text.splitlines()[0], STATUS_MS)

    # -- drag and drop, open, paste -----------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        mime = event.mimeData()
        if mime.hasUrls() or mime.hasImage():
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if event.mimeData().hasUrls() or event.mimeData().hasImage():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        self.accept_mime(event.mimeData())
        event.acceptProposedAction()

    def accept_mime(self, mime: QMimeData) -> DropOutcome | None:
        if mime.hasUrls():
            paths, remote = _local_paths(mime)
            if remote and not paths:
                self.warn(
                    "Only files on this computer can be dropped; download "
                    f"{remote[0]} first. Nothing was added."
                )
                return None
            outcome = self.accept_paths(paths)
            if remote:
                self.warn("Skipped what is not a local file: " + ", ".join(remote[:3]))
            return outcome
        if mime.hasImage():
            image = mime.imageData()
            if isinstance(image, QImage) and not image.isNull():
                return self.accept_image(image)
        self.warn(
            "Only image files, folders of frames and .onnx models can be dropped here. Nothing was added."
        )
        return None

    def accept_paths(self, paths: Sequence[Path | str], *, run: bool | None = None) -> DropOutcome:
        """Add images and folders as inputs (queueing jobs when run-on-drop is on), install
        .onnx files, and say why anything else was refused."""
        found = classify_paths([Path(p) for p in paths])
        for model in found.models:
            self.install_model_file(model)
        added = self.inputs.add_sources(list(found.sources))
        for source in added:
            self._request_thumbnail(source)
        if found.refused:
            tail = "" if found.sources or found.models else " Nothing was added."
            self.warn("\n".join(found.refused) + tail)
        run = self.panel.run_on_drop.isChecked() if run is None else run
        jobs: list[str] = []
        if found.sources:
            if run and self.inventory is None:
                self._waiting_for_models.extend(found.sources)
                self.say("Looking for the installed models; the jobs start in a moment.")
            elif run:
                jobs = self.queue_jobs(list(found.sources))
            else:
                self.say(
                    f"Added {len(found.sources)} input(s); press Run (Ctrl+Return) to process them."
                )
            if self.shown == (None, None) or not jobs:
                self.inputs.select(found.sources[0].key)
        return DropOutcome(found.sources, tuple(jobs), found.models, found.refused)

    def accept_image(self, image: QImage) -> DropOutcome | None:
        """A pasted or dragged-in picture: saved as a PNG in the data folder, then an input."""
        folder = self.data_dir / "pasted"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self.warn(f"Cannot save the pasted image in {folder}: {e.strerror or e}.")
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = folder / f"pasted-{stamp}.png"
        n = 1
        while path.exists():
            path = folder / f"pasted-{stamp}-{n}.png"
            n += 1
        if not image.save(str(path)):  # the .png suffix picks the format
            self.warn(f"Cannot save the pasted image as {path}.")
            return None
        return self.accept_paths([path])

    def paste(self) -> None:
        clipboard = QGuiApplication.clipboard()
        mime = clipboard.mimeData()
        if mime is not None and mime.hasUrls():
            self.accept_mime(mime)
            return
        image = clipboard.image()
        if image.isNull():
            self.warn("The clipboard holds no image or files to add.")
            return
        self.accept_image(image)

    def open_files_and_raise(self, files: list[str]) -> None:
        """Files handed over by a second launch (single instance), or given on the command line."""
        if files:
            self.accept_paths([Path(f) for f in files])
        self.show()
        self.raise_()
        self.activateWindow()

    def open_dialog(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(
            self,
            "Open images",
            "",
            "Images (*.png *.jpg *.jpeg *.webp *.gif *.tif *.tiff *.bmp *.avif *.tga *.qoi);;"
            "ONNX models (*.onnx);;All files (*)",
        )
        if files:
            self.accept_paths([Path(f) for f in files])

    def open_folder_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a folder of frames")
        if folder:
            self.accept_paths([Path(folder)])

    # -- jobs ---------------------------------------------------------------------------------
    def queue_jobs(self, sources: list[InputSource]) -> list[str]:
        choice = self.panel.current_model()
        operation = self.panel.current_operation()
        if choice is None:
            self.warn(
                f"No model for {operation.label.lower()} is installed, so nothing was queued. "
                "Use Get… beside the model list, or drop an .onnx model file."
            )
            return []
        ids: list[str] = []
        for source in sources:
            request = OperationRequest(
                operation=operation,
                model=choice.model,
                inputs=source.paths,
                device=self.panel.current_device(),
                runtime=self.panel.current_runtime(),
                output_dir=self.panel.output_dir(),
                tile=self.panel.current_tile() if operation is Operation.UPSCALE else None,
                sequence=source.sequence,
            )
            job = Job(request, choice.label)
            self.jobs[request.id] = job
            self.job_sources[request.id] = source
            self.job_list.add(job)
            self.engine.submit(request)
            ids.append(request.id)
        self.say(
            f"Queued {len(ids)} job{'s' if len(ids) != 1 else ''}: {operation.label} with {choice.label}."
        )
        return ids

    def run_selected(self) -> list[str]:
        sources = self.inputs.selected() or self.inputs.all_sources()
        if not sources:
            self.warn("Add images first: drop them on the window or use File ▸ Open.")
            return []
        return self.queue_jobs(sources)

    def cancel_job(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state.cancellable:
            job.on_cancel_requested()
            self.job_list.update_job(job_id)
        self.engine.cancel(job_id)

    def cancel_running(self) -> None:
        running = self.engine.running_id
        if running is not None:
            self.cancel_job(running)

    def cancel_all(self) -> None:
        for job in self.jobs.values():
            if job.state.cancellable:
                job.on_cancel_requested()
                self.job_list.update_job(job.id)
        self.engine.cancel_all()

    def _on_started(self, request: OperationRequest) -> None:
        job = self.jobs.get(request.id)
        if job is not None:
            job.on_started()
            self.job_list.update_job(job.id)

    def _on_progress(self, event: Progress) -> None:
        job = self.jobs.get(event.request_id)
        if job is None:
            return
        job.on_progress(event)
        self._dirty.add(job.id)
        if not self.redraw_timer.isActive():
            self.redraw_timer.start()

    def _redraw_rows(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for job_id in dirty:
            self.job_list.update_job(job_id)

    def _on_finished(self, result: Result) -> None:
        job = self.jobs.get(result.request_id)
        if job is None:
            return
        job.on_finished(result)
        self._dirty.discard(job.id)
        self.job_list.update_job(job.id)
        source = self.job_sources.get(job.id)
        if source is not None:
            self.latest_job[source.key] = job.id
        took = fmt_duration(job.elapsed())
        if result.products:
            self.say(
                f"{job.request.operation.label} done in {took}: {result.products[0].path.name}"
            )
        if job.message:
            self.warn(job.message)
        # Show it when the person is looking at this input, or at nothing in particular.
        key, _ = self.shown
        if job.viewable() and (key is None or (source is not None and key == source.key)):
            self.show_job(job.id)

    def _on_failed(self, failure: OperationFailure) -> None:
        job = self.jobs.get(failure.request_id)
        if job is None:
            return
        job.on_failed(failure.message)
        self._dirty.discard(job.id)
        self.job_list.update_job(job.id)
        self.say(f"{job.request.operation.label} failed: {failure.message.splitlines()[0]}")

    def _on_cancelled(self, cancellation: OperationCancellation) -> None:
        job = self.jobs.get(cancellation.request_id)
        if job is None:
            return
        job.on_cancelled()
        self._dirty.discard(job.id)
        self.job_list.update_job(job.id)
        self.say(f"Cancelled: {job.title}")

    # -- viewer -------------------------------------------------------------------------------
    def _on_input_selected(self, source: InputSource | None) -> None:
        if source is None:
            self.shown = (None, None)
            self.viewer.clear()
            return
        job_id = self.latest_job.get(source.key)
        if self.shown == (source.key, job_id):
            return
        self._load_view(source, self.jobs.get(job_id) if job_id else None)

    def show_job(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        source = self.job_sources.get(job_id) or InputSource(
            job.request.inputs, job.request.sequence
        )
        if source.key in self.inputs.sources and self.inputs.current() != source:
            self.shown = (source.key, job_id)  # so the selection change does not load twice
            self.inputs.select(source.key)
        self._load_view(source, job if job.state is JobState.FINISHED else None)

    def _on_product_chosen(self, index: int) -> None:
        key, job_id = self.shown
        job = self.jobs.get(job_id) if job_id else None
        source = self.inputs.sources.get(key) if key else None
        if job is not None:
            source = source or self.job_sources.get(job.id)
            self._load_view(source, job, index)

    def _load_view(
        self, source: InputSource | None, job: Job | None, product_index: int = 0
    ) -> None:
        self._view_gen += 1
        generation = self._view_gen
        self.shown = (source.key if source else None, job.id if job else None)
        products = job.viewable() if job is not None else []
        product = products[min(product_index, len(products) - 1)] if products else None
        self.viewer.set_products(
            [PRODUCT_LABELS[p.kind] for p in products],
            min(product_index, max(0, len(products) - 1)),
        )
        paths = source.paths if source is not None else None
        after_path = product.path if product is not None else None

        def work() -> tuple[DisplayImage | None, DisplayImage | None]:
            before = load_display_paths(paths) if paths else None
            after = load_display(after_path) if after_path else None
            return before, after

        self.tasks.submit(work, lambda outcome: self._view_loaded(generation, outcome), urgent=True)

    def _view_loaded(self, generation: int, outcome: TaskOutcome) -> None:
        if generation != self._view_gen or self._closed:
            return  # the person has moved on
        if outcome.error is not None:
            self.viewer.clear(f"Cannot show this image:\n{outcome.error}")
            return
        before, after = outcome.value
        self.viewer.show_images(before, after)

    def _request_thumbnail(self, source: InputSource) -> None:
        def done(outcome: TaskOutcome) -> None:
            if self._closed:
                return
            if outcome.error is not None:
                self.inputs.set_thumbnail(source.key, QImage(), None)
                return
            thumb = outcome.value
            caption = f"{source.label}\n{thumb.width}×{thumb.height}"
            self.inputs.set_thumbnail(source.key, thumb.image, caption)

        self.tasks.submit(lambda: make_thumbnail(source.paths[0], THUMB), done)

    # -- models -------------------------------------------------------------------------------
    def refresh_models(self) -> None:
        folder = self.models_dir()
        self.tasks.submit(lambda: discover(folder), self._on_inventory)

    def _on_inventory(self, outcome: TaskOutcome) -> None:
        if self._closed:
            return
        if outcome.error is not None:
            self.warn(f"Cannot list the models in {self.models_dir()}: {outcome.error}")
            return
        inventory: ModelInventory = outcome.value
        self.inventory = inventory
        self.panel.set_inventory(inventory)
        self.inputs.set_inventory(inventory)
        if self._waiting_for_models:
            waiting, self._waiting_for_models = self._waiting_for_models, []
            self.queue_jobs(waiting)

    def install_model_file(self, path: Path) -> None:
        folder = self.models_dir()
        self.say(f"Checking {path.name}…")
        self.tasks.submit(
            lambda: install_model(path, folder), lambda o: self._on_installed(path, o)
        )

    def _on_installed(self, path: Path, outcome: TaskOutcome) -> None:
        if self._closed:
            return
        if outcome.error is not None:
            self.warn(f"{path.name} was not added: {outcome.error}")
            return
        ref: ModelSpec = outcome.value
        self.inform(f"Added {ref.path.name} ({ref.contract.describe()}) to your models.")
        self.refresh_models()

    def add_model_dialog(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add a model", "", "ONNX models (*.onnx)")
        for f in files:
            self.install_model_file(Path(f))

    def fetch_models(self, entry: CatalogEntry | None) -> None:
        if self.fetcher.is_running():
            self.say("A model download is already running.")
            return
        if entry is None:
            args, what = ["fetch-starter"], "the starter models"
        else:
            args, what = ["download", entry.id], entry.name
        self.fetcher.start(args, what, self.models_dir())
        self.inputs.set_fetch_status(f"Getting {what}…", True)
        self.say(f"Getting {what}; the window stays usable meanwhile.")

    def _on_fetch_progress(self, line: str) -> None:
        self.inputs.set_fetch_status(line, True)
        self.statusBar().showMessage(line, STATUS_MS)

    def _on_fetch_finished(self, outcome: FetchOutcome) -> None:
        if outcome.ok:
            self.inputs.set_fetch_status("", False)
            self.inform(f"Got {outcome.description}.")
        else:
            self.inputs.set_fetch_status(f"Failed: {outcome.message}", False)
            self.warn(f"Getting {outcome.description} failed: {outcome.message}")
        self.refresh_models()

    # -- memory -------------------------------------------------------------------------------
    def _first_snapshot(self, outcome: TaskOutcome) -> None:
        if self._closed:
            return
        if isinstance(outcome.value, MemorySnapshot):
            self._show_snapshot(outcome.value)
        self.memory_timer.start()

    def poll_memory(self) -> None:
        try:
            snap = memory.snapshot()
        except Exception:  # a flaky driver must not break the window
            log.exception("memory snapshot failed")
            return
        self._show_snapshot(snap)

    def _show_snapshot(self, snap: MemorySnapshot) -> None:
        self.gauge.set_snapshot(snap)
        self.memory_panel.set_snapshot(snap)

    def _on_sessions(self, sessions: tuple[SessionInfo, ...]) -> None:
        self.memory_panel.set_sessions(sessions)
        n = len(sessions)
        self.models_button.setText(f"{n} model{'s' if n != 1 else ''} loaded")

    def show_memory_panel(self) -> None:
        if not self.memory_dock.isVisible():
            self.memory_dock.show()
            self.resizeDocks([self.memory_dock], [210], Qt.Orientation.Vertical)
        self.memory_dock.raise_()
        self.engine.refresh_sessions()

    # -- misc ---------------------------------------------------------------------------------
    def preferences(self) -> None:
        dialog = PreferencesDialog(self.settings, str(self.models_dir()), self)
        if dialog.exec():
            self.say("Saved. The new folders and limits apply the next time Tessera starts.")

    def open_log_folder(self) -> None:
        folder = self.data_dir / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def about(self) -> None:
        QMessageBox.about(
            self,
            "About Tessera",
            "<b>Tessera</b><br>Edit images with local ONNX models. One loaded copy of each "
            "model, reused for every job; GPU memory handed back after each operation.<br><br>"
            f"Models: {self.models_dir()}<br>Log: {self.data_dir / 'logs'}",
        )

    def sizeHint(self) -> QSize:
        return QSize(1280, 820)

    # -- closing ------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closed:
            event.accept()
            return
        if self.engine.is_busy() and self.confirm_close:
            count = len(self.engine.open_requests())
            answer = QMessageBox.question(
                self,
                "Jobs are running",
                f"{count} job{'s are' if count != 1 else ' is'} still running or queued. "
                "Cancel and quit?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if answer != QMessageBox.StandardButton.Yes:
                event.ignore()
                return
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Save the settings, cancel every job, and stop every thread and child process."""
        if self._closed:
            return
        self._closed = True
        self.settings.save_window(self.saveGeometry(), self.saveState())
        self.settings.sync()
        self.memory_timer.stop()
        self.redraw_timer.stop()
        self.job_list.clock.stop()
        self.fetcher.kill()
        self.engine.stop()  # cancels, waits for the engine between runs
        self.tasks.stop()
