"""Single instance (DESIGN M6): real processes on the offscreen platform hand files over.

Every test uses its own socket name (TESSERA_INSTANCE_NAME) so it never meets a running app
or another test, and every process it starts is killed and reaped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

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
        self,
        *files: str,
        life: float = WAIT_S,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, str(life), *files],
            cwd=cwd or ROOT,
            env={**self.env, **(env or {})},
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


def _socket_path(name: str | None) -> Path:
    assert name is not None, "no private folder for the socket"
    return Path(name) if os.path.isabs(name) else Path(tempfile.gettempdir()) / name


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
    monkeypatch.setattr(si, "_uid", lambda: "99999")
    assert server_name("a") != base
    assert base is not None and os.path.basename(base).startswith("tessera-")


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


# ------------------------------------------------------------------ issue #21 item 8: the key


def test_another_home_or_display_opens_its_own_window(procs: Processes, tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": "", "XDG_CONFIG_HOME": ""}
    first = procs.start(env={**home, "DISPLAY": ":5"})
    assert _first_line(first) == "LISTENING"
    other_home = {"HOME": str(tmp_path / "other"), "XDG_DATA_HOME": "", "XDG_CONFIG_HOME": ""}
    elsewhere = procs.start("x.png", env={**other_home, "DISPLAY": ":5"})
    assert _first_line(elsewhere) == "LISTENING"  # its own window, its own settings
    other_display = procs.start("x.png", env={**home, "DISPLAY": ":6"})
    assert _first_line(other_display) == "LISTENING"  # its own window on its own display
    same = procs.start("y.png", env={**home, "DISPLAY": ":5"})
    out, _ = same.communicate(timeout=WAIT_S)
    assert (same.returncode, out.strip()) == (0, "HANDED")
    line = _first_line(first)
    assert line.startswith("RECEIVED ") and "y.png" in line


def test_the_app_key_needs_no_display(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import gui.single_instance as si

    monkeypatch.setenv("DISPLAY", ":1")
    key, window = si.app_key("k"), server_name("k")
    monkeypatch.setenv("DISPLAY", ":2")
    assert si.app_key("k") == key and server_name("k") != window
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert si.app_key("k") != key


# --------------------------------------------- issue #20 item 4: no squatting outside a runtime dir

SQUATTER = """
import hashlib, json, os, socket, struct, sys
shared, victim_uid, victim_user, suffix, log = sys.argv[1:6]
# What the name was before: computable by anyone who knows the user's id and name.
digest = hashlib.sha256(f"tessera|{victim_uid}|{victim_user}|{suffix}".encode()).hexdigest()[:16]
# And the victim's own folder, made first, open to all.
folder = os.path.join(shared, f"tessera-{victim_uid}")
os.mkdir(folder)
os.chmod(folder, 0o777)
servers = []
for path in (os.path.join(shared, f"tessera-{digest}"), sys.argv[6]):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    os.chmod(path, 0o777)
    s.listen(4)
    s.settimeout(0.1)
    servers.append(s)
print("READY", flush=True)
while True:
    for s in servers:
        try:
            conn, _ = s.accept()
        except socket.timeout:
            continue
        conn.settimeout(5)
        data = conn.recv(1 << 20)
        with open(log, "ab") as f:
            f.write(data + b"\\n")
        reply = json.dumps({"ok": True, "count": 1}).encode()
        conn.sendall(struct.pack(">I", len(reply)) + reply)
        conn.close()
