"""The first window fits the screen it opens on: its frame inside the screen's free area and
its status bar inside the window (issue #35: a 1280×800 window under a title bar was taller
than a 1280×800 screen, and at 1024×640 Run and the status bar were below the edge)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMargins, QRect, QSettings
from pytestqt.qtbot import QtBot

from engine.settings import EngineSettings
from gui.main_window import MainWindow
from gui.settings import AppSettings
from gui.widgets.screen_fit import FRAME, fitted
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard


@pytest.mark.parametrize("screen", [(1280, 800), (1024, 640), (1920, 1080)])
def test_the_first_window_and_its_title_bar_fit_the_free_area(screen: tuple[int, int]) -> None:
    # A panel of 28 px at the top, as GNOME's, and a title bar of 37 px.
    available = QRect(0, 28, screen[0], screen[1] - 28)
    frame = QMargins(1, 37, 1, 1)
    inner = fitted(available, frame)
    assert available.contains(inner.marginsAdded(frame))
    assert inner.width() == min(1280, screen[0] - 2)
    assert inner.height() == min(800, screen[1] - 28 - 38)


def test_a_window_without_saved_geometry_opens_inside_its_screen(
    qtbot: QtBot, models: Path, tmp_path: Path
) -> None:
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    win = MainWindow(
        settings, engine_settings=EngineSettings(models_dir=models), data_dir=tmp_path / "data"
    )
    win.confirm_close = False
    try:
        win.show()
        qtbot.waitExposed(win)
        screen = win.screen().availableGeometry()  # the offscreen platform's: 800×800
        qtbot.waitUntil(lambda: screen.contains(win.frameGeometry()), timeout=5000)
        assert win.width() <= screen.width() - FRAME.left() - FRAME.right()
        bar = win.statusBar()
        assert bar.isVisible() and win.rect().contains(bar.geometry())
        assert win.minimumSizeHint().width() <= 1024 and win.minimumSizeHint().height() <= 600
    finally:
        win.close()
