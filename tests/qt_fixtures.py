"""Leak guards for Qt tests (style rule 13): a test fails when it leaves a QThread running or a
top-level window open. Import `qt_leak_guard` into a test module to make it autouse there."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from PySide6.QtCore import QThread
from PySide6.QtWidgets import QApplication, QWidget

from gui.main_window import MainWindow

WindowFactory = Callable[..., MainWindow]


@pytest.fixture(autouse=True)
def qt_leak_guard(qapp: QApplication, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    started: list[QThread] = []
    original = QThread.start

    def start(self: QThread, *args: object) -> None:
        started.append(self)  # a strong reference, so the check below can still ask it
        original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(QThread, "start", start)
    before = {id(w) for w in QApplication.topLevelWidgets() if w.isVisible()}
    yield
    running = []
    for thread in started:
        try:
            alive = thread.isRunning()
        except RuntimeError:  # its C++ object is gone, so it is not running
            continue
        if alive:
            running.append(thread.objectName() or repr(thread))
    left: list[QWidget] = [
        w for w in QApplication.topLevelWidgets() if w.isVisible() and id(w) not in before
    ]
    names = [f"{type(w).__name__} {w.windowTitle()!r}" for w in left]
    for w in left:
        w.close()
    assert not running, f"test left QThreads running: {running}"
    assert not names, f"test left windows open: {names}"
