"""Real failures, injected where they hurt: out of memory in every family, an exception inside
an operation, a storm of cancels, closing mid-job, and a crash while publishing a file.

The out-of-memory cases run in subprocesses because the CPU arena limit (M9) is registered
once per process. The engine-thread cases go through `gui.engine_thread.EngineThread` under
pytest-qt, counting terminal signals per request id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from engine.errors import ErrorKind
from engine.io.reading import load_image
from engine.operations.upscale import Upscale
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
    Result,
)
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from gui.engine_thread import EngineThread
from tests.engine_helpers import photo
from tests.model_files import slow, upscaler
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_MS = 60_000


def python(script: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
    )


def leftovers(folder: Path) -> list[str]:
    """Names in `folder` that look half written: temp names or empty files."""
    if not folder.exists():
        return []
    return sorted(
        f.name
        for f in folder.iterdir()
        if ".partial-" in f.name or (f.is_file() and f.stat().st_size == 0)
    )


# --------------------------------------------------------------------- out of memory, per family


# Per family: the models, then a request that needs far more than the 8 MB CPU arena and a
# smaller one of the same family that fits. Background models have a fixed input size, so
# there the smaller request is the smaller model of the family (U²-Net's 320² after BEN2's 1024²).
@dataclass(frozen=True)
class OomCase:
    setup: str  # makes big_model, small_model, big and small in the folder w
    op: str
    big_req: str = "{}"  # OperationRequest keywords of the request that runs out of memory
    small_req: str = "{}"  # and of the smaller request that must then work
    cli: tuple[str, ...] = ()


OOM_CASES = {
    "upscale": OomCase(
        "big_model = small_model = make_upscaler(w / 'up4.onnx', scale=4)\n"
        "big = photo(w / 'big.png', 256, 256); small = big",
        "UPSCALE",
        big_req="{'tile': 256}",
        small_req="{'tile': 64}",
        cli=("--tile", "256"),
    ),
    "remove-background": OomCase(
        "big_model = make_ben2(w / 'BEN2_Base.onnx'); small_model = make_u2net(w / 'u2netp.onnx')\n"
        "big = small = photo(w / 'big.png', 300, 200)",
        "REMOVE_BACKGROUND",
    ),
    "depth": OomCase(
        "big_model = small_model = make_da3(w / 'da3.onnx', fixed=False)\n"
        "big = small = photo(w / 'big.png', 300, 200)",
        "DEPTH",
        big_req="{'options': {'process_res': 1400}}",
        small_req="{'options': {'process_res': 140}}",
        cli=("--option", "process_res=1400"),
    ),
    "geometry": OomCase(
        "big_model = small_model = make_moge(w / 'moge.onnx')\n"
        "big = photo(w / 'big.png', 1400, 1000); small = photo(w / 'small.png', 64, 48)",
        "GEOMETRY",
    ),
}


@pytest.mark.parametrize("family", list(OOM_CASES))
def test_out_of_memory_releases_the_session_and_the_next_request_works(
    family: str, tmp_path: Path
) -> None:
    case = OOM_CASES[family]
    script = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from pathlib import Path
        from engine.api import Engine
        from engine.cli import exit_code_for, main as cli_main
        from engine.requests import Operation, OperationRequest
        from engine.settings import EngineSettings
        from engine.samples.background_models import make_ben2, make_u2net
        from engine.samples.depth_models import make_da3
        from engine.samples.geometry_models import make_moge
        from engine.samples.upscaler_models import make_upscaler
        from tests.engine_helpers import photo
        w = Path({work!r})
        {setup}
        out = w / 'out'
        seen = {{}}
        # Through the command line first: exit code and the message a person reads.
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            seen['cli_code'] = cli_main(['run', {family!r}, str(big), '--model', str(big_model),
                                         '--out', str(out / 'cli'), '--cpu-mem-limit', '8',
                                         *{cli!r}])
        seen['cli_stderr'] = err.getvalue()
        # Then the same failure in one engine, and the next request in the same process.
        e = Engine(EngineSettings(cpu_mem_limit=8 << 20))
        op = Operation.{op}
        r1 = e.run(OperationRequest(op, str(big_model), (big,), output_dir=out / 'a', **{big_req}))
        seen['first'] = [(f.kind.value, f.message) for f in r1.failures]
        seen['first_exit'] = exit_code_for(r1)
        seen['first_products'] = len(r1.products)
        seen['cache_after_failure'] = len(e.sessions)
        seen['released'] = e.sessions.released
        r2 = e.run(OperationRequest(op, str(small_model), (small,), output_dir=out / 'b', **{small_req}))
        seen['second'] = [f.message for f in r2.failures]
        seen['second_products'] = [str(p.path) for p in r2.products]
        seen['second_created'] = r2.sessions_created
        seen['cache_after'] = len(e.sessions)
        print(json.dumps(seen))
        """
    ).format(
        work=str(tmp_path),
        family=family,
        setup=case.setup,
        op=case.op,
        big_req=case.big_req,
        small_req=case.small_req,
        cli=list(case.cli),
    )
    p = python(script)
    assert p.returncode == 0, p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    big_name = "big.png"

    assert seen["cli_code"] == 3, seen["cli_stderr"]
    assert "Out of memory" in seen["cli_stderr"] and big_name in seen["cli_stderr"]
    assert "Traceback" not in seen["cli_stderr"] + p.stderr

    [(kind, message)] = seen["first"]
    assert kind == "resource" and seen["first_exit"] == 3
    assert message.startswith(big_name) and "Out of memory" in message
    assert seen["first_products"] == 0
    assert seen["cache_after_failure"] == 0 and seen["released"] == 1  # M5: session dropped
    assert seen["second"] == [] and seen["second_products"]
    assert seen["second_created"] == 1 and seen["cache_after"] == 1
    for out in ("cli", "a", "b"):
        assert leftovers(tmp_path / "out" / out) == []
    for product in seen["second_products"]:
        assert Path(product).stat().st_size > 0


