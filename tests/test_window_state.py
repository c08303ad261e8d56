"""The window's state lives in its workspace (gui/workspace.py), not in its widgets: the panel's
operation and "Start jobs for dropped files" are written there as they change, and what reads
them — a drop, Run — reads the workspace."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from engine.operation_specs import Operation
from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import JOB_MS, use_model


def test_the_panels_choices_are_the_workspaces_state(window: MainWindow) -> None:
    ws = window.workspace
    assert ws.operation is window.panel.current_operation()
    assert ws.run_on_drop is False  # Tessera's default
    window.panel.select_operation(Operation.DEPTH)
    assert ws.operation is Operation.DEPTH
    window.panel.run_on_drop.setChecked(True)
    assert ws.run_on_drop is True


def test_a_drop_runs_as_the_workspace_says(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    window.workspace.set_run_on_drop(True)  # the model's word, whatever a widget shows
    window.accept_paths([photo(tmp_path / "a.png", 24, 16)])
    qtbot.waitUntil(lambda: bool(window.workspace.jobs), timeout=JOB_MS)
    qtbot.waitUntil(
        lambda: all(j.state.ended for j in window.workspace.jobs.values()), timeout=JOB_MS
    )
