"""The main window: builds the widgets and connects them to the controllers.

Images on the left, the result in the middle (before/after, versions, Save as, Copy, drag out),
the operation panel with the output step and Run on the right, the job list below (one line
when idle), and the status bar with the memory gauge and the loaded models. Job state lives in
`gui.controllers.jobs`, the model list in `gui.controllers.models`; what is here is widgets,
their wiring, and the desktop's manners (drag and drop, clipboard, opening files, notices,
notifications, recent files, preferences).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QMimeData, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDesktopServices,
    QDragEnterEvent,
    QDragLeaveEvent,
    QDragMoveEvent,
    QDropEvent,
    QGuiApplication,
    QImage,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import CatalogEntry
from engine.models.inventory import ModelInventory
from engine.options import OutputOptions
from engine.previews import PreviewResult
from engine.runtime import memory
from engine.runtime.memory import MemorySnapshot
from engine.runtime.sessions import SessionInfo
from engine.settings import EngineSettings, default_data_dir
from gui.controllers.jobs import JobsController
from gui.controllers.models import ModelsController
from gui.controllers.preview import PreviewController
from gui.controllers.results import cannot_open, export_result
from gui.controllers.speed import SpeedBook
from gui.controllers.view import ViewController
from gui.engine_thread import EngineThread
from gui.inputs import InputSource
from gui.jobs import JobState, Version, fmt_duration, viewable_products
from gui.messages import Notice, NoticeLevel, Topic
from gui.notifications import Notifier, should_notify
from gui.settings import AppSettings
from gui.tasks import TaskOutcome, TaskThread
from gui.widgets.drop_overlay import DropOverlay
from gui.widgets.export_dialog import ExportDialog
from gui.widgets.images import DisplayImage, load_display_paths, make_thumbnail
from gui.widgets.inputs_panel import THUMB, InputMark, InputsPanel
from gui.widgets.job_list import JobList
from gui.widgets.memory_panel import MemoryPanel
from gui.widgets.notice_bar import NoticeBar
from gui.widgets.operation_panel import OperationPanel
from gui.widgets.preferences import PreferencesDialog
from gui.widgets.version_strip import file_mime
from gui.widgets.viewer import ViewerPanel
from gui.widgets.vram_gauge import VramGauge
from gui.widgets.welcome import WelcomePage

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
    sequence_offer: tuple[Path, ...] = ()


def _local_paths(mime: QMimeData) -> tuple[list[Path], list[str]]:
    paths: list[Path] = []
    remote: list[str] = []
    for url in mime.urls():
        if url.isLocalFile():
            paths.append(Path(url.toLocalFile()))
        else:
            remote.append(url.toString())
    return paths, remote


def _drop_words(mime: QMimeData) -> str:
    paths, remote = _local_paths(mime)
    if paths:
        count = len(paths)
        return f"Drop to add {count} file{'s' if count != 1 else ''}"
    if mime.hasImage():
        return "Drop to add this picture"
    return "Only files on this computer can be dropped" if remote else "Drop to add"


class MainWindow(QMainWindow):
    def __init__(
        self,
        settings: AppSettings | None = None,
        *,
        engine_settings: EngineSettings | None = None,
        data_dir: Path | None = None,
        start: bool = True,
        probe_runtimes: bool = True,
        calibrate: bool = True,
    ) -> None:
        super().__init__()
        self.setWindowTitle("Tessera")
        self.setObjectName("TesseraMainWindow")
        self.setAcceptDrops(True)
        self.settings = settings or AppSettings()
        self.data_dir = data_dir or default_data_dir()
        self.confirm_close = True  # tests set False to skip the question when closing mid-job
        self.open_url: Callable[[QUrl], bool] = QDesktopServices.openUrl
        self._probe = probe_runtimes
        self._closed = False
        self._dirty: set[str] = set()

        self.engine = EngineThread(engine_settings or self.settings.engine_settings(), self)
        self.tasks = TaskThread(self)
        self.speeds = SpeedBook(self.settings)
        self.jobs = JobsController(self.engine, self.speeds, self)
        self.jobs.calibrator.enabled = calibrate
        self.models = ModelsController(self.tasks, self.models_dir, self)
        self.view = ViewController(self.jobs, self.tasks, load_display_paths, self)
        self.preview = PreviewController(self.engine, lambda: self.panel.job_settings(), self)
        self.notifier = Notifier(self, self.windowIcon())

        self._build_widgets()
        self._build_menus()
        self._wire()
        geometry = self.settings.geometry()
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(1280, 800)
        state = self.settings.window_state()
        if state is not None:
            self.restoreState(state)
        self._update_run()
        if start:
            self.start()

    # -- compatibility views on the controllers ---------------------------------------------------
    @property
    def inventory(self) -> ModelInventory | None:
        return self.models.inventory

    # -- construction -------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.inputs = InputsPanel()
        self.viewer = ViewerPanel()
        self.welcome = WelcomePage()
        self.center = QStackedWidget()
        self.center.addWidget(self.welcome)
        self.center.addWidget(self.viewer)
        self.panel = OperationPanel(self.settings)
        self.job_list = JobList()
        # images | result, with the jobs under them; the operation panel takes the full height
        self.in_split = QSplitter(Qt.Orientation.Horizontal)
        self.in_split.setChildrenCollapsible(False)
        self.in_split.addWidget(self.inputs)
        self.in_split.addWidget(self.center)
        self.in_split.setStretchFactor(0, 0)
        self.in_split.setStretchFactor(1, 1)
        self.inputs.hide()
        self.work = work = QWidget()
        work_layout = QVBoxLayout(work)
        work_layout.setContentsMargins(0, 0, 0, 0)
        work_layout.setSpacing(2)
        work_layout.addWidget(self.in_split, 1)
        work_layout.addWidget(self.job_list)
        # scrolls rather than clips on a short screen
        self.panel_scroll = QScrollArea()
        self.panel_scroll.setWidgetResizable(True)
        self.panel_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.panel_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.panel_scroll.setWidget(self.panel)
        self.panel_scroll.setMinimumWidth(self.panel.minimumWidth() + 14)
        self.h_split = QSplitter(Qt.Orientation.Horizontal)
        self.h_split.setChildrenCollapsible(False)
        self.h_split.addWidget(work)
        self.h_split.addWidget(self.panel_scroll)
        self.h_split.setStretchFactor(0, 1)
        self.h_split.setStretchFactor(1, 0)
        self.h_split.setSizes([950, 330])
        self.host = QWidget()
        layout = QVBoxLayout(self.host)
        layout.setContentsMargins(4, 4, 4, 0)
        layout.addWidget(self.h_split, 1)
        self.setCentralWidget(self.host)
        self.notice = NoticeBar(self.work)  # over the images and the result, not the panel
        self.drop_overlay = DropOverlay(self.host)

        # The memory panel opens under the jobs, beside the operation panel rather than under
        # it: the viewer keeps most of its height and Run stays in view.
        self.memory_panel = MemoryPanel()
        self.memory_dock = QFrame()
        self.memory_dock.setFrameShape(QFrame.Shape.StyledPanel)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Hide the memory panel (Ctrl+M)")
        close.clicked.connect(lambda: self.memory_action.setChecked(False))
        head = QHBoxLayout()
        head.setContentsMargins(6, 2, 2, 0)
        head.addWidget(QLabel("<b>Loaded models and memory</b>"), 1)
        head.addWidget(close)
        box = QVBoxLayout(self.memory_dock)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(0)
        box.addLayout(head)
        box.addWidget(self.memory_panel)
        self.memory_dock.setMaximumHeight(190)
        self.memory_dock.hide()
        work_layout.addWidget(self.memory_dock)

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
        slot: Callable[[], object],
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
        action.triggered.connect(lambda _checked=False: slot())
        self.addAction(action)  # shortcuts work even with the menu bar hidden
        return action

    def _build_menus(self) -> None:
        key = QKeySequence.StandardKey
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self.open_action = self._action("&Open images…", self.open_dialog, [key.Open])
        file.addAction(self.open_action)
        file.addAction(self._action("Open a &folder of frames…", self.open_folder_dialog))
        self.recent_menu = QMenu("Open &recent", self)
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        file.addMenu(self.recent_menu)
        self.paste_action = self._action(
            "&Paste image", self.paste, [key.Paste], "Add the image (or files) on the clipboard"
        )
        file.addAction(self.paste_action)
        file.addSeparator()
        self.save_action = self._action(
            "&Save result as…", lambda: self.save_as(""), ["Ctrl+Shift+S"]
        )
        file.addAction(self.save_action)
        self.copy_action = self._action("&Copy result", self.copy_result, [key.Copy])
        file.addAction(self.copy_action)
        file.addSeparator()
        file.addAction(self._action("&Add a model file…", self.add_model_dialog))
        file.addAction(self._action("Refresh the &model list", self.models.refresh))
        file.addSeparator()
        file.addAction(self._action("Pr&eferences…", self.preferences, [key.Preferences]))
        file.addSeparator()
        file.addAction(self._action("&Quit", self.close, [key.Quit]))

        view = bar.addMenu("&View")
        view.addAction(self._action("Zoom &in", self.viewer.view.zoom_in, [key.ZoomIn, "Ctrl+="]))
        view.addAction(self._action("Zoom &out", self.viewer.view.zoom_out, [key.ZoomOut]))
        view.addAction(self._action("&Fit", self.viewer.view.fit, ["Ctrl+0"]))
        view.addAction(self._action("&Actual size", self.viewer.view.actual_size, ["Ctrl+1"]))
        view.addAction(self.viewer.flip_action)
        self.preview_action = QAction("&Preview", self)
        self.preview_action.setCheckable(True)
        self.preview_action.setShortcut(QKeySequence("Ctrl+P"))
        self.preview_action.setStatusTip(
            "Show what the chosen operation and model make of the part of the image in view"
        )
        self.preview_action.toggled.connect(self.set_preview)
        self.addAction(self.preview_action)
        view.addAction(self.preview_action)
        view.addSeparator()
        self.memory_action = QAction("&Memory panel", self)
        self.memory_action.setCheckable(True)
        self.memory_action.setShortcut(QKeySequence("Ctrl+M"))
        self.memory_action.toggled.connect(self._memory_toggled)
        self.addAction(self.memory_action)
        view.addAction(self.memory_action)

        jobs = bar.addMenu("&Jobs")
        self.run_action = self._action(
            "&Run",
            self.run_selected,
            ["Ctrl+Return", "Ctrl+Enter"],
            "Queue a job for every image, or for the selected ones",
        )
        jobs.addAction(self.run_action)
        self.cancel_action = self._action(
            "&Cancel the running job", self.jobs.cancel_running, [key.Cancel]
        )
        jobs.addAction(self.cancel_action)
        jobs.addAction(self._action("Cancel &all jobs", self.jobs.cancel_all))
        jobs.addAction(self._action("C&lear finished jobs", self.clear_finished))
        jobs.addSeparator()
        jobs.addAction(
            self._action(
                "Use the shown result as &input",
                self.continue_from_result,
                tip="The next job of this image starts from the result on the right",
            )
        )
        jobs.addAction(
            self._action(
                "Run the shown &chain on other images",
                lambda: self.run_chain_from(""),
                tip="Every step that made the result on the right, on the other images",
            )
        )

        helpmenu = bar.addMenu("&Help")
        helpmenu.addAction(self._action("Open the &log folder", self.open_log_folder))
        helpmenu.addAction(self._action("&About Tessera", self.about))

    def _wire(self) -> None:
        e = self.engine
        e.sessionsChanged.connect(self._on_sessions)
        e.runtimesProbed.connect(self.panel.set_runtimes)
        e.settingsApplied.connect(self._on_settings_applied)
        j = self.jobs
        j.inputsChanged.connect(self._on_inputs_changed)
        j.inputChanged.connect(self._on_input_changed)
        j.jobAdded.connect(self._on_job_added)
        j.jobChanged.connect(self._on_job_changed)
        j.jobEnded.connect(self._on_job_ended)
        j.noticeRequested.connect(self.show_notice)
        j.calibrator.busyChanged.connect(lambda _b: self._update_estimate())
        j.calibrator.calibrated.connect(lambda _m, _d: self._update_estimate())
        v = self.view
        v.selectRequested.connect(self.inputs.select)
        v.versionsChanged.connect(self.viewer.set_versions)
        v.loaded.connect(self.viewer.show_images)
        v.failed.connect(self.viewer.show_error)
        v.cleared.connect(self.viewer.clear)
        m = self.models
        m.inventoryChanged.connect(self._on_inventory)
        m.noticeRequested.connect(self.show_notice)
        m.fetchStatusChanged.connect(self._on_fetch_status)
        self.panel.runRequested.connect(self.run_selected)
        self.panel.fetchRequested.connect(self.fetch_models)
        self.panel.addModelRequested.connect(self.add_model_dialog)
        self.panel.choicesChanged.connect(self._update_run)
        self.inputs.currentChanged.connect(self.view.choose_input)
        self.inputs.selectionChanged.connect(self._update_run)
        self.inputs.addRequested.connect(self.open_dialog)
        self.inputs.removeRequested.connect(self.remove_inputs)
        self.inputs.clearRequested.connect(self.clear_inputs)
        self.inputs.runOneRequested.connect(self.run_one)
        self.welcome.openRequested.connect(self.open_dialog)
        self.welcome.pasteRequested.connect(self.paste)
        self.welcome.recentRequested.connect(lambda p: self.accept_paths([Path(p)]))
        self.welcome.starterRequested.connect(lambda: self.fetch_models(None))
        self.job_list.cancelRequested.connect(self.jobs.cancel)
        self.job_list.cancelAllRequested.connect(self.jobs.cancel_all)
        self.job_list.clearRequested.connect(self.clear_finished)
        self.job_list.showRequested.connect(self.show_job)
        self.job_list.openRequested.connect(lambda job_id: self.open_job(job_id, reveal=False))
        self.job_list.revealRequested.connect(lambda job_id: self.open_job(job_id, reveal=True))
        self.viewer.versionChosen.connect(self._on_version_chosen)
        self.viewer.previewToggled.connect(self.set_preview)
        self.viewer.previewStopRequested.connect(self.preview.cancel)
        self.viewer.continueRequested.connect(self.continue_from_result)
        self.viewer.strip.inputRequested.connect(self.use_as_input)
        self.viewer.strip.chainRequested.connect(self.run_chain_from)
        self.viewer.view.viewMoved.connect(self._preview_view_moved)
        p = self.preview
        p.patched.connect(self.viewer.add_preview_patch)
        p.resetRequested.connect(self.viewer.clear_preview)
        p.statusChanged.connect(self.viewer.set_preview_status)
        p.finished.connect(self._on_preview_finished)
        p.failed.connect(lambda text: self.warn(text, Topic.JOBS))
        v.versionsChanged.connect(lambda _versions, _l, _r: self._preview_source())
        self.panel.choicesChanged.connect(self._preview_settings_changed)
        j.showRequested.connect(self._on_show_requested)
        self.viewer.saveRequested.connect(self.save_as)
        self.viewer.copyRequested.connect(self.copy_result)
        self.viewer.openRequested.connect(lambda vid: self.open_version(vid, reveal=False))
        self.viewer.revealRequested.connect(lambda vid: self.open_version(vid, reveal=True))
        self.memory_panel.unloadRequested.connect(self.engine.unload)
        self.memory_panel.unloadAllRequested.connect(self.engine.unload_all)
        self.engine.operationFinished.connect(
            lambda result: self.memory_panel.set_last_operation(result.memory)
        )
        self.models_button.clicked.connect(self.show_memory_panel)
        self.gauge.clicked.connect(self.show_memory_panel)

    def start(self) -> None:
        self.engine.start(probe_runtimes=self._probe)
        self.tasks.start()
        self.models.refresh()
        self.welcome.set_recent(self.settings.recent_files())
        # The first reading imports psutil and starts NVML (a few hundred ms): off this thread.
        self.tasks.submit(memory.snapshot, self._first_snapshot)

    def drop_target(self) -> QWidget:
        return self

    def models_dir(self) -> Path:
        return self.engine.settings.resolved_models_dir()

    # -- messages -----------------------------------------------------------------------------
    def say(self, text: str) -> None:
        """A line in the status bar, ending in '…' where it does not fit (the whole text is in
        the log and, for problems, in the notice)."""
        bar = self.statusBar()
        room = bar.width() - self.models_button.width() - self.gauge.width() - 48
        line = text.splitlines()[0] if text else ""
        if room > 40:
            line = bar.fontMetrics().elidedText(line, Qt.TextElideMode.ElideRight, room)
        bar.showMessage(line, STATUS_MS)

    def show_notice(self, notice: Notice) -> None:
        log.info("notice: %s", notice.text)
        self.notice.show_notice(notice)
        self.say(notice.text)

    def warn(self, text: str, topic: Topic = Topic.INPUTS) -> None:
        self.show_notice(Notice(text, NoticeLevel.WARNING, topic))

    def inform(self, text: str, topic: Topic = Topic.INPUTS) -> None:
        self.show_notice(Notice(text, NoticeLevel.INFO, topic))

    # -- drag and drop, open, paste -----------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        mime = event.mimeData()
        if mime.hasUrls() or mime.hasImage():
            event.acceptProposedAction()
            self.drop_overlay.show_text(_drop_words(mime))
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if event.mimeData().hasUrls() or event.mimeData().hasImage():
            event.acceptProposedAction()

    def dragLeaveEvent(self, event: QDragLeaveEvent) -> None:
        self.drop_overlay.hide()
        super().dragLeaveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        self.drop_overlay.hide()
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
            "Only image files, folders of frames and .onnx models can be dropped here. "
            "Nothing was added."
        )
        return None

    def accept_paths(self, paths: Sequence[Path | str], *, run: bool | None = None) -> DropOutcome:
        """Add images and folders as inputs (each image its own input) and show the first;
        queue jobs when run-on-drop is on; install .onnx files; say why anything was refused."""
        found = self.jobs.add_paths(paths)
        for model in found.models:
            self.say(f"Checking {model.name}…")
            self.models.install(model)
        for source in found.sources:
            self._request_thumbnail(source)
        if found.sources:
            self.settings.add_recent([str(s.paths[0]) for s in found.sources])
        if found.refused:
            tail = "" if found.sources or found.models else " Nothing was added."
            self.warn("\n".join(found.refused) + tail)
        elif found.sources:
            self.notice.clear_topic(Topic.INPUTS)  # an earlier refusal is stale now
        run = self.panel.run_on_drop.isChecked() if run is None else run
        jobs: list[str] = []
        if found.sources and run:
            if self.inventory is None:
                self.jobs.defer(found.sources)
                self.say("Looking for the installed models; the jobs start in a moment.")
            else:
                jobs = self.queue_jobs(list(found.sources))
        elif found.sources:
            count = len(self.jobs.sources)
            self.say(
                f"Added {len(found.sources)} image{'s' if len(found.sources) != 1 else ''}. "
                f"Press {self.panel.run_button.text()} (Ctrl+Return) when ready."
                if count
                else ""
            )
        if found.sequence_offer and not found.refused:
            offer = found.sequence_offer
            self.show_notice(
                Notice(
                    f"These {len(offer)} numbered images are the same size. Each is processed on "
                    "its own; if they are the frames of one animation, process them as one "
                    "sequence instead.",
                    NoticeLevel.INFO,
                    Topic.INPUTS,
                    "Process as one sequence",
                    lambda: self.merge_as_sequence(offer),
                )
            )
        return DropOutcome(
            found.sources, tuple(jobs), found.models, found.refused, found.sequence_offer
        )

    def merge_as_sequence(self, paths: Sequence[Path]) -> InputSource | None:
        sequence = self.jobs.merge_as_sequence(paths)
        if sequence is not None:
            self._request_thumbnail(sequence)
            self.say(f"{sequence.name}: one sequence of {sequence.frames} frames.")
        return sequence

    def accept_image(self, image: QImage) -> DropOutcome | None:
        """A pasted or dragged-in picture: saved as a PNG in the pasted-images folder (Pictures/
        Tessera unless Preferences say otherwise, so it and its results can be found), then an
        input like any other."""
        folder = self.settings.pasted_dir
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
        outcome = self.accept_paths([path])
        self.inform(f"Pasted image saved as {path}.")
        return outcome

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
        """Files handed over by a second launch (single instance), or given on the command line:
        added and shown, never run on their own — the person presses Run."""
        if files:
            self.accept_paths([Path(f) for f in files], run=False)
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

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        recent = [p for p in self.settings.recent_files() if Path(p).exists()]
        for path in recent:
            action = self.recent_menu.addAction(Path(path).name)
            action.setToolTip(path)
            action.triggered.connect(lambda _c=False, p=path: self.accept_paths([Path(p)]))
        if not recent:
            self.recent_menu.addAction("No recent files").setEnabled(False)
        else:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction("Clear the list", self._clear_recent)

    def _clear_recent(self) -> None:
        self.settings.clear_recent()
        self.welcome.set_recent([])

    # -- inputs -------------------------------------------------------------------------------
    def _on_inputs_changed(self) -> None:
        sources = list(self.jobs.sources.values())
        self.inputs.set_sources(sources)
        for key in self.jobs.sources:
            self._on_input_changed(key)
        has = bool(sources)
        if has and not self.inputs.isVisible():
            self.inputs.show()
            total = sum(self.in_split.sizes())
            narrow = self.inputs.minimumSizeHint().width()
            self.in_split.setSizes([narrow, max(total - narrow, 1)])
        elif not has:
            self.inputs.hide()
        self.center.setCurrentWidget(self.viewer if has else self.welcome)
        if not has:
            self.viewer.clear()
            self.welcome.set_recent(self.settings.recent_files())
        self._update_run()

    def _on_input_changed(self, key: str) -> None:
        failure = self.jobs.failure(key)
        if self.jobs.running_for(key):
            mark, tip = InputMark.RUNNING, "A job is running or waiting for this image."
        elif failure:
            mark, tip = InputMark.FAILED, f"Failed: {failure}"
        elif any(v.viewable for v in self.jobs.versions(key)[1:]):
            mark, tip = InputMark.DONE, "Done: its results are in the strip under the viewer."
        else:
            mark, tip = InputMark.NONE, ""
        self.inputs.set_mark(key, mark, tip)

    def remove_inputs(self, keys: list[str]) -> None:
        self.jobs.remove(keys)

    def clear_inputs(self) -> None:
        self.jobs.clear()
        self.viewer.clear()

    def _request_thumbnail(self, source: InputSource) -> None:
        def done(outcome: TaskOutcome) -> None:
            if self._closed:
                return
            image = outcome.value.image if outcome.error is None else QImage()
            self.inputs.set_thumbnail(source.key, image)

        self.tasks.submit(lambda: make_thumbnail(source.paths[0], THUMB), done)

    # -- running ------------------------------------------------------------------------------
    def _update_run(self) -> None:
        label = self.jobs.run_label(self.inputs.selected_keys())
        self.panel.set_run_text(label)
        self.run_action.setText(f"&{label}")
        self._update_estimate()

    def _update_estimate(self) -> None:
        settings = self.panel.job_settings()
        if settings is None:
            self.panel.set_estimate("")
            return
        targets = self.jobs.targets(self.inputs.selected_keys())
        idle = not self.engine.is_busy()
        where = self.panel.device_words()
        self.panel.set_estimate(self.jobs.estimate_text(targets, settings, where, idle))

    def queue_jobs(self, sources: list[InputSource]) -> list[str]:
        settings = self.panel.job_settings()
        if settings is None:
            operation = self.panel.current_operation()
            self.warn(
                f"No model for {operation.label.lower()} is installed, so nothing was queued. "
                "Use Get… beside the model list, or drop an .onnx model file.",
                Topic.MODELS,
            )
            return []
        ids = self.jobs.queue(sources, settings)
        count = len(ids)
        self.say(
            f"Queued {count} job{'s' if count != 1 else ''}: "
            f"{settings.operation.label} with {settings.model_label}."
        )
        self.notice.clear_topic(Topic.JOBS)
        return ids

    def run_selected(self) -> list[str]:
        """Run: every image, or the selected ones when several are selected."""
        sources = self.jobs.targets(self.inputs.selected_keys())
        if not sources:
            self.warn("Add images first: drop them on the window or use File ▸ Open.")
            return []
        return self.queue_jobs(sources)

    def run_one(self, key: str) -> list[str]:
        source = self.jobs.source(key)
        return self.queue_jobs([source]) if source is not None else []

    def clear_finished(self) -> None:
        self.job_list.remove(self.jobs.forget_ended())

    def _on_job_added(self, job_id: str) -> None:
        job = self.jobs.jobs[job_id]
        self.job_list.add(job)

    def _on_job_changed(self, job_id: str) -> None:
        job = self.jobs.jobs.get(job_id)
        if job is None:
            return
        if job.state.ended or job.state in (JobState.LOADING, JobState.CANCELLING):
            self._dirty.discard(job_id)
            self.job_list.update_job(job_id)
            return
        self._dirty.add(job_id)
        if not self.redraw_timer.isActive():
            self.redraw_timer.start()

    def _redraw_rows(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for job_id in dirty:
            self.job_list.update_job(job_id)

    def _on_job_ended(self, job_id: str) -> None:
        job = self.jobs.jobs.get(job_id)
        if job is None:
            return
        took = fmt_duration(job.elapsed())
        name = Path(job.request.inputs[0]).name
        if job.state is JobState.FINISHED and job.result is not None and job.result.products:
            text = f"{job.request.operation.label} of {name} done in {took}."
            self.say(f"{text} {job.result.products[0].path.name}")
        elif job.state is JobState.FAILED:
            text = f"{job.request.operation.label} of {name} failed: {job.message}"
            self.say(text.splitlines()[0])
        else:
            text = f"Cancelled: {job.title}"
            self.say(text)
        if job.state is not JobState.CANCELLED and should_notify(
            job.elapsed(), self.isActiveWindow()
        ):
            self.notifier.notify("Tessera", text)
        self._update_estimate()

    # -- the viewer ---------------------------------------------------------------------------
    def _on_version_chosen(self, version_id: str, on_left: bool) -> None:
        if not on_left:
            self.set_preview(False)  # the person chose what to see on the right
        problem = self.view.choose_version(version_id, on_left)
        if problem:
            self.warn(problem, Topic.JOBS)

    def show_job(self, job_id: str) -> None:
        self.set_preview(False)
        problem = self.view.show_job(job_id)
        if problem:
            self.warn(problem, Topic.JOBS)

    # -- preview ------------------------------------------------------------------------------
    def set_preview(self, on: bool) -> None:
        """Preview on: the right side shows the panel's operation on the left version, for
        the part in view; a job that finishes for the image turns it off to show its result."""
        self.preview_action.blockSignals(True)
        self.preview_action.setChecked(on)
        self.preview_action.blockSignals(False)
        if on == self.preview.enabled and on == self.viewer.preview_on:
            return
        self.viewer.set_preview_mode(on, self._preview_label())
        if on:
            self._preview_source()
            self.preview.set_region(self.viewer.preview_region())
        self.preview.set_enabled(on)

    def _preview_label(self) -> str:
        settings = self.panel.job_settings()
        return f"Preview · {settings.model_label}" if settings is not None else "Preview"

    def _preview_source(self) -> None:
        """The left version's file is what the preview works on (one image file)."""
        key = self.jobs.viewing[0]
        path: Path | None = None
        if key is not None:
            left = self.view.pairs.get(key, ("original", ""))[0]
            version = self.jobs.version(key, left)
            if version is not None and len(version.paths) == 1 and version.paths[0].is_file():
                path = version.paths[0]
        if self.preview.enabled and key is not None and path is None:
            self.viewer.set_preview_status("Preview shows single images, not sequences.", False)
        self.preview.set_source(key, path)

    def _preview_view_moved(self) -> None:
        if not self.preview.enabled:
            return
        layer = self.viewer.view.preview
        if layer is not None:
            layer.keep_within(self.viewer.view.visible_after())
        self.preview.set_region(self.viewer.preview_region())

    def _preview_settings_changed(self) -> None:
        if self.preview.enabled:
            self.viewer.set_preview_mode(True, self._preview_label())
            self.preview.refresh()

    def _on_show_requested(self, _key: str, version_id: str) -> None:
        if version_id:
            self.set_preview(False)  # a result came in: show it, not the preview

    def _on_preview_finished(self, result: PreviewResult) -> None:
        """A non-tiled family's preview is a file: show its picture."""
        shown = viewable_products(result.products)
        if not shown:
            return
        generation = result.generation

        def loaded(outcome: TaskOutcome) -> None:
            if self._closed or generation != self.preview.generation or outcome.error:
                return
            image: DisplayImage = outcome.value
            if image.frames:
                self.viewer.view.set_preview_image(image.frames[0])

        path = shown[0].path
        self.tasks.submit(lambda: load_display_paths((path,)), loaded, urgent=True)

    # -- chains -------------------------------------------------------------------------------
    def continue_from_result(self) -> None:
        """The result on the right becomes the input of the image's next job."""
        version = self.view.viewed()
        if version is None or version.is_original or not version.viewable:
            self.say("Show a result on the right first; it then becomes the next step's input.")
            return
        self.use_as_input(version.id)

    def use_as_input(self, version_id: str) -> None:
        key = self.jobs.viewing[0]
        if key is None:
            return
        version = self.jobs.use_as_input(key, version_id)
        if version is None:
            return
        self.set_preview(False)
        self.view.choose_version(version.id, True)  # on the left: what the next step works on
        self._update_run()
        if version.is_original:
            self.say("The next job starts from the original again.")
        else:
            self.say(
                f"The next job of this image starts from {version.label}: choose the operation "
                "and press Run (Preview shows it first)."
            )

    def run_chain_from(self, version_id: str) -> list[str]:
        """Every step that made this result, on the other images (or the selected ones)."""
        version = self.jobs.find_version(version_id) if version_id else self.view.viewed()
        steps = self.jobs.chain_of(version) if version is not None else ()
        if version is None or not steps:
            self.say("Show a result on the right first: its steps are what is run again.")
            return []
        selected = [k for k in self.inputs.selected_keys() if k != version.input_key]
        keys = selected if len(selected) >= 1 and len(self.inputs.selected_keys()) >= 2 else []
        targets = [self.jobs.sources[k] for k in keys] or [
            s for k, s in self.jobs.sources.items() if k != version.input_key
        ]
        if not targets:
            self.say("Add the other images first; the chain then runs on each of them.")
            return []
        ids = self.jobs.run_chain(steps, targets)
        names = " → ".join(step.model_label for step in steps)
        self.say(f"Running {names} on {len(targets)} image{'s' if len(targets) != 1 else ''}.")
        return ids

    # -- results: save as, copy, open ---------------------------------------------------------
    def _viewed(self, version_id: str = "") -> Version | None:
        return self.view.viewed(version_id)

    def save_as(self, version_id: str = "") -> None:
        version = self._viewed(version_id)
        if version is None or not version.viewable or version.is_original:
            self.say("Nothing to save yet: run a job, then save its result.")
            return
        source = self.jobs.source(version.input_key)
        job = self.jobs.jobs.get(version.job_id or "")
        path = version.path
        assert path is not None
        dialog = ExportDialog(
            path,
            (source.width, source.height) if source else (0, 0),
            job.request.operation if job else self.panel.current_operation(),
            None,
            self.panel.output_options(),
            self,
        )
        self.export_dialog = dialog
        if not dialog.exec():
            return
        target = dialog.target()
        if target.exists() and target != path:
            answer = QMessageBox.question(
                self,
                "Replace the file?",
                f"{target.name} exists in {target.parent}. Replace it?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.export(path, target, dialog.options(), source)

    def export(
        self,
        product: Path,
        target: Path,
        options: OutputOptions,
        source: InputSource | None,
        done: Callable[[Path | None], None] | None = None,
    ) -> None:
        size = (source.width, source.height) if source is not None else (0, 0)
        self.say(f"Saving {target.name}…")

        def finished(outcome: TaskOutcome) -> None:
            if self._closed:
                return
            if outcome.error is not None:
                self.warn(f"{target.name} was not saved: {outcome.error}", Topic.FILES)
                if done is not None:
                    done(None)
                return
            written: Path = outcome.value
            self.show_notice(
                Notice(
                    f"Saved {written.name} ({options.describe()}) in {written.parent}.",
                    NoticeLevel.INFO,
                    Topic.FILES,
                    "Show in folder",
                    lambda: self._open(written.parent, written),
                )
            )
            if done is not None:
                done(written)

        self.tasks.submit(lambda: export_result(product, target, options, size), finished)

    def copy_result(self) -> None:
        version = self._viewed()
        image = self.viewer.current_image()
        if version is None or image is None:
            self.say("Nothing to copy yet.")
            return
        QGuiApplication.clipboard().setMimeData(file_mime(list(version.paths[:1]), image))
        self.say(f"Copied {version.label} ({image.width()}×{image.height()}) to the clipboard.")

    def open_version(self, version_id: str, *, reveal: bool) -> None:
        version = self._viewed(version_id)
        if version is not None and version.path is not None:
            self._open(version.path.parent if reveal else version.path, version.path)

    def open_job(self, job_id: str, *, reveal: bool) -> None:
        job = self.jobs.jobs.get(job_id)
        if job is None or job.result is None or not job.result.products:
            return
        viewable = job.viewable()
        path = (viewable[0] if viewable else job.result.products[0]).path
        self._open(path.parent if reveal else path, path)

    def _open(self, target: Path, file: Path) -> bool:
        """Open a file or folder with the desktop's program, or say why not and where it is."""
        if self.open_url(QUrl.fromLocalFile(str(target))):
            return True
        self.show_notice(
            Notice(
                cannot_open(target, file),
                NoticeLevel.WARNING,
                Topic.FILES,
                "Copy the path",
                lambda: QGuiApplication.clipboard().setText(str(file)),
            )
        )
        return False

    # -- models -------------------------------------------------------------------------------
    def _on_inventory(self, inventory: ModelInventory) -> None:
        if self._closed:
            return
        self.panel.set_inventory(inventory)
        self.welcome.set_inventory(inventory)
        waiting = self.jobs.take_deferred()
        if waiting:
            self.queue_jobs(waiting)
        self._update_run()

    def add_model_dialog(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add a model", "", "ONNX models (*.onnx)")
        for f in files:
            self.models.install(Path(f))

    def install_model_file(self, path: Path) -> None:
        self.models.install(path)

    def refresh_models(self) -> None:
        self.models.refresh()

    def fetch_models(self, entry: CatalogEntry | None) -> None:
        if self.models.fetch(entry):
            what = "the starter models" if entry is None else entry.name
            self.say(f"Getting {what}; the window stays usable meanwhile.")

    def _on_fetch_status(self, line: str, running: bool) -> None:
        self.welcome.set_fetch_status(line, running)
        if line:
            self.say(line)

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
        self.memory_action.setChecked(True)
        self.engine.refresh_sessions()

    def _memory_toggled(self, shown: bool) -> None:
        self.memory_dock.setVisible(shown)
        self.job_list.set_compact(shown)
        if shown:
            self.engine.refresh_sessions()

    # -- preferences, help --------------------------------------------------------------------
    def preferences(self) -> None:
        dialog = PreferencesDialog(self.settings, str(self.models_dir()), self)
        self.preferences_dialog = dialog
        if dialog.exec():
            self.apply_preferences()

    def apply_preferences(self) -> None:
        """Preferences in force now: the models folder, the limits, the pasted-images folder."""
        self.engine.apply_settings(self.settings.engine_settings())
        self.models.refresh()
        self.inform(
            f"Preferences applied. Models are read from {self.models_dir()}.", Topic.SETTINGS
        )

    def _on_settings_applied(self, note: str) -> None:
        if note:
            self.inform(note, Topic.SETTINGS)

    def open_log_folder(self) -> None:
        folder = self.data_dir / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        self._open(folder, folder)

    def about(self) -> None:
        QMessageBox.about(
            self,
            "About Tessera",
            "<b>Tessera</b><br>Edit images with local ONNX models. One loaded copy of each "
            "model, reused for every job; GPU memory handed back after each operation.<br><br>"
            f"Models: {self.models_dir()}<br>Log: {self.data_dir / 'logs'}",
        )

    def sizeHint(self) -> QSize:
        return QSize(1280, 800)

    # -- closing ------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closed:
            event.accept()
            return
        active = self.jobs.active()
        if active and self.confirm_close:
            count = len(active)
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
        self.preview.close()
        self.redraw_timer.stop()
        self.job_list.clock.stop()
        self.notifier.close()
        self.models.stop()
        self.jobs.calibrator.stop()
        self.view.closed = True
        self.engine.stop()  # cancels, waits for the engine between runs
        self.tasks.stop()
