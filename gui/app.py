"""`tessera` / `python -m gui [FILES…]`: the QApplication, logging, the single instance, main().

Tracebacks go to a log file in the user's data folder (Help ▸ Open the log folder), never into
the person's face: the window shows one readable line in its status bar instead.
"""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import sys
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QMessageLogContext, QtMsgType, qInstallMessageHandler
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from engine.settings import default_data_dir

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

    from gui.single_instance import hand_off_or_listen

    files = [str(f) for f in args.files]
    instance = hand_off_or_listen(files)
    if instance is None:
        log.info("handed %d file(s) to the running Tessera", len(files))
        return 0

    from engine.runtime import records
    from engine.settings import join_socket_path
    from gui.controllers.joined import JoinedRequests
    from gui.main_window import MainWindow

    records.declare(records.ProcessKind.APP)  # `engine memory` names this window's models
    window = MainWindow(data_dir=data_dir)
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
    if STARTUP_PROBE_ENV in os.environ:
        _startup_probe(app, float(os.environ[STARTUP_PROBE_ENV] or 0))
    if files:
        window.open_files_and_raise(files)
    try:
        return int(app.exec())
    finally:
        joined.close()
        window.shutdown()
        instance.close()
        sys.excepthook = sys.__excepthook__
