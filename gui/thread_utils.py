"""Small helpers for the app's long-lived QThreads."""

from __future__ import annotations

import threading


def forget_foreign_thread() -> None:
    """Drop the `threading` record Python keeps for the current Qt thread.

    Python before 3.13 registers a `_DummyThread` the first time Python code in a thread it did
    not start asks for `threading.current_thread()` (logging does, for every record) and never
    removes it, so a stopped QThread would look alive to `threading.enumerate()` forever. Call
    this as the last Python code a QThread runs.
    """
    current = threading.current_thread()
    if not isinstance(current, threading._DummyThread):
        return
    active: dict[int | None, threading.Thread] = getattr(threading, "_active", {})
    lock = getattr(threading, "_active_limbo_lock", None)
    if lock is None:
        active.pop(current.ident, None)
        return
    with lock:
        active.pop(current.ident, None)
