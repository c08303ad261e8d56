"""The app's local socket server, one class for both of its sockets: the hand-off of files to
the running window (gui/single_instance.py) and the command line's join
(gui/controllers/joined.py). Each keeps only its own messages; what a server owes every
connection is here:

- it listens on a path in Tessera's private runtime folder (the caller picks it), owner-only
  (`UserAccessOption`), after removing a socket file an ended app left;
- a connection of another user (SO_PEERCRED, Linux) is refused at accept;
- at most `max_clients` connections at once; more are closed at accept;
- the bytes of a frame not yet whole are capped (`max_unfinished`): a client that sends more
  is dropped and its buffer freed;
- a connection still idle (as its handler says) `idle_ms` after it came is dropped;
- Qt closes a `QLocalServer` for good on an accept error (out of descriptors) and removes its
  socket: the server is checked every second and listens again.

A handler (`Connections`) is told of each connection accepted and of the bytes it sends, asked
whether it is still idle at the timeout, and told once when it ended — unless the handler ended
it itself (`drop`).
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

from PySide6.QtCore import QObject, QTimer
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from engine.join import descriptor_peer_uid

log = logging.getLogger(__name__)

MAX_CLIENTS = 64  # connections at once; more are closed at accept (each holds a buffer)
WATCH_MS = 1000  # how often the server is checked: Qt closes it for good on an accept error


class Connections(Protocol):
    """What a server's owner does with its connections."""

    def accepted(self, socket: QLocalSocket) -> None:
        """A connection came (this user's, within the cap)."""

    def received(self, socket: QLocalSocket, data: bytes) -> int:
        """`data` arrived on `socket`; the bytes of an unfinished frame it now holds."""

    def idle(self, socket: QLocalSocket) -> bool:
        """Whether `socket` is still idle at the timeout (then it is dropped)."""

    def closed(self, socket: QLocalSocket) -> None:
        """`socket` ended: its peer went away, or the server dropped it (a frame too large,
        idle); not called for a connection the handler ended by `drop`."""


class LocalServer(QObject):
    """An owner-only local server with the limits of the module's docstring."""

    def __init__(
        self,
        what: str,
        connections: Connections,
        *,
        max_unfinished: int,
        idle_ms: int,
        max_clients: int = MAX_CLIENTS,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.what = what  # for the log: "single instance", "command line requests"
        self.connections = connections
        self.max_unfinished = max_unfinished
        self.idle_ms = idle_ms
        self.max_clients = max_clients
        self.name: str | None = None
        self.listener: QLocalServer | None = None
        self._pending: dict[QLocalSocket, int] = {}  # each connection's unfinished bytes
        self._watch = QTimer(self)
        self._watch.setInterval(WATCH_MS)
        self._watch.timeout.connect(self._relisten)

    @property
    def is_listening(self) -> bool:
        return self.listener is not None and self.listener.isListening()

    @property
    def clients(self) -> int:
        return len(self._pending)

    def listen(self, name: str) -> bool:
        """Listen at `name` (a socket file an ended app left is removed first); False when
        the socket cannot be made."""
        QLocalServer.removeServer(name)
        listener = QLocalServer(self)
        listener.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)  # owner only
        if not listener.listen(name):
            log.warning("%s: cannot listen on %s (%s)", self.what, name, listener.errorString())
            listener.deleteLater()
            return False
        listener.newConnection.connect(self._accept)
        self.listener, self.name = listener, name
        self._watch.start()
        return True

    def close(self) -> None:
        """Stop listening (the socket file is removed) and end every connection."""
        self._watch.stop()
        for socket in list(self._pending):
            self.drop(socket)
        if self.listener is not None:
            self.listener.close()
            self.listener.deleteLater()
            self.listener = None

    def drop(self, socket: QLocalSocket) -> None:
        """End a connection and free what it held."""
        if self._pending.pop(socket, None) is None:
            return
        if socket.state() != QLocalSocket.LocalSocketState.UnconnectedState:
            socket.abort()
        socket.deleteLater()

    def hear(self, socket: QLocalSocket) -> None:
        """Read what the peer sent, now, before writing to it: Qt ends a connection on a
        write the peer closed and drops what was still unread."""
        if socket not in self._pending:
            return
        if socket.state() == QLocalSocket.LocalSocketState.ConnectedState:
            blocked = socket.blockSignals(True)  # handled here, in order
            try:
                socket.waitForReadyRead(0)
            finally:
                socket.blockSignals(blocked)
        if socket.bytesAvailable() > 0:
            self._read(socket)
        if socket.state() == QLocalSocket.LocalSocketState.UnconnectedState:
            self._closed(socket)  # its signal went by while blocked

    # -- inside -------------------------------------------------------------------------------
    def _relisten(self) -> None:
        listener, name = self.listener, self.name
        if listener is None or name is None or listener.isListening():
            return
        log.warning(
            "%s: the server stopped (%s); listening again", self.what, listener.errorString()
        )
        listener.deleteLater()
        self.listener = None
        if not self.listen(name):
            self.name = name  # tried again at the next tick

    def _accept(self) -> None:
        listener = self.listener
        while listener is not None and listener.hasPendingConnections():
            socket = listener.nextPendingConnection()
            if socket is None:
                break
            uid = descriptor_peer_uid(int(socket.socketDescriptor()))
            if uid is not None and hasattr(os, "getuid") and uid != os.getuid():
                log.warning("%s: refused user %d's connection", self.what, uid)
                socket.abort()
                socket.deleteLater()
                continue
            if len(self._pending) >= self.max_clients:
                log.warning("%s: %d connections already; refused one", self.what, self.max_clients)
                socket.abort()
                socket.deleteLater()
                continue
            self._pending[socket] = 0
            self.connections.accepted(socket)
            QTimer.singleShot(self.idle_ms, socket, lambda s=socket: self._idle(s))
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(lambda s=socket: self._closed(s))
            if socket.bytesAvailable() > 0:
                self._read(socket)

    def _read(self, socket: QLocalSocket) -> None:
        pending = self._pending.get(socket)
        if pending is None:
            return
        data = bytes(socket.readAll().data())
        if pending + len(data) > self.max_unfinished:
            log.warning("%s: dropped a connection sending a frame too large", self.what)
            self._end(socket)
            return
        left = self.connections.received(socket, data)
        if socket in self._pending:
            self._pending[socket] = left

    def _idle(self, socket: QLocalSocket) -> None:
        if socket in self._pending and self.connections.idle(socket):
            log.info("%s: dropped a connection that stayed idle", self.what)
            self._end(socket)

    def _closed(self, socket: QLocalSocket) -> None:
        if socket not in self._pending:
            return
        if socket.bytesAvailable() > 0:
            self._read(socket)  # its last words before it closed
        self._end(socket)

    def _end(self, socket: QLocalSocket) -> None:
        if socket in self._pending:
            self.connections.closed(socket)
            self.drop(socket)
