"""The command line joins the running app (issue #22 item 1, DESIGN M6): the client side.

When a Tessera app of this user and these settings folders runs — on any display, the
terminal may be an ssh session — `python -m engine run` sends its request over the app's
owner-only socket (`engine.settings.join_socket_path()`, in the private runtime folder; a
shell without XDG_RUNTIME_DIR also looks in `/run/user/<uid>`) and the app's engine thread
runs it with the sessions it already holds, instead of this process loading a second copy of
the model.

Finding the app costs a stat and, where a socket is there, one connection and a hello; nothing
here imports ONNX Runtime. The socket is trusted only when it is a socket owned by this user in
the private folder and the process listening on it is this user's (SO_PEERCRED, Linux).
`connect` gives back:

- a `Joined` connection the app accepted;
- `None`: no app (no socket, or a stale one nobody listens on) — run standalone, silently;
- a `Standalone` line to print: an app is there but this request runs here (it refused the
  settings, did not answer in time, or the listener is not trusted).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from engine import wire
from engine.settings import join_socket_candidates

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 2.0  # connect and welcome: an app that hangs does not hold the terminal
POLL_S = 0.05  # while waiting for the app, signals are looked at this often


@dataclass(frozen=True)
class Standalone:
    """An app is there, but this request runs in this process; `line` says why."""

    line: str


@dataclass
class Joined:
    """A connection the app accepted: send the request, then read its messages."""

    sock: socket.socket
    welcome: wire.Welcome
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    waiting: list[wire.Message] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"app (pid {self.welcome.pid})"

    def send(self, message: wire.Message) -> None:
        wire.send(self.sock, message)

    def receive(self, timeout: float = POLL_S) -> wire.Message | None:
        """The next message, or None when none came within `timeout`. Raises EOFError once
        the app closed the connection, WireError for anything that is not a message."""
        self.sock.settimeout(timeout)
        try:
            message = wire.receive(self.sock, self.reader, self.waiting)
        except TimeoutError:
            return None
        if message is None:
            raise EOFError("the app closed the connection")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def peer_uid(sock: socket.socket) -> int | None:
    """The user id of the process at the other end of a connected Unix socket (Linux), or
    None where the system cannot tell."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return int(struct.unpack("3i", creds)[1])


def descriptor_peer_uid(descriptor: int) -> int | None:
    """`peer_uid` of a socket known by its descriptor (Qt's QLocalSocket): a duplicate is
    ours to close, Qt keeps its own."""
    if not hasattr(socket, "SO_PEERCRED") or descriptor < 0:
        return None
    try:
        dup = socket.socket(fileno=os.dup(descriptor))
    except OSError:
        return None
    try:
        return peer_uid(dup)
    finally:
        dup.close()


def connect(hello: wire.Hello, path: Path | None = None) -> Joined | Standalone | None:
    """Find the running app and ask it to take a request (see the module's docstring)."""
    if not hasattr(socket, "AF_UNIX"):
        return None  # Windows: the app's named pipe is not reachable from plain Python
    for candidate in join_socket_candidates() if path is None else [path]:
        found = _connect(hello, candidate)
        if found is not None:
            return found
    return None


def _connect(hello: wire.Hello, path: Path) -> Joined | Standalone | None:
    try:
        info = path.lstat()
    except OSError:
        return None  # no app
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        return Standalone(f"Running standalone: {path} is not this user's Tessera socket.")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_TIMEOUT_S)
        try:
            sock.connect(os.fspath(path))
        except (ConnectionRefusedError, FileNotFoundError):
            sock.close()
            return None  # left by an app that ended: nobody listens
        except OSError as e:
            sock.close()
            return Standalone(f"Running standalone: the running app cannot be reached ({e}).")
        uid = peer_uid(sock)
        if uid is not None and uid != os.getuid():
            sock.close()
            return Standalone(f"Running standalone: the app's socket is user {uid}'s, not ours.")
        joined = Joined(sock, wire.Welcome(0, "", False))
        wire.send(sock, hello)
        answer = wire.receive(sock, joined.reader, joined.waiting)
    except TimeoutError:
        sock.close()
        return Standalone(
            f"Running standalone: the running app did not answer within {ANSWER_TIMEOUT_S:g} s."
        )
    except (OSError, wire.WireError) as e:
        sock.close()
        log.info("the app's socket gave no welcome: %s", e)
        return Standalone(f"Running standalone: the running app did not answer ({e}).")
    if not isinstance(answer, wire.Welcome):
        sock.close()
        return Standalone("Running standalone: the running app did not answer as Tessera does.")
    if not answer.accepted:
        sock.close()
        return Standalone(f"Running standalone: {answer.reason}")
    if answer.protocol != wire.PROTOCOL:  # an app that welcomes what it cannot speak
        sock.close()
        return Standalone(
            f"Running standalone: the app (pid {answer.pid}) speaks join protocol "
            f"{answer.protocol}, this command line {wire.PROTOCOL}."
        )
    joined.welcome = answer
    return joined
