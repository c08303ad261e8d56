"""What a person sees of the command line's runs in the window: real `python -m engine run`
processes join a real window's engine (its JoinedRequests on the instance's socket). Each
joined run is a row marked with its pid whose state follows the engine's; it is cancellable
from the row and from the terminal; the window's own job keeps its progress and its Cancel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from engine.requests import Operation, ProgressKind
from engine.samples.synthetic import slow_model
from engine.settings import join_socket_path
from gui.controllers.joined import JoinedRequests, model_label
from gui.controllers.speed import DEFAULT_FIXED_S
from gui.jobs import Job, JobState
from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.model_files import WINDOW_MODELS, upscaler
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import JOB_MS, use_model

ROOT = Path(__file__).resolve().parents[1]
# The window's models, and a catalog model's file (a contract model under its id's name).
MODELS = {**WINDOW_MODELS, "realesrgan-x4plus.onnx": upscaler(4)}


@pytest.fixture
def joined(
    window: MainWindow, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[JoinedRequests]:
    """The window serving this test's command lines, as `gui.app` makes it serve them."""
    monkeypatch.setenv("TESSERA_INSTANCE_NAME", f"join-window-{os.getpid()}")
    served = JoinedRequests(window.workspace, window.engine, window)
    assert served.listen(join_socket_path())
    yield served
    served.close()


def start_run(image: Path, model: Path | str, out: Path, *extra: str) -> subprocess.Popen[str]:
    """`python -m engine run` in a terminal of its own (it joins the window: same models
    folder, same runtime folder and instance)."""
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model", str(model),
         "--out", str(out), "--json", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )  # fmt: skip


def job_of(win: MainWindow, pid: int) -> Job | None:
    """The row of the command line `pid`, by the mark a person reads on it."""
    mark = f"— from the command line (pid {pid})"
    found = [j for j in win.workspace.jobs.values() if j.title.endswith(mark)]
    assert len(found) <= 1
    return found[0] if found else None


def shown_states(win: MainWindow) -> dict[str, str]:
    """The state each row of the job list shows, by job id."""
    rows = {job.id: win.job_list.row(job.id) for job in win.job_list.jobs}
    return {job_id: row.state_label.text() for job_id, row in rows.items() if row is not None}


def runs_of(job: Job) -> int:
    return job.progress.run if job.progress is not None else 0


def ended(qtbot: QtBot, process: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    """The command line's exit code, --json and last line, the window's loop running meanwhile."""
    qtbot.waitUntil(lambda: process.poll() is not None, timeout=JOB_MS)
    stdout, stderr = process.communicate()
    lines = stderr.strip().splitlines()
    return process.returncode, json.loads(stdout), lines[-1] if lines else ""


def test_two_command_lines_beside_the_windows_job_each_end_in_their_own_state(
    qtbot: QtBot, window: MainWindow, models: Path, joined: JoinedRequests, tmp_path: Path
) -> None:
    win = window
    use_model(win, models, "slow.onnx", tile=64)
    big = photo(tmp_path / "mine.png", 1024, 768)  # about a minute of tiles on two cores
    win.jobs.add_paths([big])
    (own_id,) = win.jobs.run_selected()
    own = win.workspace.jobs[own_id]
    qtbot.waitUntil(lambda: own.state is JobState.RUNNING and runs_of(own) >= 1, timeout=JOB_MS)

    small = photo(tmp_path / "theirs.png", 48, 32)
    first = start_run(small, models / "up2.onnx", tmp_path / "first")
    second = start_run(small, models / "up2.onnx", tmp_path / "second")
    try:
        qtbot.waitUntil(
            lambda: job_of(win, first.pid) is not None and job_of(win, second.pid) is not None,
            timeout=JOB_MS,
        )
        one, two = job_of(win, first.pid), job_of(win, second.pid)
        assert one is not None and two is not None
        assert one.state is two.state is JobState.QUEUED  # behind the window's job
        for job in (one, two):
            row = win.job_list.row(job.id)
            assert row is not None and row.cancel_button.isVisible()

        first.send_signal(signal.SIGINT)  # Ctrl+C in the first terminal
        code, data, line = ended(qtbot, first)
        assert code == 130 and data["exit_code"] == 130, line
        assert line == "Stopped by SIGINT: 0 products written."
        qtbot.waitUntil(lambda: one.state is JobState.CANCELLED, timeout=10_000)
        assert one.id in win.workspace.jobs  # the row stays, Cancelled

        # The window's job goes on: its progress moves, and its row's Cancel works.
        runs = runs_of(own)
        assert own.state is JobState.RUNNING
        qtbot.waitUntil(lambda: runs_of(own) > runs, timeout=JOB_MS)
        row = win.job_list.row(own_id)
        assert row is not None and row.cancel_button.isVisible()
        qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: own.state is JobState.CANCELLED, timeout=10_000)

        # The second command line runs next and gets its product.
        code, data, line = ended(qtbot, second)
        assert code == 0, line
        assert [Path(p["path"]).parent for p in data["products"]] == [tmp_path / "second"]
        qtbot.waitUntil(lambda: two.state is JobState.FINISHED, timeout=10_000)
        assert win.workspace.jobs[two.id] is two

        # What the rows show: each its own ending, and no Cancel left on an ended job.
        expected = {one.id: "Cancelled", own_id: "Cancelled", two.id: "Done"}
        listed = [job.id for job in win.job_list.jobs]  # the terminals join in either order
        assert listed[0] == own_id and sorted(listed) == sorted(expected)
        qtbot.waitUntil(lambda: shown_states(win) == expected, timeout=10_000)
        for job_id in expected:
            row = win.job_list.row(job_id)
            assert row is not None and not row.cancel_button.isVisible()
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
                process.communicate()


