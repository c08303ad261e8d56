"""The app's main window for tests, in one place: `make_window` builds one on fresh settings over
the `models` fixture (up2, up4 and a slow upscaler unless the test module has its own), `window`
is one such window, `engine_thread` a started engine thread over the same models without a
window, and the helpers the window tests share (choosing a model, waiting for the
jobs, what the viewer shows, dragging and dropping files, test images). Loaded for every test
module by tests/conftest.py (`pytest_plugins`), so modules request the fixtures without
importing them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from engine.requests import Operation
from engine.settings import EngineSettings
from gui.engine_thread import EngineThread
from gui.jobs import SaveTo
from gui.main_window import MainWindow
from gui.settings import AppSettings

WindowFactory = Callable[..., MainWindow]


@pytest.fixture
def make_window(
    qtbot: QtBot, models: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[WindowFactory]:
    """A window on this test's settings file: Tessera's own defaults — but results beside
    their inputs — except where a test sets them. A second window of the same test reads what
    the first saved (a restart). A module whose tests drop files to run them declares
    `RUN_ON_DROP = True` (Tessera's default is off)."""
    windows: list[MainWindow] = []
    module_run_on_drop: bool | None = getattr(request.module, "RUN_ON_DROP", None)

    def make(
        settings: AppSettings | None = None, *, run_on_drop: bool | None = None, **kwargs: object
    ) -> MainWindow:
        if settings is None:
            store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
            settings = AppSettings(store)
            settings.pasted_dir = tmp_path / "Pictures" / "Tessera"
            # The window tests look for results beside their inputs; the default (a Tessera
            # folder beside them) has its own tests, on settings they make (test_window_output).
            if not store.contains("folders/save_to"):
                settings.save_to = SaveTo.BESIDE
            drop_runs = module_run_on_drop if run_on_drop is None else run_on_drop
            if drop_runs is not None and not store.contains("panel/run_on_drop"):
                settings.run_on_drop = drop_runs
        kwargs.setdefault("calibrate", False)
        win = MainWindow(
            settings,
            engine_settings=EngineSettings(models_dir=models),
            data_dir=tmp_path / "data",
            **kwargs,  # type: ignore[arg-type]
        )
        win.confirm_close = False
        windows.append(win)
        win.resize(1280, 800)
        win.show()
        qtbot.waitUntil(lambda: win.inventory is not None, timeout=10_000)
        return win

    yield make
    for win in windows:
        win.close()
        assert not win.engine.qthread.isRunning()
        assert not win.tasks.qthread.isRunning()


@pytest.fixture
def window(make_window: WindowFactory) -> MainWindow:
    return make_window()


JOB_MS = 60_000


@pytest.fixture
def settings(tmp_path: Path) -> AppSettings:
    """The app's settings in a fresh file of this test's own."""
    return AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))


@pytest.fixture
def engine_thread(models: Path) -> Iterator[EngineThread]:
    thread = EngineThread(EngineSettings(models_dir=models))
    thread.start(probe_runtimes=False)
    yield thread
    thread.stop()
    assert not thread.qthread.isRunning()


def use_model(win: MainWindow, models: Path, name: str, tile: int | None = None) -> None:
    """Upscale with the model `name` of `models` (and this tile size, 0 for auto, if given)."""
    win.panel.select_operation(Operation.UPSCALE)
    assert win.panel.select_model(str(models / name)), f"{name} is not offered"
    if tile is not None:
        win.panel.tile.setValue(tile)


def wait_ended(qtbot: QtBot, win: MainWindow) -> None:
    qtbot.waitUntil(
        lambda: (
            bool(win.workspace.jobs) and all(j.state.ended for j in win.workspace.jobs.values())
        ),
        timeout=JOB_MS,
    )


def settle_layout() -> None:
    """Deliver the layout requests Qt has posted, and those they post in turn, so geometry is
    final: instead of waiting a while and hoping the layout ran."""
    for _ in range(4):
        QApplication.sendPostedEvents()
        QApplication.processEvents()


def as_array(image: QImage) -> np.ndarray:
    """A QImage's pixels as an H×W×3 uint8 array (RGB)."""
    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    h, w = rgb.height(), rgb.width()
    data = np.frombuffer(rgb.constBits(), np.uint8, count=rgb.bytesPerLine() * h)
    return data.reshape(h, rgb.bytesPerLine())[:, : w * 3].reshape(h, w, 3).copy()


def shown_paths(win: MainWindow) -> tuple[Path | None, Path | None]:
    before, after = win.viewer.before, win.viewer.after
    return (before.path if before else None, after.path if after else None)


def jpeg(path: Path, width: int, height: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 // width, y * 255 // height, (x + y) % 255], axis=2)
    noisy = np.clip(pixels + rng.integers(-8, 8, pixels.shape), 0, 255).astype(np.uint8)
    Image.fromarray(noisy).save(path, quality=92)
    return path


def truncated_png(path: Path) -> Path:
    whole = path.with_name("whole-" + path.name)
    Image.fromarray(np.full((60, 80, 3), 90, np.uint8)).save(whole)
    path.write_bytes(whole.read_bytes()[:120])
    whole.unlink()
    return path


def drag_files(win: MainWindow, paths: list[Path]) -> QDragEnterEvent:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(
        win.rect().center(),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(win, enter)
    enter.mime = mime  # type: ignore[attr-defined]  # kept alive with the event
    return enter


def drop_files(win: MainWindow, paths: list[Path]) -> None:
    enter = drag_files(win, paths)
    assert enter.isAccepted()
    event = QDropEvent(
        QPointF(win.rect().center()),
        Qt.DropAction.CopyAction,
        enter.mime,  # type: ignore[attr-defined]
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(win, event)
