"""Issue #21 item 4: Clear after "Clear finished" empties the window without an error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from engine.samples.contract_models import make_upscaler
from gui.main_window import MainWindow
from tests.engine_helpers import photo


@pytest.fixture
def models(models_dir: Path) -> Path:
    folder = Path(models_dir)
    make_upscaler(folder / "up2.onnx", scale=2)
    return folder


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