def test_a_joined_run_cancelled_from_its_row_ends_its_terminal_saying_so(
    qtbot: QtBot, window: MainWindow, models: Path, joined: JoinedRequests, tmp_path: Path
) -> None:
    """The row's Cancel ends the command line with the cancelled exit code and one line that
    says the window cancelled it; Ctrl+C on a running joined run leaves its row Cancelled and
    the window's job queued behind it runs with its progress, and Esc cancels it."""
    win = window
    big = photo(tmp_path / "big.png", 512, 384)
    cli = start_run(big, models / "slow.onnx", tmp_path / "cli", "--tile", "64")
    try:
        qtbot.waitUntil(lambda: (job := job_of(win, cli.pid)) is not None and runs_of(job) >= 1,
                        timeout=JOB_MS)  # fmt: skip
        job = job_of(win, cli.pid)
        assert job is not None
        runs = runs_of(job)
        qtbot.waitUntil(lambda: runs_of(job) > runs, timeout=JOB_MS)  # it follows the engine
        row = win.job_list.row(job.id)
        assert row is not None and row.cancel_button.isVisible()
        qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
        code, data, line = ended(qtbot, cli)
        assert code == 130 and data["exit_code"] == 130
        assert (
            line
            == f"error: Cancelled in the Tessera window (pid {os.getpid()}): 0 products written."
        )
        qtbot.waitUntil(lambda: job.state is JobState.CANCELLED, timeout=10_000)

        # Ctrl+C on the command line's running job, the window's own queued behind it.
        cli = start_run(big, models / "slow.onnx", tmp_path / "cli", "--tile", "64")
        qtbot.waitUntil(lambda: (job := job_of(win, cli.pid)) is not None and runs_of(job) >= 1,
                        timeout=JOB_MS)  # fmt: skip
        theirs = job_of(win, cli.pid)
        assert theirs is not None
        use_model(win, models, "slow.onnx", tile=64)
        win.jobs.add_paths([photo(tmp_path / "mine.png", 512, 384)])
        (own_id,) = win.jobs.run_selected()
        own = win.workspace.jobs[own_id]
        assert own.state is JobState.QUEUED
        cli.send_signal(signal.SIGINT)
        code, data, line = ended(qtbot, cli)
        assert code == 130 and line == "Stopped by SIGINT: 0 products written."
        qtbot.waitUntil(lambda: theirs.state is JobState.CANCELLED, timeout=10_000)
        assert win.workspace.jobs.get(theirs.id) is theirs  # its row stays, Cancelled
        qtbot.waitUntil(lambda: runs_of(own) >= 2, timeout=JOB_MS)
        row = win.job_list.row(own_id)
        assert row is not None and row.cancel_button.isVisible()
        win.cancel_action.trigger()  # Esc: the running job, the window's own now
        qtbot.waitUntil(lambda: own.state is JobState.CANCELLED, timeout=10_000)
        assert not win.jobs.active()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()


