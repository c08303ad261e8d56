"""The command line joins the running app (issue #22 item 1, M6), with real processes: the app
offscreen (`python -m gui`, a private runtime folder, settings folders and instance name) and
`python -m engine run` on contract models. A joined run loads no model in the command line's
process — it never imports ONNX Runtime — and the app holds the one session; its products and
exit code are a standalone run's, bit for bit; Ctrl-C cancels the app's job and the app serves
the next request; `--standalone` and a different models folder run in-process."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from engine import __version__, join, wire
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    Result,
)
from engine.samples.synthetic import slow_model
from engine.samples.upscaler_models import make_upscaler
from gui.controllers.joined import JoinedRequests
from gui.jobs import JobState
from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.processes import end_process
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import JOB_MS

ROOT = Path(__file__).resolve().parents[1]
START_S = 90  # the app's start on a loaded two-core machine


@dataclass
class App:
    process: subprocess.Popen[str]
    env: dict[str, str]
    models: Path
    records: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def label(self) -> str:
        return f"app (pid {self.pid})"

    def engine(self, *args: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
        flags = ["-X", "importtime"] if importtime else []
        return subprocess.run(
            [sys.executable, *flags, "-m", "engine", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
            timeout=300,
        )

    def start_run(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "engine", "run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=ROOT,
        )

    def held(self) -> list[dict[str, object]]:
        """Every Tessera process and its sessions, as `engine memory --json` lists them."""
        done = self.engine("memory", "--json")
        assert done.returncode == 0, done.stderr
        processes: list[dict[str, object]] = json.loads(done.stdout)["processes"]
        return processes


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    tmp = tmp_path_factory.mktemp("join")
    run = tmp / "run"
    run.mkdir(mode=0o700)
    models = tmp / "models"
    make_upscaler(models / "realesrgan-x4plus.onnx", scale=4)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_RUNTIME_DIR": str(run),
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "XDG_DATA_HOME": str(tmp / "data"),
        "TESSERA_MODELS_DIR": str(models),
        "TESSERA_INSTANCE_NAME": f"join-test-{os.getpid()}",
    }
    env.pop("DISPLAY", None)  # the command line finds the app whatever display it is on
    process = subprocess.Popen(
        [sys.executable, "-m", "gui"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "DISPLAY": ":77"},
        cwd=ROOT,
    )
    records = run / "tessera" / "processes"
    app = App(process, env, models, records)
    try:
        deadline = time.monotonic() + START_S
        while True:  # ready once its record names the socket it serves
            record = records / f"{process.pid}.json"
            try:
                if json.loads(record.read_text()).get("endpoint"):
                    break
            except (OSError, ValueError):
                pass
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the app never served the command line"
            time.sleep(0.1)
        yield app
    finally:
        end_process(process)


def _products(data: dict[str, object]) -> list[bytes]:
    products = data["products"]
    assert isinstance(products, list)
    return [Path(p["path"]).read_bytes() for p in products]


def test_a_joined_upscale_loads_nothing_here_and_equals_a_standalone_run(
    app: App, tmp_path: Path
) -> None:
    image = photo(tmp_path / "photo.png", 40, 30)
    joined = app.engine(
        "run",
        "upscale",
        str(image),
        "--model",
        "realesrgan-x4plus",
        "--out",
        str(tmp_path / "joined"),
        "--json",
        importtime=True,
    )
    assert joined.returncode == 0, joined.stderr
    data = json.loads(joined.stdout)
    assert data["engine"] == app.label
    assert data["exit_code"] == 0
    # The command line's process never loaded ONNX Runtime: it cannot have made a session.
    assert "onnxruntime" not in joined.stderr and "| onnx" not in joined.stderr
    (listed,) = app.held()  # the command line has ended; the app holds the one copy
    assert listed["pid"] == app.pid
    sessions = listed["sessions"]
    assert isinstance(sessions, list) and [s["model"] for s in sessions] == ["realesrgan-x4plus"]

    again = app.engine(
        "run", "upscale", str(image), "--model", "realesrgan-x4plus", "--out", str(tmp_path / "j2")
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == str(tmp_path / "j2" / "photo-realesrgan-x4plus.png")
    (listed,) = app.held()
    assert len(listed["sessions"]) == 1  # type: ignore[arg-type]  # reused, not a second copy

    alone = app.engine(
        "run",
        "upscale",
        str(image),
        "--model",
        "realesrgan-x4plus",
        "--out",
        str(tmp_path / "alone"),
        "--json",
        "--standalone",
    )
    assert alone.returncode == joined.returncode == 0, alone.stderr
    solo = json.loads(alone.stdout)
    assert solo["engine"] == "this process"
    assert solo["sessions"] == {"created": 1, "reused": 0}  # its own copy
    assert [p["kind"] for p in solo["products"]] == [p["kind"] for p in data["products"]]
    assert _products(solo) == _products(data)  # bit for bit


def test_a_bad_input_fails_in_the_app_as_it_fails_standalone(app: App, tmp_path: Path) -> None:
    bad = tmp_path / "not-an-image.png"
    bad.write_bytes(b"this is text")
    args = ("run", "upscale", str(bad), "--model", "realesrgan-x4plus", "--json")
    joined, alone = app.engine(*args), app.engine(*args, "--standalone")
    assert joined.returncode == alone.returncode == 4
    a, b = json.loads(joined.stdout), json.loads(alone.stdout)
    assert (a["engine"], b["engine"]) == (app.label, "this process")
    assert a["failures"] == b["failures"]
    assert joined.stderr.splitlines()[-1] == alone.stderr.splitlines()[-1]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_cancels_the_apps_job_and_the_app_serves_the_next(
    app: App, tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    # A model of its own per case: the app still holds the last case's after its cancel.
    slow = slow_model(tmp_path / f"slow-{signum.name}.onnx", layers=800)
    big = photo(tmp_path / "big.png", 2048, 1536)  # about a minute of runs on two cores
    out = tmp_path / "slow"
    cli = app.start_run(
        "upscale", str(big), "--model", str(slow), "--out", str(out), "--tile", "64", "--json"
    )
    try:
        deadline = time.monotonic() + 120
        while not any(  # the app is running it: it holds the slow model
            s["model"] == slow.stem
            for p in app.held()
            for s in p["sessions"]  # type: ignore[attr-defined]
        ):
            assert cli.poll() is None, cli.communicate()
            assert time.monotonic() < deadline, "the app never ran the command line's job"
            time.sleep(0.2)
        cli.send_signal(signum)
        sent = time.monotonic()
        stdout, err = cli.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode == code, err
    assert err.strip().splitlines()[-1] == f"Stopped by {signum.name}: 0 products written."
    data = json.loads(stdout)
    assert data["exit_code"] == code and data["engine"] == app.label
    assert data["app_confirmed"] is True  # the app's job ended, cancelled, within the grace
    assert took < 5  # the terminal waits at most STOP_GRACE_S for the app (slack: a busy box)
    assert not list(out.glob("*.png"))

    # The app is still there, its slow job gone: the next request runs at once.
    image = photo(tmp_path / "next.png", 24, 16)
    started = time.monotonic()
    nxt = app.engine("run", "upscale", str(image), "--model", "realesrgan-x4plus", "--json")
    assert nxt.returncode == 0, nxt.stderr
    assert json.loads(nxt.stdout)["engine"] == app.label
    assert time.monotonic() - started < 30  # behind the slow job it would wait a minute
    assert app.process.poll() is None


def _app_holds(app: App, model: str) -> bool:
    """Whether the app's process record lists a session of `model`."""
    try:
        data = json.loads((app.records / f"{app.pid}.json").read_text())
    except (OSError, ValueError):
        return False
    return any(s.get("model") == model for s in data.get("sessions", []))