"""

OTHER_UID = 54321


@pytest.fixture
def squatter(instance_name: str) -> Iterator[tuple[Path, Path, Path]]:
    """Another local user listening where a launch would look: (shared temp, log, socket)."""
    if not hasattr(os, "setuid") or os.getuid() != 0:
        pytest.skip("acting as another local user needs root")
    import getpass

    # A shared temp folder that user can reach (pytest's own folders are root's alone).
    shared = Path(tempfile.mkdtemp(prefix="tessera-shared tmp-"))
    shared.chmod(0o1777)
    log = shared / "squatter.log"
    direct = shared / "theirs.sock"

    def become_other() -> None:
        os.setgid(OTHER_UID)
        os.setuid(OTHER_UID)

    # The system's Python (stdlib only): this checkout's may not be readable by that user.
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    proc = subprocess.Popen(
        [python, "-I", "-c", SQUATTER, str(shared), str(os.getuid()), getpass.getuser(),
         instance_name, str(log), str(direct)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=become_other,
        cwd=shared, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "READY":
            _, err = proc.communicate(timeout=WAIT_S)
            pytest.fail(f"the squatter did not start: {err}")
        yield shared, log, direct
    finally:
        proc.kill()
        proc.communicate(timeout=WAIT_S)
        shutil.rmtree(shared, ignore_errors=True)


def test_a_listener_of_another_user_in_the_shared_temp_folder_gets_nothing(
    procs: Processes, squatter: tuple[Path, Path, Path]
) -> None:
    shared, log, _ = squatter
    env = {k: v for k, v in procs.env.items() if k != "XDG_RUNTIME_DIR"}
    procs.env = {**env, "TMPDIR": str(shared)}
    launch = procs.start("/secret/plans.png")
    assert _first_line(launch) == "ALONE"  # its own window: nothing to trust, nothing handed
    assert not log.exists(), log.read_bytes()


def test_a_listener_of_another_user_is_never_sent_the_files(
    squatter: tuple[Path, Path, Path],
) -> None:
    _, log, direct = squatter
    instance = SingleInstance(name=str(direct))
    assert instance.send(["/secret/plans.png"], 2000) is False
    assert instance.untrusted
    assert not log.exists()


def test_deeply_nested_json_is_a_bad_message_not_a_recursion_error() -> None:
    payload = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_message(struct.pack(">I", len(payload)) + payload)


def test_a_file_name_of_any_bytes_is_handed_over_unchanged() -> None:
    name = os.fsdecode(b"/photos/caf\xe9 \xff.png")  # not UTF-8
    message, _ = decode_message(encode_message({"v": 1, "files": [name]}))
    assert message is not None
    assert message["files"] == [name]
    assert os.fsencode(name) == b"/photos/caf\xe9 \xff.png"


def _hand_off(path: Path, files: list[str], answers: list[dict[str, object]]) -> None:
    """A later launch's side in plain Python: one message, then the acknowledgement."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(WAIT_S)
        conn.connect(str(path))
        conn.sendall(encode_message({"v": 1, "files": files}))
        reply = b""
        while (message := decode_message(reply)[0]) is None:
            chunk = conn.recv(4096)
            if not chunk:
                return
            reply += chunk
        answers.append(message)


def _ended(conn: socket.socket) -> bool:
    try:
        return conn.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.mark.skipif(sys.platform == "win32", reason="a Unix socket file")
def test_the_hand_off_listens_again_after_an_accept_error_and_drops_a_greedy_client(
    qtbot: QtBot, tmp_path: Path
) -> None:
    """The hand-off shares the join's server (gui/local_server.py): Qt closes a local server
    for good on an accept error, and it listens again; a frame that never ends is capped."""
    path = tmp_path / "hand-off.sock"
    instance = SingleInstance(name=str(path))
    assert instance.try_acquire(2000) and instance.is_listening
    try:
        server = instance._server
        assert server is not None and server.listener is not None
        server.listener.close()  # what an accept error (out of descriptors) does
        assert not path.exists()
        qtbot.waitUntil(lambda: instance.is_listening and path.exists(), timeout=10_000)
        got: list[list[str]] = []
        instance.filesReceived.connect(got.append)
        answers: list[dict[str, object]] = []
        sender = threading.Thread(
            target=_hand_off, args=(path, ["/photos/a.png"], answers), daemon=True
        )
        sender.start()
        qtbot.waitUntil(lambda: not sender.is_alive(), timeout=10_000)
        assert answers == [{"ok": True, "count": 1}]
        assert got == [["/photos/a.png"]]

        server.max_unfinished = 1024  # the real cap is 16 MiB; the rule is the same
        greedy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        greedy.connect(str(path))
        greedy.sendall(struct.pack(">I", 4096) + b"x" * 2048)
        greedy.setblocking(False)
        qtbot.waitUntil(lambda: _ended(greedy), timeout=10_000)  # dropped, not waited on
        greedy.close()
        assert server.clients == 0
    finally:
        instance.close()
