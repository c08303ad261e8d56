"""`tessera` / `python -m gui [FILES…]`: the QApplication, logging, the single instance, main().

Tracebacks go to a log file in the user's data folder (Help ▸ Open the log folder), never into
the person's face: the window shows one readable line in its status bar instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from PySide6.QtCore import (
    QMessageLogContext,
    QObject,
    QProcess,
    QSocketNotifier,
    QTimer,
    QtMsgType,
    qInstallMessageHandler,
)
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from engine.files import LIVE
from engine.settings import default_data_dir

if TYPE_CHECKING:
    from engine.runtime.devices import RuntimeReport
    from gui.engine_thread import EngineThread

log = logging.getLogger("gui")

LOG_BYTES = 2 * 1024 * 1024
LOG_BACKUPS = 3
# The bench's start-up probe (engine/bench/startup.py): set, the app prints "shown" once its
# window is on screen, and quits after that many seconds when the value is above 0.
STARTUP_PROBE_ENV = "TESSERA_STARTUP_PROBE"


def resources_dir() -> Path:
    bundle = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and bundle:
        return Path(bundle) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def setup_logging(data_dir: Path) -> Path | None:
    """Log to <data>/logs/tessera.log (rotated); returns the file, or None if it cannot be made."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    folder = data_dir / "logs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            folder / "tessera.log", maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
        )
        path: Path | None = folder / "tessera.log"
    except OSError:
        handler = logging.StreamHandler(sys.stderr)
        path = None
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    )
    root.addHandler(handler)
    return path


def _qt_messages(kind: QtMsgType, _context: QMessageLogContext, message: str) -> None:
    level = {
        QtMsgType.QtDebugMsg: logging.DEBUG,
        QtMsgType.QtInfoMsg: logging.INFO,
        QtMsgType.QtWarningMsg: logging.WARNING,
        QtMsgType.QtCriticalMsg: logging.ERROR,
        QtMsgType.QtFatalMsg: logging.CRITICAL,
    }.get(kind, logging.WARNING)
    logging.getLogger("qt").log(level, "%s", message)


def _startup_probe(app: QApplication, quit_after_s: float) -> None:
    from PySide6.QtCore import QTimer

    def shown() -> None:
        print("shown", flush=True)
        if quit_after_s > 0:
            QTimer.singleShot(int(quit_after_s * 1000), app.quit)

    QTimer.singleShot(0, shown)  # the first turn of the event loop: the window is mapped


# The child probe starts this long after the window is shown: its imports would compete with
# the window's first paint and model list for the two cores of a small machine.
PROBE_DELAY_MS = 400
PROBE_TIMEOUT_MS = 60_000


class RuntimeProber(QObject):
    """What each runtime really gives, probed by `python -m engine devices --json` in a child
    process, so the window never imports onnxruntime before the first request needs it (it
    stays under its idle size; the child's memory goes back when it ends). The reports reach
    the window through the engine's own `runtimesProbed`, as the engine thread's probe's did.
    A frozen app (no `-m`) or a child that fails falls back to the engine thread's probe."""

    def __init__(self, engine: EngineThread, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._engine = engine
        self._process: QProcess | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._timed_out)

    def start(self) -> None:
        if self._process is not None:
            return
        if getattr(sys, "frozen", False):
            self._engine.probe_runtimes()
            return
        process = QProcess(self)
        process.setProgram(sys.executable)
        process.setArguments(["-m", "engine", "devices", "--json"])
        process.setWorkingDirectory(str(Path(__file__).resolve().parent.parent))
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._failed)
        self._process = process
        self._timer.start(PROBE_TIMEOUT_MS)
        process.start()

    def _finished(self, code: int, _status: QProcess.ExitStatus) -> None:
        process = self._process
        if process is None:
            return
        self._timer.stop()
        out = bytes(process.readAllStandardOutput().data()).decode("utf-8", "replace")
        reports = _parse_reports(out) if code == 0 else None
        if reports is None:
            log.warning("the runtime probe's process failed (exit %d); probing here", code)
            self._engine.probe_runtimes()
        else:
            log.info(
                "runtimes probed in a child process: %s",
                ", ".join(
                    f"{r.runtime}/{r.device} {'ok' if r.ok else 'unavailable'}" for r in reports
                ),
            )
            self._engine.runtimesProbed.emit(reports)
        self._process = None
        process.deleteLater()

    def _failed(self, error: QProcess.ProcessError) -> None:
        if error is QProcess.ProcessError.FailedToStart and self._process is not None:
            log.warning("the runtime probe's process did not start; probing here")
            self._timer.stop()
            self._process.deleteLater()
            self._process = None
            self._engine.probe_runtimes()

    def _timed_out(self) -> None:
        if self._process is not None:
            self._process.kill()  # `finished` follows, with a failing exit: probed here

    def stop(self) -> None:
        """Ends a probe still running (the app quits)."""
        self._timer.stop()
        process, self._process = self._process, None
        if process is not None:
            process.finished.disconnect(self._finished)
            process.kill()
            process.waitForFinished(5000)


