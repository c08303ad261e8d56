"""A desktop notification when a long job ends while the window is in the background.

Where the desktop has a system tray, `QSystemTrayIcon.showMessage` shows it. Where it has none
(stock GNOME), the freedesktop notification service on the session bus shows it
(`org.freedesktop.Notifications.Notify`): QtDBus finds the service without blocking the window
(its name owned, or one the bus starts on demand), and GLib's `gdbus call` sends the call.
PySide6 cannot write the D-Bus uint32 that Notify's `replaces_id` is (a Python int goes out as
int32, QDBusArgument's integer as uint16) and the services check the signature, so the one call
that needs it goes through the tool every GNOME desktop has. No bus, no service or no `gdbus`:
the notice is only logged (the window's own status bar says it anyway) — no error, no dialog.
"""

from __future__ import annotations

import logging
import os
import shutil
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, Signal
from PySide6.QtDBus import QDBusConnection, QDBusMessage, QDBusPendingCallWatcher
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QSystemTrayIcon, QWidget

from gui.jobs import Job, JobState, ended_text

log = logging.getLogger(__name__)

NOTIFY_AFTER_S = 10.0  # shorter jobs end while the person is still looking
SHOWN_MS = 8000
SERVICE = "org.freedesktop.Notifications"
SERVICE_PATH = "/org/freedesktop/Notifications"
BUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
CALL_TIMEOUT_S = 5  # a service that does not answer in this time is not waited for longer
APP_NAME = "Tessera"
APP_ICON = "image-x-generic"  # a themed icon every desktop has


class Channel(Enum):
    TRAY = "tray"
    DESKTOP = "desktop"  # the freedesktop notification service on the session bus
    LOG = "log"


def should_notify(seconds: float, window_active: bool) -> bool:
    return seconds >= NOTIFY_AFTER_S and not window_active


