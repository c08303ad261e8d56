"""Requests from the command line, run by the app's engine thread (issue #22 item 1, M6).

`python -m engine run …` of this user and these settings folders, on any display, connects to
the socket `engine.settings.join_socket_path()` (engine/join.py is its side) instead of loading
a second copy of the model in its own process. Here each connection is one request, in the
messages of engine/wire.py:

- the hello is checked: the peer is this user's (SO_PEERCRED), speaks our protocol and
  version, and asks for what this engine gives — the same models folder, the same memory caps
  and CPU arena hand-back; otherwise the welcome says in one line why the command line runs
  standalone;
- the request is queued on the engine thread after the jobs already queued, and appears in
  the job list marked as coming from the command line;
- its progress and its one terminal outcome go back, and an Alive every second while it is
  queued or running (the command line takes a silence of `wire.stall_seconds()` for a hung
  or stopped app); the command line's cancel, or its connection closing (the terminal
  closed, the process killed), cancels the job;
- the command line's Abandon (it stopped waiting and runs the request itself) cancels the
  job, and whatever the job still wrote — it ended before the app read the Abandon, e.g. the
  app was stopped — is removed, never reported: only the command line's own product stays.

The socket lives in the private runtime folder (0700, owner checked) and is owner-only
itself; the app records it in its process record (`endpoint`) for `engine memory`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtNetwork import QLocalSocket

from engine import wire
from engine.errors import EngineError, ErrorKind
from engine.io.image import is_video
from engine.io.reading import image_size
from engine.models.catalog import load_catalog
from engine.requests import (
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    Result,
)
from gui.engine_thread import EngineThread
from gui.jobs import Job
from gui.local_server import LocalServer
from gui.workspace import Workspace

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_MS = 500  # another app that already serves the socket answers within this
MAX_UNFINISHED = 4 * 1024 * 1024  # bytes of a frame not yet whole (a request of 10,000 paths fits)
IDLE_MS = 10_000  # a connection that has not sent its request by then is dropped
ALIVE_MS = int(wire.HEARTBEAT_S * 1000)  # an Alive to every waiting command line this often
# Every command line numbers its first request "job-1", as the window numbers its own: the
# engine knows a joined request by an id of the app's making, unique in this process.
_joined_ids = itertools.count(1)


def engine_id(pid: int) -> str:
    """The engine's id for a command line's request: never one of the window's "job-N"."""
    return f"cli-{pid}-{next(_joined_ids)}"


@dataclass
class _Client:
    """One command line's connection: its hello, then its one request."""

    socket: QLocalSocket
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    hello: wire.Hello | None = None
    request_id: str | None = None  # the command line's id, in every message it is sent
    engine_id: str | None = None  # the same request's id in this app's engine and job list
    ended: bool = False  # its terminal outcome was sent
    reading: bool = False  # in received(): what it sends does not read again