# --------------------------------------------------------------------------- the engine thread


MODELS = {"up2.onnx": upscaler(2), "slow.onnx": slow(150)}


class Terminals:
    """Every terminal signal of an EngineThread, per request id."""

    def __init__(self, engine_thread: EngineThread) -> None:
        self.by_id: dict[str, list[object]] = defaultdict(list)
        engine_thread.operationFinished.connect(self._add)
        engine_thread.operationFailed.connect(self._add)
        engine_thread.operationCancelled.connect(self._add)

    def _add(self, payload: Result | OperationFailure | OperationCancellation) -> None:
        self.by_id[payload.request_id].append(payload)

    def ended(self, ids: list[str]) -> bool:
        return all(self.by_id.get(i) for i in ids)

    def one(self, request_id: str) -> object:
        got = self.by_id[request_id]
        assert len(got) == 1, f"{request_id} ended {len(got)} times: {got}"
        return got[0]


def upscale(model: str, image: Path, out: Path, **kw: object) -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, model, (image,), output_dir=out, tile=64, **kw)  # type: ignore[arg-type]


def raise_once(original: Callable[..., object], error: Exception) -> Callable[..., object]:
    fired: list[bool] = []

    def wrapper(*args: object, **kwargs: object) -> object:
        if not fired:
            fired.append(True)
            raise error
        return original(*args, **kwargs)

    return wrapper


