"""Adding images to the window and following the work: each photo its own image, numbered
frames offered as one sequence, new work selected and shown without taking the view the person
chose, Run says what it runs, a failure says so in red, paste, run-on-drop and a second
launch's files. Real windows on the offscreen platform, a real engine thread, contract models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import (
    QColor,
    QGuiApplication,
    QImage,
)
from pytestqt.qtbot import QtBot

from gui.jobs import JobState
from gui.main_window import MainWindow
from gui.widgets.compare_view import CompareView
from gui.widgets.inputs_panel import InputMark
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import (
    WindowFactory,
    drop_files,
    jpeg,
    shown_paths,
    truncated_png,
    use_model,
    wait_ended,
)


def test_0_numbered_photos_are_separate_images_not_a_failing_sequence(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    window.panel.run_on_drop.setChecked(True)
    shots = [
        jpeg(tmp_path / "IMG_0001.jpg", 48, 32, 1),
        jpeg(tmp_path / "IMG_0002.jpg", 32, 48, 2),  # a portrait among landscapes
        jpeg(tmp_path / "IMG_0003.jpg", 48, 32, 3),
    ]
    drop_files(window, shots)
    requests = [job.request for job in window.workspace.jobs.values()]
    assert [r.inputs for r in requests] == [(s,) for s in shots]
    assert not any(r.sequence for r in requests)
    assert window.notice.action_button.isHidden()  # not one size: nothing to offer
    wait_ended(qtbot, window)
    assert all(j.state is JobState.FINISHED for j in window.workspace.jobs.values())
    names = sorted(p.name for p in tmp_path.glob("IMG_*-*.png"))
    assert names == ["IMG_0001-up2.png", "IMG_0002-up2.png", "IMG_0003-up2.png"]


def test_0_equally_sized_numbered_frames_are_offered_as_a_sequence_never_guessed(
    window: MainWindow, models: Path, tmp_path: Path
) -> None:
    frames = [photo(tmp_path / f"frame_{i:03d}.png", 24, 16, seed=i) for i in (1, 2, 3, 4)]
    outcome = window.accept_paths(frames)
    assert len(outcome.sources) == 4 and not any(s.sequence for s in outcome.sources)
    assert window.notice.action_button.text() == "Process as one sequence"
    window.notice.action_button.click()
    (sequence,) = window.workspace.sources.values()
    assert sequence.sequence and sequence.paths == tuple(frames)


def test_1_new_work_is_selected_shown_and_scrolled_into_view(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    window.panel.run_on_drop.setChecked(True)
    first = photo(tmp_path / "first.png", 40, 30)
    window.accept_paths([first])
    wait_ended(qtbot, window)
    qtbot.waitUntil(lambda: shown_paths(window)[0] == first)
    # six more, opened one after another while the first is selected; slow, so they queue
    use_model(window, models, "slow.onnx")
    window.panel.tile.setValue(64)
    later = [photo(tmp_path / f"later{i}.png", 400, 300, seed=i) for i in range(6)]
    for path in later:
        window.accept_paths([path])
        assert window.inputs.current() is not None
        assert window.inputs.current().paths == (path,)  # type: ignore[union-attr]
        qtbot.waitUntil(lambda p=path: shown_paths(window)[0] == p, timeout=5000)  # type: ignore[misc]
        # the list keeps the running job (else the next queued one) in view, not the newest
        qtbot.waitUntil(
            lambda: (
                window.job_list.row(
                    next(j.id for j in window.workspace.jobs.values() if j.state.active)
                )
                is not None
            ),
            timeout=3000,
        )
    assert len(window.workspace.jobs) == 7
    window.jobs.cancel_all()
    wait_ended(qtbot, window)


def test_1_a_result_does_not_replace_what_the_person_chose_to_look_at(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "slow.onnx")
    window.panel.tile.setValue(64)
    a = photo(tmp_path / "a.png", 40, 30)
    b = photo(tmp_path / "b.png", 400, 300)
    window.accept_paths([a, b])
    (job_id,) = window.run_one(str(b))
    assert window.workspace.jobs[job_id].state.active
    # the person clicks a's thumbnail meanwhile
    a_rect = window.inputs.list.visualItemRect(window.inputs.list.item(0))
    qtbot.mouseClick(window.inputs.list.viewport(), Qt.MouseButton.LeftButton, pos=a_rect.center())
    qtbot.waitUntil(lambda: shown_paths(window)[0] == a)
    wait_ended(qtbot, window)
    qtbot.wait(300)
    assert shown_paths(window) == (a, None)
    assert window.inputs.mark(str(b)) is InputMark.DONE


def test_2_run_processes_every_image_and_says_so(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    images = [photo(tmp_path / f"{n}.png", 30, 20, seed=i) for i, n in enumerate(("a", "b", "c"))]
    window.accept_paths(images)
    assert window.workspace.jobs == {}  # run-on-drop is off: adding writes nothing
    assert window.panel.run_button.text() == "Run 3 images"
    assert window.statusBar().currentMessage().startswith("Added 3 images. Press Run")
    qtbot.mouseClick(window.panel.run_button, Qt.MouseButton.LeftButton)
    assert [j.request.inputs for j in window.workspace.jobs.values()] == [(p,) for p in images]
    wait_ended(qtbot, window)
    # several selected: the button says so, and runs those (again: they are done, #21)
    window.inputs.list.item(0).setSelected(True)
    window.inputs.list.item(2).setSelected(True)
    window.inputs.list.item(1).setSelected(False)
    assert window.panel.run_button.text() == "Run selected again (2)"
    ids = window.run_selected()
    assert [window.workspace.jobs[i].request.inputs for i in ids] == [(images[0],), (images[2],)]


def test_3_a_failed_job_says_failed_in_red_on_the_job_and_the_thumbnail(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    broken = truncated_png(tmp_path / "truncated.png")
    outcome = window.accept_paths([broken])
    assert outcome.sources, outcome.refused  # its header reads: the job finds the damage
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    job = window.workspace.jobs[job_id]
    assert job.state is JobState.FAILED
    row = window.job_list.row(job_id)
    assert row is not None
    assert row.state_label.text() == "Failed"
    assert "c0392b" in row.state_label.styleSheet()  # red
    assert not row.bar.isVisibleTo(row)
    assert row.message.isVisibleTo(row) and "truncated" in row.message.text()
    assert window.job_list.expanded  # the failure is shown, not folded away
    assert window.inputs.mark(str(broken)) is InputMark.FAILED
    item = window.inputs.list.item(0)
    assert "Failed:" in item.toolTip() and "truncated" in item.toolTip()
    failed = [v for v in window.workspace.versions(str(broken)) if v.failed]
    assert failed and "truncated" in failed[0].failed


def test_6_a_successful_paste_takes_back_the_clipboard_warning(
    window: MainWindow, tmp_path: Path
) -> None:
    QGuiApplication.clipboard().clear()
    window.paste()
    assert "clipboard holds no image" in window.notice.text()
    image = QImage(32, 24, QImage.Format.Format_RGB888)
    image.fill(QColor(200, 40, 40))
    QGuiApplication.clipboard().setImage(image)
    window.paste()
    assert "clipboard holds no image" not in window.notice.text()
    assert len(window.workspace.sources) == 1


def _text_rows(view: CompareView) -> int:
    """How many pixel rows of the view carry the placeholder's text."""
    shot = view.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    width, height = shot.width(), shot.height()
    pixels = np.frombuffer(shot.constBits(), np.uint8, shot.bytesPerLine() * height)
    rows = pixels.reshape(height, shot.bytesPerLine())[:, : width * 3].reshape(height, width, 3)
    background = rows[2, 2].astype(int)
    inked = np.abs(rows.astype(int) - background).sum(axis=2) > 60
    return int(inked.any(axis=1).sum())


