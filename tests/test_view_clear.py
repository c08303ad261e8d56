"""Issue #21 item 4: Clear after "Clear finished" empties the window without an error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.model_files import upscaler

MODELS = {"up2.onnx": upscaler(2)}


def test_clear_after_clear_finished_raises_nothing(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, value, tb: errors.append(value))
    paths = [photo(tmp_path / f"p{i}.png", 24, 16, seed=i) for i in range(3)]
    window.accept_paths(paths)
    window.run_selected()
    qtbot.waitUntil(
        lambda: bool(window.workspace.jobs) and not window.jobs.active(), timeout=30_000
    )
    window.clear_finished()
    window.inputs.clearRequested.emit()
    qtbot.wait(200)
    assert errors == []
    assert window.center.currentWidget() is window.welcome
