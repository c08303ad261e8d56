"""The conftest's thread guard knows QThreads: a QThread still running is named, one that ended
is not, and Python's lasting "Dummy" record of a thread it did not start is not a leak."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QObject, QThread, Slot
from pytestqt.qtbot import QtBot

from tests.conftest import _python_threads, _track_qthreads


class _Touch(QObject):
    """Runs Python in its QThread, so Python keeps a Dummy record of that thread."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    @Slot()
    def touch(self) -> None:
        self.seen.append(threading.current_thread().name)


def test_a_running_qthread_is_named_and_an_ended_one_is_not(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    running = _track_qthreads(monkeypatch)
    thread = QThread()
    thread.setObjectName("guard-probe")
    worker = _Touch()
    worker.moveToThread(thread)
    thread.started.connect(worker.touch)
    thread.start()
    qtbot.waitUntil(lambda: bool(worker.seen))
    assert running() == ["guard-probe"]
    thread.quit()
    thread.wait()
    assert running() == []
    # Python (before 3.13) may still list the QThread as "Dummy-N": Qt's, and it has ended
    assert worker.seen[0].startswith("Dummy-") or worker.seen[0] == "guard-probe"
    assert _python_threads(before) == []


def test_a_python_thread_left_running_is_named() -> None:
    before = set(threading.enumerate())
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="left-behind")
    thread.start()
    try:
        assert _python_threads(before) == ["left-behind"]
    finally:
        stop.set()
        thread.join()
    assert _python_threads(before) == []
