"""The window's menus and their shortcuts (every shortcut also works with the menu bar hidden),
Space over the viewer, the Open recent list, and About."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QFileDialog, QMainWindow, QMenu, QMessageBox, QWidget

from engine.io.image import VIDEO_SUFFIXES
from gui.controllers.jobs import JobsController
from gui.controllers.models import ModelsController
from gui.controllers.watch import WatchController
from gui.settings import AppSettings
from gui.tasks import TaskThread
from gui.widgets.preferences import PreferencesDialog
from gui.widgets.viewer import ViewerPanel
from gui.widgets.watch_status import WatchStatus
from gui.widgets.welcome import WelcomePage

Keys = Sequence[QKeySequence | QKeySequence.StandardKey | str]
IMAGE_FILTER = (
    "Images and clips (*.png *.jpg *.jpeg *.webp *.gif *.tif *.tiff *.bmp *.avif *.tga *.qoi "
    + " ".join(f"*{s}" for s in sorted(VIDEO_SUFFIXES))
    + ");;Clips ("
    + " ".join(f"*{s}" for s in sorted(VIDEO_SUFFIXES))
    + ");;ONNX models (*.onnx);;All files (*)"
)


class MenuHost(Protocol):
    """What the menus call: the window (a protocol, so this module does not import it)."""

    settings: AppSettings
    data_dir: Path
    jobs: JobsController
    models: ModelsController
    tasks: TaskThread
    viewer: ViewerPanel
    welcome: WelcomePage

    def paste(self) -> None: ...
    def undo_clear(self) -> None: ...
    def save_as(self, version_id: str = "") -> None: ...
    def copy_result(self) -> None: ...
    def apply_preferences(self) -> None: ...
    def set_preview(self, on: bool) -> None: ...
    def memory_toggled(self, shown: bool) -> None: ...
    def run_selected(self) -> list[str]: ...
    def clear_finished(self) -> None: ...
    def continue_from_result(self) -> None: ...
    def run_chain_from(self, version_id: str = "") -> list[str]: ...
    def open_log_folder(self) -> None: ...
    def accept_paths(self, paths: Sequence[Path | str], *, run: bool | None = None) -> object: ...
    def models_dir(self) -> Path: ...


def action(
    window: QMainWindow,
    text: str,
    slot: Callable[[], object],
    keys: Keys = (),
    tip: str = "",
    menu: QMenu | None = None,
) -> QAction:
    made = QAction(text, window)
    shortcuts = [k if isinstance(k, QKeySequence) else QKeySequence(k) for k in keys]
    shortcuts = [k for k in shortcuts if not k.isEmpty()]
    if shortcuts:
        made.setShortcuts(shortcuts)
    if tip:
        made.setStatusTip(tip)
    made.triggered.connect(lambda _checked=False: slot())
    window.addAction(made)  # shortcuts work even with the menu bar hidden
    if menu is not None:
        menu.addAction(made)
    return made


def toggle(
    window: QMainWindow, text: str, keys: str, menu: QMenu, slot: Callable[[bool], None]
) -> QAction:
    made = QAction(text, window)
    made.setCheckable(True)
    made.setShortcut(QKeySequence(keys))
    made.toggled.connect(slot)
    window.addAction(made)
    menu.addAction(made)
    return made


class SpaceFlip(QObject):
    """Space flips the compare whenever the pointer or the focus is in the viewer.

    With the focus in the viewer the viewer's own Flip action answers (its shortcut covers the
    viewer and its children). With the pointer over the viewer and the focus elsewhere — on Run
    after a click, on a checkbox — this window-wide shortcut answers instead of the focused
    widget, so Space never presses a button the person is not looking at. Only one of the two is
    enabled at a time (two would make Space ambiguous); elsewhere Space does what it always does
    (types a space in a text field, toggles the focused checkbox reached with Tab)."""

    def __init__(self, window: QWidget, viewer: QWidget, flip: QAction) -> None:
        super().__init__(window)
        self.viewer = viewer
        self.pointer_in = False
        self.shortcut = QShortcut(QKeySequence(Qt.Key.Key_Space), window)
        self.shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
        self.shortcut.setAutoRepeat(False)
        self.shortcut.activated.connect(flip.trigger)
        viewer.installEventFilter(self)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self.update)
        self.update()

    def focus_in_viewer(self) -> bool:
        focus = QApplication.focusWidget()
        return focus is not None and (focus is self.viewer or self.viewer.isAncestorOf(focus))

    def update(self, *_widgets: object) -> None:
        self.shortcut.setEnabled(
            self.pointer_in and self.viewer.isVisible() and not self.focus_in_viewer()
        )

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if watched is self.viewer and kind in (QEvent.Type.Enter, QEvent.Type.Leave):
            self.pointer_in = kind is QEvent.Type.Enter
            self.update()
        elif watched is self.viewer and kind in (QEvent.Type.Show, QEvent.Type.Hide):
            self.update()
        return False


class WindowMenus:
    """The menu bar of `window`; the actions the window enables or renames are kept here."""

    def __init__(self, window: QMainWindow, host: MenuHost) -> None:
        self.window, self.host = window, host
        self.build()

    def build(self) -> None:
        h = self.host
        key, bar = QKeySequence.StandardKey, self.window.menuBar()

        def a(text: str, slot: Callable[[], object], keys: Keys = (), tip: str = "") -> QAction:
            return action(self.window, text, slot, keys, tip, current)

        current = bar.addMenu("&File")
        a("&Open images…", self.open_dialog, [key.Open])
        a("Open a &folder of frames…", self.open_folder_dialog)
        tip = "Run every image that lands in a folder with the current operation and output"
        self.watch_action = a("&Watch a folder…", self.watch_folder_dialog, tip=tip)
        self.recent_menu = current.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(self.fill_recent)
        a("&Paste image", h.paste, [key.Paste], "Add the image (or files) on the clipboard")
        # Clear empties the list at once; this brings it back (issue #21).
        tip = "Bring back the images Clear took out of the list"
        self.undo_action = a("&Undo clear", h.undo_clear, [key.Undo], tip)
        current.addSeparator()
        a("&Save result as…", h.save_as, ["Ctrl+Shift+S"])
        a("&Copy result", h.copy_result, [key.Copy])
        current.addSeparator()
        a("&Add a model file…", self.add_model_dialog)
        a("Refresh the &model list", h.models.refresh)
        current.addSeparator()
        a("Pr&eferences…", self.preferences, [key.Preferences])
        current.addSeparator()
        a("&Quit", self.window.close, [key.Quit])

        current, view = bar.addMenu("&View"), h.viewer.view
        a("Zoom &in", view.zoom_in, [key.ZoomIn, "Ctrl+="])
        a("Zoom &out", view.zoom_out, [key.ZoomOut])
        a("&Fit", view.fit, ["Ctrl+0"])
        a("&Actual size", view.actual_size, ["Ctrl+1"])
        current.addAction(h.viewer.flip_action)
        self.space = SpaceFlip(self.window, h.viewer, h.viewer.flip_action)
        self.preview_action = toggle(self.window, "&Preview", "Ctrl+P", current, h.set_preview)
        self.preview_action.setStatusTip(
            "Show what the chosen operation and model make of the part of the image in view"
        )
        current.addSeparator()
        self.memory_action = toggle(
            self.window, "&Memory panel", "Ctrl+M", current, h.memory_toggled
        )

        current, jobs = bar.addMenu("&Jobs"), h.jobs
        tip = "Queue a job for every image, or for the selected ones"
        self.run_action = a("&Run", h.run_selected, ["Ctrl+Return", "Ctrl+Enter"], tip)
        self.cancel_action = a("&Cancel the running job", jobs.cancel_running, [key.Cancel])
        a("Cancel &all jobs", jobs.cancel_all)
        a("C&lear finished jobs", h.clear_finished)
        current.addSeparator()
        tip = "The next job of this image starts from the result on the right"
        a("Use the shown result as &input", h.continue_from_result, tip=tip)
        tip = "Every step that made the result on the right, on the other images"
        a("Run the shown &chain on other images", h.run_chain_from, tip=tip)

        current = bar.addMenu("&Help")
        self._build_watch()
        a("Open the &log folder", h.open_log_folder)
        a("&About Tessera", self.about)

    def fill_recent(self) -> None:
        host, menu = self.host, self.recent_menu
        menu.clear()
        recent = [p for p in host.settings.recent_files() if Path(p).exists()]
        for path in recent:
            item = menu.addAction(Path(path).name)
            item.setToolTip(path)
            item.triggered.connect(lambda _c=False, p=path: host.accept_paths([Path(p)]))
        if not recent:
            menu.addAction("No recent files").setEnabled(False)
        else:
            menu.addSeparator()
            menu.addAction("Clear the list", self.clear_recent)

    def clear_recent(self) -> None:
        self.host.settings.clear_recent()
        self.host.welcome.set_recent([])

    def about(self) -> None:
        host = self.host
        QMessageBox.about(
            self.window,
            "About Tessera",
            "<b>Tessera</b><br>Edit images with local ONNX models. One loaded copy of each "
            "model, reused for every job; GPU memory handed back after each operation.<br><br>"
            f"Models: {host.models_dir()}<br>Log: {host.data_dir / 'logs'}",
        )

    def _build_watch(self) -> None:
        """The watched folder: its controller, and its sign in the status bar (with Stop)."""
        h = self.host
        self.watch = WatchController(
            h.tasks, lambda paths: h.accept_paths(paths, run=True), self.window
        )
        self.watch_status = WatchStatus(self.window)
        self.window.statusBar().addPermanentWidget(self.watch_status)
        w, status = self.watch, self.watch_status
        w.watchStarted.connect(status.show_watching)
        w.watchStopped.connect(lambda _folder: status.show_stopped())
        w.filesArrived.connect(
            lambda names: status.show_arrived([Path(n).name for n in names], len(w.arrived))
        )
        w.statusRequested.connect(self.window.statusBar().showMessage)
        status.stopRequested.connect(w.stop)
        w.watchStarted.connect(
            lambda folder: self.watch_action.setText(f"Stop &watching {Path(folder).name}")
        )
        w.watchStopped.connect(lambda _folder: self.watch_action.setText("&Watch a folder…"))

    def watch_folder_dialog(self) -> None:
        """Watch a folder (the menu's entry stops the watch while there is one)."""
        if self.watch.folder is not None:
            self.watch.stop()
            return
        folder = QFileDialog.getExistingDirectory(
            self.window, "Watch a folder", str(self.host.settings.open_dir)
        )
        if folder:
            self.watch.start(Path(folder))

    # -- the dialogs the File menu opens ------------------------------------------------------
    # Each starts in the folder last used for it (AppSettings), never in the current directory.
    def open_dialog(self) -> None:
        settings = self.host.settings
        files, _ = QFileDialog.getOpenFileNames(
            self.window, open_title("Open images", settings), str(settings.open_dir), IMAGE_FILTER
        )
        if files:
            settings.open_dir = Path(files[0]).parent
            self.host.accept_paths([Path(f) for f in files])

    def open_folder_dialog(self) -> None:
        settings = self.host.settings
        folder = QFileDialog.getExistingDirectory(
            self.window, open_title("Open a folder of frames", settings), str(settings.open_dir)
        )
        if folder:
            # the folder that holds it: the next sequence is most likely its sibling
            settings.open_dir = Path(folder).parent
            self.host.accept_paths([Path(folder)])

    def add_model_dialog(self) -> None:
        settings = self.host.settings
        files, _ = QFileDialog.getOpenFileNames(
            self.window, "Add a model", str(settings.model_open_dir), "ONNX models (*.onnx)"
        )
        if files:
            settings.model_open_dir = Path(files[0]).parent
        for f in files:
            self.host.models.install(Path(f))

    def preferences(self) -> None:
        dialog = PreferencesDialog(self.host.settings, str(self.host.models_dir()), self.window)
        if dialog.exec():
            self.host.apply_preferences()


def open_title(title: str, settings: AppSettings) -> str:
    """The Open dialog's title, saying why it starts in home when there is no Pictures folder."""
    note = settings.open_dir_note()
    return f"{title} ({note})" if note else title
