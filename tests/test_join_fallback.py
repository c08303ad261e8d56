"""A joined run whose app goes away mid-job, or stops answering, says so in one line and runs
the request here: exit 0 with its product, never exit 1 "internal", never a wait without
limit. The app is a plain socket server that welcomes the request, then closes (an app that
quits or is killed) or says nothing more (a hung app)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from engine import __version__, wire
from engine.requests import OperationRequest
from engine.samples.upscaler_models import make_upscaler
from tests.engine_helpers import photo

ROOT = Path(__file__).resolve().parents[1]


def _welcome(conn: socket.socket) -> tuple[wire.FrameReader, list[wire.Message]]:
    """An app's side of the handshake: the command line's hello read, welcomed."""
    reader = wire.FrameReader()
    waiting: list[wire.Message] = []
    hello = wire.receive(conn, reader, waiting)
    assert isinstance(hello, wire.Hello)
    wire.send(conn, wire.Welcome(os.getpid(), __version__, True))
    return reader, waiting


def _dying_app(listener: socket.socket, got_request: threading.Event) -> None:
    conn, _ = listener.accept()
    with conn:
        reader, waiting = _welcome(conn)
        wire.receive(conn, reader, waiting)  # the request: then the app is gone
        got_request.set()


def _hung_app(listener: socket.socket, got: list[wire.Message], done: threading.Event) -> None:
    """Welcomes, takes the request, then never answers: it only reads what the command line
    still sends (its Abandon) until the connection ends."""
    conn, _ = listener.accept()
    with conn:
        reader, waiting = _welcome(conn)
        while (message := wire.receive(conn, reader, waiting)) is not None:
            got.append(message)
    done.set()


def _joined_run(
    tmp_path: Path, app: Callable[[socket.socket], None], extra_env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float]:
    """`engine run` of one small upscale against `app` serving the join socket; the run and
    the seconds it took."""
    models = tmp_path / "models"
    model = make_upscaler(models / "up2.onnx", scale=2)
    image = photo(tmp_path / "a.png", 24, 16)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_RUNTIME_DIR": str(run),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "TESSERA_MODELS_DIR": str(models),
        **extra_env,
    }
    where = subprocess.run(
        [sys.executable, "-c", "from engine.settings import join_socket_path as p; print(p())"],
        capture_output=True, text=True, env=env, cwd=ROOT, check=True,
    )  # fmt: skip
    path = Path(where.stdout.strip())
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    server = threading.Thread(target=app, args=(listener,), daemon=True)
    server.start()
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model", str(model),
             "--out", str(tmp_path / "o")],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
        )  # fmt: skip
    finally:
        listener.close()
    return done, time.monotonic() - started


def test_a_run_whose_app_goes_away_mid_job_finishes_standalone(tmp_path: Path) -> None:
    got_request = threading.Event()
    done, _ = _joined_run(tmp_path, lambda s: _dying_app(s, got_request), {})
    assert got_request.is_set()
    assert done.returncode == 0, done.stderr
    assert "Running standalone: the Tessera app" in done.stderr
    assert "went away" in done.stderr
    assert (tmp_path / "o" / "a-up2.png").exists()


def test_a_run_whose_app_stops_answering_finishes_standalone_within_the_bound(
    tmp_path: Path,
) -> None:
    got: list[wire.Message] = []
    hung_up = threading.Event()
    done, took = _joined_run(
        tmp_path, lambda s: _hung_app(s, got, hung_up), {wire.STALL_ENV: "1.5"}
    )
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("Running standalone")]
    assert line.endswith("stopped answering (no word for 1.5 s).")
    assert done.stdout.strip() == str(tmp_path / "o" / "a-up2.png")
    assert (tmp_path / "o" / "a-up2.png").exists()
    assert took < 60  # bounded: without the bound it would wait until the timeout (120 s)
    assert hung_up.wait(10)
    # The app hears that the command line runs it itself, so it drops whatever it writes.
    request, abandon = got
    assert isinstance(request, OperationRequest) and isinstance(abandon, wire.Abandon)
    assert abandon.request_id == request.id