def gvariant_text(text: str) -> str:
    """`text` as a GVariant string literal: what `gdbus call` reads an argument as (quoted, so
    a title starting with '-' is not taken for an option)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def session_bus_known() -> bool:
    """A session bus this process was told of, or the user's bus socket (systemd's)."""
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return True
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    return bool(runtime) and (Path(runtime) / "bus").exists()


class DesktopService(QObject):
    """The freedesktop notification service on a session bus (the desktop's own, or the one
    at `address`). `finished` says, per notification, whether the service took it."""

    finished = Signal(bool)

    def __init__(self, parent: QObject | None = None, *, address: str | None = None) -> None:
        super().__init__(parent)
        self.address = address
        self._bus: QDBusConnection | None = None
        self._processes: list[QProcess] = []

    def bus(self) -> QDBusConnection | None:
        if self._bus is None and not self.address and not session_bus_known():
            return None  # not asked for: libdbus would try to start a bus of its own
        if self._bus is None:
            self._bus = (
                QDBusConnection.connectToBus(self.address, f"tessera-notify-{id(self)}")
                if self.address
                else QDBusConnection.sessionBus()
            )
        return self._bus if self._bus.isConnected() else None

    @property
    def available(self) -> bool:
        """A session bus, and the tool that speaks Notify on it."""
        return self.bus() is not None and shutil.which("gdbus") is not None

    def send(self, title: str, text: str) -> None:
        bus = self.bus()
        if bus is None:
            self._done(False, "no session bus")
            return
        ask = QDBusMessage.createMethodCall(*BUS, "NameHasOwner")
        ask.setArguments([SERVICE])
        watcher = QDBusPendingCallWatcher(bus.asyncCall(ask), self)
        watcher.finished.connect(lambda w: self._owner_known(w, title, text))

    def _owner_known(self, watcher: QDBusPendingCallWatcher, title: str, text: str) -> None:
        watcher.deleteLater()
        reply = watcher.reply()
        if reply.type() is QDBusMessage.MessageType.ReplyMessage and reply.arguments()[:1] == [
            True
        ]:
            self._call(title, text)
            return
        bus = self.bus()
        if bus is None:
            self._done(False, "the session bus went away")
            return
        ask = QDBusMessage.createMethodCall(*BUS, "ListActivatableNames")
        later = QDBusPendingCallWatcher(bus.asyncCall(ask), self)
        later.finished.connect(lambda w: self._activatable_known(w, title, text))

    def _activatable_known(self, watcher: QDBusPendingCallWatcher, title: str, text: str) -> None:
        watcher.deleteLater()
        names = watcher.reply().arguments()[:1]
        if names and SERVICE in (names[0] or []):
            self._call(title, text)  # the bus starts the service for the call
        else:
            self._done(False, f"no {SERVICE} service on the session bus")

    def _call(self, title: str, text: str) -> None:
        where = ["--address", self.address] if self.address else ["--session"]
        args = [
            "call",
            *where,
            "--timeout",
            str(CALL_TIMEOUT_S),
            "--dest",
            SERVICE,
            "--object-path",
            SERVICE_PATH,
            "--method",
            f"{SERVICE}.Notify",
            gvariant_text(APP_NAME),
            "0",  # replaces_id: a new notification
            gvariant_text(APP_ICON),
            gvariant_text(title),
            gvariant_text(text),
            "[]",  # actions
            "{}",  # hints
            str(SHOWN_MS),
        ]
        process = QProcess(self)
        self._processes.append(process)
        process.finished.connect(lambda code, _status: self._ended(process, code == 0))
        process.errorOccurred.connect(lambda _e: self._ended(process, False))
        process.start("gdbus", args)

    def _ended(self, process: QProcess, shown: bool) -> None:
        if process not in self._processes:
            return  # errorOccurred and finished both report a crash
        self._processes.remove(process)
        why = "" if shown else bytes(process.readAllStandardError().data()).decode(errors="replace")
        process.deleteLater()
        self._done(shown, why.strip())

    def _done(self, shown: bool, why: str) -> None:
        if not shown:
            log.info("desktop notification not shown: %s", why or "the service refused it")
        self.finished.emit(shown)

    def close(self) -> None:
        for process in list(self._processes):
            process.kill()
            process.waitForFinished(1000)
        self._processes.clear()
        if self._bus is not None and self.address:
            QDBusConnection.disconnectFromBus(f"tessera-notify-{id(self)}")
        self._bus = None


class Notifier:
    """The tray where there is one; else the freedesktop service over the session bus; else
    the log. `sent` records what went where (the channel chosen when it was sent)."""

    def __init__(
        self,
        parent: QWidget,
        icon: QIcon,
        *,
        tray_available: bool | None = None,
        bus_address: str | None = None,
    ) -> None:
        self.parent = parent
        self.icon = icon
        self.tray_available = (
            QSystemTrayIcon.isSystemTrayAvailable() if tray_available is None else tray_available
        )
        self._tray: QSystemTrayIcon | None = None
        self.desktop = DesktopService(parent, address=bus_address)
        self.sent: list[tuple[Channel, str, str]] = []

    @property
    def channel(self) -> Channel:
        if self.tray_available:
            return Channel.TRAY
        return Channel.DESKTOP if self.desktop.available else Channel.LOG

    def notify(self, title: str, text: str) -> Channel:
        channel = self.channel
        if channel is Channel.TRAY:
            if self._tray is None:
                self._tray = QSystemTrayIcon(self.icon, self.parent)
                self._tray.setToolTip("Tessera")
            self._tray.show()
            self._tray.showMessage(title, text, QSystemTrayIcon.MessageIcon.Information, SHOWN_MS)
        elif channel is Channel.DESKTOP:
            self.desktop.send(title, text)
        log.info("notification (%s): %s — %s", channel.value, title, text)
        self.sent.append((channel, title, text))
        return channel

    def job_ended(self, job: Job) -> None:
        """A long job that ended while the window is in the background: say so on the desktop
        (a cancelled one only ends what the person asked)."""
        if job.state is not JobState.CANCELLED and should_notify(
            job.elapsed(), self.parent.isActiveWindow()
        ):
            self.notify("Tessera", ended_text(job)[1])

    def close(self) -> None:
        self.desktop.close()
        if self._tray is not None:
            self._tray.hide()
            self._tray.deleteLater()
            self._tray = None
