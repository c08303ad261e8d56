"""Shared test set-up: offscreen Qt, and a guard against threads left running."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ORT_LOGGING_LEVEL", "3")

# The main window's fixtures, for any module that requests them (loaded after the variables
# above are set: they import the GUI).
pytest_plugins = ["tests.window_fixtures"]


@pytest.fixture(autouse=True)
def _no_threads_left_behind() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 5.0
    while True:
        extra = [
            t
            for t in threading.enumerate()
            if t.ident not in before
            and t.is_alive()
            and not t.name.startswith(("pydevd", "asyncio"))
        ]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not extra, f"test left threads running: {[t.name for t in extra]}"


@pytest.fixture
def models_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[os.PathLike[str]]:
    path = tmp_path_factory.mktemp("models")
    monkeypatch.setenv("TESSERA_MODELS_DIR", str(path))
    yield path
