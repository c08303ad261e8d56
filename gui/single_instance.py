"""One running Tessera per user, settings folder and display (DESIGN M6): a second launch
hands its files over and exits.

The first instance listens on a local socket (QLocalServer). A later launch connects, checks
that the listener is this user's, sends the absolute paths of its files as one
length-prefixed JSON message, waits for the acknowledgement and exits; the running instance
emits `filesReceived` and the app opens the files and raises its window. A socket left by a
crashed instance (nobody answers) is removed and the new launch becomes the first instance.

Keys (two levels, so the command line of issue #22 can find the app without a display):
- `app_key()`: the user id and the real paths of the settings and data folders (another HOME
  or XDG_CONFIG_HOME/XDG_DATA_HOME is another app). Derivable anywhere, with no display.
- `server_name()`: the window hand-off, `app_key()` plus the display (WAYLAND_DISPLAY or
  DISPLAY): a launch on another display opens its own window there.

Where the socket lives, so no other local user can squat its name: in Tessera's private
runtime folder (`engine.settings.private_runtime_dir`, shared with the process records):
`$XDG_RUNTIME_DIR/tessera` when that is ours alone; elsewhere (su, `sudo -i`, ssh without
pam_systemd, cron, containers) `tessera-<uid>` in the temp folder, made 0700 and checked (a
real folder, ours, nobody else's bits) before use. A folder that fails the check, or a
listener whose peer credentials (SO_PEERCRED) are another user's, is not trusted: the launch
starts its own window, without listening.

Wiring in `main()` (after the QApplication exists, before any model is loaded):

    instance = hand_off_or_listen(files)
    if instance is None:
        return 0  # the running instance has the files
    instance.filesReceived.connect(window.open_files_and_raise)

`TESSERA_INSTANCE_NAME` adds a suffix to the key (tests use it so they never meet a running
app).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from engine.join import descriptor_peer_uid
from engine.settings import default_data_dir, private_runtime_dir
from gui.local_server import LocalServer

log = logging.getLogger(__name__)

NAME_ENV = "TESSERA_INSTANCE_NAME"
PROTOCOL = 1
HEADER = struct.Struct(">I")  # payload length, big-endian
MAX_MESSAGE = 16 * 1024 * 1024  # thousands of long paths fit; anything larger is not ours
DEFAULT_TIMEOUT_MS = 5000
CONNECTION_TIMEOUT_MS = 10_000  # a client that never finishes its message is dropped


def _uid() -> str:
    return str(os.getuid()) if hasattr(os, "getuid") else os.environ.get("USERNAME", "")


def settings_folders() -> tuple[str, str]:
    """The real paths of Tessera's data folder and of the folder its settings file is in."""
    if os.name == "nt" or sys.platform == "darwin":
        config = Path.home()  # QSettings: the registry / ~/Library/Preferences: per HOME
    else:
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return os.path.realpath(default_data_dir()), os.path.realpath(config / "Tessera")


def app_key(suffix: str | None = None) -> str:
    """This user's Tessera with these settings: the same on every display."""
    if suffix is None:
        suffix = os.environ.get(NAME_ENV, "")
    data, config = settings_folders()
    text = "\0".join(["tessera", _uid(), data, config, suffix])
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def display_id() -> str:
    """The display a window would open on (empty where there is only one)."""
    return os.environ.get("WAYLAND_DISPLAY") or os.environ.get("DISPLAY") or ""


def server_name(suffix: str | None = None) -> str | None:
    """The window hand-off's socket: a path in a private folder (a plain name on Windows,
    where Qt's named pipe is per session). None where no folder can be trusted."""
    text = f"{app_key(suffix)}\0{display_id()}"
    name = "tessera-" + hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    if os.name == "nt":
        return name
    folder = private_folder()
    return str(folder / name) if folder is not None else None


