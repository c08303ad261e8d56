"""Batches that survive: the window's queue on disk, a window killed (SIGKILL) in the middle
of a batch, and the next window offering "Resume n of m (label)" that queues exactly the jobs
whose products are missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from engine.requests import Operation
from engine.settings import EngineSettings
from gui.controllers.queue_store import JOURNAL, read_journal, resume_text
from gui.jobs import JobSettings, JobState, SaveTo
from gui.main_window import MainWindow
from gui.settings import AppSettings
from tests.slow_models import make_slow_upscaler

ROOT = Path(__file__).resolve().parent.parent
JOBS, KILL_AFTER = 200, 80

# The first window, in a process of its own: it runs the batch and is killed with SIGKILL
# (no clean exit, no Qt teardown) once KILL_AFTER jobs have ended.
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    from engine.requests import Operation
    from engine.settings import EngineSettings
    from gui.jobs import JobState, SaveTo
    from gui.main_window import MainWindow
    from gui.settings import AppSettings

    home, kill_after, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    settings = AppSettings(QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat))
    settings.save_to = SaveTo.BESIDE
    win = MainWindow(
        settings,
        engine_settings=EngineSettings(models_dir=home / "models"),
        data_dir=home / "data",
        calibrate=False,
    )
    win.confirm_close = False
    win.show()
    done = []

    def ended(job_id):
        if win.workspace.jobs[job_id].state is JobState.FINISHED:
            done.append(job_id)
        if len(done) == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    def go():
        if win.inventory is None:
            QTimer.singleShot(20, go)
            return
        win.panel.select_operation(Operation.UPSCALE)
        assert win.panel.select_model(str(home / "models" / "slow.onnx"))
        win.jobs.add_paths(sorted((home / "in").glob("*.png")))
        run()

    def run():
        if len(win.workspace.sources) < count:  # a large add comes in parts
            QTimer.singleShot(20, run)
            return
        win.workspace.jobEnded.connect(ended)
        win.jobs.run_selected(Operation.UPSCALE)

    QTimer.singleShot(0, go)
    app.exec()
    sys.exit(3)  # never reached: the kill comes first
    """
)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    (tmp_path / "models").mkdir()
    make_slow_upscaler(tmp_path / "models" / "slow.onnx", layers=40)
    rng = np.random.default_rng(1)
    for n in range(JOBS):
        pixels = rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / "in" / f"img{n:03}.png")
    return tmp_path


def _made(home: Path) -> dict[str, list[Path]]:
    """Each input's products in its folder (results are written beside the inputs)."""
    out: dict[str, list[Path]] = {}
    for p in sorted((home / "in").iterdir()):
        if p.name.startswith("img") and "-" in p.stem:
            out.setdefault(p.stem.split("-")[0], []).append(p)
    return out


def _window(home: Path) -> MainWindow:
    settings = AppSettings(QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat))
    settings.save_to = SaveTo.BESIDE
    win = MainWindow(
        settings,
        engine_settings=EngineSettings(models_dir=home / "models"),
        data_dir=home / "data",
        calibrate=False,
    )
    win.confirm_close = False
    win.show()
    return win