def test_a_joined_row_reads_as_the_windows_own_and_stays_until_clear_finished(
    qtbot: QtBot, window: MainWindow, models: Path, joined: JoinedRequests, tmp_path: Path
) -> None:
    """The row names the model as the window does ("Photo ×4"); removing or clearing the
    window's images leaves it (it is no image's job); "Clear finished" takes it."""
    win = window
    mine = photo(tmp_path / "mine.png", 24, 16)
    win.jobs.add_paths([mine])
    cli = start_run(photo(tmp_path / "theirs.png", 24, 16), "realesrgan-x4plus", tmp_path / "cli")
    code, _, line = ended(qtbot, cli)
    assert code == 0, line
    job = job_of(win, cli.pid)
    assert job is not None
    qtbot.waitUntil(lambda: job.state is JobState.FINISHED, timeout=10_000)
    assert job.title == (f"Upscale · theirs.png · Photo ×4 — from the command line (pid {cli.pid})")
    win.jobs.remove([str(mine)])
    win.jobs.clear()
    assert win.workspace.jobs.get(job.id) is job
    assert job in win.job_list.jobs
    win.clear_finished()
    assert job.id not in win.workspace.jobs and job not in win.job_list.jobs


def test_a_joined_run_teaches_the_estimates_its_own_size_and_gets_one_itself(
    qtbot: QtBot, window: MainWindow, models: Path, joined: JoinedRequests, tmp_path: Path
) -> None:
    """A joined job's time is learnt for its image's size, not as the fixed cost of every
    image: after a 512×384 joined job, a tiny image is not estimated to take as long; the next
    joined job is estimated as the window's own are."""
    win = window
    model = str(models / "slow.onnx")
    cli = start_run(photo(tmp_path / "theirs.png", 512, 384), model, tmp_path / "cli",
                    "--tile", "128")  # fmt: skip
    code, _, line = ended(qtbot, cli)
    assert code == 0, line
    job = job_of(win, cli.pid)
    assert job is not None
    qtbot.waitUntil(lambda: job.state is JobState.FINISHED, timeout=10_000)
    assert job.megapixels == 512 * 384 / 1e6
    took = job.working_seconds()
    tiny = win.jobs.speeds.estimate(Operation.UPSCALE, model, "cpu", 24 * 16 / 1e6, 1)
    assert took is not None and tiny is not None
    # A tiny image costs the assumed fixed part of a job plus its few pixels' share, not a
    # share of this job's whole time (before: about a quarter of it).
    assert tiny.seconds < DEFAULT_FIXED_S + took / 20, (tiny, took)

    # The next command line's row says how long it will take, as the window's own rows do.
    cli = start_run(photo(tmp_path / "next.png", 512, 384), model, tmp_path / "cli",
                    "--tile", "128")  # fmt: skip
    try:
        qtbot.waitUntil(lambda: job_of(win, cli.pid) is not None, timeout=JOB_MS)
        after = job_of(win, cli.pid)
        assert after is not None and after.expected_s is not None and after.expected_s > 0
    finally:
        cli.kill()
        cli.communicate()


def test_a_joined_run_ends_on_sigterm_while_the_app_cannot_stop_at_once(
    qtbot: QtBot, window: MainWindow, models: Path, joined: JoinedRequests, tmp_path: Path
) -> None:
    """SIGTERM while the app makes the job's session (no run yet, so nothing to interrupt):
    the terminal does not wait for the app's word (it waited 2 s), it ends with 143 and says
    the job is cancelled there; the app's row ends Cancelled once the session is made."""
    win = window
    heavy = slow_model(tmp_path / "heavy.onnx", layers=2000)  # seconds to make its session
    cli = start_run(photo(tmp_path / "p.png", 64, 48), heavy, tmp_path / "cli")
    try:
        qtbot.waitUntil(
            lambda: (job := job_of(win, cli.pid)) is not None and job.progress is not None,
            timeout=JOB_MS,
        )
        job = job_of(win, cli.pid)
        assert job is not None and job.progress is not None
        assert job.progress.kind is ProgressKind.STARTED  # its session is being made
        cli.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        qtbot.waitUntil(lambda: cli.poll() is not None, timeout=JOB_MS)
        took = time.monotonic() - sent
        code, data, line = ended(qtbot, cli)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert code == 143 and data["exit_code"] == 143
    assert data["app_confirmed"] is False
    assert job.state is JobState.CANCELLING
    assert line == (
        f"Stopped by SIGTERM: the Tessera app (pid {os.getpid()}) cancels the job when its "
        "current step ends; what it wrote before stays."
    )
    assert took < 5  # a liveness bound only: the time is measured and reported, not tested
    qtbot.waitUntil(lambda: job.state is JobState.CANCELLED, timeout=JOB_MS)
    assert not (tmp_path / "cli").exists() or not list((tmp_path / "cli").iterdir())


