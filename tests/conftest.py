"""Shared test set-up: offscreen Qt, and a guard against threads left running — Python's own
and Qt's (QThreads)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from engine.api import Engine
    from engine.operation_specs import Operation

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
# A command line started by a test never joins a Tessera app the person has open (issue #22).
os.environ.setdefault("TESSERA_INSTANCE_NAME", f"tests-{os.getpid()}")
# Tessera's CPU kernel wherever a graph allows, as on every CPU alike: which path a test takes
# must not hang on a measurement of this machine (tests/test_kernel_choice.py measures).
os.environ.setdefault("TESSERA_CPU_KERNELS", "tessera")

# The main window's fixtures, for any module that requests them (loaded after the variables
# above are set: they import the GUI).
pytest_plugins = ["tests.window_fixtures"]


def _python_threads(before: set[threading.Thread]) -> list[str]:
    # Python before 3.13 keeps a "Dummy-N" record of every thread it did not start (a QThread
    # that ran Python code) for ever: those are Qt's, asked below whether they still run.
    # Compared as objects: a new thread may get the ident of one that ended.
    return [
        t.name
        for t in threading.enumerate()
        if t not in before
        and t.is_alive()
        and not t.name.startswith(("pydevd", "asyncio", "Dummy-"))
    ]


def _track_qthreads(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Record every QThread started from now on; returns what tells which still run. Only
    where a test module has loaded Qt: the engine's tests never import it."""
    qtcore = sys.modules.get("PySide6.QtCore")
    if qtcore is None:
        return list
    started: list[object] = []
    original = qtcore.QThread.start

    def start(self: object, *args: object) -> None:
        started.append(self)  # a strong reference, so the check can still ask it
        original(self, *args)

    monkeypatch.setattr(qtcore.QThread, "start", start)

    def running() -> list[str]:
        alive = []
        for thread in started:
            try:
                if thread.isRunning():  # type: ignore[attr-defined]
                    alive.append(thread.objectName() or repr(thread))  # type: ignore[attr-defined]
            except RuntimeError:  # its C++ object is gone, so it is not running
                continue
        return alive

    return running


@pytest.fixture(autouse=True)
def _no_threads_left_behind(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = set(threading.enumerate())
    qthreads = _track_qthreads(monkeypatch)
    yield
    deadline = time.monotonic() + 5.0
    while True:
        extra = _python_threads(before) + qthreads()
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not extra, f"test left threads running: {extra}"


@pytest.fixture
def models_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[os.PathLike[str]]:
    path = tmp_path_factory.mktemp("models")
    monkeypatch.setenv("TESSERA_MODELS_DIR", str(path))
    yield path


@pytest.fixture
def models(models_dir: os.PathLike[str], request: pytest.FixtureRequest) -> Path:
    """This test's models folder with the models its module declares in `MODELS` (file name →
    maker, tests/model_files.py), else the window's set (`WINDOW_MODELS`)."""
    from tests.model_files import WINDOW_MODELS, build_models

    return build_models(Path(models_dir), getattr(request.module, "MODELS", WINDOW_MODELS))


@pytest.fixture(scope="module")
def module_models(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """One models folder that all the tests of a module share, with the models it declares in
    `MODELS` (else the window's set): for a module whose engine lives across its tests."""
    from tests.model_files import WINDOW_MODELS, build_models

    folder = tmp_path_factory.mktemp("models")
    return build_models(folder, getattr(request.module, "MODELS", WINDOW_MODELS))


@pytest.fixture(scope="module")
def module_engine(module_models: Path, request: pytest.FixtureRequest) -> Engine:
    """One Engine on `module_models` for all the tests of a module, so its sessions are reused
    across them; the module's `ENGINE_SETTINGS` (a dict of EngineSettings fields) set it up."""
    from engine.api import Engine
    from engine.settings import EngineSettings

    options = getattr(request.module, "ENGINE_SETTINGS", {})
    return Engine(EngineSettings(models_dir=module_models, **options))


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Operation:
    """tests/toy_operation.py's fifth operation, registered for one test (the operation table
    is restored after it)."""
    from engine import operation_specs
    from tests.toy_operation import TOY

    monkeypatch.setattr(operation_specs, "_BY_NAME", dict(operation_specs._BY_NAME))
    return operation_specs.register(TOY)


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private XDG_RUNTIME_DIR (mode 0700) for this test and the processes it starts."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture
def processes_dir(runtime_dir: Path) -> Path:
    """Where the Tessera processes of `runtime_dir` keep their records."""
    return runtime_dir / "tessera" / "processes"
