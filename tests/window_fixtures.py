"""The app's main window for tests: `make_window` builds one on fresh settings over the test
module's own `models` fixture, `window` is one such window. Loaded for every test module by
tests/conftest.py (`pytest_plugins`), so modules request them without importing them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from engine.settings import EngineSettings
from gui.main_window import MainWindow
from gui.settings import AppSettings

WindowFactory = Callable[..., MainWindow]


@pytest.fixture
def make_window(qtbot: QtBot, models: Path, tmp_path: Path) -> Iterator[WindowFactory]:
    """A window on fresh settings: Tessera's own defaults, except where a test sets them."""
    windows: list[MainWindow] = []

    def make(settings: AppSettings | None = None, **kwargs: object) -> MainWindow:
        if settings is None:
            store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
            settings = AppSettings(store)
            settings.pasted_dir = tmp_path / "Pictures" / "Tessera"
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


@pytest.fixture
def window(make_window: WindowFactory) -> MainWindow:
    return make_window()