def private_folder() -> Path | None:
    """Tessera's private runtime folder (engine.settings.private_runtime_dir: under
    $XDG_RUNTIME_DIR when that is ours alone, else `<temp>/tessera-<uid>`, made 0700, owner and
    mode checked); None when no folder can be trusted (someone else made it first)."""
    folder = private_runtime_dir()
    if folder is None:
        log.warning(
            "single instance: no private folder for the socket; this launch opens its own window"
        )
    return folder


def _lock_path(name: str) -> str:
    if os.path.isabs(name):
        return name + ".lock"
    return os.path.join(tempfile.gettempdir(), name + ".lock")


def encode_message(payload: dict[str, object]) -> bytes:
    # \u escapes: a file name that is not UTF-8 (lone surrogates) comes back as its bytes
    data = json.dumps(payload, ensure_ascii=True).encode("ascii")
    return HEADER.pack(len(data)) + data


def decode_message(buffer: bytes) -> tuple[dict[str, object] | None, int]:
    """(message, bytes used) once `buffer` holds a whole message, else (None, 0).

    Raises ValueError for a message that is too large or not a JSON object.
    """
    if len(buffer) < HEADER.size:
        return None, 0
    (length,) = HEADER.unpack_from(buffer)
    if length > MAX_MESSAGE:
        raise ValueError(f"message of {length} bytes is too large")
    end = HEADER.size + length
    if len(buffer) < end:
        return None, 0
    try:
        message = json.loads(buffer[HEADER.size : end].decode("utf-8"))
    except RecursionError as e:  # the parser recurses: a peer must not end the event loop
        raise ValueError("nested too deeply") from e
    if not isinstance(message, dict):
        raise ValueError("message is not a JSON object")
    return message, end


def _files_of(message: dict[str, object]) -> list[str]:
    files = message.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ValueError("message has no list of file paths")
    return list(files)