def test_a_stopped_app_sends_the_run_standalone_and_drops_its_own_late_product(
    app: App, tmp_path: Path
) -> None:
    """The app is SIGSTOPped mid-job: the command line hears nothing for the bound, says so,
    runs the request itself (exit 0, its product); the app, continued, drops its job and
    writes nothing beside it, and serves the next request."""
    slow = slow_model(tmp_path / "slow-stopped.onnx", layers=400)
    image = photo(tmp_path / "mid.png", 512, 384)  # seconds of runs, in the app or here
    out = tmp_path / "stopped"
    cli = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model", str(slow),
         "--out", str(out), "--tile", "64", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**app.env, wire.STALL_ENV: "3"}, cwd=ROOT,
    )  # fmt: skip
    stopped = False
    try:
        deadline = time.monotonic() + 120
        while not _app_holds(app, slow.stem):  # loaded: its runs begin now (the record is
            assert cli.poll() is None, cli.communicate()  # read here, not by a process)
            assert time.monotonic() < deadline, "the app never ran the command line's job"
            time.sleep(0.02)
        app.process.send_signal(signal.SIGSTOP)
        stopped = True
        stdout, err = cli.communicate(timeout=240)  # without the bound: forever
        assert cli.returncode == 0, err
        data = json.loads(stdout)
        assert data["engine"] == "this process"
        assert f"Running standalone: the Tessera {app.label} stopped answering" in err
        (product,) = [Path(p["path"]) for p in data["products"]]
        made = product.read_bytes()
    finally:
        if stopped:
            app.process.send_signal(signal.SIGCONT)
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    # The app runs again: its abandoned job ends before the next request (one engine thread).
    nxt = app.engine("run", "upscale", str(photo(tmp_path / "n.png", 24, 16)),
                     "--model", "realesrgan-x4plus", "--out", str(tmp_path / "n"), "--json")  # fmt: skip
    assert nxt.returncode == 0, nxt.stderr
    assert json.loads(nxt.stdout)["engine"] == app.label
    assert sorted(out.iterdir()) == [product]  # the app's late product is not beside it
    assert product.read_bytes() == made