def test_an_exception_inside_an_operation_fails_that_input_and_the_thread_serves_on(
    qtbot: QtBot, engine_thread: EngineThread, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Fault injection inside the operation's own work: the batch goes on (the design's
    # per-input failure), so the request finishes with the fault named in its failures.
    monkeypatch.setattr(
        Upscale, "process", raise_once(Upscale.process, RuntimeError("injected fault #1"))
    )
    ends = Terminals(engine_thread)
    first, second = photo(tmp_path / "first.png"), photo(tmp_path / "second.png", seed=1)
    batch = OperationRequest(
        Operation.UPSCALE, "up2", (first, second), output_dir=tmp_path / "out", tile=64
    )
    after = upscale("up2", first, tmp_path / "after")
    ids = [engine_thread.submit(batch), engine_thread.submit(after)]
    qtbot.waitUntil(lambda: ends.ended(ids), timeout=TIMEOUT_MS)
    qtbot.wait(100)  # a duplicate terminal signal would arrive now
    result = ends.one(batch.id)
    assert isinstance(result, Result)
    [failure] = result.failures
    assert failure.kind is ErrorKind.INTERNAL and failure.source == first
    assert "injected fault #1" in failure.message and first.name in failure.message
    assert [p.source for p in result.products] == [second]
    served = ends.one(after.id)
    assert isinstance(served, Result) and served.ok and served.sessions_created == 0
    assert engine_thread.is_running()


def test_an_exception_for_the_whole_request_emits_operation_failed_and_the_thread_serves_on(
    qtbot: QtBot, engine_thread: EngineThread, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Fault injection before any input is touched: nothing can go on, so the request fails.
    monkeypatch.setattr(
        Upscale,
        "check_request",
        raise_once(Upscale.check_request, ValueError("injected fault #2")),
    )
    ends = Terminals(engine_thread)
    img = photo(tmp_path / "a.png")
    broken, fine = upscale("up2", img, tmp_path / "o1"), upscale("up2", img, tmp_path / "o2")
    ids = [engine_thread.submit(broken), engine_thread.submit(fine)]
    qtbot.waitUntil(lambda: ends.ended(ids), timeout=TIMEOUT_MS)
    qtbot.wait(100)
    failure = ends.one(broken.id)
    assert isinstance(failure, OperationFailure)
    assert failure.kind is ErrorKind.INTERNAL and "injected fault #2" in failure.message
    assert "Traceback" not in failure.message
    served = ends.one(fine.id)
    assert isinstance(served, Result) and served.ok and len(served.products) == 1
    assert not (tmp_path / "o1").exists() or not list((tmp_path / "o1").iterdir())
    assert engine_thread.is_running()


def test_cancel_storm_every_job_ends_exactly_once(
    qtbot: QtBot, engine_thread: EngineThread, tmp_path: Path
) -> None:
    ends = Terminals(engine_thread)
    small = photo(tmp_path / "small.png", 24, 18)
    medium = photo(tmp_path / "medium.png", 96, 64)
    out = tmp_path / "out"
    cancel_at_start: set[str] = set()

    def on_started(request: OperationRequest) -> None:
        if request.id in cancel_at_start:
            engine_thread.cancel(request.id)  # the job is running (or just ended) by now

    engine_thread.operationStarted.connect(on_started)
    ids: list[str] = []
    cancelled_queued: list[str] = []
    untouched: list[str] = []
    for i in range(100):
        slow = i % 3 == 0
        req = upscale("slow" if slow else "up2", medium if slow else small, out)
        ids.append(engine_thread.submit(req))
        if slow:
            cancel_at_start.add(req.id)
        if i % 2 == 0 and engine_thread.cancel(req.id):  # still queued, or running by now
            cancelled_queued.append(req.id)
            again = upscale("up2", small, out)  # re-queue the cancelled job
            ids.append(engine_thread.submit(again))
            if i % 4 == 0:
                engine_thread.cancel(again.id)
            else:
                untouched.append(again.id)
        elif not slow:
            untouched.append(req.id)
    # A final cancel pass over everything still open, while the worker is busy.
    for rid in ids[::7]:
        engine_thread.cancel(rid)
    qtbot.waitUntil(lambda: ends.ended(ids), timeout=TIMEOUT_MS)
    qtbot.wait(200)  # any duplicate terminal signal would have arrived
    counts = {rid: len(ends.by_id[rid]) for rid in ids}
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    assert len(ids) >= 150 and not engine_thread.open_requests()
    kinds = [type(ends.one(rid)).__name__ for rid in ids]
    for rid in cancelled_queued:
        assert isinstance(ends.one(rid), OperationCancellation | Result)
    never_cancelled = [rid for rid in untouched if rid not in ids[::7]]
    assert all(isinstance(ends.one(r), Result) and ends.one(r).ok for r in never_cancelled)  # type: ignore[attr-defined]
    print(
        f"\ncancel storm: {len(ids)} jobs, {sum(counts.values())} terminal signals: "
        f"{kinds.count('Result')} finished, {kinds.count('OperationCancellation')} cancelled, "
        f"{kinds.count('OperationFailure')} failed"
    )
    # The thread still serves a job after the storm.
    last = upscale("up2", small, out)
    with qtbot.waitSignal(engine_thread.operationFinished, timeout=TIMEOUT_MS) as blocker:
        engine_thread.submit(last)
    assert blocker.args[0].request_id == last.id and blocker.args[0].ok
    assert leftovers(out) == []


def test_stop_mid_job_returns_and_leaves_no_partial_file(
    qtbot: QtBot, models: Path, tmp_path: Path
) -> None:
    engine = EngineThread(EngineSettings(models_dir=models))
    ends = Terminals(engine)
    engine.start(probe_runtimes=False)
    done_first = threading.Event()
    running_second = threading.Event()

    def on_progress(event: Progress) -> None:  # on the engine thread
        if event.kind is ProgressKind.INPUT_FINISHED and event.input_index == 0:
            done_first.set()
        if event.kind is ProgressKind.RUN_FINISHED and event.input_index == 1:
            running_second.set()

    engine.worker.progressChanged.connect(on_progress, Qt.ConnectionType.DirectConnection)
    out = tmp_path / "out"
    first, second = photo(tmp_path / "first.png", 40, 30), photo(tmp_path / "second.png", 400, 300)
    job = OperationRequest(Operation.UPSCALE, "slow", (first, second), output_dir=out, tile=64)
    engine.submit(job)
    qtbot.waitUntil(running_second.is_set, timeout=TIMEOUT_MS)
    assert done_first.is_set()
    engine.stop()
    assert not engine.qthread.isRunning()
    qtbot.waitUntil(lambda: ends.ended([job.id]), timeout=TIMEOUT_MS)
    qtbot.wait(100)
    ended = ends.one(job.id)
    assert isinstance(ended, OperationCancellation) and ended.started
    assert leftovers(out) == []
    assert [f.name for f in out.iterdir()] == ["first-slow.png"]  # the finished input only
    assert load_image(out / "first-slow.png", 1 << 24).frames[0].shape[:2] == (30, 40)


def test_stop_while_a_product_is_being_written_leaves_it_whole_or_absent(
    qtbot: QtBot, models: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from engine.cancel import CancelToken
    from engine.io.png import PngWriter

    writing = threading.Event()
    cancelled = threading.Event()
    add = PngWriter.add
    cancel = CancelToken.cancel

    def slow_add(self: PngWriter, *args: object, **kwargs: object) -> None:
        writing.set()
        # stop() is called from the GUI thread meanwhile: the write goes on once it cancelled.
        assert cancelled.wait(TIMEOUT_MS / 1000), "stop() never cancelled the job"
        add(self, *args, **kwargs)  # type: ignore[arg-type]

    def cancel_seen(self: CancelToken) -> None:
        cancel(self)
        cancelled.set()

    # Products are encoded frame by frame as they are made: hold the PNG encoder there.
    monkeypatch.setattr(PngWriter, "add", slow_add)
    monkeypatch.setattr(CancelToken, "cancel", cancel_seen)
    engine = EngineThread(EngineSettings(models_dir=models))
    ends = Terminals(engine)
    engine.start(probe_runtimes=False)
    out = tmp_path / "out"
    images = [photo(tmp_path / f"{n}.png", 40, 30, seed=n) for n in range(3)]
    job = OperationRequest(Operation.UPSCALE, "up2", tuple(images), output_dir=out, tile=64)
    engine.submit(job)
    qtbot.waitUntil(writing.is_set, timeout=TIMEOUT_MS)
    engine.stop()
    assert not engine.qthread.isRunning()
    qtbot.waitUntil(lambda: ends.ended([job.id]), timeout=TIMEOUT_MS)
    assert isinstance(ends.one(job.id), OperationCancellation)
    assert leftovers(out) == []
    # The write in flight stops at its next block of rows (the encoder checks the cancel
    # there): its temp file is removed, nothing is published, later inputs are not started.
    assert [f.name for f in out.iterdir()] == []


# ----------------------------------------------------------------- a crash while publishing


def test_crash_between_writing_and_renaming_leaves_nothing_that_looks_finished(
    tmp_path: Path,
) -> None:
    model = make_upscaler(tmp_path / "models" / "up2.onnx", scale=2)
    img = photo(tmp_path / "a.png", 40, 30)
    out = tmp_path / "out"
    marker = tmp_path / "publishing"
    # The app: a real CLI run whose os.link (the publishing step, once renameat2 is out of the
    # way) stops for good, to be killed.
    script = textwrap.dedent(
        f"""
        import os, time
        from pathlib import Path
        import engine.files
        engine.files._renameat2 = None
        def stuck_link(src, dst, *a, **k):
            Path({str(marker)!r}).write_text(str(src))
            time.sleep(120)
        os.link = stuck_link
        from engine.cli import main
        main(['run', 'upscale', {str(img)!r}, '--model', {str(model)!r}, '--out', {str(out)!r}])
        """
    )
    app = subprocess.Popen(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and app.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the app never reached publishing"
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait(30)
    assert app.returncode == -signal.SIGKILL

    [temp] = list(out.iterdir())
    assert Path(marker.read_text()) == temp
    assert temp.name.startswith(".") and ".partial-" in temp.name  # hidden, marked unfinished
    assert not temp.name.endswith(".png")  # no image viewer or *.png glob takes it
    assert temp.name != "a-up2.png"

    # The next run takes the product's own name (and sweeps the temp file of the dead process).
    from engine.cli import main

    assert main(["run", "upscale", str(img), "--model", str(model), "--out", str(out)]) == 0
    assert (out / "a-up2.png").is_file()
    frames_out = tmp_path / "again"
    assert main(["run", "upscale", str(out), "--model", str(model), "--out", str(frames_out)]) == 0
    [product] = list(frames_out.iterdir())
    assert load_image(product, 1 << 24).frames[0].shape[:2] == (120, 160)
    # The next run in that folder swept the killed process's temp file (issue #20).
    assert sorted(f.name for f in out.iterdir()) == ["a-up2.png"]
