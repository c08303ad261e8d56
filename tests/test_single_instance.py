"""Single instance (DESIGN M6): real processes on the offscreen platform hand files over.

Every test uses its own socket name (TESSERA_INSTANCE_NAME) so it never meets a running app
or another test, and every process it starts is killed and reaped at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gui.single_instance import (
    NAME_ENV,
    SingleInstance,
    decode_message,
    encode_message,
    server_name,
)

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 30.0  # generous: the first import of PySide6 on a cold CI machine is slow

# A tiny program around SingleInstance: prints LISTENING or HANDED, then (as the first
# instance) RECEIVED <json> for the first hand-off, and exits; exits 3 after `life` seconds.
PROGRAM = """
import json, sys
from PySide6.QtCore import QCoreApplication, QTimer
from gui.single_instance import hand_off_or_listen

life = float(sys.argv[1])
app = QCoreApplication(sys.argv[:1])
instance = hand_off_or_listen(sys.argv[2:], 5000)
if instance is None:
    print("HANDED", flush=True)
    sys.exit(0)
print("LISTENING" if instance.is_listening else "ALONE", flush=True)

def received(files):
    print("RECEIVED " + json.dumps(files), flush=True)
    instance.close()
    app.quit()

instance.filesReceived.connect(received)
QTimer.singleShot(int(life * 1000), lambda: app.exit(3))
sys.exit(app.exec())
"""


class Processes:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: list[subprocess.Popen[str]] = []

    def start(
        self, *files: str, life: float = WAIT_S, cwd: Path | None = None
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, str(life), *files],
            cwd=cwd or ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.started.append(proc)
        return proc

    def reap(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=WAIT_S)  # also closes the pipes


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # the program prints within WAIT_S or exits
    if not line:
        _, err = proc.communicate(timeout=WAIT_S)
        pytest.fail(f"the instance printed nothing (exit {proc.returncode}): {err}")
    return line


@pytest.fixture
def instance_name(monkeypatch: pytest.MonkeyPatch) -> str:
    suffix = f"test-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv(NAME_ENV, suffix)
    return suffix


@pytest.fixture
def procs(instance_name: str) -> Iterator[Processes]:
    env = dict(os.environ)
    env.update({NAME_ENV: instance_name, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)})
    processes = Processes(env)
    try:
        yield processes
    finally:
        processes.reap()
        if sys.platform != "win32":  # a killed instance leaves its socket file
            _socket_path(server_name(instance_name)).unlink(missing_ok=True)


def _socket_path(name: str) -> Path:
    from PySide6.QtCore import QDir

    return Path(name) if os.path.isabs(name) else Path(QDir.tempPath()) / name


def test_second_launch_hands_its_file_to_the_first(procs: Processes, tmp_path: Path) -> None:
    first = procs.start()
    assert _first_line(first) == "LISTENING"
    picture = tmp_path / "ünïcode picture.png"
    picture.write_bytes(b"not looked at")
    # a relative path: the running instance must get it absolute, against the sender's folder
    second = procs.start(picture.name, cwd=tmp_path)
    out, err = second.communicate(timeout=WAIT_S)
    assert second.returncode == 0, err
    assert out.strip() == "HANDED"
    line = _first_line(first)
    assert line.startswith("RECEIVED ")
    assert json.loads(line.removeprefix("RECEIVED ")) == [str(picture)]
    first.communicate(timeout=WAIT_S)
    assert first.returncode == 0


def test_second_launch_without_files_still_reaches_the_first(procs: Processes) -> None:
    first = procs.start()
    assert _first_line(first) == "LISTENING"
    second = procs.start()
    out, _ = second.communicate(timeout=WAIT_S)
    assert (second.returncode, out.strip()) == (0, "HANDED")
    assert _first_line(first) == "RECEIVED []"  # the app raises its window on this


def test_killed_instance_does_not_block_the_next(
    procs: Processes, instance_name: str, tmp_path: Path
) -> None:
    crashed = procs.start()
    assert _first_line(crashed) == "LISTENING"
    crashed.send_signal(signal.SIGKILL)
    crashed.communicate(timeout=WAIT_S)
    path = _socket_path(server_name(instance_name))
    if sys.platform != "win32":
        assert path.exists(), "a killed instance leaves its socket file behind"
    fresh = procs.start()
    assert _first_line(fresh) == "LISTENING"
    picture = tmp_path / "a.png"
    handed = procs.start(str(picture))
    out, _ = handed.communicate(timeout=WAIT_S)
    assert (handed.returncode, out.strip()) == (0, "HANDED")
    assert _first_line(fresh) == f"RECEIVED {json.dumps([str(picture)])}"


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="file-system sockets only")
def test_stale_socket_file_is_removed(procs: Processes, instance_name: str) -> None:
    path = _socket_path(server_name(instance_name))
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # a socket file nobody listens on: connect is refused
    stale.close()
    assert path.exists()
    first = procs.start()
    assert _first_line(first) == "LISTENING"
    second = procs.start("x.png")
    out, _ = second.communicate(timeout=WAIT_S)
    assert (second.returncode, out.strip()) == (0, "HANDED")
    assert _first_line(first).startswith("RECEIVED ")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_socket_is_private_to_the_user(procs: Processes, instance_name: str) -> None:
    first = procs.start()
    assert _first_line(first) == "LISTENING"
    mode = _socket_path(server_name(instance_name)).stat().st_mode
    assert mode & 0o077 == 0, oct(mode)


def test_names_differ_per_user_and_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    import gui.single_instance as si

    base = server_name("a")
    assert server_name("a") == base
    assert server_name("b") != base
    monkeypatch.setattr(si, "_user_key", lambda: "99999|someone-else")
    assert server_name("a") != base
    assert os.path.basename(base).startswith("tessera-")


def test_messages_round_trip_and_reject_garbage() -> None:
    data = encode_message({"v": 1, "files": ["/a b/ç.png"]})
    assert decode_message(data[:5]) == (None, 0)
    assert decode_message(data + b"rest") == ({"v": 1, "files": ["/a b/ç.png"]}, len(data))
    with pytest.raises(ValueError):
        decode_message(b"\xff\xff\xff\xff")
    with pytest.raises(ValueError):
        decode_message(b"\x00\x00\x00\x03[1]")


def test_send_without_a_running_instance_fails_quickly(instance_name: str) -> None:
    assert SingleInstance().send(["x.png"], 200) is False
