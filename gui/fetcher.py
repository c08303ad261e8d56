"""Runs `python -m engine models …` (fetch-starter, download ID) as a child process.

A QProcess rather than a thread: the download and the ncnn conversion are the engine CLI's own
code with its own progress output, the window stays free, and closing the app stops the
child: SIGTERM first, so the CLI removes its temp files and exits (143) within a second, then
a kill for a child that does not answer (downloads resume, installs are atomic).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent  # holds the gui and engine packages


def engine_command(args: list[str]) -> list[str]:
    """The command line that runs the engine CLI with `args`, frozen or not."""
    if getattr(sys, "frozen", False):
        return [
            sys.executable,
            "--engine",
            *args,
        ]  # packaging/launcher.py hands these to the engine CLI
    return [sys.executable, "-m", "engine", *args]


@dataclass(frozen=True)
class FetchOutcome:
    ok: bool
    description: str  # what was fetched, for a person
    message: str  # the last lines the command printed


class ModelFetcher(QObject):
    fetchProgressed = Signal(str)  # the latest line of output
    fetchFinished = Signal(object)  # FetchOutcome

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._process: QProcess | None = None
        self._description = ""
        self._lines: list[str] = []
        self._partial = ""

    def is_running(self) -> bool:
        return self._process is not None

    def start(self, args: list[str], description: str, models_dir: Path) -> bool:
        if self._process is not None:
            return False
        command = engine_command(["models", "--models-dir", str(models_dir), *args])
        process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONUNBUFFERED", "1")
        process.setProcessEnvironment(env)
        process.setWorkingDirectory(str(ROOT))
        process.readyReadStandardOutput.connect(self._read)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._error)
        self._process = process
        self._description = description
        self._lines = []
        self._partial = ""
        log.info("running %s", " ".join(command))
        process.start(command[0], command[1:])
        return True

    def kill(self, grace_ms: int = 1500) -> None:
        """Stop the child: asked to stop first (its signal handler cleans up), then killed."""
        process = self._process
        if process is None:
            return
        self._process = None
        process.blockSignals(True)
        process.terminate()  # SIGTERM here; on Windows a console child ignores it: killed below
        if not process.waitForFinished(grace_ms):
            process.kill()
            process.waitForFinished(3000)
        process.deleteLater()

    def _read(self) -> None:
        if self._process is None:
            return
        text = self._partial + bytes(self._process.readAllStandardOutput().data()).decode(
            "utf-8", errors="replace"
        )
        # progress bars redraw with \r; every \r or \n ends a line worth showing
        parts = text.replace("\r", "\n").split("\n")
        self._partial = parts.pop()
        for line in parts:
            line = line.strip()
            if line:
                self._lines.append(line)
                self.fetchProgressed.emit(line)
        self._lines = self._lines[-20:]

    def _finished(self, code: int, _status: QProcess.ExitStatus) -> None:
        self._read()
        if self._partial.strip():
            self._lines.append(self._partial.strip())
        process, self._process = self._process, None
        if process is not None:
            process.deleteLater()
        errors = [line for line in self._lines if line.startswith("error:")]
        message = (errors[-1] if errors else "\n".join(self._lines[-2:])).removeprefix("error: ")
        log.info("%s ended with %d: %s", self._description, code, "\n".join(self._lines[-5:]))
        self.fetchFinished.emit(FetchOutcome(code == 0, self._description, message))

    def _error(self, error: QProcess.ProcessError) -> None:
        if error != QProcess.ProcessError.FailedToStart:
            return
        process, self._process = self._process, None
        if process is not None:
            process.deleteLater()
        self.fetchFinished.emit(
            FetchOutcome(False, self._description, "The engine command could not be started.")
        )
