"""The window's speeds are not taught by a job that took a preview's tiles instead of running
them: its time is not that of its megapixels. A real engine thread and the contract ×2
upscaler, no widget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from engine.previews import PreviewRequest, Region
from engine.requests import Operation, OperationRequest
from engine.settings import EngineSettings
from gui.controllers.jobs import JobsController
from gui.controllers.speed import SpeedBook
from gui.engine_thread import EngineThread
from gui.jobs import JobSettings
from gui.settings import AppSettings
from gui.workspace import Workspace
from tests.engine_helpers import photo
from tests.model_files import upscaler
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard

JOB_MS = 60_000
MODELS = {"up2.onnx": upscaler(2)}


@pytest.fixture
def thread(models: Path) -> Iterator[EngineThread]:
    engine = EngineThread(EngineSettings(models_dir=models))
    engine.start(probe_runtimes=False)
    yield engine
    engine.stop()


@pytest.fixture
def jobs(thread: EngineThread, tmp_path: Path) -> JobsController:
    store = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    return JobsController(Workspace(), thread, SpeedBook(AppSettings(store)))


def _ended(jobs: JobsController) -> bool:
    return bool(jobs.workspace.jobs) and all(j.state.ended for j in jobs.workspace.jobs.values())


def test_a_job_after_a_preview_teaches_the_speed_book_nothing(
    qtbot: QtBot, jobs: JobsController, thread: EngineThread, models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "big.png", 600, 420, seed=3)
    (source,) = jobs.add_paths([image]).sources
    chosen = JobSettings(Operation.UPSCALE, str(models / "up2.onnx"), "up2 ×2", tile=128)
    preview = OperationRequest(Operation.UPSCALE, chosen.model, (image,), tile=128)
    with qtbot.waitSignal(thread.previewFinished, timeout=JOB_MS):
        thread.submit_preview(PreviewRequest(preview, Region(250, 170, 350, 250)))
    (first,) = jobs.queue([source], chosen)
    qtbot.waitUntil(lambda: _ended(jobs), timeout=JOB_MS)
    result = jobs.workspace.jobs[first].result
    assert result is not None and result.runs_reused > 0  # it took the preview's tiles
    assert jobs.speed.speeds.get(chosen.model, "cpu") is None
    jobs.queue([source], chosen)  # the same job again, with no preview before it: it teaches
    qtbot.waitUntil(lambda: _ended(jobs), timeout=JOB_MS)
    assert jobs.speed.speeds.get(chosen.model, "cpu") is not None
