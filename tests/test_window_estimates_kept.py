"""Estimates learnt from finished jobs are kept in the data folder and known after a restart,
and a batch of an image and a clip is counted as what it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from gui.controllers.speed_store import FILE_NAME
from gui.inputs import InputSource
from gui.jobs import JobSettings
from gui.main_window import MainWindow
from gui.settings import AppSettings, SaveTo
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory, use_model, wait_ended


def _fresh_settings(path: Path) -> AppSettings:
    settings = AppSettings(QSettings(str(path), QSettings.Format.IniFormat))
    settings.save_to = SaveTo.BESIDE
    return settings


def test_a_speed_learnt_before_a_restart_gives_the_first_estimate_after_it(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    first = make_window(_fresh_settings(tmp_path / "one.ini"))
    use_model(first, models, "up2.onnx")
    image = photo(tmp_path / "a.png", 320, 240, seed=1)
    first.accept_paths([image])
    assert "The first job measures" in first.jobs.estimate_line("this CPU")
    first.run_selected()
    wait_ended(qtbot, first)
    assert (tmp_path / "data" / FILE_NAME).is_file()
    first.close()
    # The next start: the same data folder, and settings that kept nothing of the speeds
    # (QSettings is written lazily; a killed app loses what it had not synced).
    again = make_window(_fresh_settings(tmp_path / "two.ini"))
    use_model(again, models, "up2.onnx")
    again.accept_paths([photo(tmp_path / "b.png", 320, 240, seed=2)])
    line = again.jobs.estimate_line("this CPU")
    assert "The first job measures" not in line and "rough" not in line
    assert line.endswith("on this CPU for 1 image."), line


def test_an_image_and_a_clip_are_counted_as_an_image_and_a_clip(
    make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    window = make_window()
    use_model(window, models, "up2.onnx")
    settings = window.workspace.settings
    assert settings is not None
    window.speeds.learn(settings.operation, settings.model, settings.device, 2.0, 0.5, 1)
    sources = [
        InputSource((tmp_path / "a.png",), False, 1, 640, 480),
        InputSource((tmp_path / "c.mp4",), False, 50, 320, 240, 2.0),
    ]
    line = window.jobs.estimate_text(sources, settings, "this CPU", True)
    assert "for 1 image and 1 clip" in line, line


def _tiny_sources(folder: Path, count: int) -> list[InputSource]:
    return [InputSource((folder / f"t{i}.png",), False, 1, 8, 8) for i in range(count)]


def _after_one_job(
    qtbot: QtBot, make_window: WindowFactory, models: Path, image: Path, size: tuple[int, int]
) -> tuple[MainWindow, JobSettings]:
    """A window that has run one job of up2.onnx on a photo of `size`, and its settings."""
    window = make_window()
    use_model(window, models, "up2.onnx")
    window.accept_paths([photo(image, *size, seed=1)])
    window.run_selected()
    wait_ended(qtbot, window)
    settings = window.workspace.settings
    assert settings is not None
    return window, settings


def test_after_one_real_job_small_images_still_cost_their_own_time(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    """One job of a real size teaches a rate per pixel; each image also costs its reading,
    writing and the engine's turn whatever its size, so 1000 small images are not "about
    20 s" for 80 s: the batch's figure counts that cost per image."""
    window, settings = _after_one_job(qtbot, make_window, models, tmp_path / "a.png", (320, 240))
    speed = window.speeds.get(settings.model, settings.device)
    assert speed is not None and speed.fixed > 0
    guess = window.jobs.estimate(_tiny_sources(tmp_path, 50), settings)
    assert guess is not None and guess.seconds >= 50 * speed.fixed


def test_a_batch_waits_for_its_model_to_load_when_it_is_not_in_memory(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    """After Unload all (or a restart) a batch's first image waits for the model's loading:
    the figure counts it then, and not while the model is in memory."""
    window, settings = _after_one_job(qtbot, make_window, models, tmp_path / "a.png", (64, 48))
    start = window.speeds.load_seconds(settings.model, settings.device)
    assert start > 0
    sources = _tiny_sources(tmp_path, 5)
    qtbot.waitUntil(lambda: window.jobs.speed.loaded(settings.model, settings.device), timeout=5000)
    loaded = window.jobs.estimate(sources, settings)
    window.engine.unload_all()
    qtbot.waitUntil(
        lambda: not window.jobs.speed.loaded(settings.model, settings.device), timeout=5000
    )
    cold = window.jobs.estimate(sources, settings)
    assert loaded is not None and cold is not None
    assert cold.seconds == pytest.approx(loaded.seconds + start)


def test_a_batch_of_tiny_images_keeps_what_real_jobs_taught(
    make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    """300 tiny PNGs teach the cost per image; the rate per pixel that the real jobs before
    them taught stays, so the next large image still has its figure."""
    window = make_window()
    use_model(window, models, "up2.onnx")
    settings = window.workspace.settings
    assert settings is not None
    op, model, device = settings.operation, settings.model, settings.device
    window.speeds.learn(op, model, device, 2.0, 0.5, 1)
    for _ in range(30):
        window.speeds.learn(op, model, device, 0.05, 0.001, 1)
    large = [InputSource((tmp_path / "large.png",), False, 1, 2000, 1000)]
    guess = window.jobs.estimate(large, settings)
    assert guess is not None and not guess.rough
    assert guess.seconds > 30 * 0.05  # 2 Mpx at the rate of the real job: about 8 s


def test_a_models_first_job_teaches_no_time_its_once_only_probe_took(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    """A light model's first job measures its tile overlap once (seconds on a slow machine);
    a tiny image's cost learnt from that job leaves the probe out, or every later small image
    would be "about 1 s" for 50 ms."""
    window = make_window()
    use_model(window, models, "up2.onnx")
    window.accept_paths([photo(tmp_path / "a.png", 64, 48, seed=1)])
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    job = window.workspace.jobs[job_id]
    assert job.result is not None and job.started_at is not None and job.ended_at is not None
    probe = job.result.timings["probe_s"]
    assert probe > 0
    settings = window.workspace.settings
    assert settings is not None
    speed = window.speeds.get(settings.model, settings.device)
    assert speed is not None
    took = max(job.ended_at - job.started_at, job.result.timings["total_s"])
    assert speed.fixed <= took - probe + 1e-6
