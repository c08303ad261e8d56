"""Safe keys and a window that keeps out of the way (issue #21 items 3, 10 and 13): Space flips
the compare whenever the pointer or the focus is in the viewer and never presses Run again;
buttons do not keep the focus after they ran; Tab from Run goes to the picture; notices never
cover the viewer's toolbar; Open starts in the last folder used; at 1024×640 the strip shows
three versions without scrolling."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt, QTimer
from PySide6.QtGui import QColor, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractButton, QApplication, QFileDialog, QLineEdit, QWidget
from pytestqt.qtbot import QtBot

from engine.samples.upscaler_models import make_upscaler
from gui.main_window import MainWindow
from gui.settings import AppSettings
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory, settle_layout, use_model, wait_ended


def _ready(qtbot: QtBot, win: MainWindow, tmp_path: Path, models: Path) -> None:
    """An image in view with two different pictures to compare, the window active."""
    use_model(win, models, "up2.onnx")
    win.accept_paths([photo(tmp_path / "keys.png", 40, 30)])
    qtbot.waitUntil(lambda: win.viewer.before is not None)
    red = QImage(80, 60, QImage.Format.Format_RGB888)
    red.fill(QColor(255, 0, 0))
    blue = QImage(80, 60, QImage.Format.Format_RGB888)
    blue.fill(QColor(0, 0, 255))
    win.viewer.view.set_images(red, blue)
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)


_moves = [0]


def _pointer_over(qtbot: QtBot, widget: QWidget) -> None:
    """A real move over `widget`, near its centre at a spot not used before (see below)."""
    _moves[0] += 1
    step = _moves[0] % 40
    window = widget.window()
    QTest.mouseMove(window, widget.mapTo(window, widget.rect().center() + QPoint(step, step)))
    settle_layout()  # the Enter and Leave the move posts are delivered


def _pointer_away(qtbot: QtBot, win: MainWindow) -> None:
    """Over the operation panel, by way of the viewer: offscreen, a window shown under the
    pointer gets a synthetic Enter, and a move to where the pointer already was is dropped, so
    without a real move over the viewer first no Leave would follow."""
    _pointer_over(qtbot, win.viewer.view)
    _pointer_over(qtbot, win.panel)


def _space(qtbot: QtBot) -> None:
    focus = QApplication.focusWidget()
    assert focus is not None
    qtbot.keyClick(focus, Qt.Key.Key_Space)


def test_space_over_the_viewer_flips_while_run_has_the_focus(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    _ready(qtbot, window, tmp_path, models)
    run = window.panel.run_button
    run.setFocus(Qt.FocusReason.TabFocusReason)  # reached with Tab: it may have the focus
    qtbot.waitUntil(run.hasFocus)
    _pointer_over(qtbot, window.viewer.view)
    _space(qtbot)
    assert window.viewer.view.flipped  # the compare flipped …
    assert not window.workspace.jobs  # … and no job was queued
    _space(qtbot)
    assert not window.viewer.view.flipped and not window.workspace.jobs
    # the pointer elsewhere: Space is the focused button's again
    _pointer_over(qtbot, window.panel)
    _space(qtbot)
    assert len(window.workspace.jobs) == 1
    wait_ended(qtbot, window)


def test_space_with_the_focus_in_the_viewer_flips_wherever_the_pointer_is(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    _ready(qtbot, window, tmp_path, models)
    _pointer_away(qtbot, window)
    window.viewer.view.setFocus()
    qtbot.waitUntil(window.viewer.view.hasFocus)
    _space(qtbot)
    assert window.viewer.view.flipped and not window.workspace.jobs


def test_space_in_a_text_field_types_a_space_even_with_the_pointer_over_the_viewer(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    _ready(qtbot, window, tmp_path, models)
    field = QLineEdit(window.panel)  # a text field in the window (the panel has none of its own)
    field.show()
    field.setFocus()
    qtbot.waitUntil(field.hasFocus)
    qtbot.keyClicks(field, "my")
    _pointer_over(qtbot, window.viewer.view)
    _space(qtbot)
    qtbot.keyClicks(field, "photos")
    assert field.text() == "my photos"
    assert not window.viewer.view.flipped


def test_clicking_run_leaves_the_focus_in_the_viewer(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    _ready(qtbot, window, tmp_path, models)
    window.viewer.view.setFocus()
    qtbot.waitUntil(window.viewer.view.hasFocus)
    qtbot.mouseClick(window.panel.run_button, Qt.MouseButton.LeftButton)
    assert len(window.workspace.jobs) == 1
    assert not window.panel.run_button.hasFocus()
    assert window.viewer.view.hasFocus(), QApplication.focusWidget()
    wait_ended(qtbot, window)
    # Save as… (its dialog closed unanswered) does not leave the keyboard on a button either
    QTimer.singleShot(50, lambda: window.export_dialog.reject())
    window.viewer.save_button.click()
    assert window.focusWidget() is window.viewer.view  # what has the keyboard once it is back
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.viewer.view)
    _space(qtbot)
    assert len(window.workspace.jobs) == 1  # Space did not run it again


def test_run_pressed_with_space_hands_the_keyboard_to_the_viewer(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    _ready(qtbot, window, tmp_path, models)
    _pointer_away(qtbot, window)
    run = window.panel.run_button
    run.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(run.hasFocus)
    _space(qtbot)  # the keyboard way to press Run
    assert len(window.workspace.jobs) == 1
    assert window.viewer.view.hasFocus()
    _space(qtbot)  # a second Space flips; it does not queue the job again
    assert len(window.workspace.jobs) == 1 and window.viewer.view.flipped
    wait_ended(qtbot, window)


def test_tab_from_run_goes_to_the_picture_not_to_clear(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    _ready(qtbot, window, tmp_path, models)
    run = window.panel.run_button
    run.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(run.hasFocus)
    qtbot.keyClick(run, Qt.Key.Key_Tab)
    focus = QApplication.focusWidget()
    assert focus is window.viewer.view, focus
    assert focus is not None and focus.property("text") != "Clear"


def test_buttons_take_the_focus_from_tab_not_from_a_click(window: MainWindow) -> None:
    strong = [
        b.text() or b.objectName()
        for b in window.findChildren(QAbstractButton)
        if b.focusPolicy() == Qt.FocusPolicy.StrongFocus
    ]
    assert strong == []


@pytest.mark.parametrize("size", [(1280, 800), (1024, 640)])
def test_a_notice_never_covers_the_viewers_toolbar(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, size: tuple[int, int]
) -> None:
    window.resize(*size)
    window.accept_paths([photo(tmp_path / "n.png", 64, 48)])
    qtbot.waitUntil(lambda: window.viewer.before is not None)
    viewer = window.viewer
    window.warn("Could not read broken.png: the file ends early. " * 4)
    qtbot.waitUntil(lambda: bool(window.notice.text()) and window.notice.isVisible())
    settle_layout()
    notice = window.notice.rect().translated(window.notice.mapTo(window, QPoint()))
    for button in (
        viewer.preview_button,
        viewer.fit_button,
        viewer.actual_button,
        *viewer.mode_buttons.buttons(),
    ):
        assert button.isVisible()
        centre = button.mapTo(window, button.rect().center())
        assert window.childAt(centre) is button, button.text()  # nothing over it
        rect = button.rect().translated(button.mapTo(window, QPoint()))
        assert not rect.intersects(notice), button.text()
    # nor the picture's top: it stays where it was, and so does the toolbar
    view_top = viewer.view.mapTo(window, QPoint()).y()
    window.notice.dismiss()
    settle_layout()
    assert viewer.view.mapTo(window, QPoint()).y() == view_top


def _answer_file_dialog(qtbot: QtBot, chosen: Path, seen: list[str]) -> None:
    """Reads where the real file dialog opened, then picks `chosen` in it."""

    def answer(tries: int = 100) -> None:
        dialogs = [
            w
            for w in QApplication.topLevelWidgets()
            if isinstance(w, QFileDialog) and w.isVisible()
        ]
        if not dialogs:
            if tries:
                QTimer.singleShot(50, lambda: answer(tries - 1))
            return
        dialog = dialogs[0]
        seen.append(dialog.directory().absolutePath())
        name = dialog.findChild(QLineEdit, "fileNameEdit")  # what the person types or picks
        assert name is not None
        name.setText(str(chosen))
        dialog.accept()

    QTimer.singleShot(50, answer)


def test_open_starts_in_the_last_folder_used_never_the_current_one(
    qtbot: QtBot,
    make_window: WindowFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    (home / "Pictures").mkdir(parents=True)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_PICTURES_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.chdir(checkout)
    store = QSettings(str(tmp_path / "keys.ini"), QSettings.Format.IniFormat)
    settings = AppSettings(store)
    settings.pasted_dir = tmp_path / "pasted"
    win = make_window(settings)
    holiday = tmp_path / "holiday"
    holiday.mkdir()
    picture = photo(holiday / "beach.png", 30, 20)
    seen: list[str] = []
    _answer_file_dialog(qtbot, picture, seen)
    win.menus.open_dialog()
    assert seen == [str(home / "Pictures")]  # the Pictures folder, not the checkout
    assert str(picture) in win.workspace.sources
    # the next Open starts where the last one found the picture, after a restart too
    second = photo(holiday / "cliff.png", 30, 20)
    _answer_file_dialog(qtbot, second, seen)
    win.inputs.addRequested.emit()  # the images list's Add…
    assert seen[-1] == str(holiday)
    assert (
        AppSettings(QSettings(str(tmp_path / "keys.ini"), QSettings.Format.IniFormat)).open_dir
        == holiday
    )
    # a remembered folder that is gone: Pictures again
    settings.open_dir = tmp_path / "gone"
    assert settings.open_dir == home / "Pictures"


def test_at_1024x640_three_versions_fit_the_strip_without_scrolling(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    # Models named after their files, as one's own models are: the longest labels.
    make_upscaler(models / "realesrgan-x4plus-anime-6B.onnx", scale=4)
    make_upscaler(models / "realesr-animevideov3-x2.onnx", scale=2)
    win = make_window()
    win.resize(1024, 640)
    win.accept_paths([photo(tmp_path / "strip.png", 40, 30)])
    for name in ("realesrgan-x4plus-anime-6B.onnx", "realesr-animevideov3-x2.onnx"):
        use_model(win, models, name)
        win.run_selected()
        wait_ended(qtbot, win)
    strip = win.viewer.strip
    qtbot.waitUntil(lambda: len(strip.buttons) == 3)
    settle_layout()
    bar = strip.horizontalScrollBar()
    assert bar.maximum() == 0, (strip.width(), bar.maximum())
    assert not bar.isVisible()
    for version_id, button in strip.buttons.items():  # each says which it is, in full on hover
        assert strip.versions[version_id].label in button.toolTip()
