"""A job's results in the window: the chosen format and size, Save as, Copy, drag out, each
batch's output folder, pasted images' folder; and the person who opens three photos, runs
once, exports one as JPEG at ×2 and drags another out; the memory panel after a job."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtCore import QPoint, QSettings, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QDrag,
    QGuiApplication,
    QImage,
)
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from engine.options import OutputFormat, OutputOptions
from gui.main_window import MainWindow
from gui.settings import AppSettings, pictures_dir
from gui.widgets.preferences import PreferencesDialog
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import jpeg, shown_paths, use_model, wait_ended


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
    window.panel.save_to.set_folder(first)
    window.run_selected()
    window.panel.save_to.set_folder(second)  # changed while the first batch may still run
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
