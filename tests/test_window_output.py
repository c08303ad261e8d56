"""Issue #21 on where results go and what Run runs: a `Tessera` folder beside the images by
default (never among them, so a reopened folder never takes them as inputs), an unreadable
input marked at once and left out of Run, Clear undone by its notice or Ctrl+Z, and Run that
skips what is done ("Run 1 image (2 done)", "Run 3 images again", "Run 1 clip"). Real windows
on the offscreen platform, a real engine thread, contract models, real files."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QToolButton
from pytestqt.qtbot import QtBot

from engine.io.sequences import list_sequence
from engine.options import OutputFormat, OutputOptions
from gui.jobs import JobState, SaveTo
from gui.main_window import MainWindow
from gui.settings import AppSettings
from gui.widgets.inputs_panel import InputMark
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.video_clips import make_clip
from tests.window_fixtures import WindowFactory, jpeg, use_model, wait_ended


def fresh_settings(tmp_path: Path, name: str = "fresh.ini") -> AppSettings:
    """Settings as a new user has them: nothing saved, Tessera's own defaults."""
    settings = AppSettings(QSettings(str(tmp_path / name), QSettings.Format.IniFormat))
    settings.pasted_dir = tmp_path / "Pictures" / "Tessera"
    return settings


def truncated_jpeg(path: Path) -> Path:
    whole = jpeg(path.with_name("whole-" + path.name), 64, 48, 9)
    data = whole.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # its header reads; its pixels end early
    whole.unlink()
    return path


