"""Watching a folder from the window: files that land in it become inputs and run with the
current operation, each once, when whole; products never come back; Stop ends the watch.
A real window on the offscreen platform, a real engine thread, a contract model."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from pytestqt.qtbot import QtBot

from gui.jobs import JobState
from gui.main_window import MainWindow
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import use_model, wait_ended


def _png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _looks(qtbot: QtBot, window: MainWindow, count: int) -> None:
    watch = window.menus.watch
    target = watch.looks + count
    qtbot.waitUntil(lambda: watch.looks >= target, timeout=10_000)


def test_files_landing_in_a_watched_folder_are_run_once_each_when_whole(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    folder = tmp_path / "hot"
    folder.mkdir()
    watch = window.menus.watch
    watch.timer.setInterval(20)
    assert watch.start(folder)
    assert window.menus.watch_status.isVisibleTo(window)
    assert "Watching" in window.menus.watch_status.label.text()
    assert window.menus.watch_action.text() == "Stop &watching hot"

    data = _png(1)
    with open(folder / "first.png", "wb") as file:
        file.write(data[: len(data) // 2])
        file.flush()
        _looks(qtbot, window, 3)  # half a file, unchanged over several looks: not taken
        assert window.workspace.jobs == {}
        file.write(data[len(data) // 2 :])
    (folder / "second.png").write_bytes(_png(2))
    qtbot.waitUntil(lambda: len(window.workspace.jobs) == 2, timeout=10_000)
    wait_ended(qtbot, window)
    jobs = list(window.workspace.jobs.values())
    assert sorted(j.request.inputs[0].name for j in jobs) == ["first.png", "second.png"]
    assert all(j.state is JobState.FINISHED for j in jobs)
    assert "2 arrived" in window.menus.watch_status.label.text()
    # The products were written beside the inputs, in the watched folder: never taken.
    assert sorted(p.name for p in folder.iterdir()) == [
        "first-up2.png",
        "first.png",
        "second-up2.png",
        "second.png",
    ]
    _looks(qtbot, window, 3)
    assert len(window.workspace.jobs) == 2

    window.menus.watch_status.stop_button.click()
    assert watch.folder is None and not watch.timer.isActive()
    assert not window.menus.watch_status.isVisibleTo(window)
    assert window.menus.watch_action.text() == "&Watch a folder…"
    (folder / "late.png").write_bytes(_png(3))
    watch.look()  # no look when stopped
    assert not watch._looking and len(window.workspace.jobs) == 2
