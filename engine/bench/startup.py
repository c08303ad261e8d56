"""Start-up and idle figures (issue #24): the window's time to appear, the command line's time
to its first run, and what an idle window holds.

Each is a real process: the app (`python -m gui`, offscreen) started with the start-up probe
(gui/app.py prints "shown" once its window is on screen), the CLI with `--json`. Their own
data and settings folders are temporary and their single-instance name is the bench's own, so
a Tessera the person has open is neither used nor disturbed. "Cold" is the first start in this
bench run (the system's file cache may hold the files already: it is not a first boot); "warm"
the best of the next starts.

Both start from compiled bytecode, as an installed Tessera does (pip and the packaged app
compile it; scripts/start.sh too): where PYTHONDONTWRITEBYTECODE is set, as on some build
machines, every start would otherwise compile the engine's and the GUI's sources again, about
0.1 s of each start (measured on 2 cores).
"""

from __future__ import annotations

import compileall
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from engine.bench.table import Row, Table

STARTUP_PROBE_ENV = "TESSERA_STARTUP_PROBE"  # gui/app.py's hook
INSTANCE_ENV = "TESSERA_INSTANCE_NAME"  # gui/single_instance.py's per-instance suffix
SHOWN_TIMEOUT_S = 60.0


@functools.cache
def compile_bytecode() -> bool:
    """Compile the engine's and the GUI's sources into their __pycache__ (py_compile writes
    them whatever PYTHONDONTWRITEBYTECODE says; the interpreter reads them either way).
    False where a folder cannot be written: the starts then compile as they go."""
    done = True
    for name in ("engine", "gui"):
        spec = importlib.util.find_spec(name)  # finds the package without importing it (Qt)
        if spec is None or not spec.submodule_search_locations:
            continue
        for folder in spec.submodule_search_locations:
            done = bool(compileall.compile_dir(folder, quiet=2)) and done
    return done


def _app_env(home: Path, models_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "QT_QPA_PLATFORM": "offscreen",
            STARTUP_PROBE_ENV: "0",
            INSTANCE_ENV: f"bench-{os.getpid()}",
            "TESSERA_MODELS_DIR": str(models_dir),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"),
        }
    )
    return env


def _start_app(env: dict[str, str]) -> tuple[subprocess.Popen[str], float]:
    """The app started, and the seconds until its window was shown."""
    start = time.perf_counter()
    app = subprocess.Popen(
        [sys.executable, "-m", "gui"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert app.stdout is not None
    for line in app.stdout:  # blocks until the probe speaks or the app ends
        if line.strip() == "shown":
            return app, time.perf_counter() - start
    app.wait()
    app.stdout.close()
    raise RuntimeError(f"the app ended (exit {app.returncode}) before showing its window")


def _stop(app: subprocess.Popen[str]) -> None:
    app.terminate()
    try:
        app.wait(timeout=10)
    except subprocess.TimeoutExpired:
        app.kill()
        app.wait()
    if app.stdout is not None:
        app.stdout.close()


def measure_window(table: Table, models_dir: Path, idle_s: float, warm_starts: int) -> None:
    """Time to a shown window (cold, then the best of `warm_starts`), and over `idle_s` of
    the last start's idling: its RSS at the end and its CPU time, per minute."""
    compiled = compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="tessera-bench-app-") as d:
        env = _app_env(Path(d), models_dir)
        try:
            app, cold = _start_app(env)
            _stop(app)
            warm = []
            for i in range(warm_starts):
                app, seconds = _start_app(env)
                warm.append(seconds)
                if i < warm_starts - 1:
                    _stop(app)
        except (OSError, RuntimeError) as e:
            table.add(Row("window shown (warm)", "skipped", "", "<= 1.5 s", None, str(e)))
            return
        try:
            proc = psutil.Process(app.pid)
            time.sleep(1.0)  # the first turn of the event loop's deferred work is not idling
            before = proc.cpu_times()
            time.sleep(idle_s)
            after = proc.cpu_times()
            rss = proc.memory_info().rss
        finally:
            _stop(app)
    best = min(warm)
    source = "compiled bytecode" if compiled else "sources compiled as they load"
    table.add(
        Row("window shown (cold: first start of this run)", cold, "s", note=f"offscreen; {source}")
    )
    table.add(
        Row(
            "window shown (warm)",
            best,
            "s",
            "<= 1.5 s",
            best <= 1.5,
            f"best of {len(warm)} starts, offscreen, {source}; the machine is shared",
        )
    )
    cpu = (after.user + after.system) - (before.user + before.system)
    per_minute = cpu * 60 / idle_s
    table.add(
        Row(
            "idle window RSS",
            rss / 2**20,
            "MiB",
            "<= 120 MB",
            rss <= 120e6,
            f"after {idle_s + 1:.0f} s idle, no model loaded, {models_dir.name}/ listed",
        )
    )
    table.add(
        Row(
            "idle window CPU time per minute",
            per_minute,
            "s",
            "<= 0.2 s",
            per_minute <= 0.2,
            f"{cpu:.3f} s over {idle_s:.0f} s"
            + ("" if idle_s >= 60 else ", scaled to a minute (--quick)"),
        )
    )


def measure_cli(table: Table, model: Path, image: Path, out: Path, repeats: int) -> None:
    """Command line to its first run: `python -m engine run upscale … --json` from the
    process's start (best of `repeats`), the model's kept optimised copy already made."""
    compiled = compile_bytecode()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "engine",
                "run",
                "upscale",
                str(image),
                "--model",
                str(model),
                "--out",
                str(out),
                "--json",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        try:
            result = json.loads(done.stdout)
            timings = result["timings"]
            # Everything after the first run (the rest of the request, the exit) is taken off.
            first = wall - (timings["total_s"] - timings["first_run_s"])
        except (ValueError, KeyError, IndexError, TypeError):
            table.add(
                Row(
                    "command line to first run",
                    "skipped",
                    "",
                    "<= 0.5 s",
                    None,
                    f"exit {done.returncode}: {done.stderr.strip()[-200:]}",
                )
            )
            return
        for p in out.glob("*"):
            p.unlink()
        best = min(best, first)
    table.add(
        Row(
            "command line to first run",
            best,
            "s",
            "<= 0.5 s",
            best <= 0.5,
            f"best of {repeats}: process start → the first model run (its exit counted), "
            f"{model.stem}, a small image; "
            + ("compiled bytecode" if compiled else "sources compiled as they load"),
        )
    )