class SingleInstance(QObject):
    """The per-user socket: listen as the first instance, or hand files to the one running."""

    filesReceived = Signal(list)  # absolute paths (str) handed over by a later launch

    def __init__(self, name: str | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # None: no private folder can be trusted; this launch neither hands off nor listens.
        self.server_name = name if name is not None else server_name()
        self.untrusted = False  # a listener of another user answered
        # The accept loop, peer check and limits (gui/local_server.py), made when it listens.
        self._server: LocalServer | None = None
        self._peer: QLocalSocket | None = None
        self._buffers: dict[QLocalSocket, bytearray] = {}

    @property
    def is_listening(self) -> bool:
        return self._server is not None and self._server.is_listening

    def try_acquire(self, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> bool:
        """True: this process is the first instance (and listens). False: another one answers.

        A lock file serialises launches started at the same moment; without it two could both
        find nobody listening and both listen (Qt's listen replaces an existing socket file).
        """
        if self.server_name is None:
            return True  # alone: no hand-off can be trusted here
        lock = QLockFile(_lock_path(self.server_name))
        locked = lock.tryLock(timeout_ms)
        if not locked:
            log.warning("single instance: lock %s is held; going on without it", lock.fileName())
        try:
            if self._connect(timeout_ms):
                return False
            if self.untrusted:
                return True  # someone else's listener holds the name: alone, not listening
            # nobody answers: whatever socket file is there was left by a crashed instance
            QLocalServer.removeServer(self.server_name)
            self._listen()
            return True
        finally:
            if locked:
                lock.unlock()

    def send(
        self, files: Sequence[str | os.PathLike[str]], timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> bool:
        """Hand `files` (made absolute here, against this process's folder) to the running instance.

        True once the running instance acknowledged the message.
        """
        socket = self._peer
        if socket is None or socket.state() != QLocalSocket.LocalSocketState.ConnectedState:
            if not self._connect(timeout_ms):
                return False
            socket = self._peer
        assert socket is not None
        paths = [os.path.abspath(os.fspath(f)) for f in files]
        try:
            socket.write(encode_message({"v": PROTOCOL, "files": paths}))
            if not socket.waitForBytesWritten(timeout_ms) and socket.bytesToWrite() > 0:
                log.warning("single instance: sending failed: %s", socket.errorString())
                return False
            reply = bytearray()
            while True:
                ack, _ = decode_message(bytes(reply))
                if ack is not None:
                    return ack.get("ok") is True
                if not socket.waitForReadyRead(timeout_ms):
                    log.warning("single instance: no acknowledgement: %s", socket.errorString())
                    return False
                reply += bytes(socket.readAll().data())
        except ValueError as exc:
            log.warning("single instance: bad acknowledgement: %s", exc)
            return False
        finally:
            self._drop_peer()

    def close(self) -> None:
        """Stop listening (removes the socket file) and drop any connection."""
        self._drop_peer()
        self._buffers.clear()
        if self._server is not None:
            self._server.close()
            self._server.deleteLater()
            self._server = None

    # -- client side -----------------------------------------------------------------------
    def _connect(self, timeout_ms: int) -> bool:
        self._drop_peer()
        if self.server_name is None:
            return False
        socket = QLocalSocket()
        socket.connectToServer(self.server_name)
        if socket.waitForConnected(timeout_ms):
            uid = descriptor_peer_uid(int(socket.socketDescriptor()))
            if uid is not None and hasattr(os, "getuid") and uid != os.getuid():
                # Never hand file paths to another user's process.
                log.warning("single instance: the listener is user %d's; not handing off", uid)
                self.untrusted = True
                socket.abort()
                return False
            self._peer = socket
            return True
        log.debug("single instance: no server at %s (%s)", self.server_name, socket.errorString())
        socket.abort()
        return False

    def _drop_peer(self) -> None:
        if self._peer is not None:
            self._peer.abort()
            self._peer = None

    # -- server side -----------------------------------------------------------------------
    def _listen(self) -> None:
        if QCoreApplication.instance() is None:
            raise RuntimeError("create the QApplication before SingleInstance listens")
        assert self.server_name is not None
        server = LocalServer(
            "single instance",
            self,
            max_unfinished=HEADER.size + MAX_MESSAGE,
            idle_ms=CONNECTION_TIMEOUT_MS,
            parent=self,
        )
        if not server.listen(self.server_name):
            log.warning("single instance: later launches will start their own window")
            server.deleteLater()
            return
        self._server = server

    # the server's Connections
    def accepted(self, socket: QLocalSocket) -> None:
        self._buffers[socket] = bytearray()

    def idle(self, socket: QLocalSocket) -> bool:
        return True  # a hand-off is one message and its acknowledgement: 10 s is plenty

    def closed(self, socket: QLocalSocket) -> None:
        self._buffers.pop(socket, None)

    def received(self, socket: QLocalSocket, data: bytes) -> int:
        buffer = self._buffers.get(socket)
        if buffer is None:
            return 0
        buffer += data
        try:
            message, used = decode_message(bytes(buffer))
            if message is None:
                return len(buffer)
            files = _files_of(message)
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("single instance: dropped a bad message: %s", exc)
            self._forget(socket)
            return 0
        del buffer[:used]
        socket.write(encode_message({"ok": True, "count": len(files)}))
        socket.flush()
        socket.disconnectFromServer()  # closes once the acknowledgement is written
        # after the ack, so the second launch exits without waiting for the window's work
        self.filesReceived.emit(files)
        return len(buffer)

    def _forget(self, socket: QLocalSocket) -> None:
        self._buffers.pop(socket, None)
        if self._server is not None:
            self._server.drop(socket)


def hand_off_or_listen(
    files: Sequence[str | os.PathLike[str]], timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> SingleInstance | None:
    """None: `files` went to the running instance and this launch should exit with 0.

    Otherwise this process is the first instance and the returned object listens; connect its
    `filesReceived`. When a running instance connects but never acknowledges (it hangs), this
    launch runs on its own without listening rather than leave the person with no window.
    """
    instance = SingleInstance()
    if instance.try_acquire(timeout_ms):
        return instance
    if instance.send(files, timeout_ms):
        instance.close()
        instance.deleteLater()
        return None
    log.warning("single instance: the running instance did not answer; starting another one")
    return instance
