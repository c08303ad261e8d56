"""Estimates learnt from finished jobs are kept in the data folder and known after a restart,
and a batch of an image and a clip is counted as what it is."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from gui.controllers.speed_store import FILE_NAME
from gui.inputs import InputSource
from gui.settings import AppSettings, SaveTo
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory, use_model, wait_ended


def _fresh_settings(path: Path) -> AppSettings:
    settings = AppSettings(QSettings(str(path), QSettings.Format.IniFormat))
    settings.save_to = SaveTo.BESIDE
    return settings


def test_a_speed_learnt_before_a_restart_gives_the_first_estimate_after_it(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    first = make_window(_fresh_settings(tmp_path / "one.ini"))
    use_model(first, models, "up2.onnx")
    image = photo(tmp_path / "a.png", 320, 240, seed=1)
    first.accept_paths([image])
    assert "The first job measures" in first.jobs.estimate_line("this CPU")
    first.run_selected()
    wait_ended(qtbot, first)
    assert (tmp_path / "data" / FILE_NAME).is_file()
    first.close()
    # The next start: the same data folder, and settings that kept nothing of the speeds
    # (QSettings is written lazily; a killed app loses what it had not synced).
    again = make_window(_fresh_settings(tmp_path / "two.ini"))
    use_model(again, models, "up2.onnx")
    again.accept_paths([photo(tmp_path / "b.png", 320, 240, seed=2)])
    line = again.jobs.estimate_line("this CPU")
    assert "The first job measures" not in line and "rough" not in line
    assert line.endswith("on this CPU for 1 image."), line


def test_an_image_and_a_clip_are_counted_as_an_image_and_a_clip(
    make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    window = make_window()
    use_model(window, models, "up2.onnx")
    settings = window.workspace.settings
    assert settings is not None
    window.speeds.learn(settings.operation, settings.model, settings.device, 2.0, 0.5, 1)
    sources = [
        InputSource((tmp_path / "a.png",), False, 1, 640, 480),
        InputSource((tmp_path / "c.mp4",), False, 50, 320, 240, 2.0),
    ]
    line = window.jobs.estimate_text(sources, settings, "this CPU", True)
    assert "for 1 image and 1 clip" in line, line