class JoinedRequests(QObject):
    """The app's side of the join: a local server and the requests it queued."""

    requestJoined = Signal(str)  # job id: a command line's job is in the queue

    def __init__(
        self, workspace: Workspace, engine: EngineThread, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.workspace = workspace
        self.engine = engine
        self.path: Path | None = None
        # The accept loop, peer check and limits (gui/local_server.py); the messages are here.
        self._server = LocalServer(
            "command line requests",
            self,
            max_unfinished=MAX_UNFINISHED,
            idle_ms=IDLE_MS,
            parent=self,
        )
        self._clients: dict[QLocalSocket, _Client] = {}
        self._by_request: dict[str, _Client] = {}
        self._gave_up: set[str] = set()  # jobs whose command line runs them itself (Abandon)
        self._alive = QTimer(self)  # the command lines waiting on a job hear from the app
        self._alive.setInterval(ALIVE_MS)
        self._alive.timeout.connect(self._send_alive)
        self.requestJoined.connect(self._keep_alive)
        engine.progressChanged.connect(self._on_progress)
        engine.operationFinished.connect(self._on_ended)
        engine.operationFailed.connect(self._on_ended)
        engine.operationCancelled.connect(self._on_ended)

    # -- the server ---------------------------------------------------------------------------
    def listen(self, path: Path | None) -> bool:
        """Serve the command line at `path`; False when another app already does (or the
        socket cannot be made: the command line then runs standalone)."""
        if path is None:
            return False
        probe = QLocalSocket()
        probe.connectToServer(str(path))
        if probe.waitForConnected(ANSWER_TIMEOUT_MS):
            probe.abort()
            log.info("command line requests: another Tessera serves %s", path)
            return False
        probe.abort()
        if not self._server.listen(str(path)):
            return False
        self.path = path
        return True

    def close(self) -> None:
        """Stop listening; the command lines still connected see the connection end."""
        self._alive.stop()
        self._server.close()  # removes the socket file, ends every connection
        self._clients.clear()
        self._by_request.clear()

    # -- the server's Connections -------------------------------------------------------------
    def accepted(self, socket: QLocalSocket) -> None:
        self._clients[socket] = _Client(socket)

    def idle(self, socket: QLocalSocket) -> bool:
        client = self._clients.get(socket)
        return client is not None and client.request_id is None  # no request by IDLE_MS

    def closed(self, socket: QLocalSocket) -> None:
        client = self._clients.get(socket)
        if client is not None:
            self._on_disconnected(client)

    def received(self, socket: QLocalSocket, data: bytes) -> int:
        client = self._clients.get(socket)
        if client is None:
            return 0
        client.reading = True
        try:
            self._read(client, data)
        finally:
            client.reading = False
        return client.reader.pending

    # -- one client ---------------------------------------------------------------------------
    def _send(self, client: _Client, message: wire.Message) -> None:
        if client.engine_id is not None and not client.reading:
            self._hear(client)
        if client.socket.state() == QLocalSocket.LocalSocketState.ConnectedState:
            client.socket.write(wire.encode(message))
            client.socket.flush()

    def _hear(self, client: _Client) -> None:
        """Read what the command line sent before writing to it: Qt ends a connection on a
        write the peer closed, and drops what was unread — the Abandon of a command line that
        gave up while this app was stopped, then ended."""
        self._server.hear(client.socket)

    def _read(self, client: _Client, data: bytes) -> None:
        if client.ended:
            return  # answered and closing: the rest is not read
        try:
            messages = client.reader.feed(data)
        except wire.WireError as e:
            log.warning("command line requests: dropped a connection: %s", e)
            if client.hello is not None and client.request_id is None:
                # Every request is answered: one the app cannot read gets a usage error.
                self._send(client, OperationFailure("", ErrorKind.USAGE, str(e)))
                client.ended = True
                client.socket.disconnectFromServer()  # closes once the answer is written
                return
            self._drop(client)
            return
        for message in messages:
            if isinstance(message, wire.Hello) and client.hello is None:
                self._on_hello(client, message)
            elif isinstance(message, OperationRequest) and client.hello is not None:
                if client.request_id is None:
                    self._on_request(client, message)
                elif message.id != client.request_id:
                    self._refuse_second(client, message)
                else:  # the same id again: its one answer is still to come
                    log.warning("command line requests: %s sent twice", message.id)
            elif isinstance(message, wire.Cancel) and message.request_id == client.request_id:
                self._cancel(client)
            elif isinstance(message, wire.Abandon) and message.request_id == client.request_id:
                if client.engine_id is not None:
                    self._gave_up.add(client.engine_id)  # what the job writes is removed
                log.info(
                    "command line requests: %s abandoned; run in its own process",
                    message.request_id,
                )
                self._cancel(client)

    def _on_hello(self, client: _Client, hello: wire.Hello) -> None:
        from engine import __version__

        reason = self._refusal(hello)
        client.hello = hello
        self._send(client, wire.Welcome(os.getpid(), __version__, not reason, reason))
        if reason:
            log.info("command line pid %d runs standalone: %s", hello.pid, reason)
            client.socket.disconnectFromServer()

    def _refusal(self, hello: wire.Hello) -> str:
        """Why this engine cannot run the command line's request as it would run it; empty
        when it can."""
        from engine import __version__

        me = f"the app (pid {os.getpid()})"
        settings = self.engine.settings
        if hello.protocol != wire.PROTOCOL:  # messages it would not know (Alive, Abandon)
            return (
                f"{me} speaks join protocol {wire.PROTOCOL}, this command line "
                f"{hello.protocol} (Tessera {hello.version})."
            )
        if hello.version != __version__:
            return f"{me} is Tessera {__version__}, this command line {hello.version}."
        ours = os.path.realpath(settings.resolved_models_dir().expanduser())
        if hello.models_dir is not None and os.path.realpath(hello.models_dir) != ours:
            return f"{me} uses the models in {ours}, this run those in {hello.models_dir}."
        for name, theirs, mine in (
            ("CPU memory limit", hello.cpu_mem_limit, settings.cpu_mem_limit),
            ("GPU memory limit", hello.gpu_mem_limit, settings.gpu_mem_limit),
        ):
            if theirs != mine:
                return f"{me} has {_limit(mine)} as its {name}, this run {_limit(theirs)}."
        if hello.keep_cpu_arena != settings.keep_cpu_arena:
            keeps = "keeps" if settings.keep_cpu_arena else "hands back"
            return f"{me} {keeps} its CPU arena after each job; --keep-cpu-arena differs."
        return ""

    def _refuse_second(self, client: _Client, request: OperationRequest) -> None:
        """One request per connection: a second one is answered, about itself only."""
        line = f"this connection already sent request {client.request_id}; one per connection."
        self._send(client, OperationFailure(request.id, ErrorKind.USAGE, line))

    def _on_request(self, client: _Client, theirs: OperationRequest) -> None:
        assert client.hello is not None
        client.request_id = theirs.id
        request = dataclasses.replace(theirs, id=engine_id(client.hello.pid))
        try:
            wire.check_joined(theirs)  # a raw request is checked as the command line checks it
            request.typed_options()
            ahead = len(self.engine.open_requests())
            self.engine.submit(request)
        except (EngineError, RuntimeError) as e:
            kind = e.kind if isinstance(e, EngineError) else ErrorKind.INTERNAL
            self._send(client, OperationFailure(theirs.id, kind, str(e)))
            client.ended = True
            client.socket.disconnectFromServer()
            return
        client.engine_id = request.id
        self._by_request[request.id] = client
        job = Job(
            request,
            model_label(request.model),
            megapixels=_megapixels(request),
            origin=f"command line (pid {client.hello.pid})",
        )
        self.workspace.add_job(job, f"command-line:{request.id}", ())
        self._send(client, wire.Queued(theirs.id, ahead))
        self.requestJoined.emit(request.id)

    def _cancel(self, client: _Client) -> None:
        if client.engine_id is not None and not client.ended:
            self.workspace.job_cancel_requested(client.engine_id)
            self.engine.cancel(client.engine_id)

    def _on_disconnected(self, client: _Client) -> None:
        self._cancel(client)  # the terminal is gone: nobody waits for this job
        self._drop(client)

    def _drop(self, client: _Client) -> None:
        self._clients.pop(client.socket, None)
        if client.engine_id is not None:
            self._by_request.pop(client.engine_id, None)
        self._server.drop(client.socket)

    # -- the command line's patience ----------------------------------------------------------
    def _keep_alive(self) -> None:
        if not self._alive.isActive():
            self._alive.start()

    def _send_alive(self) -> None:
        if not self._by_request:
            self._alive.stop()
            return
        for client in list(self._by_request.values()):
            if client.request_id is not None and not client.ended:
                self._send(client, wire.Alive(client.request_id))

    def _abandoned(
        self, client: _Client | None, outcome: Result | OperationFailure | OperationCancellation
    ) -> bool:
        """Whether the command line gave up on this job (then the products of the job are
        removed: the command line made its own). Its Abandon is read here if still unread,
        before the outcome goes out: an app that was stopped finds it so when the job ends."""
        job = outcome.request_id
        if client is not None and job not in self._gave_up and not client.reading:
            self._hear(client)
        if job not in self._gave_up:
            return False
        self._gave_up.discard(job)
        if client is not None:
            client.ended = True
            self._drop(client)
        written = (
            [p.path for p in outcome.products] if isinstance(outcome, Result) else outcome.products
        )
        for path in written:
            with contextlib.suppress(OSError):
                if path.is_file():
                    path.unlink()
        log.info(
            "command line requests: %s ended after its command line stopped waiting; "
            "removed %d product(s)",
            job,
            len(written),
        )
        return True

    # -- the engine's signals -----------------------------------------------------------------
    def _on_progress(self, event: Progress) -> None:
        client = self._by_request.get(event.request_id)
        if client is not None and client.request_id is not None:
            self._send(client, dataclasses.replace(event, request_id=client.request_id))

    def _on_ended(self, outcome: Result | OperationFailure | OperationCancellation) -> None:
        client = self._by_request.pop(outcome.request_id, None)
        if self._abandoned(client, outcome) or client is None or client.request_id is None:
            return
        client.ended = True
        self._send(client, dataclasses.replace(outcome, request_id=client.request_id))
        client.socket.disconnectFromServer()  # closes once the outcome is written


def model_label(model: str) -> str:
    """The words the window's own rows use for the model: "Photo ×4" for a catalog model (by
    its id, or a path to its file), else the file's name."""
    catalog = load_catalog()
    entry = catalog.get(model)
    path = Path(model)
    if entry is None and path.suffix.lower() == ".onnx":
        entry = next((e for e in catalog.values() if e.file == path.name), None)
    if entry is not None:
        return entry.short_label
    return path.stem if path.suffix.lower() == ".onnx" else model


def _megapixels(request: OperationRequest) -> float:
    """The size of a one-image request, from its header (a read of a few hundred bytes), so
    the job teaches the window's estimates what a job of its size costs; 0 (unknown: it
    teaches nothing) for several inputs, a clip or an unreadable file."""
    if len(request.inputs) != 1 or request.sequence or is_video(request.inputs[0]):
        return 0.0
    try:
        width, height, frames = image_size(request.inputs[0])
    except (EngineError, OSError, ValueError):  # a folder, or a file it will fail on
        return 0.0
    return width * height / 1e6 if frames == 1 else 0.0


def _limit(value: int | None) -> str:
    return "no limit" if value is None else f"{value // (1024 * 1024)} MB"
