"""The idle window holds nothing (issue #22 item 3, M6): the real app, offscreen, with Photo ×4
chosen, loads no model at start — it used to load it to time two tiny images and keep it —
and holds none again after Unload; this process's record (`engine memory`) says the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from engine.runtime import records
from engine.runtime.sessions import SessionInfo
from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.model_files import upscaler
from tests.processes import end_process
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory, wait_ended

JOB_MS = 60_000
ROOT = Path(__file__).resolve().parents[1]


MODELS = {"realesrgan-x4plus.onnx": upscaler(4)}  # offered as Photo ×4


def loaded(qtbot: QtBot, win: MainWindow) -> tuple[SessionInfo, ...]:
    """The sessions the window's engine holds, asked of the engine thread itself."""
    with qtbot.waitSignal(win.engine.sessionsChanged, timeout=10_000) as blocker:
        win.engine.refresh_sessions()
    return tuple(blocker.args[0])


def test_the_idle_window_holds_no_model_at_start_nor_after_unload(
    qtbot: QtBot, make_window: WindowFactory, tmp_path: Path
) -> None:
    win = make_window(calibrate=True)  # as the app starts: speed measuring on
    settings = win.panel.job_settings()
    assert settings is not None and settings.model == "realesrgan-x4plus"
    # Start-up's own work ends when the task thread (model list, thumbnails) has nothing left
    # and the engine thread is idle; only then is "holds no model" meaningful.
    qtbot.waitUntil(lambda: win.tasks.pending() == 0 and not win.engine.is_busy(), timeout=JOB_MS)
    assert loaded(qtbot, win) == ()
    assert records.THIS.record().sessions == ()
    assert win.models_button.text() == "0 models loaded"

    # A job the person asks for loads the model; Unload hands it back.
    image = photo(tmp_path / "p.png", 40, 30)
    win.accept_paths([image])
    qtbot.waitUntil(lambda: bool(win.workspace.sources), timeout=10_000)
    win.jobs.queue(list(win.workspace.sources.values()), settings)
    wait_ended(qtbot, win)
    assert [s.model_name for s in loaded(qtbot, win)] == ["realesrgan-x4plus.onnx"]
    assert [s.model for s in records.THIS.record().sessions] == ["realesrgan-x4plus"]
    with qtbot.waitSignal(win.engine.sessionsChanged, timeout=10_000):
        win.engine.unload_all()
    assert loaded(qtbot, win) == ()
    assert records.THIS.record().sessions == ()
    assert win.models_button.text() == "0 models loaded"


def _app_env(tmp_path: Path, models: Path, name: str) -> dict[str, str]:
    """The real app's environment: offscreen, its own runtime folder, settings and instance."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_RUNTIME_DIR": str(run),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "TESSERA_MODELS_DIR": str(models),
        "TESSERA_INSTANCE_NAME": f"{name}-{os.getpid()}",
    }


@contextmanager
def _started_app(
    env: dict[str, str], *, stdout: int, stderr: int
) -> Iterator[subprocess.Popen[str]]:
    """The real app (`python -m gui`) in its own process, ended by SIGTERM as a person's
    session would end it (killed if it does not go within 30 s)."""
    app = subprocess.Popen(
        [sys.executable, "-m", "gui"], stdout=stdout, stderr=stderr, text=True, env=env, cwd=ROOT
    )
    try:
        yield app
    finally:
        end_process(app)


def test_the_started_app_process_holds_no_model_as_engine_memory_says(
    models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real app in its own process (offscreen, a private instance and settings): right
    after start `engine memory` lists it with no model, and its record goes when it ends."""
    env = _app_env(tmp_path, models, "idle-test")
    run = Path(env["XDG_RUNTIME_DIR"])
    records_dir = run / "tessera" / "processes"
    with _started_app(env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as app:
        _wait_for(lambda: (records_dir / f"{app.pid}.json").exists(), app, "the app's record")
        # The child probe of the runtimes is start-up's last step (after the window and its
        # model list, where the old start-up loaded Photo ×4): once it is logged, start-up is over.
        log_file = Path(env["XDG_DATA_HOME"]) / "tessera" / "logs" / "tessera.log"
        _wait_for(lambda: "runtimes probed" in _read(log_file), app, "the runtime probe")
        done = subprocess.run(
            [sys.executable, "-m", "engine", "memory", "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        (listed,) = json.loads(done.stdout)["processes"]
        assert listed["pid"] == app.pid and listed["kind"] == "app"
        assert listed["label"] == f"the app (pid {app.pid})"
        assert listed["sessions"] == []
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    records.read_all()  # the app's own exit removes it; if a signal ended it, this sweeps it
    assert not (records_dir / f"{app.pid}.json").exists()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _wait_for(
    happened: Callable[[], bool], app: subprocess.Popen[str], what: str, timeout: float = 60
) -> None:
    """Wait until `happened()` (checked every 50 ms) while the app runs, at most `timeout`."""
    deadline = time.monotonic() + timeout
    while not happened():
        assert app.poll() is None, f"the app ended before {what}: {app.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.05)
    assert app.poll() is None, f"the app ended: {app.communicate()}"


def _mapped(pid: int, marker: str) -> bool:
    """Whether a shared library whose path holds `marker` is mapped into process `pid` (an
    imported extension module is: this is `sys.modules` seen from outside)."""
    return marker in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_the_idle_app_has_not_imported_onnxruntime_and_still_shows_the_probed_runtimes(
    models: Path, tmp_path: Path
) -> None:
    """Issue #24: the runtime probe runs in a child process after the window is shown, so the
    idle window never loads ONNX Runtime (~25 MB); its reports still reach the window (the log
    says what arrived, and the device list is filled from them)."""
    env = {**_app_env(tmp_path, models, "idle-ort"), "TESSERA_STARTUP_PROBE": "0"}
    log_file = tmp_path / "data" / "tessera" / "logs" / "tessera.log"
    with _started_app(env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as app:
        assert app.stdout is not None
        assert app.stdout.readline().strip() == "shown", app.communicate()
        # The probe is start-up's last step: logged, the window and its model list are done.
        _wait_for(lambda: "runtimes probed" in _read(log_file), app, "the runtime probe")
        assert not _mapped(app.pid, "onnxruntime"), "the idle window loaded ONNX Runtime"
        assert not _mapped(app.pid, "onnx_cpp2py_export"), "the idle window loaded onnx"
        # HTTP and TLS come with the first download, not the window (3 MiB of the idle RSS).
        assert not _mapped(app.pid, "/_ssl."), "the idle window loaded TLS for downloads"
        assert "runtimes probed in a child process: cpu/cpu ok" in log_file.read_text()


def test_the_child_probe_fills_the_device_list(qtbot: QtBot, make_window: WindowFactory) -> None:
    from gui.app import RuntimeProber

    win = make_window(probe_runtimes=False)
    assert win.panel.reports == ()
    prober = RuntimeProber(win.engine, win)
    with qtbot.waitSignal(win.engine.runtimesProbed, timeout=90_000) as blocker:
        prober.start()
    reports = blocker.args[0]
    assert any(r.device == "cpu" and r.ok for r in reports)
    assert win.panel.reports == tuple(reports)
    assert win.panel.device.count() >= 1 and win.panel.device.itemText(0) == "CPU"