def test_a_joined_rows_pid_mark_stays_whole_beside_a_long_file_name(
    qtbot: QtBot, window: MainWindow, models: Path, joined: JoinedRequests, tmp_path: Path
) -> None:
    """A narrow window and a long file name elide the row's title, never which terminal the
    row belongs to."""
    win = window
    win.resize(1024, 640)
    name = "holiday-in-the-mountains-with-the-whole-family-" + "very-long-" * 6 + "name.png"
    cli = start_run(photo(tmp_path / name, 24, 16), models / "up2.onnx", tmp_path / "cli")
    code, _, line = ended(qtbot, cli)
    assert code == 0, line
    job = job_of(win, cli.pid)
    assert job is not None
    qtbot.waitUntil(lambda: job.state is JobState.FINISHED, timeout=10_000)
    if not win.job_list.expanded:  # the list closes when its jobs end: the person opens it
        qtbot.mouseClick(win.job_list.toggle, Qt.MouseButton.LeftButton)
    row = win.job_list.row(job.id)
    assert row is not None
    qtbot.waitUntil(lambda: row.title.width() > 50, timeout=10_000)
    assert row.title.is_elided()
    drawn = [row.title.shown_text()] + [
        label.text() for label in row.findChildren(QLabel) if label.isVisibleTo(row)
    ]
    assert any(text.endswith(f"— from the command line (pid {cli.pid})") for text in drawn), drawn


def test_a_joined_model_is_named_as_the_window_names_it(tmp_path: Path) -> None:
    """By its catalog id or a path to its file, a catalog model reads "Photo ×4"; another
    model file reads as its name."""
    assert model_label("realesrgan-x4plus") == "Photo ×4"
    assert model_label(str(tmp_path / "realesrgan-x4plus.onnx")) == "Photo ×4"
    assert model_label(str(tmp_path / "my-upscaler.onnx")) == "my-upscaler"


def test_cancel_all_ends_the_joined_runs_and_the_windows_own(
    qtbot: QtBot, window: MainWindow, models: Path, joined: JoinedRequests, tmp_path: Path
) -> None:
    """Cancel all takes the command lines' jobs with the window's: each terminal ends with
    the cancelled exit code, every row Cancelled."""
    win = window
    use_model(win, models, "slow.onnx", tile=64)
    win.jobs.add_paths([photo(tmp_path / "mine.png", 1024, 768)])
    (own_id,) = win.jobs.run_selected()
    own = win.workspace.jobs[own_id]
    image = photo(tmp_path / "theirs.png", 48, 32)
    clis = [start_run(image, models / "up2.onnx", tmp_path / f"cli-{i}") for i in range(2)]
    try:
        qtbot.waitUntil(lambda: all(job_of(win, c.pid) is not None for c in clis), timeout=JOB_MS)
        theirs = [job_of(win, c.pid) for c in clis]
        qtbot.mouseClick(win.job_list.cancel_all_button, Qt.MouseButton.LeftButton)
        for cli in clis:
            code, data, line = ended(qtbot, cli)
            assert code == 130 and data["exit_code"] == 130, line
            assert line.startswith("error: Cancelled in the Tessera window")
        everyone = [own, *(job for job in theirs if job is not None)]
        assert len(everyone) == 3
        qtbot.waitUntil(
            lambda: all(job.state is JobState.CANCELLED for job in everyone), timeout=10_000
        )
    finally:
        for cli in clis:
            if cli.poll() is None:
                cli.kill()
                cli.communicate()
