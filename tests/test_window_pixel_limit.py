"""An image over the pixel limit is marked at once like any unreadable input, never counted
by Run nor estimated, and its message names the Preferences setting that raises the limit."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from PySide6.QtWidgets import QFormLayout, QLabel
from pytestqt.qtbot import QtBot

from gui.main_window import MainWindow
from gui.settings import PIXEL_LIMIT
from gui.widgets.inputs_panel import InputMark
from gui.widgets.preferences import PreferencesDialog
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import use_model, wait_ended


def declared_png(path: Path, width: int, height: int) -> Path:
    """A PNG whose header declares `width`×`height` (its data is a few bytes: never decoded)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 16)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat)
    path.write_bytes(png + chunk(b"IEND", b""))
    return path


def test_an_image_over_the_pixel_limit_is_marked_and_never_counted(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    good = [photo(tmp_path / f"p{i}.png", 64, 48, seed=i) for i in range(2)]
    huge = declared_png(tmp_path / "huge.png", 100_000, 100_000)
    window.accept_paths([*good, huge])
    # Marked at once, from the header, before any thumbnail or job.
    assert window.inputs.mark(str(huge)) is InputMark.BROKEN
    reason = window.workspace.broken[str(huge)]
    assert PIXEL_LIMIT in reason and "Preferences" in reason and "100000×100000" in reason
    assert window.panel.run_button.text() == "Run 2 images"
    assert [s.key for s in window.jobs.targets()] == [str(p) for p in good]
    assert "3 images" not in window.jobs.estimate_line("this CPU")
    ids = window.run_selected()
    assert len(ids) == 2  # never queued, so never offered again after failing


def test_preferences_offer_the_pixel_limit_the_message_names(
    window: MainWindow, qtbot: QtBot
) -> None:
    dialog = PreferencesDialog(window.settings, "models")
    qtbot.addWidget(dialog)
    form = dialog.findChild(QFormLayout)
    assert form is not None
    widgets = [form.itemAt(i).widget() for i in range(form.count())]  # type: ignore[union-attr]
    labels = [w.text() for w in widgets if isinstance(w, QLabel)]
    assert PIXEL_LIMIT in labels
    dialog.max_pixels.setValue(20)
    dialog.accept()
    assert window.settings.engine_settings().max_pixels == 20_000_000


def test_the_engines_refusal_names_the_windows_lever_not_the_command_lines(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """The engine's message names the command line's option (--max-megapixels); in the
    window the same refusal names Preferences' “Largest image”, the lever a person has."""
    dialog = PreferencesDialog(window.settings, "models")
    qtbot.addWidget(dialog)
    dialog.max_pixels.setValue(1)  # 1 Mpx: a 900×600 input passes, its ×2 product does not
    dialog.accept()
    window.apply_preferences()
    use_model(window, models, "up2.onnx")
    window.accept_paths([photo(tmp_path / "wide.png", 900, 600, seed=3)])
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    message = window.workspace.jobs[job_id].message
    assert "the limit is 1.0 megapixels" in message, message
    assert PIXEL_LIMIT in message and "Preferences" in message
    assert "--max-megapixels" not in message
