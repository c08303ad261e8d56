"""Small things a person meets: the clip bar's play/pause drawn by the style (a "⏸" glyph is
an empty box in many fonts), "one other" rather than "one of 1 others", Save as… that keeps
its Save button in place when JPEG is picked, and an Open dialog that says why it starts in
home when there is no Pictures folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from engine.models.catalog import Family
from engine.models.inventory import discover
from engine.options import OutputFormat, OutputOptions
from engine.requests import Operation
from gui.controllers.models import get_offers, missing_hint
from gui.menus import open_title
from gui.settings import AppSettings
from gui.widgets.clip_bar import ClipBar
from gui.widgets.export_dialog import ExportDialog
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard


def test_the_play_button_is_an_icon_in_both_states(qtbot: QtBot) -> None:
    bar = ClipBar()
    qtbot.addWidget(bar)
    for playing in (False, True, False):
        bar.play_button.setChecked(playing)
        assert not bar.play_button.icon().isNull() and bar.play_button.text() == ""
        assert bar.play_button.toolTip() == ("Pause" if playing else "Play the clip")
    bar.timer.stop()


def test_one_other_model_is_one_other(tmp_path: Path) -> None:
    empty = discover(tmp_path / "none")
    counts = set()
    for family in Family:
        others = len(get_offers(empty, family)) - 1
        counts.add(others)
        hint = missing_hint(empty, family)
        assert "of 1 others" not in hint
        if others == 1:
            assert "or one other," in hint
        elif others > 1:
            assert f"or one of {others} others," in hint
    assert 1 in counts


def test_save_as_keeps_its_save_button_in_place_when_jpeg_is_picked(
    qtbot: QtBot, tmp_path: Path
) -> None:
    product = tmp_path / "shot_x2.png"
    product.write_bytes(b"")
    dialog = ExportDialog(
        product, (640, 480), Operation.UPSCALE, 2, OutputOptions(OutputFormat.PNG)
    )
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    before = dialog.buttons.mapTo(dialog, dialog.buttons.rect().topLeft()), dialog.height()
    dialog.editor.format.setCurrentIndex(dialog.editor.format.findData(OutputFormat.JPEG))
    qtbot.waitUntil(lambda: dialog.editor.note.isVisible(), timeout=2000)
    dialog.layout().activate()  # type: ignore[union-attr]
    after = dialog.buttons.mapTo(dialog, dialog.buttons.rect().topLeft()), dialog.height()
    assert after == before


@pytest.mark.parametrize("pictures", [False, True])
def test_open_says_it_starts_in_home_when_there_is_no_pictures_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pictures: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    if pictures:
        (home / "Pictures").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_PICTURES_DIR", str(home / "Pictures"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    title = open_title("Open images", settings)
    if pictures:
        assert title == "Open images" and settings.open_dir == home / "Pictures"
    else:
        assert "home folder" in title and "no Pictures folder" in title
        assert settings.open_dir == home