def test_a_killed_batch_is_offered_again_and_only_its_missing_jobs_run(
    qtbot: QtBot, home: Path
) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), str(KILL_AFTER), str(JOBS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    made = _made(home)
    assert len(made) >= KILL_AFTER and len(made) < JOBS  # killed in the middle
    missing = {f"img{n:03}" for n in range(JOBS)} - set(made)
    journal = home / "data" / JOURNAL
    assert journal.is_file()

    win = _window(home)
    try:
        qtbot.waitUntil(lambda: win.notice.action_button.isVisible(), timeout=20_000)
        label = win.queue_store.interrupted[0].label
        assert win.notice.action_button.text() == f"Resume {len(missing)} of {JOBS} ({label})"
        assert "not done" in win.notice.text()
        gone = sorted(missing)[-1]
        (home / "in" / f"{gone}.png").unlink()  # one input deleted since: said, the rest run
        win.notice.action_button.click()
        queued = win.workspace.jobs.values()
        qtbot.waitUntil(lambda: len(win.workspace.jobs) == len(missing) - 1, timeout=10_000)
        assert {j.request.inputs[0].stem for j in queued} == missing - {gone}
        assert "could not be queued again" in win.notice.text() and gone in win.notice.text()
        qtbot.waitUntil(
            lambda: all(j.state.ended for j in win.workspace.jobs.values()), timeout=120_000
        )
        # Every input has its one product now: none made twice, none left out.
        counts = {k: len(v) for k, v in _made(home).items()}
        assert counts == {f"img{n:03}": 1 for n in range(JOBS) if f"img{n:03}" != gone}
        qtbot.waitUntil(lambda: not journal.exists(), timeout=5_000)  # nothing left to resume
    finally:
        win.close()
    assert not win.engine.qthread.isRunning()


def test_a_journal_that_cannot_be_written_is_said_once_and_the_batch_runs(
    qtbot: QtBot, home: Path
) -> None:
    (home / "data").write_text("a file where the data folder should be")
    win = _window(home)
    try:
        qtbot.waitUntil(lambda: win.inventory is not None, timeout=10_000)
        win.panel.select_operation(Operation.UPSCALE)
        assert win.panel.select_model(str(home / "models" / "slow.onnx"))
        win.jobs.add_paths(sorted((home / "in").glob("*.png"))[:2])
        win.jobs.run_selected(Operation.UPSCALE)
        assert "cannot be resumed after a crash" in win.notice.text()
        qtbot.waitUntil(
            lambda: all(j.state.ended for j in win.workspace.jobs.values()), timeout=60_000
        )
        assert all(j.state is JobState.FINISHED for j in win.workspace.jobs.values())
    finally:
        win.close()


def _settings(label: str = "Photo ×4") -> JobSettings:
    return JobSettings(Operation.UPSCALE, "/models/up.onnx", label, output_dir=Path("/out"))


def _batch(path: Path, jobs: list[tuple[str, list[str]]], label: str = "Photo ×4") -> None:
    from engine.wire import to_json

    record = {"t": "batch", "id": jobs[0][0], "label": label, "settings": to_json(_settings())}
    record["jobs"] = [[i, p] for i, p in jobs]
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def test_the_journal_takes_a_done_job_whose_product_is_gone_or_torn_for_not_done(
    tmp_path: Path,
) -> None:
    journal = tmp_path / JOURNAL
    good = tmp_path / "good-x4.png"
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(good)
    torn = tmp_path / "torn-x4.png"
    torn.write_bytes(good.read_bytes()[:30])
    _batch(journal, [(f"j{n}", [f"/in/{n}.png"]) for n in range(6)])
    ends = [
        ["j0", "done", [str(good)]],
        ["j1", "done", [str(torn)]],  # half written: made again
        ["j2", "done", [str(tmp_path / "deleted.png")]],  # gone: made again
        ["j3", "failed", []],  # failed: not tried again by itself
        ["j4", "cancelled", []],  # the person cancelled it
    ]
    with open(journal, "a") as f:
        f.write(json.dumps({"t": "end", "jobs": ends}) + "\n")
        f.write('{"t": "end", "jobs": [["j5", "do')  # torn by a kill mid-write
    (batch,) = read_journal(journal)
    assert [j.id for j in batch.todo] == ["j1", "j2", "j5"] and batch.total == 6
    assert batch.settings == _settings()
    assert resume_text([batch]) == "Resume 3 of 6 (Photo ×4)"


def test_a_job_killed_before_its_end_was_heard_is_done_when_its_product_is_whole(
    tmp_path: Path,
) -> None:
    """The batch's done jobs tell how it names products; a job that never said it ended but
    whose product is there and whole is not run again (no second, numbered copy)."""
    journal = tmp_path / JOURNAL
    folder = tmp_path / "in"
    (folder / "Tessera").mkdir(parents=True)
    pixels = Image.fromarray(np.zeros((4, 4, 3), np.uint8))
    for name in ("a", "b", "c"):
        pixels.save(folder / f"{name}.png")
    for name in ("a", "b"):
        pixels.save(folder / "Tessera" / f"{name}-x4.png")
    torn = folder / "Tessera" / "c-x4.png"
    torn.write_bytes((folder / "Tessera" / "a-x4.png").read_bytes()[:30])
    settings = JobSettings(Operation.UPSCALE, "/models/up.onnx", "Photo ×4")
    from engine.wire import to_json

    jobs = [[f"j{n}", [str(folder / f"{name}.png")]] for n, name in enumerate("abcd")]
    lines = [
        {
            "t": "batch",
            "id": "j0",
            "label": "Photo ×4",
            "settings": to_json(settings),
            "jobs": jobs,
        },
        {"t": "end", "jobs": [["j0", "done", [str(folder / "Tessera" / "a-x4.png")]]]},
    ]
    journal.write_text("".join(json.dumps(r) + "\n" for r in lines))
    (batch,) = read_journal(journal)
    # b: made, unheard → done; c: torn → again; d: no product → again
    assert [j.id for j in batch.todo] == ["j2", "j3"]


def test_several_interrupted_batches_are_offered_together() -> None:
    from gui.controllers.queue_store import InterruptedBatch, StoredJob

    one = InterruptedBatch("Photo ×4", _settings(), 1000, (StoredJob("a", ()),) * 612)
    two = InterruptedBatch("Cut-out", _settings(), 30, (StoredJob("b", ()),) * 20)
    assert resume_text([one]) == "Resume 612 of 1000 (Photo ×4)"
    assert resume_text([one, two]) == "Resume 632 of 1030 (Photo ×4, Cut-out)"


def test_a_batch_that_ends_leaves_no_journal_and_nothing_to_offer(qtbot: QtBot, home: Path) -> None:
    win = _window(home)
    try:
        qtbot.waitUntil(lambda: win.inventory is not None, timeout=10_000)
        win.panel.select_operation(Operation.UPSCALE)
        assert win.panel.select_model(str(home / "models" / "slow.onnx"))
        win.jobs.add_paths(sorted((home / "in").glob("*.png"))[:3])
        win.jobs.run_selected(Operation.UPSCALE)
        journal = home / "data" / JOURNAL
        qtbot.waitUntil(journal.exists, timeout=5_000)  # written as soon as it is queued
        (batch,) = read_journal(journal)
        assert batch.total == 3 and batch.label == win.workspace.settings.model_label  # type: ignore[union-attr]
        qtbot.waitUntil(
            lambda: all(j.state.ended for j in win.workspace.jobs.values()), timeout=60_000
        )
        assert not journal.exists()
    finally:
        win.close()
    again = _window(home)
    try:
        with qtbot.waitSignal(again.queue_store.journalRead, timeout=10_000) as read:
            pass
        assert read.args == [0]
        assert again.queue_store.interrupted == [] and not again.notice.action_button.isVisible()
    finally:
        again.close()
