"""A desktop notification when a long job ends while the window is in the background.

Where the desktop has a system tray, `QSystemTrayIcon.showMessage` shows it; elsewhere the
notice is only logged (and the window's own status bar says it): no error, no dialog.
"""

from __future__ import annotations

import logging
from enum import Enum

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QSystemTrayIcon, QWidget

from gui.jobs import Job, JobState, ended_text

log = logging.getLogger(__name__)

NOTIFY_AFTER_S = 10.0  # shorter jobs end while the person is still looking


class Channel(Enum):
    TRAY = "tray"
    LOG = "log"


def should_notify(seconds: float, window_active: bool) -> bool:
    return seconds >= NOTIFY_AFTER_S and not window_active


class Notifier:
    def __init__(self, parent: QWidget, icon: QIcon, *, tray_available: bool | None = None) -> None:
        self.parent = parent
        self.icon = icon
        self.tray_available = (
            QSystemTrayIcon.isSystemTrayAvailable() if tray_available is None else tray_available
        )
        self._tray: QSystemTrayIcon | None = None
        self.sent: list[tuple[Channel, str, str]] = []

    @property
    def channel(self) -> Channel:
        return Channel.TRAY if self.tray_available else Channel.LOG

    def notify(self, title: str, text: str) -> Channel:
        channel = self.channel
        if channel is Channel.TRAY:
            if self._tray is None:
                self._tray = QSystemTrayIcon(self.icon, self.parent)
                self._tray.setToolTip("Tessera")
            self._tray.show()
            self._tray.showMessage(title, text, QSystemTrayIcon.MessageIcon.Information, 8000)
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
        if self._tray is not None:
            self._tray.hide()
            self._tray.deleteLater()
            self._tray = None
