"""Widgets on their own: the compare view, input sorting, the job texts, the model fetcher, and
the app's entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage
from pytestqt.qtbot import QtBot

from engine.requests import Operation, OperationRequest
from engine.samples.upscaler_models import make_upscaler
from gui.fetcher import FetchOutcome, ModelFetcher
from gui.inputs import classify_paths, numbered_sequence
from gui.jobs import Job, JobState, fmt_duration
from gui.widgets.compare_view import CompareView
from gui.widgets.images import load_display, to_qimage
from tests.engine_helpers import gif3, photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard


def _image(w: int, h: int, colour: QColor, alpha: bool = False) -> QImage:
    fmt = QImage.Format.Format_RGBA8888 if alpha else QImage.Format.Format_RGB888
    image = QImage(w, h, fmt)
    image.fill(colour)
    return image


def test_compare_view_splits_zooms_and_pans(qtbot: QtBot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(400, 300)
    view.show()
    before = _image(40, 30, QColor(255, 0, 0))
    after = _image(80, 60, QColor(0, 0, 255))
    view.set_images(before, after)
    fitted = view.zoom
    assert fitted == pytest.approx(min(384 / 80, 284 / 60))
    shot = view.grab().toImage()
    centre_y = shot.height() // 2
    assert shot.pixelColor(QPoint(150, centre_y)).red() > 200  # before on the left
    assert shot.pixelColor(QPoint(250, centre_y)).blue() > 200  # after on the right

    # drag the split line to the left
    split_x = int(view._split_x())
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, pos=QPoint(split_x, centre_y))
    qtbot.mouseMove(view, QPoint(split_x - 100, centre_y))
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, pos=QPoint(split_x - 100, centre_y))
    assert view.split < 0.3
    assert view.grab().toImage().pixelColor(QPoint(150, centre_y)).blue() > 200

    view.zoom_in()
    assert view.zoom == pytest.approx(fitted * 1.25)
    view.actual_size()
    assert view.zoom == 1.0
    # pan: dragging away from the split line moves the image
    origin = QPointF(view._origin)
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, pos=QPoint(350, 280))
    qtbot.mouseMove(view, QPoint(330, 270))
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, pos=QPoint(330, 270))
    assert view._origin == origin + QPointF(-20, -10)
    view.fit()
    assert view.zoom == pytest.approx(fitted)


def test_transparent_pixels_show_the_checkerboard(qtbot: QtBot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(200, 200)
    view.show()
    view.set_images(_image(16, 16, QColor(0, 0, 0, 0), alpha=True), None)
    shot = view.grab().toImage()
    colours = {shot.pixelColor(QPoint(x, 100)).name() for x in range(20, 180, 3)}
    assert {"#cccccc", "#999999"} <= colours


def test_to_qimage_handles_grey_alpha_and_16_bit() -> None:
    grey_alpha = np.zeros((4, 5, 2), np.uint8)
    grey_alpha[..., 0] = 200
    grey_alpha[..., 1] = 128
    image = to_qimage(grey_alpha)
    assert (image.width(), image.height()) == (5, 4)
    assert image.pixelColor(0, 0).red() == 200 and image.pixelColor(0, 0).alpha() == 128
    deep = np.full((2, 3, 3), 65535, np.uint16)
    assert to_qimage(deep).pixelColor(1, 1).green() == 255


def test_an_animated_file_decodes_every_frame(tmp_path: Path) -> None:
    shown = load_display(gif3(tmp_path / "anim.gif"))
    assert shown.total_frames == 3 and len(shown.frames) == 3


def test_classify_paths_keeps_the_order_and_says_why(tmp_path: Path) -> None:
    a = photo(tmp_path / "a.png")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    model = make_upscaler(tmp_path / "m.onnx")
    missing = tmp_path / "gone.png"
    found = classify_paths([notes, a, empty_dir, model, missing])
    assert [s.paths for s in found.sources] == [(a,)]
    assert found.models == (model,)
    assert len(found.refused) == 3
    assert "notes.txt" in found.refused[0] and "not an image" in found.refused[0]
    assert "empty" in found.refused[1]
    assert "gone.png" in found.refused[2] and "does not exist" in found.refused[2]


def test_numbered_sequence() -> None:
    names = [Path("/x/frame_10.png"), Path("/x/frame_9.png"), Path("/x/frame_11.png")]
    assert numbered_sequence(names) == [names[1], names[0], names[2]]
    assert numbered_sequence(names[:2]) is None  # too few
    assert numbered_sequence([*names[:2], Path("/x/other_3.png")]) is None
    assert numbered_sequence([*names[:2], Path("/y/frame_3.png")]) is None


def test_job_times_and_states() -> None:
    job = Job(OperationRequest(Operation.UPSCALE, "m", (Path("/a.png"),)), "Model")
    assert job.state is JobState.QUEUED and job.state.cancellable
    assert job.title == "Upscale · a.png · Model"
    assert job.eta() is None
    job.on_started()
    job.on_cancel_requested()
    assert job.state is JobState.CANCELLING and not job.state.cancellable
    job.on_cancelled()
    assert job.state.ended
    assert fmt_duration(5.4) == "5 s"
    assert fmt_duration(75) == "1:15"
    assert fmt_duration(3725) == "1:02:05"


def test_closing_stops_a_fetch_with_sigterm_first(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine CLI cleans up its temp files on SIGTERM (exit 143); a plain kill would leave
    # them. The child here stands in for a long download and records which signal it got.
    import sys

    import gui.fetcher as fetcher_module

    marker = tmp_path / "got-sigterm"
    child = tmp_path / "child.py"
    child.write_text(
        "import signal, sys, time, pathlib\n"
        "def stop(*_):\n"
        f"    pathlib.Path({str(marker)!r}).write_text('143')\n"
        "    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('downloading', flush=True)\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(fetcher_module, "engine_command", lambda args: [sys.executable, str(child)])
    fetcher = ModelFetcher()
    with qtbot.waitSignal(fetcher.fetchProgressed, timeout=30_000):
        assert fetcher.start(["download", "x"], "x", tmp_path)
    fetcher.kill()
    assert marker.read_text() == "143"
    assert not fetcher.is_running()


def test_the_fetcher_reports_a_failed_download(qtbot: QtBot, tmp_path: Path) -> None:
    fetcher = ModelFetcher()
    lines: list[str] = []
    fetcher.fetchProgressed.connect(lines.append)
    with qtbot.waitSignal(fetcher.fetchFinished, timeout=60_000) as blocker:
        assert fetcher.start(["download", "no-such-model"], "no-such-model", tmp_path)
        assert not fetcher.start(["download", "x"], "x", tmp_path)  # one at a time
    outcome: FetchOutcome = blocker.args[0]
    assert not outcome.ok
    assert "no-such-model" in outcome.message
    assert not fetcher.is_running()


def test_launcher_passes_engine_commands_through_before_the_gui_loads(tmp_path: Path) -> None:
    make_upscaler(tmp_path / "mine.onnx")
    launcher = Path(__file__).resolve().parent.parent / "packaging" / "launcher.py"
    # After the engine command ran, the launcher must not have imported Qt or any GUI module.
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['tessera', '--engine', 'models', '--models-dir', {str(tmp_path)!r}, 'list']\n"
        "try:\n"
        f"    runpy.run_path({str(launcher)!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "gui = sorted(m for m in sys.modules if m == 'gui' or m.startswith(('gui.', 'PySide6')))\n"
        "print('exit', code, 'gui', gui)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=launcher.parent.parent,
    )
    assert "mine.onnx" in done.stdout, done.stderr
    assert done.stdout.strip().endswith("exit 0 gui []"), done.stdout
