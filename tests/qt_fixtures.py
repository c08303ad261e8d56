"""Leak guard for Qt tests (style rule 13): a test fails when it leaves a top-level window open
(QThreads left running are caught for every test by tests/conftest.py). Import
`qt_leak_guard` into a test module to make it autouse there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtWidgets import QApplication, QWidget


@pytest.fixture(autouse=True)
def qt_leak_guard(qapp: QApplication) -> Iterator[None]:
    before = {id(w) for w in QApplication.topLevelWidgets() if w.isVisible()}
    yield
    left: list[QWidget] = [
        w for w in QApplication.topLevelWidgets() if w.isVisible() and id(w) not in before
    ]
    names = [f"{type(w).__name__} {w.windowTitle()!r}" for w in left]
    for w in left:
        w.close()
    assert not names, f"test left windows open: {names}"
