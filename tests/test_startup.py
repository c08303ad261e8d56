"""Start-up: the window is drawn before its model list is read, and loading the window's
modules loads neither onnx nor ONNX Runtime (the model list, the engine and the runtime probe
import them on the threads that use them). Time to a shown window is measured, not asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QObject, QSettings
from pytestqt.qtbot import QtBot

from engine.settings import EngineSettings
from gui.controllers.models import ModelsController
from gui.main_window import MainWindow
from gui.settings import AppSettings
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard

ROOT = Path(__file__).resolve().parent.parent


def test_the_window_modules_load_no_onnx() -> None:
    code = (
        "import sys\n"
        "import gui.app, gui.main_window\n"
        "print(sorted(m for m in ('onnx', 'onnxruntime') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class _Paints(QObject):
    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self.order = order

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint and "paint" not in self.order:
            self.order.append("paint")
        return False


def test_the_window_is_drawn_before_its_model_list_is_read(
    qtbot: QtBot, tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    refresh = ModelsController.refresh

    def listed(self: ModelsController) -> None:
        order.append("models")
        refresh(self)

    monkeypatch.setattr(ModelsController, "refresh", listed)
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    win = MainWindow(
        settings,
        engine_settings=EngineSettings(models_dir=Path(models_dir)),
        data_dir=tmp_path / "data",
        probe_runtimes=False,
        calibrate=False,
    )
    paints = _Paints(order)
    win.installEventFilter(paints)
    try:
        win.show()
        qtbot.waitUntil(lambda: win.inventory is not None, timeout=10_000)
        assert order == ["paint", "models"]
    finally:
        win.close()
