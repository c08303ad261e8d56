"""The window's manners on the desktop: opening results with the desktop's programs (and
saying so when none opens them), notifications, recent files, Preferences, the time left
before the first tile, and words without jargon."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QLabel, QWidget
from pytestqt.qtbot import QtBot

from engine.requests import Operation
from engine.samples.upscaler_models import make_upscaler
from gui.jobs import JobState
from gui.main_window import MainWindow
from gui.widgets.preferences import PreferencesDialog
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import JOB_MS, WindowFactory, use_model, wait_ended


def test_11_open_and_show_in_folder_say_when_nothing_opens_the_file(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    opened: list[str] = []

    def nothing_opens(url: QUrl) -> bool:
        opened.append(url.toLocalFile())
        return False

    window.open_url = nothing_opens
    window.accept_paths([photo(tmp_path / "o.png", 30, 20)])
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    row = window.job_list.row(job_id)
    assert row is not None
    row.open_button.click()
    product = tmp_path / "o-up2.png"
    assert opened == [str(product)]
    assert "no program is set to open .png files" in window.notice.text()
    assert str(product) in window.notice.text()
    row.reveal_button.click()
    assert opened[-1] == str(tmp_path)
    assert "Could not open" in window.notice.text()


def test_11_a_long_job_that_ends_in_the_background_is_notified(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "slow.onnx")
    window.panel.tile.setValue(64)
    window.accept_paths([photo(tmp_path / "n.png", 400, 300)])
    other = QWidget()  # the person is working in another window
    try:
        other.show()
        other.activateWindow()
        qtbot.waitUntil(lambda: not window.isActiveWindow())
        (job_id,) = window.run_selected()
        job = window.workspace.jobs[job_id]
        qtbot.waitUntil(lambda: job.started_at is not None, timeout=JOB_MS)
        assert job.started_at is not None and job.state.active
        job.started_at -= 30  # as if it had run half a minute
        wait_ended(qtbot, window)
    finally:
        other.close()
    assert job.state is JobState.FINISHED
    assert len(window.notifier.sent) == 1
    channel, _title, text = window.notifier.sent[0]
    assert "n.png done" in text
    assert channel is window.notifier.channel  # the tray where there is one, else the log

    # a short job, or one that ends while the person is looking, is not notified
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.run_selected()
    wait_ended(qtbot, window)
    assert len(window.notifier.sent) == 1


def test_11_recent_files_are_offered(
    qtbot: QtBot, make_window: WindowFactory, tmp_path: Path
) -> None:
    win = make_window()
    first = photo(tmp_path / "recent.png", 30, 20)
    win.accept_paths([first])
    win.clear_inputs()
    assert [b.text() for b in win.welcome.recent_buttons] == ["recent.png"]
    win.menus.fill_recent()
    (action,) = [a for a in win.recent_menu.actions() if a.text() == "recent.png"]
    action.trigger()
    assert list(win.workspace.sources) == [str(first)]


def test_11_preferences_apply_at_once_and_show_the_environment_override(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialog = PreferencesDialog(window.settings, str(window.models_dir()), window)
    qtbot.addWidget(dialog)
    assert os.environ["TESSERA_MODELS_DIR"] in dialog.env_note.text()  # conftest sets it
    assert not dialog.models.isEnabled()
    dialog.reject()

    other = tmp_path / "other-models"
    make_upscaler(other / "mine3.onnx", scale=3)
    monkeypatch.delenv("TESSERA_MODELS_DIR")
    window.settings.models_dir = str(other)
    with qtbot.waitSignal(window.engine.settingsApplied, timeout=10_000):
        window.apply_preferences()
    qtbot.waitUntil(lambda: window.panel.select_model(str(other / "mine3.onnx")), timeout=10_000)
    window.accept_paths([photo(tmp_path / "m.png", 20, 10)])
    window.run_selected()
    wait_ended(qtbot, window)
    assert (tmp_path / "m-mine3.png").is_file()  # ran from the new folder, no restart


def test_11_a_job_shows_the_time_left_before_its_first_tile(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "slow.onnx")
    window.speeds.learn(Operation.UPSCALE, str(models / "slow.onnx"), "cpu", 3000.0, 1.0, 1)
    window.accept_paths([photo(tmp_path / "big.png", 400, 300)])
    (job_id,) = window.run_selected()
    job = window.workspace.jobs[job_id]
    row = window.job_list.row(job_id)
    assert row is not None
    assert "min" in row.time_label.text()  # queued: how long it will take
    qtbot.waitUntil(lambda: job.state is JobState.RUNNING, timeout=JOB_MS)
    row.refresh()
    if job.first_run is None:  # before the first tile: from the measured speed
        assert "left (estimate)" in row.time_label.text()
    window.jobs.cancel(job_id)
    wait_ended(qtbot, window)


def test_11_drop_images_here_once_and_no_jargon(window: MainWindow) -> None:
    def visible_texts() -> list[str]:
        texts = [w.text() for w in window.findChildren(QLabel) if w.isVisible() and w.text()]
        if window.viewer.view.isVisible():
            texts.append(window.viewer.view.placeholder)
        return texts

    assert sum("Drop images here" in t for t in visible_texts()) == 1
    combo = window.panel.model
    items = [combo.itemText(i) for i in range(combo.count())]
    assert not any("(starter)" in t for t in [*visible_texts(), *items])
