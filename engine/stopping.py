"""The first handlers of SIGINT and SIGTERM, installed before anything heavy is imported.

A Ctrl-C in the first second of `python -m engine` or `python -m gui` arrives while onnx,
ml_dtypes or Qt are being imported, long before the command line's or the app's own handlers
exist: Python's default turns it into a KeyboardInterrupt traceback from inside an import.
Until the real handlers replace these, a stop signal ends the process at once, quietly, with
the usual exit code: nothing has been written yet, so there is nothing to clean up.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _stop_now(signum: int, _frame: FrameType | None) -> None:
    try:
        os.write(2, b"Stopped.\n")
    except OSError:
        pass
    os._exit(EXIT_CODES.get(signal.Signals(signum), 143))


def stop_quietly_until_ready() -> None:
    """Install the early handlers (main thread only; a no-op elsewhere)."""
    for number in EXIT_CODES:
        try:
            signal.signal(number, _stop_now)
        except ValueError:  # not the main thread: its owner handles signals
            return


def ready_for_keyboard_interrupt() -> object:
    """Python's own SIGINT handler again (KeyboardInterrupt, which the command line turns into
    one line); returns the handler it replaced."""
    return signal.signal(signal.SIGINT, signal.default_int_handler)
