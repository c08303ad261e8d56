"""Issue 13, "The result at the centre": one test per numbered problem (0–12), and the person
who opens three photos, presses Run once, sees each result appear, exports one as JPEG at ×2
and drags another out — real windows on the offscreen platform, a real engine thread, real
contract models in temporary folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import (
    QColor,
    QDrag,
    QDragEnterEvent,
    QDragLeaveEvent,
    QDropEvent,
    QGuiApplication,
    QImage,
)
from PySide6.QtWidgets import QApplication, QLabel, QWidget
from pytestqt.qtbot import QtBot

from engine.options import OutputFormat, OutputOptions
from engine.requests import Operation
from engine.samples.contract_models import make_upscaler
from gui.jobs import JobState
from gui.main_window import MainWindow
from gui.settings import AppSettings, pictures_dir
from gui.widgets.compare_view import CompareView, ViewMode
from gui.widgets.inputs_panel import InputMark
from gui.widgets.preferences import PreferencesDialog
from tests.engine_helpers import gif3, photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.slow_models import make_slow_upscaler
from tests.window_fixtures import WindowFactory

ROOT = Path(__file__).resolve().parent.parent
JOB_MS = 60_000


@pytest.fixture
def models(models_dir: Path) -> Path:
    folder = Path(models_dir)
    make_upscaler(folder / "up2.onnx", scale=2)
    make_upscaler(folder / "up4.onnx", scale=4)
    make_slow_upscaler(folder / "slow.onnx", layers=300)
    return folder


def use_model(win: MainWindow, models: Path, name: str) -> None:
    win.panel.select_operation(Operation.UPSCALE)
    assert win.panel.select_model(str(models / name)), f"{name} is not offered"


def wait_ended(qtbot: QtBot, win: MainWindow) -> None:
    qtbot.waitUntil(
        lambda: bool(win.jobs.jobs) and all(j.state.ended for j in win.jobs.jobs.values()),
        timeout=JOB_MS,
    )


def shown_paths(win: MainWindow) -> tuple[Path | None, Path | None]:
    before, after = win.viewer.before, win.viewer.after
    return (before.path if before else None, after.path if after else None)


def jpeg(path: Path, width: int, height: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 // width, y * 255 // height, (x + y) % 255], axis=2)
    noisy = np.clip(pixels + rng.integers(-8, 8, pixels.shape), 0, 255).astype(np.uint8)
    Image.fromarray(noisy).save(path, quality=92)
    return path


def truncated_png(path: Path) -> Path:
    whole = path.with_name("whole-" + path.name)
    Image.fromarray(np.full((60, 80, 3), 90, np.uint8)).save(whole)
    path.write_bytes(whole.read_bytes()[:120])
    whole.unlink()
    return path


def drag_files(win: MainWindow, paths: list[Path]) -> QDragEnterEvent:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(
        win.rect().center(),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(win, enter)
    enter.mime = mime  # type: ignore[attr-defined]  # kept alive with the event
    return enter


def drop_files(win: MainWindow, paths: list[Path]) -> None:
    enter = drag_files(win, paths)
    assert enter.isAccepted()
    event = QDropEvent(
        QPointF(win.rect().center()),
        Qt.DropAction.CopyAction,
        enter.mime,  # type: ignore[attr-defined]
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(win, event)


# ---------------------------------------------------------------------------------- problem 0


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
    requests = [job.request for job in window.jobs.jobs.values()]
    assert [r.inputs for r in requests] == [(s,) for s in shots]
    assert not any(r.sequence for r in requests)
    assert window.notice.action_button.isHidden()  # not one size: nothing to offer
    wait_ended(qtbot, window)
    assert all(j.state is JobState.FINISHED for j in window.jobs.jobs.values())
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
    (sequence,) = window.jobs.sources.values()
    assert sequence.sequence and sequence.paths == tuple(frames)


# ---------------------------------------------------------------------------------- problem 1


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
        newest = list(window.jobs.jobs)[-1]
        row = window.job_list.row(newest)
        assert row is not None
        viewport = window.job_list.scroll_area.viewport()
        qtbot.waitUntil(
            lambda r=row, v=viewport: (  # type: ignore[misc]
                r.isVisible() and v.rect().contains(r.mapTo(v, r.rect().bottomLeft()))
            ),
            timeout=3000,
        )
    assert len(window.jobs.jobs) == 7
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
    assert window.jobs.jobs[job_id].state.active
    # the person clicks a's thumbnail meanwhile
    a_rect = window.inputs.list.visualItemRect(window.inputs.list.item(0))
    qtbot.mouseClick(window.inputs.list.viewport(), Qt.MouseButton.LeftButton, pos=a_rect.center())
    qtbot.waitUntil(lambda: shown_paths(window)[0] == a)
    wait_ended(qtbot, window)
    qtbot.wait(300)
    assert shown_paths(window) == (a, None)
    assert window.inputs.mark(str(b)) is InputMark.DONE


# ---------------------------------------------------------------------------------- problem 2


def test_2_run_processes_every_image_and_says_so(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    images = [photo(tmp_path / f"{n}.png", 30, 20, seed=i) for i, n in enumerate(("a", "b", "c"))]
    window.accept_paths(images)
    assert window.jobs.jobs == {}  # run-on-drop is off: adding writes nothing
    assert window.panel.run_button.text() == "Run 3 images"
    assert "Run 3 images" in window.statusBar().currentMessage()
    qtbot.mouseClick(window.panel.run_button, Qt.MouseButton.LeftButton)
    assert [j.request.inputs for j in window.jobs.jobs.values()] == [(p,) for p in images]
    wait_ended(qtbot, window)
    # several selected: the button says so, and runs those
    window.inputs.list.item(0).setSelected(True)
    window.inputs.list.item(2).setSelected(True)
    window.inputs.list.item(1).setSelected(False)
    assert window.panel.run_button.text() == "Run selected (2)"
    ids = window.run_selected()
    assert [window.jobs.jobs[i].request.inputs for i in ids] == [(images[0],), (images[2],)]


# ---------------------------------------------------------------------------------- problem 3


def test_3_a_failed_job_says_failed_in_red_on_the_job_and_the_thumbnail(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    broken = truncated_png(tmp_path / "truncated.png")
    outcome = window.accept_paths([broken])
    assert outcome.sources, outcome.refused  # its header reads: the job finds the damage
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    job = window.jobs.jobs[job_id]
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
    failed = [v for v in window.jobs.versions(str(broken)) if v.failed]
    assert failed and "truncated" in failed[0].failed


# ---------------------------------------------------------------------------------- problem 4


@pytest.fixture
def catalog_models(models: Path) -> Path:
    """Contract models under the file names of catalog models: the picker knows them by id."""
    make_upscaler(models / "realesrgan-x4plus.onnx", scale=4)
    make_upscaler(models / "realesrgan-x4plus-anime.onnx", scale=4)
    for scale in (2, 3, 4):
        make_upscaler(models / f"realesrgan-animevideov3-x{scale}.onnx", scale=scale)
    return models


def test_4_the_model_picker_shows_purpose_scale_and_a_photo_default(
    qtbot: QtBot, catalog_models: Path, make_window: WindowFactory, tmp_path: Path
) -> None:
    win = make_window()
    panel = win.panel
    texts = [panel.model.itemText(i) for i in range(panel.model.count())]
    assert texts[:3] == ["Photo ×4", "Anime ×4", "Fast preview"]
    assert not any("starter" in t for t in texts)
    assert panel.current_model() is not None
    assert panel.current_model().model == "realesrgan-x4plus"  # type: ignore[union-attr]
    assert "Photos" in panel.model_hint.text()
    assert not panel.scale_row.isVisibleTo(panel)  # one scale: nothing to choose
    panel.model.setCurrentIndex(2)
    assert panel.scale_row.isVisibleTo(panel)
    assert [b.text() for b in panel.scale_buttons.buttons()] == ["×2", "×3", "×4"]
    assert panel.select_scale(2)
    assert panel.current_model().model == "realesrgan-animevideov3-x2"  # type: ignore[union-attr]
    assert "Anime and video frames" in panel.model_hint.text()

    # an estimate from this model's measured speed on this machine
    image = photo(tmp_path / "photo.png", 40, 30)
    win.accept_paths([image])
    assert panel.estimate.text().startswith("The first job measures")
    win.speeds.learn(Operation.UPSCALE, "realesrgan-animevideov3-x2", "cpu", 180, 0.0012, 1)
    win._update_estimate()
    assert panel.estimate.text().startswith("About 3 min on this CPU for 1 image")

    # output names carry the model
    for model in ("realesrgan-x4plus", "realesrgan-x4plus-anime", "realesrgan-animevideov3-x4"):
        assert panel.select_model(model)
        win.run_selected()
    wait_ended(qtbot, win)
    names = sorted(p.name for p in tmp_path.glob("photo-*"))
    assert names == [
        "photo-realesrgan-animevideov3-x4.png",
        "photo-realesrgan-x4plus-anime.png",
        "photo-realesrgan-x4plus.png",
    ]


# ---------------------------------------------------------------------------------- problem 5


@pytest.mark.parametrize(
    ("operation", "writes", "download"),
    [
        (Operation.DEPTH, "depth map", "Download Depth Anything 3 Small"),
        (Operation.GEOMETRY, "point cloud", "Download MoGe-2 ViT-S (normal)"),
    ],
)
def test_5_depth_and_geometry_say_how_to_get_a_model_and_what_it_writes(
    window: MainWindow, operation: Operation, writes: str, download: str
) -> None:
    window.panel.select_operation(operation)
    hint = window.panel.model_hint.text()
    assert "Get…" in hint and writes in hint
    assert "python -m engine" not in hint and "fetch-starter" not in hint
    assert not window.panel.run_button.isEnabled()
    actions = [a for a in window.panel.get_menu.actions() if a.text()]
    assert actions[0].text().startswith(download)
    assert writes in actions[0].toolTip()
    assert not any("starter" in a.text() for a in actions)  # no starter model does this
    assert actions[-1].text() == "Add a model file (.onnx)…"


# ---------------------------------------------------------------------------------- problem 6


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
    assert len(window.jobs.sources) == 1


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


# ---------------------------------------------------------------------------------- problem 7


def test_7_jobs_write_the_chosen_format_and_size(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up4.onnx")
    editor = window.panel.output_editor
    editor.set_options(OutputOptions(OutputFormat.JPEG, 85, factor=2.0))
    assert "no transparency" in editor.note.text()
    image = jpeg(tmp_path / "photo.jpg", 60, 40)
    window.accept_paths([image])
    window.run_selected()
    wait_ended(qtbot, window)
    product = tmp_path / "photo-up4-x2.jpg"
    with Image.open(product) as written:
        assert written.format == "JPEG" and written.size == (120, 80)
    assert not list(tmp_path.glob("photo-up4.png"))  # no full-size PNG on the way


def test_7_save_as_exports_a_result_as_webp_at_a_width(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up4.onnx")
    image = photo(tmp_path / "p.png", 40, 30)
    window.accept_paths([image])
    window.run_selected()
    wait_ended(qtbot, window)
    qtbot.waitUntil(lambda: shown_paths(window)[1] == tmp_path / "p-up4.png")
    target = tmp_path / "exported" / "small.webp"
    target.parent.mkdir()

    def fill_in() -> None:
        dialog = window.export_dialog
        dialog.editor.set_options(OutputOptions(OutputFormat.WEBP, 80, width=100))
        assert dialog.size_note.text() == "100×75 pixels"
        dialog.path.setText(str(target))
        dialog.accept()

    QTimer.singleShot(0, fill_in)
    qtbot.mouseClick(window.viewer.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(target.exists, timeout=10_000)
    with Image.open(target) as written:
        assert written.format == "WEBP" and written.size == (100, 75)
    qtbot.waitUntil(lambda: "Saved small.webp" in window.notice.text())


def test_7_copy_puts_the_result_and_its_file_on_the_clipboard(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    window.accept_paths([photo(tmp_path / "c.png", 40, 30)])
    window.run_selected()
    wait_ended(qtbot, window)
    product = tmp_path / "c-up2.png"
    qtbot.waitUntil(lambda: shown_paths(window)[1] == product)
    QGuiApplication.clipboard().clear()
    qtbot.mouseClick(window.viewer.copy_button, Qt.MouseButton.LeftButton)
    mime = QGuiApplication.clipboard().mimeData()
    assert mime is not None
    assert [u.toLocalFile() for u in mime.urls()] == [str(product)]
    copied = QGuiApplication.clipboard().image()
    assert (copied.width(), copied.height()) == (80, 60)


def test_7_the_result_can_be_dragged_out_of_the_viewer(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    window.accept_paths([photo(tmp_path / "d.png", 40, 30)])
    window.run_selected()
    wait_ended(qtbot, window)
    product = tmp_path / "d-up2.png"
    qtbot.waitUntil(lambda: shown_paths(window)[1] == product)
    handle = window.viewer.drag_handle
    assert handle.isEnabled()
    # a press and a move past the drag distance start a real QDrag with the file
    QTimer.singleShot(200, QDrag.cancel)  # let go, where the platform runs a drag loop
    qtbot.mousePress(handle, Qt.MouseButton.LeftButton, pos=QPoint(5, 5))
    qtbot.mouseMove(handle, QPoint(5 + 3 * QApplication.startDragDistance(), 5))
    assert handle.last_mime is not None
    assert [u.toLocalFile() for u in handle.last_mime.urls()] == [str(product)]
    assert handle.last_drop is not None  # the drag ran and ended
    qtbot.mouseRelease(handle, Qt.MouseButton.LeftButton, pos=QPoint(5, 5))


def test_7_each_batch_keeps_its_output_folder(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    image = photo(tmp_path / "f.png", 30, 20)
    window.accept_paths([image])
    first, second = tmp_path / "batch-1", tmp_path / "batch-2"
    window.panel.output.setText(str(first))
    window.run_selected()
    window.panel.output.setText(str(second))  # changed while the first batch may still run
    window.run_selected()
    wait_ended(qtbot, window)
    # (a guard: requests always carried their folder; the window must keep it that way)
    assert [p.name for p in first.glob("f-*.png")] == [p.name for p in second.glob("f-*.png")]
    assert len(list(first.glob("f-*.png"))) == 1


def test_7_pasted_images_and_their_results_go_to_a_visible_folder(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    default = AppSettings(QSettings(str(tmp_path / "fresh.ini"), QSettings.Format.IniFormat))
    assert default.pasted_dir == pictures_dir() / "Tessera"
    assert not any(part.startswith(".") for part in default.pasted_dir.parts[1:])
    use_model(window, models, "up2.onnx")
    image = QImage(32, 24, QImage.Format.Format_RGB888)
    image.fill(QColor(10, 120, 200))
    QGuiApplication.clipboard().setImage(image)
    window.paste()
    folder = tmp_path / "Pictures" / "Tessera"
    (pasted,) = folder.glob("pasted-*.png")
    assert str(folder) in window.notice.text()  # the person is told where it went
    window.run_selected()
    wait_ended(qtbot, window)
    assert (folder / f"{pasted.stem}-up2.png").is_file()
    assert not (tmp_path / "data" / "pasted").exists()


# ---------------------------------------------------------------------------------- problem 8


def test_8_run_on_drop_is_off_by_default_remembered_and_a_handover_never_runs(
    make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    first = make_window()
    assert not first.panel.run_on_drop.isChecked()
    drop_files(first, [photo(tmp_path / "a.png", 30, 20)])
    assert first.jobs.jobs == {} and len(first.jobs.sources) == 1
    first.panel.run_on_drop.setChecked(True)
    first.close()
    second = make_window()
    assert second.panel.run_on_drop.isChecked()  # remembered once changed
    second.open_files_and_raise([str(photo(tmp_path / "handed.png", 30, 20))])
    assert second.jobs.jobs == {}  # a second launch's files are shown, not run
    assert second.inputs.current() is not None


# ---------------------------------------------------------------------------------- problem 9


def _viewer_size(win: MainWindow) -> tuple[int, int]:
    view = win.viewer.view
    return view.width(), view.height()


@pytest.mark.parametrize(("size", "least"), [((1280, 800), (700, 520)), ((1024, 640), (460, 380))])
def test_9_the_viewer_takes_the_space(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
    size: tuple[int, int],
    least: tuple[int, int],
) -> None:
    window.resize(*size)
    window.accept_paths([photo(tmp_path / "v.png", 64, 48)])
    qtbot.waitUntil(lambda: window.viewer.before is not None)
    qtbot.wait(50)
    width, height = _viewer_size(window)
    assert width >= least[0] and height >= least[1], (width, height)
    assert window.job_list.height() <= 40  # idle: one line
    # a notice floats over the content instead of pushing it down
    top = window.viewer.view.mapTo(window, QPoint(0, 0)).y()
    window.warn("Something to say")
    qtbot.wait(20)
    assert window.viewer.view.mapTo(window, QPoint(0, 0)).y() == top
    # the memory panel leaves the viewer most of its height
    window.show_memory_panel()
    qtbot.wait(50)
    assert _viewer_size(window)[1] >= least[1] * 0.6


def test_9_titles_end_in_an_ellipsis_and_thumbnails_name_a_file_once(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    window.resize(1024, 640)
    long = photo(tmp_path / ("holiday-" * 22 + "photo.png"), 30, 20)
    window.accept_paths([long])
    (job_id,) = window.run_selected()
    row = window.job_list.row(job_id)
    assert row is not None
    qtbot.waitUntil(lambda: row.title.width() > 50)
    assert row.title.is_elided() and row.title.shown_text().endswith("…")
    assert row.title.toolTip() == str(long)
    item = window.inputs.list.item(0)
    assert item.text() == long.name  # the name once; the size goes to the tooltip
    wait_ended(qtbot, window)


# --------------------------------------------------------------------------------- problem 10


def _colour_at(view: CompareView, x: int) -> QColor:
    return view.grab().toImage().pixelColor(QPoint(x, view.height() // 2))


def test_10_the_split_line_stays_in_view_when_zoomed(qtbot: QtBot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(400, 300)
    view.show()
    red = QImage(80, 60, QImage.Format.Format_RGB888)
    red.fill(QColor(255, 0, 0))
    blue = QImage(80, 60, QImage.Format.Format_RGB888)
    blue.fill(QColor(0, 0, 255))
    view.set_images(red, blue)
    view.set_split(0.5)
    for _ in range(12):  # zoomed far in towards the left edge of the picture
        view._set_zoom(view.zoom * 1.25, QPointF(5, 150))
    assert 0 < view._split_x() < view.width()
    assert _colour_at(view, 100).red() > 200  # before, left of the line
    assert _colour_at(view, 300).blue() > 200  # after, right of it


def test_10_space_flips_to_the_left_version_and_back(qtbot: QtBot, window: MainWindow) -> None:
    view = window.viewer.view
    view.resize(400, 300)
    red = QImage(80, 60, QImage.Format.Format_RGB888)
    red.fill(QColor(255, 0, 0))
    blue = QImage(80, 60, QImage.Format.Format_RGB888)
    blue.fill(QColor(0, 0, 255))
    view.set_images(red, blue)
    window.viewer.set_mode(ViewMode.SINGLE)
    x = view.width() // 2
    assert _colour_at(view, x).blue() > 200
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Space)
    assert view.flipped and _colour_at(view, x).red() > 200
    qtbot.keyClick(view, Qt.Key.Key_Space)
    assert not view.flipped and _colour_at(view, x).blue() > 200


def test_10_any_two_versions_compare_with_the_split_or_side_by_side(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "two.png", 40, 30)
    window.accept_paths([image])
    for name in ("up2.onnx", "up4.onnx"):
        use_model(window, models, name)
        window.run_selected()
        wait_ended(qtbot, window)
    labels = [v.label for v in window.jobs.versions(str(image))]
    assert labels == ["Original", "up2 ×2", "up4 ×4"]
    qtbot.waitUntil(lambda: shown_paths(window) == (image, tmp_path / "two-up4.png"))
    up2 = window.jobs.versions(str(image))[1]
    window.viewer.versionChosen.emit(up2.id, True)  # Shift+click: up2 on the left
    qtbot.waitUntil(lambda: shown_paths(window) == (up2.path, tmp_path / "two-up4.png"))
    assert window.viewer.view.labels == ("up2 ×2", "up4 ×4")
    window.viewer.set_mode(ViewMode.SIDE_BY_SIDE)
    assert window.viewer.view.mode is ViewMode.SIDE_BY_SIDE
    # back to this image later: the same pair is shown
    other = photo(tmp_path / "other.png", 40, 30)
    window.accept_paths([other])
    qtbot.waitUntil(lambda: shown_paths(window)[0] == other)
    window.inputs.list.setCurrentRow(0)
    qtbot.waitUntil(lambda: shown_paths(window) == (up2.path, tmp_path / "two-up4.png"))


def test_10_side_by_side_shows_both_versions_zoomed_together(qtbot: QtBot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(400, 300)
    view.show()
    red = QImage(80, 60, QImage.Format.Format_RGB888)
    red.fill(QColor(255, 0, 0))
    blue = QImage(80, 60, QImage.Format.Format_RGB888)
    blue.fill(QColor(0, 0, 255))
    view.set_images(red, blue)
    view.set_mode(ViewMode.SIDE_BY_SIDE)
    assert _colour_at(view, 100).red() > 200 and _colour_at(view, 300).blue() > 200
    view.zoom_in()
    assert _colour_at(view, 100).red() > 200 and _colour_at(view, 300).blue() > 200


def test_10_animations_play(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    window.accept_paths([gif3(tmp_path / "anim.gif")])
    qtbot.waitUntil(lambda: window.viewer.before is not None)
    viewer = window.viewer
    assert viewer.scrubber_row.isVisible() and viewer.scrubber.value() == 0
    viewer.play_button.click()
    qtbot.waitUntil(lambda: viewer.scrubber.value() == 2, timeout=3000)
    qtbot.waitUntil(lambda: viewer.scrubber.value() == 0, timeout=3000)  # and loops
    viewer.play_button.click()
    assert not viewer.play_timer.isActive()


def test_10_files_dragged_over_the_window_are_highlighted(
    window: MainWindow, tmp_path: Path
) -> None:
    drag_files(window, [photo(tmp_path / "x.png"), photo(tmp_path / "y.png")])
    assert window.drop_overlay.isVisible()
    assert window.drop_overlay.text == "Drop to add 2 files"
    QApplication.sendEvent(window, QDragLeaveEvent())
    assert not window.drop_overlay.isVisible()


# --------------------------------------------------------------------------------- problem 11


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
        job = window.jobs.jobs[job_id]
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
    win._fill_recent_menu()
    (action,) = [a for a in win.recent_menu.actions() if a.text() == "recent.png"]
    action.trigger()
    assert list(win.jobs.sources) == [str(first)]


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
    job = window.jobs.jobs[job_id]
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


# --------------------------------------------------------------------------------- problem 12


def _fake_ldd(folder: Path, missing: list[str]) -> Path:
    folder.mkdir(exist_ok=True)
    ldd = folder / "ldd"
    lines = "".join(f'echo "\t{name} => not found"\n' for name in missing)
    ldd.write_text("#!/bin/sh\n" + lines + 'echo "\tlibc.so.6 => /lib/libc.so.6"\n')
    ldd.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("distro", "command"),
    [
        (
            "ID=ubuntu\nID_LIKE=debian",
            "sudo apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1",
        ),
        ("ID=fedora", "sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms"),
        ("ID=arch", "sudo pacman -S --needed xcb-util-cursor xcb-util-wm xcb-util-keysyms"),
        (
            'ID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"',
            "sudo zypper install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1",
        ),
    ],
)
def test_12_the_start_script_names_the_missing_qt_libraries(
    tmp_path: Path, distro: str, command: str
) -> None:
    fake = _fake_ldd(
        tmp_path / "bin", ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    )
    os_release = tmp_path / "os-release"
    os_release.write_text(distro + "\n")
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "OS_RELEASE": str(os_release),
    }
    env.pop("QT_QPA_PLATFORM", None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "check_qt_libs.sh"), sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    assert command in done.stderr
    assert "libxcb-icccm.so.4" in done.stderr
    assert "could not load" not in done.stderr


def test_12_the_check_passes_where_the_libraries_are_there_and_runs_before_the_app(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    real = subprocess.run(
        [str(ROOT / "scripts" / "check_qt_libs.sh"), sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    import PySide6

    qxcb = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    ldd = subprocess.run(["ldd", str(qxcb)], capture_output=True, text=True, timeout=60)
    expect_missing = "not found" in ldd.stdout
    assert real.returncode == (1 if expect_missing else 0), real.stderr
    start = (ROOT / "scripts" / "start.sh").read_text()
    assert start.index("check_qt_libs.sh") < start.index("fetch-starter") < start.index("-m gui")


def test_12_the_deb_depends_on_every_xcb_library_the_plugin_loads(tmp_path: Path) -> None:
    import PySide6

    source = (ROOT / "packaging" / "build.py").read_text(encoding="utf-8")
    block = source.split("DEB_DEPENDS = (", 1)[1].split(")", 1)[0]
    deb_depends = "".join(part.strip().strip('"') for part in block.splitlines())

    qt = Path(PySide6.__file__).parent / "Qt"
    needed: set[str] = set()
    for lib in (qt / "plugins" / "platforms" / "libqxcb.so", qt / "lib" / "libQt6XcbQpa.so.6"):
        out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, timeout=60).stdout
        needed |= {
            line.split()[0]
            for line in out.splitlines()
            if line.strip().startswith(("libxcb", "libxkbcommon", "libX11-xcb"))
        }
    assert needed, "the plugin links no xcb library?"
    # every one reported missing, on Debian: the packages the script names must be in Depends
    fake = _fake_ldd(tmp_path / "bin", sorted(needed))
    os_release = tmp_path / "os-release"
    os_release.write_text("ID=debian\n")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "OS_RELEASE": str(os_release)}
    env.pop("QT_QPA_PLATFORM", None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "check_qt_libs.sh"), sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    packages = done.stderr.split("sudo apt-get install ", 1)[1].split()
    declared = {p.strip() for p in deb_depends.split(",")}
    assert set(packages) <= declared, set(packages) - declared


# ------------------------------------------------------------------------------- the scenario


def test_a_person_opens_three_photos_runs_once_exports_one_and_drags_another(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """Without reading the README: open three photos, press Run once, see each result appear
    in turn, export one as JPEG at ×2, drag another into a file manager."""
    use_model(window, models, "slow.onnx")  # a job lasts long enough to be watched
    window.panel.tile.setValue(64)
    shots = [
        jpeg(tmp_path / "IMG_0101.jpg", 192, 128, 1),
        jpeg(tmp_path / "IMG_0102.jpg", 128, 192, 2),
        jpeg(tmp_path / "IMG_0103.jpg", 192, 128, 3),
    ]
    window.accept_paths(shots)  # File ▸ Open
    shown: list[Path] = []
    window.viewer.imagesShown.connect(
        lambda: shown.append(window.viewer.after.path) if window.viewer.after else None
    )
    assert window.panel.run_button.text() == "Run 3 images"
    qtbot.mouseClick(window.panel.run_button, Qt.MouseButton.LeftButton)
    wait_ended(qtbot, window)
    products = [tmp_path / f"{s.stem}-slow.png" for s in shots]
    qtbot.waitUntil(lambda: shown[-1:] == products[-1:], timeout=10_000)
    assert [p for p in products if p in shown] == products  # each appeared, in turn
    assert shown.index(products[0]) < shown.index(products[1]) < shown.index(products[2])

    # export the second as JPEG at ×2: pick it in the strip of its image, then Save as
    window.inputs.list.setCurrentRow(1)
    qtbot.waitUntil(lambda: shown_paths(window)[1] == products[1])
    exported = tmp_path / "IMG_0102-slow-x2.jpg"

    def choose_jpeg_x2() -> None:
        dialog = window.export_dialog
        dialog.editor.format.setCurrentIndex(dialog.editor.format.findData("jpeg"))
        dialog.editor.size_box.setCurrentIndex(dialog.editor.size_box.findData(2.0))
        assert dialog.target() == exported
        dialog.accept()

    QTimer.singleShot(0, choose_jpeg_x2)
    qtbot.mouseClick(window.viewer.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(exported.exists, timeout=10_000)
    with Image.open(exported) as written:
        assert written.format == "JPEG" and written.size == (256, 384)

    # drag the third into a file manager
    window.inputs.list.setCurrentRow(2)
    qtbot.waitUntil(lambda: shown_paths(window)[1] == products[2])
    QTimer.singleShot(50, QDrag.cancel)
    window.viewer.drag_handle.start_drag()
    mime = window.viewer.drag_handle.last_mime
    assert mime is not None and [u.toLocalFile() for u in mime.urls()] == [str(products[2])]


def test_the_memory_panel_says_what_the_last_job_left_held(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    # Issue #11: the memory panel shows what the last operation left held, from the engine's
    # own byte figures (MemoryReport), not a guess.
    use_model(window, models, "up4.onnx")
    window.accept_paths([photo(tmp_path / "a.png", 120, 90)])
    window.run_selected()
    wait_ended(qtbot, window)
    qtbot.waitUntil(lambda: window.memory_panel.last is not None, timeout=10_000)
    last = window.memory_panel.last
    assert last is not None and last.rss_peak >= last.rss_after_load > 0
    text = window.memory_panel.diagnosis()
    assert "The last job peaked" in text and "of RAM held" in text


def test_the_hand_back_is_a_preference_applied_to_the_engine(
    qtbot: QtBot, window: MainWindow
) -> None:
    dialog = PreferencesDialog(window.settings, str(window.models_dir()), window)
    qtbot.addWidget(dialog)
    assert dialog.hand_back.isChecked() and not window.settings.engine_settings().keep_cpu_arena
    dialog.hand_back.setChecked(False)
    dialog.accept()
    assert window.settings.keep_cpu_arena and window.settings.engine_settings().keep_cpu_arena