def test_a_different_models_folder_runs_standalone_and_says_so(app: App, tmp_path: Path) -> None:
    other = tmp_path / "other-models"
    make_upscaler(other / "realesrgan-x4plus.onnx", scale=4)
    image = photo(tmp_path / "p.png", 24, 16)
    done = app.engine(
        "run", "upscale", str(image), "--model", "realesrgan-x4plus",
        "--models-dir", str(other), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["engine"] == "this process"
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("Running standalone")]
    assert line == (
        f"Running standalone: the app (pid {app.pid}) uses the models in "
        f"{os.path.realpath(app.models)}, this run those in {os.path.realpath(other)}."
    )


def test_no_app_runs_standalone_silently(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    models = tmp_path / "models"
    make_upscaler(models / "realesrgan-x4plus.onnx", scale=4)
    image = photo(tmp_path / "p.png", 24, 16)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_RUNTIME_DIR": str(run),
        "TESSERA_MODELS_DIR": str(models),
        "TESSERA_INSTANCE_NAME": f"join-none-{os.getpid()}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model",
         "realesrgan-x4plus", "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["engine"] == "this process"
    assert "standalone" not in done.stderr


# -- the app's side, in this process: the real window and engine thread, a real socket -------
class _Client(threading.Thread):
    """A command line's side in a thread: hello, the request, then every message until the
    outcome (or until `hang_up` is set: it closes the connection, as a killed terminal does)."""

    def __init__(
        self,
        socket: Path,
        request: OperationRequest,
        hello: wire.Hello,
        then: OperationRequest | None = None,  # a second request on the same connection
    ) -> None:
        super().__init__(name="join-client", daemon=True)
        self.socket, self.request, self.hello, self.then = socket, request, hello, then
        self.messages: list[object] = []
        self.refused: str = ""
        self.hang_up = threading.Event()

    def run(self) -> None:
        joined = join.connect(self.hello, self.socket)
        if not isinstance(joined, join.Joined):
            self.refused = joined.line if joined is not None else "no app"
            return
        try:
            joined.send(wire.for_sending(self.request))
            if self.then is not None:
                joined.send(wire.for_sending(self.then))
            while not self.hang_up.is_set():
                message = joined.receive(timeout=0.05)
                if message is None:
                    continue
                self.messages.append(message)
                if isinstance(message, (Result, OperationCancellation)) or (
                    isinstance(message, OperationFailure) and message.request_id == self.request.id
                ):
                    return
        except EOFError:
            return
        finally:
            joined.close()


def _job_writing_to(win: MainWindow, folder: Path) -> str | None:
    """The id the app gave the joined job writing to `folder` (not the command line's id)."""
    ids = [i for i, job in win.workspace.jobs.items() if job.request.output_dir == folder]
    return ids[0] if ids else None


@contextlib.contextmanager
def _serving(win: MainWindow, tmp_path: Path) -> Iterator[tuple[JoinedRequests, Path]]:
    """The window's join server on a socket of the test's own, closed however the test ends."""
    served = JoinedRequests(win.workspace, win.engine, win)
    path = tmp_path / "join.sock"
    assert served.listen(path)
    try:
        yield served, path
    finally:
        served.close()


def _hello(models: Path, **changes: object) -> wire.Hello:
    hello = wire.Hello(os.getpid(), __version__, models_dir=os.path.realpath(models))
    return dataclasses.replace(hello, **changes)  # type: ignore[arg-type]


def test_the_apps_list_shows_the_command_lines_job_after_the_queued_ones(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    win = window
    with _serving(win, tmp_path) as (_served, path):
        # A job of the window's own runs (the slow model), so the command line's waits. Eight
        # photos: one alone could end before the first Alive (a second), and the command line's
        # job would then run and end without one; the test cancels this job once it has one.
        slow = OperationRequest(
            Operation.UPSCALE,
            str(models / "slow.onnx"),
            tuple(photo(tmp_path / f"big{i}.png", 1024, 768, seed=i) for i in range(8)),
            output_dir=tmp_path / "own",
            tile=64,
        )
        win.engine.submit(slow)
        image = photo(tmp_path / "cli.png", 24, 16)
        request = OperationRequest(
            Operation.UPSCALE, str(models / "up2.onnx"), (image,), output_dir=tmp_path / "cli"
        )
        client = _Client(path, request, _hello(models))
        client.start()
        qtbot.waitUntil(lambda: _job_writing_to(win, tmp_path / "cli") is not None, timeout=10_000)
        job_id = _job_writing_to(win, tmp_path / "cli")
        assert job_id is not None and job_id != request.id  # the app's own, unique id
        job = win.workspace.jobs[job_id]
        assert job.title.endswith(f"— from the command line (pid {os.getpid()})")
        row = win.job_list.row(job_id)  # the list's virtual rows: bound while in view
        assert row is not None and "from the command line" in row.job.title
        qtbot.waitUntil(lambda: bool(client.messages), timeout=10_000)
        assert client.messages[0] == wire.Queued(request.id, 1)  # after the window's job
        # Queued, no progress of its own: the app still says it answers, every second.
        qtbot.waitUntil(lambda: wire.Alive(request.id) in client.messages, timeout=10_000)
        win.engine.cancel(slow.id)
        qtbot.waitUntil(lambda: not client.is_alive(), timeout=JOB_MS)  # the loop serves it
        outcome = client.messages[-1]
        assert isinstance(outcome, Result) and outcome.ok, outcome
        assert [p.path.parent for p in outcome.products] == [tmp_path / "cli"]
        qtbot.waitUntil(lambda: job.state is JobState.FINISHED, timeout=10_000)

        # A terminal that goes away cancels its job in the app.
        gone = dataclasses.replace(slow, output_dir=tmp_path / "gone")
        client = _Client(path, gone, _hello(models))
        client.start()
        qtbot.waitUntil(
            lambda: (
                (gone_id := _job_writing_to(win, tmp_path / "gone")) is not None
                and win.workspace.jobs[gone_id].state is JobState.RUNNING
            ),
            timeout=JOB_MS,
        )
        gone_job = win.workspace.jobs[str(_job_writing_to(win, tmp_path / "gone"))]
        client.hang_up.set()
        qtbot.waitUntil(lambda: not client.is_alive(), timeout=10_000)
        qtbot.waitUntil(lambda: gone_job.state is JobState.CANCELLED, timeout=10_000)
        assert not list((tmp_path / "gone").glob("*.png"))


def test_a_job_that_ends_after_its_command_line_gave_up_leaves_no_product(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """The command line stopped waiting (Abandon) while the app could not read it — its event
    loop held up, as a stopped app's is — and the job finished meanwhile: the app removes the
    product it published, since the command line made its own."""
    win = window
    served = JoinedRequests(win.workspace, win.engine, win)
    path = tmp_path / "join.sock"
    assert served.listen(path)
    out = tmp_path / "late"
    request = OperationRequest(
        Operation.UPSCALE,
        str(models / "up2.onnx"),
        (photo(tmp_path / "late.png", 24, 16),),
        output_dir=out,
    )
    queued, go, abandoned = threading.Event(), threading.Event(), threading.Event()
    heard: list[wire.Message] = []

    def command_line() -> None:
        joined = join.connect(_hello(models), path)
        assert isinstance(joined, join.Joined)
        try:
            joined.send(wire.for_sending(request))
            while not isinstance(message := joined.receive(timeout=0.05), wire.Queued):
                pass
            queued.set()
            go.wait(JOB_MS / 1000)
            joined.send(wire.Abandon(request.id))
            abandoned.set()
            with contextlib.suppress(EOFError, OSError):
                while (message := joined.receive(timeout=0.05)) is not None or not go.is_set():
                    if message is not None:
                        heard.append(message)
        finally:
            joined.close()

    client = threading.Thread(target=command_line, daemon=True)
    client.start()
    try:
        qtbot.waitUntil(queued.is_set, timeout=JOB_MS)
        go.set()
        # The app's event loop is held up here: the Abandon stays unread while the job ends.
        deadline = time.monotonic() + JOB_MS / 1000
        while not (abandoned.is_set() and list(out.glob("*.png"))):
            assert time.monotonic() < deadline, "the job never wrote its product"
            time.sleep(0.01)
        qtbot.waitUntil(lambda: not list(out.glob("*.png")), timeout=JOB_MS)
        assert not any(isinstance(m, Result) for m in heard)  # nothing reported either
    finally:
        served.close()
        client.join(10)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"version": "0.0.1"}, "is Tessera {v}, this command line 0.0.1."),
        ({"protocol": 1}, "speaks join protocol {p}, this command line 1 (Tessera {v})."),
        ({"cpu_mem_limit": 512 * 1024 * 1024}, "has no limit as its CPU memory limit, this run 512 MB."),
        ({"keep_cpu_arena": True}, "hands back its CPU arena after each job; --keep-cpu-arena differs."),
        ({"models_dir": "/elsewhere"}, "uses the models in {m}, this run those in /elsewhere."),
    ],
)  # fmt: skip
def test_what_the_apps_engine_cannot_honour_is_refused_in_one_line(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path, changes: dict[str, object],
    reason: str,
) -> None:  # fmt: skip
    served = JoinedRequests(window.workspace, window.engine, window)
    assert served.listen(tmp_path / "join.sock")
    try:
        image = photo(tmp_path / "cli.png", 24, 16)
        request = OperationRequest(Operation.UPSCALE, str(models / "up2.onnx"), (image,))
        client = _Client(tmp_path / "join.sock", request, _hello(models, **changes))
        client.start()
        qtbot.waitUntil(lambda: not client.is_alive(), timeout=10_000)
        expected = reason.format(v=__version__, m=os.path.realpath(models), p=wire.PROTOCOL)
        assert client.refused == f"Running standalone: the app (pid {os.getpid()}) {expected}"
        assert request.id not in window.workspace.jobs
    finally:
        served.close()


