"""Desktop notifications where there is no system tray (stock GNOME): the freedesktop
notification service on a real session bus (a private dbus-daemon) with a tiny service of this
test's own (QtDBus) that records the Notify call; and the silent fallback to the log when the
bus or the service is missing."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import ClassInfo, QObject, Slot
from PySide6.QtDBus import QDBusConnection
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from gui.notifications import SERVICE, SERVICE_PATH, Channel, Notifier, gvariant_text
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard

needs_bus = pytest.mark.skipif(
    shutil.which("dbus-daemon") is None or shutil.which("gdbus") is None,
    reason="needs dbus-daemon and gdbus (the dbus and GLib tools)",
)


@pytest.fixture
def bus_address() -> Iterator[str]:
    """A session bus of this test's own: nothing else is on it."""
    daemon = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert daemon.stdout is not None
        address = daemon.stdout.readline().strip()
        assert address, "dbus-daemon printed no address"
        yield address
    finally:
        daemon.terminate()
        daemon.wait(10)
        if daemon.stdout is not None:
            daemon.stdout.close()


@ClassInfo({"D-Bus Interface": SERVICE})  # type: ignore[call-arg]
class RecordingService(QObject):  # type: ignore[operator]
    """What a desktop's notification server offers of the spec: Notify, recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    @Slot(str, "uint", str, str, str, "QStringList", "QVariantMap", int, result="uint")
    def Notify(  # the D-Bus method's name
        self,
        app_name: str,
        replaces_id: int,
        app_icon: str,
        summary: str,
        body: str,
        actions: list[str],
        hints: dict[str, object],
        expire_timeout: int,
    ) -> int:
        self.calls.append(
            (app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout)
        )
        return len(self.calls)


@pytest.fixture
def service(bus_address: str) -> Iterator[RecordingService]:
    name = "test-notification-server"
    connection = QDBusConnection.connectToBus(bus_address, name)
    assert connection.isConnected()
    recorder = RecordingService()
    assert connection.registerObject(
        SERVICE_PATH, recorder, QDBusConnection.RegisterOption.ExportAllSlots
    )
    assert connection.registerService(SERVICE)
    yield recorder
    connection.unregisterService(SERVICE)
    connection.unregisterObject(SERVICE_PATH)
    QDBusConnection.disconnectFromBus(name)


def _notifier(qtbot: QtBot, address: str | None) -> tuple[Notifier, QWidget]:
    parent = QWidget()
    qtbot.addWidget(parent)
    return Notifier(parent, QIcon(), tray_available=False, bus_address=address), parent


@needs_bus
def test_without_a_tray_notify_goes_to_the_freedesktop_service(
    qtbot: QtBot, bus_address: str, service: RecordingService
) -> None:
    notifier, _parent = _notifier(qtbot, bus_address)
    try:
        assert notifier.channel is Channel.DESKTOP
        title, text = "Tessera", "Upscale of it's-a-photo.png done in 42 s."
        with qtbot.waitSignal(notifier.desktop.finished, timeout=15_000) as shown:
            assert notifier.notify(title, text) is Channel.DESKTOP
        assert shown.args == [True]
        (call,) = service.calls
        app_name, replaces_id, _icon, summary, body, actions, hints, expire = call
        assert (app_name, replaces_id, summary, body) == ("Tessera", 0, title, text)
        assert actions == [] and hints == {} and expire > 0
    finally:
        notifier.close()


@needs_bus
def test_a_bus_without_the_service_falls_back_silently(qtbot: QtBot, bus_address: str) -> None:
    notifier, _parent = _notifier(qtbot, bus_address)
    try:
        with qtbot.waitSignal(notifier.desktop.finished, timeout=15_000) as shown:
            notifier.notify("Tessera", "done")  # no exception, no dialog
        assert shown.args == [False]
    finally:
        notifier.close()


def test_no_bus_means_the_log(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    notifier, _parent = _notifier(qtbot, None)
    try:
        assert notifier.channel is Channel.LOG
        assert notifier.notify("Tessera", "done") is Channel.LOG
        assert notifier.sent == [(Channel.LOG, "Tessera", "done")]
    finally:
        notifier.close()


def test_a_tray_wins(qtbot: QtBot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    notifier = Notifier(parent, QIcon(), tray_available=True, bus_address="unix:path=/nonexistent")
    assert notifier.channel is Channel.TRAY
    notifier.close()


def test_texts_are_quoted_for_gdbus() -> None:
    assert gvariant_text("it's -x \\ done") == "'it\\'s -x \\\\ done'"
