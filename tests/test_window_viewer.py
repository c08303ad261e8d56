"""The viewer: it takes the space, titles elide, the split line stays in view when zoomed,
Space flips, any two versions compare (split or side by side), animations play, and files
dragged over the window are highlighted."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import (
    QColor,
    QDragLeaveEvent,
    QImage,
)
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from gui.main_window import MainWindow
from gui.widgets.compare_view import CompareView, ViewMode
from tests.engine_helpers import gif3, photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import drag_files, settle_layout, shown_paths, use_model, wait_ended


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
    settle_layout()
    width, height = _viewer_size(window)
    assert width >= least[0] and height >= least[1], (width, height)
    assert window.job_list.height() <= 40  # idle: one line
    # a notice opens under the viewer: the picture and its toolbar do not move
    top = window.viewer.view.mapTo(window, QPoint(0, 0)).y()
    window.warn("Something to say")
    qtbot.waitUntil(window.notice.isVisible)
    settle_layout()
    assert window.viewer.view.mapTo(window, QPoint(0, 0)).y() == top
    # the memory panel leaves the viewer most of its height
    window.show_memory_panel()
    settle_layout()
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
    labels = [v.label for v in window.workspace.versions(str(image))]
    assert labels == ["Original", "up2 ×2", "up4 ×4"]
    qtbot.waitUntil(lambda: shown_paths(window) == (image, tmp_path / "two-up4.png"))
    up2 = window.workspace.versions(str(image))[1]
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