# -- finding the app: what is not an app that answers is standalone ---------------------------
def test_a_socket_nobody_listens_on_is_no_app(tmp_path: Path) -> None:
    path = tmp_path / "join.sock"
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(path))  # an app that ended without removing it
    left.close()
    assert join.connect(_hello(tmp_path), path) is None
    assert join.connect(_hello(tmp_path), tmp_path / "absent.sock") is None


def test_a_listener_that_never_answers_sends_the_run_standalone(tmp_path: Path) -> None:
    path = tmp_path / "join.sock"
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hung.bind(str(path))
    hung.listen(1)  # accepted by the kernel, never answered
    try:
        started = time.monotonic()
        found = join.connect(_hello(tmp_path), path)
        assert found == join.Standalone(
            "Running standalone: the running app did not answer within 2 s."
        )
        assert time.monotonic() - started < 2 * join.ANSWER_TIMEOUT_S
    finally:
        hung.close()


def test_a_file_that_is_not_a_socket_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "join.sock"
    path.write_text("planted")
    found = join.connect(_hello(tmp_path), path)
    assert isinstance(found, join.Standalone) and "is not this user's Tessera socket" in found.line


def test_a_job_cancelled_in_the_app_tells_the_command_line_what_it_wrote(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """The person's Cancel in the window ends the command line's job too, and the ending
    names the products already written (the terminal lists them, as a stopped run does)."""
    win = window
    with _serving(win, tmp_path) as (_served, path):
        first = photo(tmp_path / "a.png", 24, 16)
        second = photo(tmp_path / "b.png", 512, 384)
        request = OperationRequest(
            Operation.UPSCALE,
            str(models / "slow.onnx"),
            (first, second),
            output_dir=tmp_path / "cli",
            tile=64,
        )
        client = _Client(path, request, _hello(models))
        client.start()
        qtbot.waitUntil(
            lambda: any(
                isinstance(m, Progress) and m.input_index == 1 and m.run >= 1
                for m in list(client.messages)
            ),
            timeout=JOB_MS,
        )
        job_id = _job_writing_to(win, tmp_path / "cli")
        assert job_id is not None
        win.jobs.cancel(job_id)  # the window's Cancel on its row
        qtbot.waitUntil(lambda: not client.is_alive(), timeout=10_000)
        outcome = client.messages[-1]
        assert isinstance(outcome, OperationCancellation) and outcome.started
        assert outcome.products == (tmp_path / "cli" / "a-slow.png",)
        assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["a-slow.png"]
        assert win.workspace.jobs[job_id].state is JobState.CANCELLED


def test_overlapping_joined_runs_with_one_id_each_get_their_own_outcome(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """Every command line numbers its first request "job-1", as the window numbers its own:
    two terminals at once while the window runs "job-1" each get their own product, and every
    id is answered once; a second request on a connection is refused, about itself only."""
    win = window
    with _serving(win, tmp_path) as (_served, path):
        own = OperationRequest(
            Operation.UPSCALE,
            str(models / "slow.onnx"),
            (photo(tmp_path / "big.png", 512, 384),),
            output_dir=tmp_path / "own",
            tile=64,
            id="job-1",
        )
        win.engine.submit(own)
        clients = []
        for name in ("d1", "d2"):
            image = photo(tmp_path / f"{name}.png", 24, 16)
            request = OperationRequest(
                Operation.UPSCALE,
                str(models / "up2.onnx"),
                (image,),
                output_dir=tmp_path / name,
                id="job-1",
            )
            clients.append(_Client(path, request, _hello(models)))
        for client in clients:
            client.start()
        qtbot.waitUntil(lambda: all(c.messages for c in clients), timeout=10_000)
        win.engine.cancel(own.id)
        qtbot.waitUntil(lambda: not any(c.is_alive() for c in clients), timeout=JOB_MS)
        for client, name in zip(clients, ("d1", "d2"), strict=True):
            ends = [m for m in client.messages if isinstance(m, Result | OperationFailure)]
            ends += [m for m in client.messages if isinstance(m, OperationCancellation)]  # type: ignore[misc]
            assert len(ends) == 1, client.messages
            outcome = ends[0]
            assert isinstance(outcome, Result) and outcome.request_id == "job-1", outcome
            assert [p.path.name for p in outcome.products] == [f"{name}-up2.png"]
            assert [p.path.parent for p in outcome.products] == [tmp_path / name]
            assert all(m.request_id == "job-1" for m in client.messages)  # type: ignore[attr-defined]

        # A second request on one connection is answered about itself, the first still runs.
        first = OperationRequest(
            Operation.UPSCALE,
            str(models / "up2.onnx"),
            (photo(tmp_path / "e.png", 24, 16),),
            output_dir=tmp_path / "e",
            id="job-1",
        )
        twice = _Client(path, first, _hello(models), then=dataclasses.replace(first, id="job-2"))
        twice.start()
        qtbot.waitUntil(lambda: not twice.is_alive(), timeout=JOB_MS)
        refusals = [a for a in twice.messages if isinstance(a, OperationFailure)]
        assert [r.request_id for r in refusals] == ["job-2"], twice.messages
        assert "one per connection" in refusals[0].message
        assert isinstance(twice.messages[-1], Result)
        assert twice.messages[-1].request_id == "job-1"


class _Raw(threading.Thread):
    """A raw client: the hello, then `payload` as it is, then every message until the app
    closes the connection."""

    def __init__(self, socket: Path, hello: wire.Hello, payload: bytes) -> None:
        super().__init__(name="join-raw", daemon=True)
        self.socket, self.hello, self.payload = socket, hello, payload
        self.messages: list[object] = []

    def run(self) -> None:
        joined = join.connect(self.hello, self.socket)
        assert isinstance(joined, join.Joined), joined
        try:
            joined.sock.sendall(self.payload)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                message = joined.receive(timeout=0.05)
                if message is not None:
                    self.messages.append(message)
        except EOFError:
            return
        finally:
            joined.close()


def _frame(body: dict[str, object], kind: str = "request") -> bytes:
    data = json.dumps({"type": kind, "body": body}).encode()
    return struct.pack(">I", len(data)) + data


def test_raw_requests_are_checked_as_the_command_line_checks_them_and_all_answered(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    win = window
    with _serving(win, tmp_path) as (_served, path):
        image = photo(tmp_path / "a.png", 24, 16)
        good = OperationRequest(
            Operation.UPSCALE, str(models / "up2.onnx"), (image,), output_dir=tmp_path / "o"
        )
        body = wire._dump(good)
        cases = {
            "tile 1": _frame({**body, "tile": 1}),
            "tile 0": _frame({**body, "tile": 0}),
            "tile -1": _frame({**body, "tile": -1}),
            "relative": _frame({**body, "inputs": ["a.png"]}),
            "unknown operation": _frame({**body, "operation": "sharpen"}),
        }
        clients = {name: _Raw(path, _hello(models), payload) for name, payload in cases.items()}
        for client in clients.values():
            client.start()
        qtbot.waitUntil(lambda: not any(c.is_alive() for c in clients.values()), timeout=30_000)
        for name, client in clients.items():
            (answer,) = client.messages
            assert isinstance(answer, OperationFailure), (name, answer)
            assert answer.kind.value == "usage", (name, answer)
        tiles = clients["tile 1"].messages[0]
        assert isinstance(tiles, OperationFailure) and "--tile takes" in tiles.message
        assert not (tmp_path / "o").exists()


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_the_server_drops_idle_and_oversized_clients_and_listens_again_after_an_error(
    qtbot: QtBot,
    window: MainWindow,
    models: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gui.controllers import joined as joined_module

    monkeypatch.setattr(joined_module, "IDLE_MS", 300)
    win = window
    with _serving(win, tmp_path) as (served, path):
        # A connection that never sends its request is dropped after the idle time.
        idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        idle.connect(str(path))
        idle.setblocking(False)
        qtbot.waitUntil(lambda: _closed(idle), timeout=10_000)
        idle.close()

        # A frame that grows past the cap of an unfinished frame is dropped, its bytes freed.
        greedy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        greedy.connect(str(path))
        sent = threading.Event()

        def send_a_lot() -> None:
            try:
                greedy.sendall(struct.pack(">I", 15 * 1024 * 1024) + b"x" * (6 * 1024 * 1024))
            except OSError:
                pass
            sent.set()

        threading.Thread(target=send_a_lot, daemon=True).start()
        qtbot.waitUntil(sent.is_set, timeout=20_000)
        qtbot.waitUntil(lambda: not served._clients, timeout=10_000)
        greedy.close()

        # Qt closes a local server for good on an accept error: it listens again by itself.
        assert served._server.listener is not None
        served._server.listener.close()
        image = photo(tmp_path / "after.png", 24, 16)
        request = OperationRequest(
            Operation.UPSCALE, str(models / "up2.onnx"), (image,), output_dir=tmp_path / "after"
        )
        qtbot.waitUntil(lambda: path.exists(), timeout=10_000)
        client = _Client(path, request, _hello(models))
        client.start()
        qtbot.waitUntil(lambda: not client.is_alive(), timeout=JOB_MS)
        assert client.messages and isinstance(client.messages[-1], Result), client.refused


def test_twenty_joined_runs_from_four_terminals_each_get_their_own_product(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """The soak: four terminals each run five requests one after another (every process
    numbers from job-1), all at once against the app while the window runs its own jobs."""
    win = window
    with _serving(win, tmp_path) as (_served, path):
        own = [
            OperationRequest(
                Operation.UPSCALE,
                str(models / "up2.onnx"),
                (photo(tmp_path / f"own{i}.png", 64, 48),),
                output_dir=tmp_path / "own",
                id=f"job-{i + 1}",
            )
            for i in range(3)
        ]
        win.engine.submit_many(own)
        outcomes: dict[str, list[object]] = {}

        def terminal(t: int) -> None:
            for r in range(5):
                name = f"t{t}r{r}"
                image = photo(tmp_path / f"{name}.png", 24, 16)
                request = OperationRequest(
                    Operation.UPSCALE,
                    str(models / "up2.onnx"),
                    (image,),
                    output_dir=tmp_path / name,
                    id=f"job-{r + 1}",
                )
                client = _Client(path, request, _hello(models))
                client.run()  # in this terminal's thread: one run after another
                outcomes[name] = client.messages

        terminals = [threading.Thread(target=terminal, args=(t,), daemon=True) for t in range(4)]
        for thread in terminals:
            thread.start()
        qtbot.waitUntil(lambda: not any(t.is_alive() for t in terminals), timeout=4 * JOB_MS)
        assert len(outcomes) == 20
        for name, messages in outcomes.items():
            ends = [m for m in messages if isinstance(m, Result | OperationFailure)]
            assert len(ends) == 1, (name, messages)
            (result,) = ends
            assert isinstance(result, Result) and result.ok, (name, result)
            assert [p.path for p in result.products] == [tmp_path / name / f"{name}-up2.png"]
        assert sorted(p.name for p in (tmp_path / "own").iterdir()) == [
            f"own{i}-up2.png" for i in range(3)
        ]
