"""The main window: builds the widgets and the menus and connects them to the controllers.

Images on the left, the result in the middle (before/after, versions, Save as, Copy, drag out),
the operation panel with the output step and Run on the right, the job list below (one line
when idle), and the status bar with the memory gauge and the loaded models. The window's state
lives in `gui.workspace`; what happens to it in `gui.controllers` (inputs: drops, opening,
pasting; jobs: where a job is queued; view; preview: where a preview is asked and answered;
results: Save as, opening; models; memory). What is here is widgets, their wiring, and
rendering the workspace into them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QSize, QTimer, QUrl
from PySide6.QtGui import QCloseEvent, QDesktopServices, QGuiApplication, QImage, QShowEvent
from PySide6.QtWidgets import QMainWindow, QWidget

from engine.models.catalog import CatalogEntry
from engine.settings import EngineSettings, default_data_dir
from gui.controllers.clip import ClipController
from gui.controllers.inputs import DropOutcome, InputsController
from gui.controllers.jobs import JobsController
from gui.controllers.memory import MemoryController
from gui.controllers.models import ModelsController
from gui.controllers.preview import PreviewController
from gui.controllers.queue_store import QueueStore
from gui.controllers.results import ResultsController
from gui.controllers.speed import SpeedBook
from gui.controllers.speed_store import FILE_NAME, SpeedStore
from gui.controllers.view import ViewController
from gui.engine_thread import EngineThread
from gui.jobs import Version, ended_text
from gui.menus import WindowMenus
from gui.messages import Notice, NoticeLevel, Topic
from gui.notifications import Notifier
from gui.settings import AppSettings
from gui.tasks import TaskThread
from gui.widgets.drop_overlay import DropTarget
from gui.widgets.export_dialog import ExportDialog
from gui.widgets.images import load_display_paths, make_thumbnail, read_clip_frame
from gui.widgets.inputs_panel import THUMB
from gui.widgets.job_list import confirm_quit
from gui.widgets.model_browser import ModelBrowser, open_model_browser
from gui.widgets.pictures_binding import PicturesBinding
from gui.widgets.preview_binding import PreviewBinding
from gui.widgets.screen_fit import fit_first, refit
from gui.widgets.version_strip import file_mime
from gui.widgets.window_layout import WindowLayout
from gui.workspace import Workspace

if TYPE_CHECKING:  # the model list is read on the task thread: onnx is not loaded by the window
    from engine.models.inventory import ModelInventory


log = logging.getLogger(__name__)

SHOWN_FALLBACK_MS = 300  # a window not shown (yet) still reads its model list
STATUS_FRAME_MS = 16  # a job's ending in the status bar: at most one line a frame


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
        self.settings = settings or AppSettings()
        self.data_dir = data_dir or default_data_dir()
        self.confirm_close = True  # tests set False to skip the question when closing mid-job
        self.open_url: Callable[[QUrl], bool] = QDesktopServices.openUrl
        self._probe = probe_runtimes
        self._closed = False
        self._read_pending = False  # the model list is read once the window is drawn
        # A job's ending says so in the status bar at most once a frame: a batch ends jobs
        # faster than the bar is worth repainting, and only the newest line is read (#21).
        self.ended_timer = QTimer(self)
        self.ended_timer.setSingleShot(True)
        self.ended_timer.setInterval(STATUS_FRAME_MS)
        self.ended_line = ""
        self.ended_timer.timeout.connect(lambda: self.layout_.say(self.ended_line))

        self.workspace = ws = Workspace(self)
        self.engine = EngineThread(engine_settings or self.settings.engine_settings(), self)
        self.tasks = TaskThread(self)
        self.speeds = SpeedBook(
            self.settings, store=SpeedStore(self.data_dir / FILE_NAME, self.settings)
        )
        self.jobs = JobsController(ws, self.engine, self.speeds, self)
        self.jobs.calibrator.enabled = calibrate
        self.queue_store = QueueStore(self.data_dir, ws, self.jobs, self.tasks, self)
        self.models = ModelsController(self.tasks, self.models_dir, self)
        self.view = ViewController(ws, self.tasks, load_display_paths, self)
        self.preview = PreviewController(ws, self.engine, self.tasks, load_display_paths, self)
        self.clip = ClipController(self.tasks, read_clip_frame, self)  # type: ignore[arg-type]
        self.preview.frame_of = lambda: ws.clip_frame
        self.results = ResultsController(
            ws, self.tasks, lambda path: self.open_url(QUrl.fromLocalFile(str(path))), self
        )
        self.memory = MemoryController(self.engine, self.tasks, self)
        self.notifier = Notifier(self, self.windowIcon())

        self._build_widgets()
        self.intake = InputsController(
            self.jobs,
            self.models,
            self.tasks,
            self.settings,
            lambda path: make_thumbnail(path, THUMB).image,
            lambda: ws.run_on_drop,
            lambda: ws.operation,
            self,
        )
        self._build_menus()
        self._wire()
        geometry = self.settings.geometry()
        if geometry is None or not self.restoreGeometry(geometry):
            fit_first(self)
        # Once shown, the real frame is checked against the screen: unless the size was set
        # again since (a test's, a bench's explicit size is kept).
        self._fit_size: QSize | None = self.size()
        state = self.settings.window_state()
        if state is not None:
            self.restoreState(state)
        ws.set_settings(self.panel.job_settings())
        self._update_run()
        if start:
            self.start()

    @property
    def inventory(self) -> ModelInventory | None:
        return self.models.inventory

    @property
    def memory_timer(self) -> QTimer:
        return self.memory.timer

    # -- construction -------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.layout_ = ui = WindowLayout(self, self.settings)
        self.inputs, self.viewer, self.welcome = ui.inputs, ui.viewer, ui.welcome
        self.center, self.panel, self.job_list = ui.center, ui.panel, ui.job_list
        self.notice, self.drop_overlay = ui.notice, ui.drop_overlay
        self.memory_dock, self.memory_panel = ui.memory_dock, ui.memory_panel
        self.models_button, self.gauge = ui.models_button, ui.gauge

    def _build_menus(self) -> None:
        self.menus = menus = WindowMenus(self, self)
        self.recent_menu, self.run_action = menus.recent_menu, menus.run_action
        self.cancel_action, self.preview_action = menus.cancel_action, menus.preview_action
        self.memory_action = menus.memory_action
        ws = self.workspace
        DropTarget(self, self.drop_overlay, self.intake.accept_mime)
        warn = lambda text: self.warn(text, Topic.JOBS)  # noqa: E731
        self.preview_glue = PreviewBinding(self.viewer, self.preview, self.preview_action, warn)
        self.pictures_glue = PicturesBinding(
            self.viewer, self.view, self.preview, ws.pictures, self.memory, self.memory_panel
        )

    def _wire(self) -> None:
        ws, e, j, v = self.workspace, self.engine, self.jobs, self.view
        self.layout_.render(ws, j, lambda label: self.run_action.setText(f"&{label}"))
        ws.settingsChanged.connect(self.preview_glue.settings_changed)
        ws.jobEnded.connect(self._on_job_ended)
        e.runtimesProbed.connect(self.panel.set_runtimes)
        e.settingsApplied.connect(self._on_settings_applied)
        for controller in (j, self.intake, self.results):
            controller.statusRequested.connect(self.say)
            controller.noticeRequested.connect(self.show_notice)
        for controller in (j, self.intake):
            controller.noticeCleared.connect(self.notice.clear_topic)
        j.showRequested.connect(v.show)
        j.showRequested.connect(self._on_show_requested)
        v.selectRequested.connect(self.inputs.select)
        v.versionsChanged.connect(self.viewer.set_versions)
        v.versionsChanged.connect(lambda _versions, _l, _r: self.preview_glue.follow_left())
        v.loaded.connect(lambda _b, _a, _l: self.clip.forget())
        v.loaded.connect(self.viewer.show_images)
        self.viewer.clipFrameRequested.connect(
            lambda n: self.clip.request(self.viewer.before, self.viewer.after, n)
        )
        self.clip.frameRead.connect(self.viewer.show_clip_frame)
        # The frame on screen is the workspace's: a new picture starts at its first frame (a
        # frame still being read for the old one is dropped by `forget`).
        self.clip.frameRead.connect(lambda index, *_: ws.set_clip_frame(index))
        for shown in (v.loaded, v.cleared, v.failed):
            shown.connect(lambda *_: ws.set_clip_frame(0))
        self.clip.frameRead.connect(lambda *_: self.preview.refresh())  # Preview: this frame
        self.clip.failed.connect(self.viewer.clip_frame_failed)
        v.failed.connect(self.viewer.show_error)
        v.cleared.connect(self.viewer.clear)
        self.queue_store.noticeRequested.connect(self.show_notice)
        m = self.models
        m.inventoryChanged.connect(self._on_inventory)
        m.noticeRequested.connect(self.show_notice)
        m.fetchStatusChanged.connect(self._on_fetch_status)
        self.intake.thumbnailReady.connect(
            lambda key, image: self.inputs.set_thumbnail(key, image or QImage())
        )
        self.intake.selectRequested.connect(self.inputs.select_keys)
        self.panel.runRequested.connect(self.run_selected)
        self.panel.fetchRequested.connect(self.fetch_models)
        self.panel.browseRequested.connect(self.browse_models)
        self.panel.addModelRequested.connect(self.menus.add_model_dialog)
        self.inputs.currentChanged.connect(v.choose_input)
        self.inputs.addRequested.connect(self.menus.open_dialog)
        self.inputs.removeRequested.connect(j.remove)
        self.inputs.clearRequested.connect(self.clear_inputs)
        self.inputs.runOneRequested.connect(self.run_one)
        self.welcome.openRequested.connect(self.menus.open_dialog)
        self.welcome.pasteRequested.connect(self.paste)
        self.welcome.recentRequested.connect(lambda path: self.accept_paths([Path(path)]))
        self.welcome.starterRequested.connect(lambda: self.fetch_models(None))
        self.job_list.cancelRequested.connect(j.cancel)
        self.job_list.cancelAllRequested.connect(j.cancel_all)
        self.job_list.clearRequested.connect(self.clear_finished)
        self.job_list.showRequested.connect(self.show_job)
        self.job_list.openRequested.connect(lambda i: self.results.open_job(i, reveal=False))
        self.job_list.revealRequested.connect(lambda i: self.results.open_job(i, reveal=True))
        self.viewer.versionChosen.connect(self._on_version_chosen)
        self.viewer.continueRequested.connect(self.continue_from_result)
        self.viewer.strip.inputRequested.connect(self.use_as_input)
        self.viewer.strip.chainRequested.connect(self.run_chain_from)
        self.viewer.saveRequested.connect(self.save_as)
        self.viewer.copyRequested.connect(self.copy_result)
        self.viewer.openRequested.connect(lambda i: self.results.open_version(i, reveal=False))
        self.viewer.revealRequested.connect(lambda i: self.results.open_version(i, reveal=True))
        self.layout_.render_memory(self.memory, e, self.memory_action)

    def start(self) -> None:
        self.engine.start(probe_runtimes=self._probe)
        self.tasks.start()
        self.welcome.set_recent(self.settings.recent_files())
        # The model list and the first memory reading (it starts NVML) come once the window is
        # drawn: they are read on the task thread, but importing onnx there would hold the GIL
        # while the window is built and painted. A window never shown reads them soon anyway.
        self._read_pending = True
        QTimer.singleShot(SHOWN_FALLBACK_MS, self._after_shown)

    def event(self, event: QEvent) -> bool:
        handled = super().event(event)
        if event.type() == QEvent.Type.Paint and self._read_pending:
            QTimer.singleShot(0, self._after_shown)  # the first paint is on screen now
        return handled

    def _after_shown(self) -> None:
        if self._read_pending and not self._closed:
            self._read_pending = False
            self.models.refresh()
            self.memory.start()
            self.queue_store.offer()  # a batch a crash, a kill or a reboot interrupted

    def drop_target(self) -> QWidget:
        return self

    def models_dir(self) -> Path:
        return self.engine.settings.resolved_models_dir()

    # -- messages -----------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.ended_timer.stop()  # a job's ending waiting for the next frame is older news
        self.layout_.say(text)

    def show_notice(self, notice: Notice) -> None:
        log.info("notice: %s", notice.text)
        self.notice.show_notice(notice)
        self.say(notice.text)

    def warn(self, text: str, topic: Topic = Topic.INPUTS) -> None:
        self.show_notice(Notice(text, NoticeLevel.WARNING, topic))

    def inform(self, text: str, topic: Topic = Topic.INPUTS) -> None:
        self.show_notice(Notice(text, NoticeLevel.INFO, topic))

    # -- open, paste (the inputs controller's; drops: DropTarget) -----------------------------
    def accept_paths(self, paths: Sequence[Path | str], *, run: bool | None = None) -> DropOutcome:
        return self.intake.accept_paths(paths, run=run)

    def paste(self) -> None:
        self.intake.paste()

    def open_files_and_raise(self, files: list[str]) -> None:
        """Files handed over by a second launch (single instance), or given on the command line:
        added and shown, never run on their own — the person presses Run."""
        if files:
            self.accept_paths([Path(f) for f in files], run=False)
        self.show()
        self.raise_()
        self.activateWindow()

    # -- rendering the workspace --------------------------------------------------------------
    def _update_run(self) -> None:
        self.layout_.update_run()

    def _update_estimate(self) -> None:
        self.layout_.update_estimate()

    def _on_job_ended(self, job_id: str) -> None:
        job = self.workspace.jobs.get(job_id)
        if job is not None:
            self.ended_line = ended_text(job)[0]
            if not self.ended_timer.isActive():
                self.ended_timer.start()
            self.notifier.job_ended(job)

    # -- running, chains ----------------------------------------------------------------------
    # After Run (and Save as…), no button keeps the keyboard: a second Space must not queue
    # the same minutes-long job again (gui/widgets/window_layout.py, focus_viewer).
    def run_selected(self) -> list[str]:
        queued = self.jobs.run_selected(self.workspace.operation)
        self.layout_.focus_viewer()
        return queued

    def run_one(self, key: str) -> list[str]:
        queued = self.jobs.run_one(key, self.workspace.operation)
        self.layout_.focus_viewer()
        return queued

    def clear_finished(self) -> None:
        self.jobs.forget_ended()

    def clear_inputs(self) -> None:
        """Clear, at once; the notice's Undo (or Ctrl+Z) brings the list back."""
        self.intake.clear()
        self.viewer.clear()

    def undo_clear(self) -> None:
        self.intake.undo_clear()

    def continue_from_result(self) -> None:
        """The result on the right becomes the input of the image's next job."""
        version = self.view.viewed()
        if version is None or version.is_original or not version.viewable:
            self.say("Show a result on the right first; it then becomes the next step's input.")
            return
        self.use_as_input(version.id)

    def use_as_input(self, version_id: str) -> None:
        key = self.workspace.viewing[0]
        version = self.jobs.use_as_input(key, version_id) if key is not None else None
        if version is None:
            return
        self.set_preview(False)
        self.view.choose_version(version.id, True)  # on the left: what the next step works on
        self._update_run()

    def run_chain_from(self, version_id: str = "") -> list[str]:
        ws = self.workspace
        queued = self.jobs.run_chain_from(
            ws.find_version(version_id) if version_id else ws.viewed()
        )
        self.layout_.focus_viewer()
        return queued

    # -- the viewer and its preview -----------------------------------------------------------
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

    def set_preview(self, on: bool) -> None:
        self.preview_glue.set_preview(on)

    def _on_show_requested(self, _key: str, version_id: str) -> None:
        if version_id:
            self.set_preview(False)  # a result came in: show it, not the preview

    # -- results: save as, copy ---------------------------------------------------------------
    def _viewed(self, version_id: str = "") -> Version | None:
        return self.view.viewed(version_id)

    def save_as(self, version_id: str = "") -> None:
        version = self.results.saveable(version_id)
        if version is None or version.path is None:
            return
        source = self.workspace.source(version.input_key)
        job = self.workspace.jobs.get(version.job_id or "")
        operation = job.request.operation if job else self.workspace.operation
        size = (source.width, source.height) if source else (0, 0)
        options = self.panel.output_options()
        self.export_dialog = ExportDialog(version.path, size, operation, None, options, self)
        chosen = self.export_dialog.ask()
        self.layout_.focus_viewer()
        if chosen is not None:
            self.results.export(version.path, chosen[0], chosen[1], source)

    def copy_result(self) -> None:
        version = self._viewed()
        image = self.viewer.current_image()
        if version is None or image is None:
            self.say("Nothing to copy yet.")
            return
        QGuiApplication.clipboard().setMimeData(file_mime(list(version.paths[:1]), image))
        self.say(f"Copied {version.label} ({image.width()}×{image.height()}) to the clipboard.")

    # -- models, memory -----------------------------------------------------------------------
    def _on_inventory(self, inventory: ModelInventory) -> None:
        if self._closed:
            return
        self.panel.set_inventory(inventory)
        self.welcome.set_inventory(inventory)
        waiting = self.jobs.take_deferred()
        if waiting:
            self.jobs.queue_jobs(waiting, self.workspace.operation)
        self._update_run()

    def fetch_models(self, entry: CatalogEntry | None) -> None:
        if self.models.fetch(entry):
            what = "the starter models" if entry is None else entry.name
            self.say(f"Getting {what}; the window stays usable meanwhile.")

    def browse_models(self) -> ModelBrowser:
        return open_model_browser(self.models, self.settings, self)

    def _on_fetch_status(self, line: str, running: bool) -> None:
        self.welcome.set_fetch_status(line, running)
        if line:
            self.say(line)

    def poll_memory(self) -> None:
        self.memory.poll()

    def show_memory_panel(self) -> None:
        self.layout_.show_memory_panel()

    def memory_toggled(self, shown: bool) -> None:
        self.layout_.memory_toggled(shown)

    # -- preferences, help --------------------------------------------------------------------
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
        self.results.open(folder, folder)

    def sizeHint(self) -> QSize:
        return QSize(1280, 800)

    # -- closing ------------------------------------------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        fit, self._fit_size = self._fit_size, None
        if fit is not None and fit == self.size():  # a first or restored size too big shrinks
            QTimer.singleShot(0, lambda: refit(self))

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closed:
            event.accept()
            return
        active = len(self.jobs.active())
        if active and self.confirm_close and not confirm_quit(self, active):
            event.ignore()
            return
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Save the settings, cancel every job, and stop every thread and child process."""
        if self._closed:
            return
        self._closed = True
        self.queue_store.close()  # before the jobs are cancelled: those stay to resume
        self.settings.save_window(self.saveGeometry(), self.saveState())
        self.settings.sync()
        self.memory.stop()
        self.preview.close()
        self.layout_.redraw_timer.stop()
        self.job_list.clock.stop()
        self.notifier.close()
        self.models.stop()
        self.jobs.calibrator.stop()
        for controller in (self.view, self.intake, self.results, self.clip):
            controller.closed = True
        self.engine.stop()  # cancels, waits for the engine between runs
        self.tasks.stop()
