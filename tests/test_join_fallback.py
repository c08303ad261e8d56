"""A joined run whose app goes away mid-job says so in one line and runs the request here:
exit 0 with its product, never exit 1 "internal". The app is a plain socket server that
welcomes the request, then closes, as an app that quits or is killed does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from engine import __version__, wire
from engine.samples.upscaler_models import make_upscaler
from tests.engine_helpers import photo

ROOT = Path(__file__).resolve().parents[1]


def _dying_app(listener: socket.socket, got_request: threading.Event) -> None:
    conn, _ = listener.accept()
    with conn:
        reader = wire.FrameReader()
        waiting: list[wire.Message] = []
        hello = wire.receive(conn, reader, waiting)
        assert isinstance(hello, wire.Hello)
        wire.send(conn, wire.Welcome(os.getpid(), __version__, True))
        wire.receive(conn, reader, waiting)  # the request: then the app is gone
        got_request.set()


def test_a_run_whose_app_goes_away_mid_job_finishes_standalone(tmp_path: Path) -> None:
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
    got_request = threading.Event()
    server = threading.Thread(target=_dying_app, args=(listener, got_request), daemon=True)
    server.start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model", str(model),
             "--out", str(tmp_path / "o")],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
        )  # fmt: skip
    finally:
        listener.close()
    assert got_request.is_set()
    assert done.returncode == 0, done.stderr
    assert "Running standalone: the Tessera app" in done.stderr
    assert "went away" in done.stderr
    assert (tmp_path / "o" / "a-up2.png").exists()