def test_6_clear_forgets_a_viewer_error_and_long_errors_wrap(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    window.resize(900, 640)
    broken = truncated_png(tmp_path / ("a-rather-long-name-" * 4 + "truncated.png"))
    window.accept_paths([broken])
    view = window.viewer.view
    qtbot.waitUntil(lambda: "Cannot show this image" in view.placeholder)
    line = view.fontMetrics().height()
    assert _text_rows(view) > 2 * line  # wrapped onto several lines, not cut at both edges
    window.inputs.clearRequested.emit()
    assert "Cannot show" not in view.placeholder
    assert not window.viewer.isVisible() or "Cannot" not in window.viewer.title.text()


def test_8_run_on_drop_is_off_by_default_remembered_and_a_handover_never_runs(
    make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    first = make_window()
    assert not first.panel.run_on_drop.isChecked()
    drop_files(first, [photo(tmp_path / "a.png", 30, 20)])
    assert first.workspace.jobs == {} and len(first.workspace.sources) == 1
    first.panel.run_on_drop.setChecked(True)
    first.close()
    second = make_window()
    assert second.panel.run_on_drop.isChecked()  # remembered once changed
    second.open_files_and_raise([str(photo(tmp_path / "handed.png", 30, 20))])
    assert second.workspace.jobs == {}  # a second launch's files are shown, not run
    assert second.inputs.current() is not None
