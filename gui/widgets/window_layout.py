"""The window's widgets and where they sit: images | result with the jobs under them, the
operation panel at full height on the right, the memory panel under the jobs, the notices between
the images and the result and the jobs (never over the viewer's toolbar), and the status bar's gauge and loaded-models button. Rendering only:
the window wires them to the workspace and the controllers."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QFrame,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.runtime.sessions import SessionInfo
from gui.controllers.jobs import JobsController
from gui.controllers.memory import MemoryController
from gui.engine_thread import EngineThread
from gui.inputs import InputSource
from gui.settings import AppSettings
from gui.widgets.drop_overlay import DropOverlay
from gui.widgets.inputs_panel import InputMark, InputsPanel
from gui.widgets.job_list import JobList
from gui.widgets.memory_panel import MemoryDock
from gui.widgets.notice_bar import NoticeBar
from gui.widgets.operation_panel import OperationPanel
from gui.widgets.viewer import ViewerPanel
from gui.widgets.vram_gauge import VramGauge
from gui.widgets.welcome import WelcomePage
from gui.workspace import Workspace

STATUS_MS = 10_000  # how long a status line stays
PROGRESS_REDRAW_MS = 50  # rows redraw at most this often, however fast tiles finish


class WindowLayout:
    """Builds the window's widgets into `window` and keeps them as attributes."""

    def __init__(self, window: QMainWindow, settings: AppSettings) -> None:
        self.settings = settings
        self.inputs = InputsPanel()
        self.viewer = ViewerPanel()
        self.welcome = WelcomePage()
        self.center = QStackedWidget()
        self.center.addWidget(self.welcome)
        self.center.addWidget(self.viewer)
        self.panel = OperationPanel(settings)
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
        # Notices under the images and the result: the viewer's toolbar and the picture's top
        # stay where they are while one shows, and nothing covers them.
        self.notice = NoticeBar(work)
        work_layout.addWidget(self.notice)
        work_layout.addWidget(self.job_list)
        # scrolls rather than clips on a short screen
        self.panel_scroll = QScrollArea()
        self.panel_scroll.setWidgetResizable(True)
        self.panel_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.panel_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.panel_scroll.setWidget(self.panel)
        # A click on a button in it (Run) must not hand the keyboard to the scroll area: the
        # focus stays where the person was working (keep_focus_on_click).
        self.panel_scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)
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
        window.setCentralWidget(self.host)
        self.drop_overlay = DropOverlay(self.host)
        # The memory panel opens under the jobs, beside the operation panel rather than under
        # it: the viewer keeps most of its height and Run stays in view.
        self.memory_dock = MemoryDock()
        self.memory_panel = self.memory_dock.panel
        work_layout.addWidget(self.memory_dock)

        self.models_button = QToolButton()
        self.models_button.setAutoRaise(True)
        self.models_button.setText("0 models loaded")
        self.models_button.setToolTip(
            "Show the loaded models and their memory (Unload, Unload all)"
        )
        self.gauge = VramGauge()
        self.bar = bar = window.statusBar()
        bar.addPermanentWidget(self.models_button)
        bar.addPermanentWidget(self.gauge)
        bar.setSizeGripEnabled(True)
        self.keep_focus_on_click(self.host)
        # Tab from Run goes to the picture (what the person looks at next), not round to the
        # images list's Add, Remove and Clear.
        QWidget.setTabOrder(self.panel.run_button, self.viewer.view)

    @staticmethod
    def keep_focus_on_click(root: QWidget) -> None:
        """Buttons take the focus from Tab, not from a click — as on macOS and in GIMP's and
        Krita's docks: after a click the keyboard still belongs to the picture or the list the
        person was working in, so Space and the arrows keep their meaning there, and a second
        Space never presses Run (a job of minutes) again. (Tool buttons already work so.)"""
        for button in root.findChildren(QAbstractButton):
            if button.focusPolicy() == Qt.FocusPolicy.StrongFocus:
                button.setFocusPolicy(Qt.FocusPolicy.TabFocus)

    def focus_viewer(self) -> None:
        """The keyboard goes to the picture when it is on a button (one that ran by Space) or
        nowhere, so Space flips next instead of running that button again."""
        focus = QApplication.focusWidget()
        if self.viewer.view.isVisible() and (focus is None or isinstance(focus, QAbstractButton)):
            self.viewer.view.setFocus(Qt.FocusReason.OtherFocusReason)

    def say(self, text: str) -> None:
        """A line in the status bar, ending in '…' where it does not fit (the whole text is in
        the log and, for problems, in the notice)."""
        bar = self.bar
        room = bar.width() - self.models_button.width() - self.gauge.width() - 48
        line = text.splitlines()[0] if text else ""
        if room > 40:
            line = bar.fontMetrics().elidedText(line, Qt.TextElideMode.ElideRight, room)
        bar.showMessage(line, STATUS_MS)

    def render(self, ws: Workspace, jobs: JobsController, run_label: Callable[[str], None]) -> None:
        """Draw the workspace into the widgets as it changes, and hand their edits to it."""
        self.ws, self.jobs, self.run_label = ws, jobs, run_label
        self.redraw_timer = QTimer(self.host)
        self.redraw_timer.setSingleShot(True)
        self.redraw_timer.setInterval(PROGRESS_REDRAW_MS)
        self.redraw_timer.timeout.connect(self._redraw_rows)
        ws.inputsChanged.connect(self._inputs_changed)
        ws.inputChanged.connect(self._input_changed)
        ws.selectionChanged.connect(self.update_run)
        ws.settingsChanged.connect(self.update_run)
        ws.jobAdded.connect(lambda job_id: self.job_list.add(ws.jobs[job_id]))
        ws.jobChanged.connect(self._job_changed)
        # Run's words and the estimate read every input: once per turn of the event loop, not
        # once per job (a result or an unreadable file changes what Run runs)
        self.estimate_timer = QTimer(self.host)
        self.estimate_timer.setSingleShot(True)
        self.estimate_timer.setInterval(0)
        self.estimate_timer.timeout.connect(self.update_run)
        ws.inputChanged.connect(lambda _key: self.estimate_timer.start())
        ws.jobEnded.connect(lambda _job_id: self.estimate_timer.start())
        ws.jobsEnded.connect(lambda _job_ids: self.estimate_timer.start())
        ws.jobsForgotten.connect(self.job_list.remove)
        jobs.calibrator.busyChanged.connect(lambda _b: self.update_estimate())
        jobs.calibrator.calibrated.connect(lambda _m, _d: self.update_estimate())
        # The panel's choices are the workspace's state: the operation first (read by what the
        # settings' change starts), then the settings; run-on-drop as it is toggled.
        self.panel.settingsChanged.connect(
            lambda _settings: ws.set_operation(self.panel.current_operation())
        )
        self.panel.settingsChanged.connect(ws.set_settings)
        self.panel.run_on_drop.toggled.connect(ws.set_run_on_drop)
        ws.set_operation(self.panel.current_operation())
        ws.set_run_on_drop(self.panel.run_on_drop.isChecked())
        self.inputs.selectionChanged.connect(lambda: ws.select(self.inputs.selected_keys()))

    def update_run(self) -> None:
        label = self.jobs.run_label()
        self.panel.set_run_text(label)
        self.run_label(label)
        self.update_estimate()

    def update_estimate(self) -> None:
        self.panel.set_estimate(self.jobs.estimate_line(self.panel.device_words()))

    def _inputs_changed(self) -> None:
        sources = list(self.ws.sources.values())
        known = set(self.inputs.sources)  # their marks stand: each is told its own changes
        self.show_inputs(sources)
        for source in sources:
            if source.key not in known:
                self._input_changed(source.key)
        if not sources:
            self.welcome.set_recent(self.settings.recent_files())
        self.update_run()

    def _input_changed(self, key: str) -> None:
        ws = self.ws
        done = any(v.viewable for v in ws.results(key))
        self.mark_input(key, ws.running_for(key), ws.failure(key), done, ws.broken.get(key, ""))

    def _job_changed(self, job_id: str) -> None:
        if job_id not in self.ws.dirty:
            self.job_list.update_job(job_id)
        elif not self.redraw_timer.isActive():
            self.redraw_timer.start()

    def _redraw_rows(self) -> None:
        for job_id in self.ws.take_dirty():
            self.job_list.update_job(job_id)

    def render_memory(self, memory: MemoryController, engine: EngineThread, shown: QAction) -> None:
        """The gauge, the loaded-models button and the memory panel, from the memory
        controller's readings; `shown` is the View menu's Memory panel action."""
        self.engine, self.memory_action = engine, shown
        memory.snapshotTaken.connect(self.gauge.set_snapshot)
        memory.processRead.connect(self.memory_panel.set_process)
        memory.snapshotTaken.connect(self.memory_panel.set_snapshot)
        memory.censusTaken.connect(self.memory_panel.set_census)
        memory.sessionsChanged.connect(self._sessions_changed)
        engine.operationFinished.connect(lambda r: self.memory_panel.set_last_operation(r.memory))
        self.memory_dock.closeRequested.connect(lambda: shown.setChecked(False))
        self.memory_panel.unloadRequested.connect(engine.unload)
        self.memory_panel.unloadAllRequested.connect(engine.unload_all)
        self.models_button.clicked.connect(self.show_memory_panel)
        self.gauge.clicked.connect(self.show_memory_panel)

    def _sessions_changed(self, sessions: tuple[SessionInfo, ...], text: str) -> None:
        self.memory_panel.set_sessions(sessions)
        self.models_button.setText(text)

    def show_memory_panel(self) -> None:
        self.memory_action.setChecked(True)
        self.engine.refresh_sessions()

    def memory_toggled(self, shown: bool) -> None:
        self.memory_dock.setVisible(shown)
        self.job_list.set_compact(shown)
        if shown:
            self.engine.refresh_sessions()

    def show_inputs(self, sources: list[InputSource]) -> None:
        """The images list, shown with its first image; the welcome page when there is none."""
        self.inputs.set_sources(sources)
        if sources and not self.inputs.isVisible():
            self.inputs.show()
            total = sum(self.in_split.sizes())
            narrow = self.inputs.minimumSizeHint().width()
            self.in_split.setSizes([narrow, max(total - narrow, 1)])
        elif not sources:
            self.inputs.hide()
        focus = QApplication.focusWidget()
        from_welcome = focus is None or self.welcome.isAncestorOf(focus)
        self.center.setCurrentWidget(self.viewer if sources else self.welcome)
        if not sources:
            self.viewer.clear()
        elif from_welcome and self.viewer.isVisible():
            # the welcome page's button had the keyboard: it goes to the picture, not to the
            # next widget in the chain (which could be a button Space would press)
            self.viewer.view.setFocus(Qt.FocusReason.OtherFocusReason)

    def mark_input(
        self, key: str, running: bool, failure: str, done: bool, broken: str = ""
    ) -> None:
        if running:
            mark, tip = InputMark.RUNNING, "A job is running or waiting for this image."
        elif failure:
            mark, tip = InputMark.FAILED, f"Failed: {failure}"
        elif broken:
            mark, tip = InputMark.BROKEN, f"Cannot be read, so Run leaves it out: {broken}"
        elif done:
            mark, tip = InputMark.DONE, "Done: its results are in the strip under the viewer."
        else:
            mark, tip = InputMark.NONE, ""
        self.inputs.set_mark(key, mark, tip)