# -- 5: a default output folder that is never an input -------------------------------------------
def test_5_results_go_to_a_tessera_folder_beside_the_images_never_among_them(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    window = make_window(fresh_settings(tmp_path))
    assert window.panel.save_to.choice() is SaveTo.TESSERA
    assert window.panel.save_to.text() == "Tessera folder beside each image"
    assert [window.panel.save_to.box.itemText(i) for i in range(2)] == [
        "Tessera folder beside each image",
        "Next to each image",
    ]
    assert window.panel.save_to.box.itemText(window.panel.save_to.box.count() - 1) == "A folder…"
    use_model(window, models, "up2.onnx")
    shots = tmp_path / "shots"
    shots.mkdir()
    frames = [photo(shots / f"frame_{i:03d}.png", 24, 16, seed=i) for i in (1, 2, 3)]
    window.accept_paths(frames)  # each its own image
    results = shots / "Tessera"
    assert not results.exists()  # made at the first result, not before
    window.run_selected()
    wait_ended(qtbot, window)
    assert all(j.state is JobState.FINISHED for j in window.workspace.jobs.values())
    assert sorted(p.name for p in results.iterdir()) == [
        "frame_001-up2.png",
        "frame_002-up2.png",
        "frame_003-up2.png",
    ]
    assert sorted(p.name for p in shots.iterdir()) == sorted([*(f.name for f in frames), "Tessera"])
    # The folder reopened as frames takes its three frames, not its results…
    window.inputs.clearRequested.emit()
    outcome = window.accept_paths([shots])
    (sequence,) = outcome.sources
    assert sequence.sequence and sequence.frames == 3
    # …and a select-all of the folder leaves its Tessera folder out, saying so.
    window.inputs.clearRequested.emit()
    outcome = window.accept_paths([*frames, results])
    assert [s.paths for s in outcome.sources] == [(f,) for f in frames]
    assert any("Tessera/" in why and "left out" in why for why in outcome.refused)
    # A chosen folder and "Next to each image" stay choices, remembered.
    window.panel.save_to.ask_folder = lambda _start: tmp_path / "chosen"
    box = window.panel.save_to.box
    box.activated.emit(box.count() - 1)  # "A folder…"
    assert window.panel.output_dir() == tmp_path / "chosen"
    assert window.panel.save_to.text() == str(tmp_path / "chosen")
    assert window.settings.save_to is SaveTo.FOLDER


def test_5_a_frame_folder_that_got_results_beside_its_frames_still_runs(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """ "Next to each image" (the fixture's choice, an older user's) wrote ×2 products among the
    frames; reopening the folder as frames took them as frames of another size and failed."""
    assert window.panel.save_to.choice() is SaveTo.BESIDE
    assert window.panel.save_to.text() == "Next to each image"
    use_model(window, models, "up2.onnx")
    folder = tmp_path / "frames"
    folder.mkdir()
    frames = [photo(folder / f"f_{i:03d}.png", 24, 16, seed=i) for i in (1, 2, 3)]
    window.accept_paths(frames)
    window.run_selected()
    wait_ended(qtbot, window)
    assert len(list(folder.glob("f_*-up2.png"))) == 3  # among the frames
    window.inputs.clearRequested.emit()
    (sequence,) = window.accept_paths([folder]).sources
    assert sequence.frames == 3
    assert list_sequence(folder) == frames
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    job = window.workspace.jobs[job_id]
    assert job.state is JobState.FINISHED, job.message
    assert len(list((folder / "Tessera").glob("f_001-up2-*.png"))) == 3


def test_5_a_saved_next_to_each_image_or_folder_keeps_working(tmp_path: Path) -> None:
    assert fresh_settings(tmp_path, "new.ini").save_to is SaveTo.TESSERA
    beside = fresh_settings(tmp_path, "beside.ini")
    beside.store.setValue("folders/output", "")  # what the window saved before issue #21
    assert beside.save_to is SaveTo.BESIDE
    folder = fresh_settings(tmp_path, "folder.ini")
    folder.store.setValue("folders/output", str(tmp_path / "out"))
    assert folder.save_to is SaveTo.FOLDER and folder.output_dir == str(tmp_path / "out")
    folder.save_to = SaveTo.TESSERA
    assert folder.save_to is SaveTo.TESSERA


# -- 9: an unreadable input is marked at once and left out of Run --------------------------------
def test_9_a_truncated_jpeg_is_marked_at_once_and_run_leaves_it_out(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    good = [jpeg(tmp_path / f"IMG_{i:04d}.jpg", 32, 24, i) for i in range(8)]
    broken = truncated_jpeg(tmp_path / "IMG_0100.jpg")
    outcome = window.accept_paths([*good[:4], broken, *good[4:]])
    assert len(outcome.sources) == 9  # its header reads: it is added, then found out
    key = str(broken)
    qtbot.waitUntil(lambda: window.inputs.mark(key) is InputMark.BROKEN)
    item = window.inputs.list.item(4)
    assert "truncated" in item.toolTip() and "Run leaves it out" in item.toolTip()
    assert window.panel.run_button.text() == "Run 8 images"
    ids = window.run_selected()
    assert [window.workspace.jobs[i].request.inputs for i in ids] == [(p,) for p in good]
    wait_ended(qtbot, window)
    assert all(window.workspace.jobs[i].state is JobState.FINISHED for i in ids)
    assert window.inputs.mark(key) is InputMark.BROKEN  # still says why, not "Failed"


# -- 3: Clear can be undone ----------------------------------------------------------------------
def _clear_button(window: MainWindow) -> QToolButton:
    buttons = [b for b in window.inputs.findChildren(QToolButton) if b.text() == "Clear"]
    assert len(buttons) == 1
    return buttons[0]


def test_3_clear_of_a_thousand_images_is_instant_and_undone_by_its_notice_or_ctrl_z(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    pixels = np.zeros((4, 4, 3), np.uint8)
    paths = []
    for i in range(1000):
        pixels[0, 0, 0] = i % 256
        path = folder / f"p{i:04d}.png"
        Image.fromarray(pixels).save(path)
        paths.append(path)
    window.accept_paths(paths)  # the first part now, the rest a part per turn (issue #21)
    qtbot.waitUntil(lambda: len(window.workspace.sources) == 1000, timeout=30_000)
    use_model(window, models, "up2.onnx")
    wanted = [str(paths[i]) for i in (3, 500, 999)]
    window.inputs.select_keys(wanted)
    assert window.workspace.selected == tuple(wanted)
    order = list(window.workspace.sources)

    started = time.perf_counter()
    _clear_button(window).click()
    cleared_s = time.perf_counter() - started
    assert window.workspace.sources == {} and window.inputs.list.count() == 0
    assert window.notice.text().startswith("Cleared 1000 images")
    assert window.notice.action_button.text() == "Undo"
    assert cleared_s < 2.0, cleared_s  # loose: issue #21 measured ~30 s for Clear of 1000

    window.notice.action_button.click()  # Undo on the notice
    assert list(window.workspace.sources) == order
    assert window.inputs.list.count() == 1000
    assert window.inputs.selected_keys() == wanted
    assert window.workspace.selected == tuple(wanted)
    assert window.panel.run_button.text() == "Run selected (3)"

    _clear_button(window).click()
    undo = [
        a for a in window.actions() if QKeySequence(QKeySequence.StandardKey.Undo) in a.shortcuts()
    ]
    assert len(undo) == 1  # Ctrl+Z
    window.activateWindow()
    qtbot.keyClick(window.inputs.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert list(window.workspace.sources) == order
    assert window.workspace.selected == tuple(wanted)
    # Adding images after Clear makes the old list stale: nothing to undo then.
    _clear_button(window).click()
    window.accept_paths(paths[:2])
    undo[0].trigger()
    assert list(window.workspace.sources) == [str(p) for p in paths[:2]]


# -- 13: Run skips what is done ------------------------------------------------------------------
def test_13_run_skips_images_done_with_the_same_settings_and_says_so(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    shots = [photo(tmp_path / f"{n}.png", 24, 16, seed=i) for i, n in enumerate("abc")]
    window.accept_paths(shots)
    assert window.panel.run_button.text() == "Run 3 images"
    window.run_one(str(shots[0]))
    window.run_one(str(shots[1]))
    wait_ended(qtbot, window)
    qtbot.waitUntil(lambda: window.panel.run_button.text() == "Run 1 image (2 done)")
    assert window.run_action.text() == "&Run 1 image (2 done)"
    ids = window.run_selected()
    assert [window.workspace.jobs[i].request.inputs for i in ids] == [(shots[2],)]
    wait_ended(qtbot, window)
    qtbot.waitUntil(lambda: window.panel.run_button.text() == "Run 3 images again")
    # another output step, or another model, is not done yet
    window.panel.output_editor.set_options(OutputOptions(OutputFormat.JPEG))
    window.panel.output_editor.changed.emit()
    assert window.panel.run_button.text() == "Run 3 images"
    window.panel.output_editor.set_options(OutputOptions())
    window.panel.output_editor.changed.emit()
    assert window.panel.run_button.text() == "Run 3 images again"
    use_model(window, models, "up4.onnx")
    assert window.panel.run_button.text() == "Run 3 images"
    use_model(window, models, "up2.onnx")
    again = window.run_selected()
    assert len(again) == 3
    wait_ended(qtbot, window)
    # selected: the done ones are counted the same way
    window.inputs.select_keys([str(shots[0]), str(shots[1])])
    assert window.panel.run_button.text() == "Run selected again (2)"


def test_13_run_pressed_again_during_a_batch_does_not_queue_it_twice(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    shots = [photo(tmp_path / f"{n}.png", 24, 16, seed=i) for i, n in enumerate("abc")]
    window.accept_paths(shots)
    first = window.run_selected()
    assert len(first) == 3
    # Before the engine thread's answers are handled, all three are still queued or running.
    assert window.workspace.run_plan().label == "Run (3 queued)"
    assert window.run_selected() == []
    assert len(window.workspace.jobs) == 3
    extra = photo(tmp_path / "d.png", 24, 16, seed=9)
    window.accept_paths([extra])
    assert window.workspace.run_plan().label == "Run 1 image (3 queued)"
    ids = window.run_selected()
    assert [window.workspace.jobs[i].request.inputs for i in ids] == [(extra,)]
    wait_ended(qtbot, window)
    qtbot.waitUntil(lambda: window.panel.run_button.text() == "Run 4 images again")


def test_13_a_clip_is_counted_as_a_clip(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    window = make_window()
    use_model(window, models, "up2.onnx")
    clip = make_clip(tmp_path / "walk.mp4", frames=3, audio=None)
    window.accept_paths([clip])  # a clip joins once the task thread has read its header
    qtbot.waitUntil(lambda: window.panel.run_button.text() == "Run 1 clip", timeout=10_000)
    window.accept_paths([photo(tmp_path / "a.png", 24, 16), photo(tmp_path / "b.png", 24, 16)])
    assert window.panel.run_button.text() == "Run 2 images and 1 clip"
