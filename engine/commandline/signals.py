"""Stopping a run: SIGINT and SIGTERM (on Windows also Ctrl+Break and closing the console)
set the request's cancel token, which is checked before every model run, interrupts a run in
flight, and is checked between blocks of rows while a PNG is written and between frames while
decoding. A C call (Pillow decoding one big image, zlib) cannot be interrupted, so the main
thread waits at most `STOP_GRACE_S` for the engine thread; then it removes every temp file
still registered (engine/files.py) and exits without waiting further. Either way it prints one
line, lists the products already written under `--json`, and exits 130 (SIGINT) or 143
(SIGTERM)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from engine.cancel import CancelToken
from engine.commandline.reporting import THIS_PROCESS, exit_code_for, result_json
from engine.errors import Cancelled, EngineError, ErrorKind
from engine.files import LIVE
from engine.requests import Result
from engine.runtime import records

STOP_GRACE_S = 0.8  # after a stop signal, the longest wait for the engine thread
# A joined run waits this long for the app's word that its job ended: the app stops a run
# within ~0.1 s, but not a session being made, a big image being decoded or the hand-back run
# after the cancel (seconds), and the terminal still ends within a second. Its cancel is sent at once, and its connection closing
# cancels the job too: the app's job ends, confirmed or not.
JOINED_STOP_GRACE_S = 0.7

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


class StopSignals:
    """SIGINT and SIGTERM (Windows: also Ctrl+Break and closing the console) cancel the run.

    The first signal is kept: it decides the exit code. The handlers only set flags (they run
    in the main thread between two bytecodes); the main thread does the rest in `finish`.
    """

    def __init__(self, cancel: CancelToken) -> None:
        self.cancel = cancel
        self.signum: int | None = None
        self.at = 0.0
        self.done = threading.Event()  # set once the process may end (Windows console close)

    def stop(self, signum: int) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
        self.cancel.cancel()

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.stop(signum)

    def waited_enough(self, grace: float = STOP_GRACE_S) -> bool:
        return self.signum is not None and time.monotonic() - self.at > grace

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        names = ["SIGINT", "SIGTERM", "SIGBREAK"]  # SIGBREAK: Ctrl+Break, Windows only
        numbers = [getattr(signal, n) for n in names if hasattr(signal, n)]
        previous = {n: signal.signal(n, self._handler) for n in numbers}
        console = console_close_handler(self) if sys.platform == "win32" else None
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            self.done.set()
            del console  # kept alive until here: the console may call it at any time

    def exit_code(self) -> int:
        # SIGBREAK and closing the console count as terminated.
        return {int(k): v for k, v in SIGNAL_EXIT.items()}.get(self.signum or 0, 143)

    def finish(
        self, worker: threading.Thread, outcome: dict[str, Any], placed: list[Path], as_json: bool
    ) -> int:
        """After a stop signal: clean up, print one line (and the JSON), and end."""
        abandoned = worker.is_alive()  # stuck in a C call: do not wait for it any longer
        removed = LIVE.abandon()  # the temp files it (or a finished cancel) left registered
        code = self.exit_code()
        name = signal.Signals(self.signum).name if self.signum in set(signal.Signals) else "stop"
        result = outcome.get("result")
        if isinstance(result, Result) and not abandoned:
            code = exit_code_for(result)  # the run had already finished: it is reported as such
        error = outcome.get("error")
        if error is not None and not isinstance(error, Cancelled) and not abandoned:
            code = error.exit_code if isinstance(error, EngineError) else 1
        count = len(placed)
        line = (
            f"Stopped by {name}: {count} product{'s' if count != 1 else ''} written"
            + (f", {len(removed)} unfinished file(s) removed" if removed else "")
            + ("." if code in (130, 143) else f"; the run had already ended (exit {code}).")
        )
        print(line, file=sys.stderr)
        if as_json:
            data: dict[str, Any] = (
                result_json(result)
                if isinstance(result, Result) and not abandoned
                else {"products": [{"path": str(p)} for p in placed]}
            )
            data.update(
                signal=name,
                exit_code=code,
                error={"kind": ErrorKind.CANCELLED.value, "message": line},
                engine=THIS_PROCESS,
            )
            print(json.dumps(data, indent=2))
        if abandoned:
            # The engine thread may sit in a C call for a long time; no finaliser may wait
            # for it (or run ORT's destructors under it), so end the process here.
            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
            records.withdraw()  # os._exit skips atexit, which would remove it
            os._exit(code)
        return code


def console_close_handler(stop: StopSignals) -> object:  # pragma: no cover - Windows only
    """Closing the console window, logging off or shutting down: Windows calls this on a
    thread of its own and ends the process when it returns (or after about 5 s)."""
    if sys.platform != "win32":
        return None
    import ctypes
    from ctypes import wintypes

    events = (2, 5, 6)  # CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT

    @ctypes.WINFUNCTYPE(wintypes.BOOL, wintypes.DWORD)
    def handler(event: int) -> bool:
        if event not in events:
            return False  # Ctrl+C and Ctrl+Break arrive as SIGINT / SIGBREAK
        stop.stop(signal.SIGTERM)
        stop.done.wait(STOP_GRACE_S + 2.0)  # let the main thread clean up before Windows ends us
        return True

    ctypes.windll.kernel32.SetConsoleCtrlHandler(handler, True)
    return handler
