"""A thread-safe cancel flag that also terminates the model run in flight (M8)."""

from __future__ import annotations

import threading
from typing import Any

from engine.errors import Cancelled


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread of a command that has no engine thread to cancel:
    it unwinds like Ctrl+C (exit 143 instead of 130)."""


class CancelToken:
    """Set from any thread; checked by the engine before every run.

    While a run is in flight the runner registers its RunOptions here, so `cancel()` can set
    `terminate` on it and ORT aborts between nodes instead of finishing a long run.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._live: Any = None  # the RunOptions of the run in flight, if any

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            if self._live is not None:
                self._live.terminate = True

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled()

    def attach(self, run_options: Any) -> None:
        with self._lock:
            self._live = run_options
            if self._event.is_set():
                run_options.terminate = True

    def detach(self) -> None:
        with self._lock:
            self._live = None

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)