def _parse_reports(text: str) -> tuple[RuntimeReport, ...] | None:
    from engine.runtime.devices import RuntimeReport  # dataclasses only: no onnxruntime

    try:
        items = json.loads(text)
        reports = tuple(
            RuntimeReport(
                str(i["runtime"]),
                str(i["device"]),
                bool(i["ok"]),
                None if i["provider"] is None else str(i["provider"]),
                str(i["detail"]),
            )
            for i in items
        )
    except (ValueError, KeyError, TypeError):
        return None
    return reports or None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tessera", description="Edit images with local ONNX models."
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="images, folders of frames or .onnx models"
    )
    parser.add_argument("--self-test", action="store_true", help="check the installation and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list)
    if args.self_test:
        from gui.self_test import run_self_test

        return run_self_test()

    data_dir = default_data_dir()
    log_path = setup_logging(data_dir)
    log.info("starting Tessera (log %s)", log_path)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    qInstallMessageHandler(_qt_messages)
    app.setOrganizationName("Tessera")
    app.setApplicationName("Tessera")
    app.setApplicationDisplayName("Tessera")
    app.setDesktopFileName("tessera")
    icon = resources_dir() / "icons" / "tessera.svg"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))

    # From here a stop signal is handled by the event loop (it waits if it comes before).
    uninstall = install_stop_signals(app)
    from gui.single_instance import hand_off_or_listen

    files = [str(f) for f in args.files]
    instance = hand_off_or_listen(files)
    if instance is None:
        log.info("handed %d file(s) to the running Tessera", len(files))
        uninstall()
        return 0

    from engine.runtime import records
    from engine.settings import join_socket_path
    from gui.controllers.joined import JoinedRequests
    from gui.main_window import MainWindow

    records.declare(records.ProcessKind.APP)  # `engine memory` names this window's models
    # The runtimes are probed in a child process once the window is up: importing
    # onnxruntime here would keep ~25 MB in an idle window that may never run a model.
    window = MainWindow(data_dir=data_dir, probe_runtimes=False)
    instance.filesReceived.connect(window.open_files_and_raise)
    # `python -m engine run` of this user and settings, on any display, joins this engine.
    joined = JoinedRequests(window.workspace, window.engine, window)
    socket_path = join_socket_path()
    if joined.listen(socket_path):
        records.declare(records.ProcessKind.APP, endpoint=str(socket_path))

    def excepthook(
        kind: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        log.critical("unhandled error", exc_info=(kind, value, tb))
        window.say(f"Something went wrong ({value}); the details are in {log_path or 'the log'}.")

    sys.excepthook = excepthook
    window.show()
    prober = RuntimeProber(window.engine, app)
    QTimer.singleShot(PROBE_DELAY_MS, prober.start)
    if STARTUP_PROBE_ENV in os.environ:
        _startup_probe(app, float(os.environ[STARTUP_PROBE_ENV] or 0))
    if files:
        window.open_files_and_raise(files)
    try:
        return int(app.exec())
    finally:
        prober.stop()
        joined.close()
        window.shutdown()  # cancels the jobs (their temp files go), stops the speed tests
        instance.close()  # the socket file goes
        uninstall()
        LIVE.abandon()  # a temp file a stuck C call still holds
        sys.excepthook = sys.__excepthook__


def install_stop_signals(app: QApplication) -> Callable[[], None]:
    """SIGTERM (logout, shutdown, `kill`) and SIGINT end the app as quitting does: the
    event loop returns and `main` cancels, cleans up and closes. The signal only writes its
    number into a socket pair (Python's wake-up fd) whose reading end a QSocketNotifier
    watches, so it is handled in the event loop even while Qt waits in C. Returns the
    function that puts the previous handlers back."""
    if os.name == "nt" or threading.current_thread() is not threading.main_thread():
        return lambda: None
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    numbers = (signal.SIGTERM, signal.SIGINT)
    # A Python-level handler must exist for the C handler to write the wake-up byte.
    previous = {n: signal.signal(n, lambda *_: None) for n in numbers}
    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Type.Read, app)

    def woken() -> None:
        try:
            data = reader.recv(64)
        except OSError:
            return
        for number in data:
            if number in numbers:
                log.info("%s: quitting", signal.Signals(number).name)
                # Through a timer: before the event loop runs, exit() alone would be lost.
                QTimer.singleShot(0, lambda code=128 + number: app.exit(code))
                return

    notifier.activated.connect(woken)

    def uninstall() -> None:
        notifier.setEnabled(False)
        signal.set_wakeup_fd(previous_fd)
        for number, handler in previous.items():
            signal.signal(number, handler)
        reader.close()
        writer.close()

    return uninstall
