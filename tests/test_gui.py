"""The desktop app on the offscreen platform: real widgets, a real engine thread and real contract
models in temporary folders."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QThread, QTimer, QUrl
from PySide6.QtGui import (
    QColor,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QImage,
    QKeySequence,
)
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from engine.errors import ErrorKind
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
    Result,
)
from engine.runtime import memory as engine_memory
from engine.runtime.memory import GpuSnapshot, MemorySnapshot, ProcessUsage, RamSnapshot
from engine.samples.faulty_models import make_two_strings
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from gui.engine_thread import EngineThread
from gui.jobs import JobState, progress_text
from gui.main_window import MainWindow
from gui.settings import AppSettings
from gui.widgets.vram_gauge import VramGauge
from tests.engine_helpers import gif3, photo
from tests.model_files import slow, upscaler
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory, use_model, wait_ended

GB = 1024**3
MB = 1024**2
JOB_TIMEOUT_MS = 60_000


MODELS = {"up2.onnx": upscaler(2), "slow.onnx": slow(300)}


RUN_ON_DROP = True  # these tests are about running jobs: dropped files run at once


def drop(win: MainWindow, paths: list[Path]) -> QDropEvent:
    """A real drag-enter and drop with file URLs, sent to the window's drop target."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    target = win.drop_target()
    centre = QPointF(target.rect().center())
    enter = QDragEnterEvent(
        target.rect().center(),  # QDragEnterEvent takes a QPoint, QDropEvent a QPointF
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    event = QDropEvent(
        centre,
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(target, event)
    return event


# ------------------------------------------------------------------------------------ dropping


def test_files_dropped_before_the_model_list_is_in_wait_for_it(
    qtbot: QtBot, models: Path, tmp_path: Path
) -> None:
    store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings = AppSettings(store)
    settings.run_on_drop = True
    win = MainWindow(
        settings,
        engine_settings=EngineSettings(models_dir=models),
        data_dir=tmp_path / "d",
        calibrate=False,
    )
    win.confirm_close = False
    try:
        a = photo(tmp_path / "a.png", 20, 16)
        outcome = win.accept_paths([a])  # dropped at once, before the models are listed
        assert win.inventory is None and not outcome.jobs and not win.workspace.jobs
        qtbot.waitUntil(lambda: len(win.workspace.jobs) == 1, timeout=10_000)
        assert next(iter(win.workspace.jobs.values())).request.inputs == (a,)
        wait_ended(qtbot, win)
        assert all(job.state is JobState.FINISHED for job in win.workspace.jobs.values())
    finally:
        win.close()


def test_dropping_files_queues_the_right_jobs(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    a = photo(tmp_path / "a.png", 40, 30)
    b = photo(tmp_path / "b.jpg", 30, 20)
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        photo(frames / f"f{i:03d}.png", 24, 16, seed=i)
    anim = gif3(tmp_path / "anim.gif")

    drop(window, [a, b, frames, anim])

    requests = [job.request for job in window.workspace.jobs.values()]
    assert [r.inputs for r in requests] == [(a,), (b,), (frames,), (anim,)]
    assert [r.sequence for r in requests] == [False, False, True, False]
    assert all(r.operation is Operation.UPSCALE for r in requests)
    assert all(r.model == str(models / "up2.onnx") for r in requests)
    assert len(window.inputs.sources) == 4
    wait_ended(qtbot, window)
    states = {
        job.request.inputs[0].name: (job.state, job.message)
        for job in window.workspace.jobs.values()
    }
    assert all(state is JobState.FINISHED for state, _ in states.values()), states
    result = window.workspace.jobs[requests[3].id].result
    assert result is not None and result.products[0].frames == 3  # the GIF stays animated


def test_a_numbered_set_of_frames_is_one_sequence_job_when_the_person_says_so(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    window = make_window(run_on_drop=False)
    use_model(window, models, "up2.onnx")
    shots = [photo(tmp_path / f"shot_{i}.png", 20, 16, seed=i) for i in (10, 9, 11)]
    drop(window, shots)
    assert len(window.workspace.sources) == 3  # three images, until the person chooses otherwise
    assert window.notice.action_button.text() == "Process as one sequence"
    qtbot.mouseClick(window.notice.action_button, Qt.MouseButton.LeftButton)
    (source,) = window.workspace.sources.values()
    assert source.sequence and source.paths == (shots[1], shots[0], shots[2])  # frame order
    window.run_selected()
    (job,) = window.workspace.jobs.values()
    assert job.request.sequence
    assert job.request.inputs == (shots[1], shots[0], shots[2])


def test_a_dropped_text_file_is_refused_with_a_message(window: MainWindow, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n- milk\n")
    drop(window, [notes])
    assert window.workspace.jobs == {}
    assert window.inputs.sources == {}
    assert "notes.txt" in window.notice.text()
    assert "not an image" in window.notice.text()
    assert "Nothing was added" in window.notice.text()
    assert "notes.txt" in window.statusBar().currentMessage()


def test_a_dropped_onnx_model_is_installed_or_refused(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    incoming = tmp_path / "incoming"
    mine = make_upscaler(incoming / "my-upscaler.onnx", scale=3)
    drop(window, [mine])
    qtbot.waitUntil(lambda: "Added my-upscaler.onnx" in window.notice.text(), timeout=10_000)
    qtbot.waitUntil(
        lambda: window.panel.select_model(str(window.models_dir() / "my-upscaler.onnx"))
    )
    assert window.workspace.jobs == {}  # a model is not a job

    strings = make_two_strings(incoming / "strings.onnx")
    drop(window, [strings])
    qtbot.waitUntil(lambda: "strings.onnx was not added" in window.notice.text(), timeout=10_000)
    assert "fits none" in window.notice.text()
    assert not (window.models_dir() / "strings.onnx").exists()


def test_a_pasted_image_is_saved_in_the_pictures_folder(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    window.panel.run_on_drop.setChecked(False)
    image = QImage(32, 24, QImage.Format.Format_RGB888)
    image.fill(QColor(200, 40, 40))
    QGuiApplication.clipboard().setImage(image)
    window.paste()
    pasted = list((tmp_path / "Pictures" / "Tessera").glob("pasted-*.png"))
    assert len(pasted) == 1
    assert list(window.inputs.sources) == [str(pasted[0])]
    assert window.workspace.jobs == {}


# ------------------------------------------------------------------------------- running jobs


def test_an_upscale_runs_on_the_engine_thread_with_tile_progress_in_order(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx", tile=64)
    engine_side: list[tuple[QThread, int, Progress]] = []
    gui_side: list[object] = []

    def on_engine_thread(event: Progress) -> None:
        engine_side.append((QThread.currentThread(), threading.get_ident(), event))

    window.engine.worker.runFinished.connect(on_engine_thread, Qt.ConnectionType.DirectConnection)
    window.engine.runFinished.connect(gui_side.append)
    window.engine.operationFinished.connect(gui_side.append)
    source = photo(tmp_path / "photo.png", 200, 150)
    with qtbot.waitSignal(window.engine.operationFinished, timeout=JOB_TIMEOUT_MS) as blocker:
        window.accept_paths([source])
    result: Result = blocker.args[0]

    assert engine_side, "no tile ran"
    assert all(t is window.engine.qthread for t, _, _ in engine_side)
    assert {ident for _, ident, _ in engine_side} != {threading.get_ident()}
    runs = [e for e in gui_side if isinstance(e, Progress)]
    count = runs[0].run_count
    assert count > 1, "the job was not tiled"
    assert [e.run for e in runs] == list(range(1, count + 1))
    assert all(e.kind is ProgressKind.RUN_FINISHED for e in runs)
    assert gui_side[-1] is result
    assert result.tile == 64 and result.runs >= count  # plus the scale probe on first load

    product = result.products[0].path
    qtbot.waitUntil(lambda: window.viewer.after is not None and window.viewer.after.path == product)
    assert window.viewer.before is not None and window.viewer.before.path == source
    after = window.viewer.after
    assert after is not None and (after.width, after.height) == (400, 300)
    assert window.viewer.view.has_before() and window.viewer.view.has_after()
    row = window.job_list.row(result.request_id)
    assert row is not None and row.state_label.text() == "Done" and row.open_button.isVisibleTo(row)


def test_cancel_during_a_tiled_job_keeps_the_session_for_the_next_job(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "slow.onnx", tile=64)
    engine_runs: list[Progress] = []
    # The engine thread is held at the end of its second run until Cancel has been clicked:
    # the count read before the click is then the count at the click, however loaded the
    # machine (the thread that appends is the one waiting).
    clicked = threading.Event()

    def on_run(event: Progress) -> None:  # on the engine thread, between two runs
        engine_runs.append(event)
        if len(engine_runs) == 2:
            clicked.wait(JOB_TIMEOUT_MS / 1000)

    window.engine.worker.runFinished.connect(on_run, Qt.ConnectionType.DirectConnection)
    big = photo(tmp_path / "big.png", 400, 300)
    (job_id,) = window.accept_paths([big]).jobs
    try:
        qtbot.waitUntil(lambda: len(engine_runs) >= 2, timeout=JOB_TIMEOUT_MS)
        row = window.job_list.row(job_id)
        assert row is not None and row.cancel_button.isEnabled()

        with qtbot.waitSignal(window.engine.operationCancelled, timeout=JOB_TIMEOUT_MS) as blocker:
            at_cancel = len(engine_runs)
            assert at_cancel == 2  # the engine waits: nothing ran since
            qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
            clicked.set()
    finally:
        clicked.set()  # never leave the engine thread waiting
    cancellation: OperationCancellation = blocker.args[0]
    assert cancellation.request_id == job_id and cancellation.started
    # the engine was between two runs at the click: none starts after it
    assert len(engine_runs) == at_cancel
    total = engine_runs[0].run_count
    assert len(engine_runs) < total
    qtbot.wait(300)
    assert len(engine_runs) == at_cancel
    assert row.state_label.text() == "Cancelled"
    assert not row.cancel_button.isVisibleTo(row)

    window.show_memory_panel()
    qtbot.waitUntil(lambda: [s.model_name for s in window.memory_panel.sessions] == ["slow.onnx"])
    assert window.memory_panel.table.rowCount() == 1
    assert window.models_button.text() == "1 model loaded"

    small = photo(tmp_path / "small.png", 40, 30)
    with qtbot.waitSignal(window.engine.operationFinished, timeout=JOB_TIMEOUT_MS) as blocker:
        window.accept_paths([small])
    result: Result = blocker.args[0]
    assert result.sessions_created == 0 and result.sessions_reused >= 1


def test_a_queued_job_is_cancelled_at_once_and_esc_cancels_the_running_one(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "slow.onnx", tile=64)
    started = threading.Event()
    window.engine.worker.runFinished.connect(
        lambda _e: started.set(), Qt.ConnectionType.DirectConnection
    )
    first, second = window.accept_paths(
        [photo(tmp_path / "a.png", 400, 300), photo(tmp_path / "b.png", 400, 300)]
    ).jobs
    qtbot.waitUntil(started.is_set, timeout=JOB_TIMEOUT_MS)
    queued_row = window.job_list.row(second)
    assert queued_row is not None and queued_row.state_label.text() == "Queued"
    qtbot.mouseClick(queued_row.cancel_button, Qt.MouseButton.LeftButton)
    assert queued_row.state_label.text() == "Cancelled"  # at once, not after the running job
    assert window.workspace.jobs[first].state is JobState.RUNNING

    assert window.cancel_action.shortcut() == QKeySequence(QKeySequence.StandardKey.Cancel)
    with qtbot.waitSignal(window.engine.operationCancelled, timeout=JOB_TIMEOUT_MS) as blocker:
        window.cancel_action.trigger()
    assert blocker.args[0].request_id == first
    assert window.workspace.jobs[first].state is JobState.CANCELLED


def test_two_jobs_with_the_same_model_create_one_session(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    results: list[Result] = []
    window.engine.operationFinished.connect(results.append)
    window.accept_paths([photo(tmp_path / "one.png", 40, 30), photo(tmp_path / "two.png", 30, 40)])
    qtbot.waitUntil(lambda: len(results) == 2, timeout=JOB_TIMEOUT_MS)
    assert [r.sessions_created for r in results] == [1, 0]
    assert results[1].sessions_reused >= 1
    assert [s.model_name for s in window.memory_panel.sessions] == ["up2.onnx"]


def test_the_memory_panel_unload_releases_the_session(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    with qtbot.waitSignal(window.engine.operationFinished, timeout=JOB_TIMEOUT_MS):
        window.accept_paths([photo(tmp_path / "p.png", 40, 30)])
    qtbot.mouseClick(window.models_button, Qt.MouseButton.LeftButton)
    assert window.memory_dock.isVisible()
    qtbot.waitUntil(lambda: window.memory_panel.table.rowCount() == 1)
    window.memory_panel.table.selectRow(0)
    # (an earlier refresh may still be on its way; wait for the empty list)
    with qtbot.waitSignal(
        window.engine.sessionsChanged, timeout=10_000, check_params_cb=lambda s: s == ()
    ):
        qtbot.mouseClick(window.memory_panel.unload_button, Qt.MouseButton.LeftButton)
    assert window.memory_panel.table.rowCount() == 0
    assert window.models_button.text() == "0 models loaded"
    with qtbot.waitSignal(window.engine.operationFinished, timeout=JOB_TIMEOUT_MS) as blocker:
        window.accept_paths([photo(tmp_path / "q.png", 40, 30)])
    assert blocker.args[0].sessions_created == 1  # it really was released


def test_a_multi_frame_result_gets_a_frame_scrubber(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    with qtbot.waitSignal(window.viewer.imagesShown, timeout=JOB_TIMEOUT_MS):
        window.accept_paths([gif3(tmp_path / "anim.gif")])
    qtbot.waitUntil(lambda: window.viewer.after is not None, timeout=JOB_TIMEOUT_MS)
    assert window.viewer.scrubber_row.isVisible()
    assert window.viewer.scrubber.maximum() == 2
    window.viewer.scrubber.setValue(2)
    assert window.viewer.frame_label.text() == "3/3"


def test_the_event_loop_stays_responsive_during_a_job(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "slow.onnx", tile=64)
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    source = photo(tmp_path / "work.png", 320, 240)
    timer.start()
    with qtbot.waitSignal(window.engine.operationFinished, timeout=JOB_TIMEOUT_MS):
        window.accept_paths([source])
    timer.stop()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(gaps) > 10
    print(
        f"\nlargest event-loop gap during a job: {max(gaps) * 1000:.1f} ms over {len(ticks)} ticks"
    )


def test_closing_the_window_mid_job_leaves_no_thread_running(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    win = make_window()
    use_model(win, models, "slow.onnx", tile=64)
    started = threading.Event()
    win.engine.worker.runFinished.connect(
        lambda _e: started.set(), Qt.ConnectionType.DirectConnection
    )
    win.accept_paths([photo(tmp_path / "long.png", 400, 300)])
    qtbot.waitUntil(started.is_set, timeout=JOB_TIMEOUT_MS)
    assert win.engine.is_busy()
    began = time.perf_counter()
    assert win.close()
    took = time.perf_counter() - began
    assert not win.engine.qthread.isRunning()
    assert not win.tasks.qthread.isRunning()
    print(f"\nclosing mid-job took {took * 1000:.0f} ms")


# -------------------------------------------------------------------------- the engine thread


def test_every_request_gets_exactly_one_terminal_signal(
    qtbot: QtBot, models: Path, tmp_path: Path
) -> None:
    engine = EngineThread(EngineSettings(models_dir=models))
    terminals: dict[str, list[object]] = defaultdict(list)
    for signal in (engine.operationFinished, engine.operationFailed, engine.operationCancelled):
        signal.connect(lambda payload: terminals[payload.request_id].append(payload))
    started: list[str] = []
    engine.operationStarted.connect(lambda request: started.append(request.id))
    ran: list[str] = []
    engine.runFinished.connect(lambda progress: ran.append(progress.request_id))
    engine.start(probe_runtimes=False)
    try:
        big = photo(tmp_path / "big.png", 400, 300)
        small = photo(tmp_path / "small.png", 40, 30)

        def request(model: str, image: Path) -> OperationRequest:
            return OperationRequest(
                Operation.UPSCALE, model, (image,), output_dir=tmp_path / "out", tile=64
            )

        running = request("slow", big)
        queued = request("slow", big)
        fine = request("up2", small)
        broken = request("no-such-model", small)
        for r in (running, queued, fine, broken):
            engine.submit(r)
        qtbot.waitUntil(lambda: running.id in started, timeout=JOB_TIMEOUT_MS)
        assert engine.cancel(queued.id)
        # cancelled while queued: answered at once, on this thread
        assert [type(p) for p in terminals[queued.id]] == [OperationCancellation]
        assert not terminals[queued.id][0].started  # type: ignore[attr-defined]
        qtbot.waitUntil(lambda: running.id in ran, timeout=JOB_TIMEOUT_MS)  # mid-job: cancel it
        assert engine.cancel(running.id)
        qtbot.waitUntil(
            lambda: all(terminals[r.id] for r in (running, fine, broken)), timeout=JOB_TIMEOUT_MS
        )
        qtbot.wait(200)
        assert {rid: len(p) for rid, p in terminals.items()} == {
            r.id: 1 for r in (running, queued, fine, broken)
        }
        cancelled = terminals[running.id][0]
        assert isinstance(cancelled, OperationCancellation) and cancelled.started
        assert isinstance(terminals[fine.id][0], Result)
        failure = terminals[broken.id][0]
        assert isinstance(failure, OperationFailure)
        assert failure.kind is ErrorKind.BAD_MODEL and "no-such-model" in failure.message
        assert queued.id not in started
        assert not engine.cancel(fine.id)  # already over
    finally:
        engine.stop()
    assert not engine.qthread.isRunning()


def test_stop_cancels_queued_and_running_jobs(qtbot: QtBot, models: Path, tmp_path: Path) -> None:
    engine = EngineThread(EngineSettings(models_dir=models))
    terminals: dict[str, list[str]] = defaultdict(list)
    engine.operationFinished.connect(lambda p: terminals[p.request_id].append("finished"))
    engine.operationFailed.connect(lambda p: terminals[p.request_id].append("failed"))
    engine.operationCancelled.connect(lambda p: terminals[p.request_id].append("cancelled"))
    started: list[str] = []
    engine.operationStarted.connect(lambda r: started.append(r.id))
    engine.start(probe_runtimes=False)
    big = photo(tmp_path / "big.png", 400, 300)
    ids = [
        engine.submit(
            OperationRequest(Operation.UPSCALE, "slow", (big,), output_dir=tmp_path, tile=64)
        )
        for _ in range(3)
    ]
    qtbot.waitUntil(lambda: bool(started), timeout=JOB_TIMEOUT_MS)
    engine.stop()
    assert not engine.qthread.isRunning()
    qtbot.waitUntil(lambda: all(terminals[i] for i in ids))
    qtbot.wait(100)
    assert {i: terminals[i] for i in ids} == {i: ["cancelled"] for i in ids}


# ----------------------------------------------------------------------- gauge, panel, texts


def _ram() -> RamSnapshot:
    return RamSnapshot(total=32 * GB, available=20 * GB, process_rss=300 * MB)


def test_the_gauge_renders_without_nvml(qtbot: QtBot) -> None:
    gauge = VramGauge()
    qtbot.addWidget(gauge)
    gauge.set_snapshot(MemorySnapshot((), _ram(), "no NVIDIA driver (test)"))
    gauge.resize(gauge.sizeHint())
    assert gauge.text.startswith("No NVIDIA GPU")
    assert "RAM 12.0 GB / 32.0 GB" in gauge.text
    assert "no NVIDIA driver (test)" in gauge.toolTip()
    assert not gauge.grab().isNull()


def test_the_gauge_renders_with_nvml(qtbot: QtBot) -> None:
    gauge = VramGauge()
    qtbot.addWidget(gauge)
    gpu = GpuSnapshot(
        0, "NVIDIA Test", 24 * GB, 10 * GB, 14 * GB, 2 * GB, (ProcessUsage(4242, "game", 6 * GB),)
    )
    gauge.set_snapshot(MemorySnapshot((gpu,), _ram(), None))
    gauge.resize(gauge.sizeHint())
    assert gauge.text == "GPU 0  10.0 GB / 24.0 GB · Tessera 2.0 GB · others 6.0 GB"
    assert "game (pid 4242): 6.0 GB" in gauge.toolTip()
    image = gauge.grab().toImage()
    assert not image.isNull()
    # the own share (blue) fills the left of the bar
    left = image.pixelColor(QPoint(4, image.height() // 2))
    assert left.blue() > left.red()


def test_the_window_polls_the_gauge_with_and_without_a_gpu(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    qtbot.waitUntil(window.memory_timer.isActive, timeout=10_000)
    monkeypatch.setattr(
        engine_memory, "snapshot", lambda: MemorySnapshot((), _ram(), "no driver here")
    )
    window.poll_memory()  # read on the task thread, shown when it is in
    qtbot.waitUntil(lambda: window.gauge.text.startswith("No NVIDIA GPU"), timeout=5_000)
    assert window.gauge.text.startswith("No NVIDIA GPU")
    gpu = GpuSnapshot(
        0, "NVIDIA Test", 24 * GB, 10 * GB, 14 * GB, 2 * GB, (ProcessUsage(7, "other-ai", 6 * GB),)
    )
    monkeypatch.setattr(engine_memory, "snapshot", lambda: MemorySnapshot((gpu,), _ram(), None))
    # now the window's own timer picks it up
    qtbot.waitUntil(lambda: window.gauge.text.startswith("GPU 0"), timeout=5_000)
    assert "this process holds 2.0 GB" in window.memory_panel.diagnosis()
    assert "other-ai (pid 7)" in window.memory_panel.diagnosis()


def test_progress_text() -> None:
    event = Progress(
        "job-x", ProgressKind.RUN_FINISHED, frame=1, frame_count=5, run=14, run_count=36
    )
    assert progress_text(event, Operation.UPSCALE) == "frame 2/5 · tile 14/36"
    assert progress_text(event, Operation.DEPTH) == "frame 2/5 · run 14/36"
    single = Progress("job-y", ProgressKind.RUN_FINISHED, run=1, run_count=1)
    assert progress_text(single, Operation.UPSCALE) == ""


def test_settings_survive_a_restart(make_window: WindowFactory, tmp_path: Path) -> None:
    first = make_window()
    first.panel.tile.setValue(128)
    first.panel.save_to.set_folder(tmp_path / "results")
    first.panel.run_on_drop.setChecked(False)
    first.close()
    second = make_window()
    assert second.panel.tile.value() == 128
    assert second.panel.output_dir() == tmp_path / "results"
    assert not second.panel.run_on_drop.isChecked()
    assert second.panel.current_device() == "cpu"
