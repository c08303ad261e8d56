"""Bench rows of the command line joining the running app (issue #22 item 1, M6).

The real app is started offscreen (`python -m gui`, a private runtime folder, settings folders
and instance name in the scratch folder), holding one model after a first request. Then:

- bytes on the machine: the sum of both processes' RSS once a command-line run of the same
  model has ended its work — joined (the app runs it) against `--standalone` (a second copy);
- the extra time of a request sent through the app against the same request in-process on a
  warm engine (small image, median of 10);
- the time a whole joined `engine run` spends beyond a standalone one (a photo of a few hundred
  pixels a side, the model already loaded in the app; best of a few, alternating).

Where the app cannot start here (no Qt), the rows say so instead.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from engine import __version__, join, wire
from engine.api import Engine
from engine.bench.table import Row, Table
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Result,
)
from engine.samples.synthetic import test_image
from engine.settings import EngineSettings

MIB = 1024 * 1024
START_S = 90.0
ROOT = Path(__file__).resolve().parents[2]

# engine run in a child that reports its own RSS after its work (before the interpreter ends).
CLI_WITH_RSS = """
import sys, psutil
from engine.cli import main
code = main(sys.argv[1:])
print("RSS", psutil.Process().memory_info().rss, file=sys.stderr, flush=True)
sys.exit(code)
"""


class _App:
    """The real app in a child process, offscreen, with a scratch home of its own."""

    def __init__(self, work: Path, model: Path) -> None:
        run = work / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "QT_QPA_PLATFORM": "offscreen",
            "XDG_RUNTIME_DIR": str(run),
            "XDG_CONFIG_HOME": str(work / "config"),
            "XDG_DATA_HOME": str(work / "data"),
            "TESSERA_MODELS_DIR": str(model.parent),
            "TESSERA_INSTANCE_NAME": f"bench-{os.getpid()}",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gui"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.env,
            cwd=ROOT,
        )
        self.record = run / "tessera" / "processes" / f"{self.process.pid}.json"
        self.socket: Path | None = None

    def ready(self) -> bool:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                endpoint = json.loads(self.record.read_text()).get("endpoint")
            except (OSError, ValueError):
                endpoint = None
            if endpoint:
                self.socket = Path(endpoint)
                return True
            time.sleep(0.1)
        return False

    def rss(self) -> int:
        return int(psutil.Process(self.process.pid).memory_info().rss)

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _cli_rss(app: _App, args: list[str]) -> tuple[int, str]:
    """Run `engine run …` in a child; its RSS after the work, and where it ran."""
    done = subprocess.run(
        [sys.executable, "-c", CLI_WITH_RSS, "run", *args, "--json"],
        capture_output=True,
        text=True,
        env=app.env,
        cwd=ROOT,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"engine run failed ({done.returncode}): {done.stderr[-500:]}")
    rss = next(int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("RSS"))
    return rss, str(json.loads(done.stdout).get("engine", ""))


def _through_app(socket: Path, model: Path, request: OperationRequest) -> float:
    """Seconds for one request sent to the app, from connecting to its result."""
    start = time.perf_counter()
    hello = wire.Hello(os.getpid(), __version__, models_dir=os.path.realpath(model.parent))
    joined = join.connect(hello, socket)
    if not isinstance(joined, join.Joined):
        raise RuntimeError(f"the app did not take the request: {joined}")
    try:
        joined.send(wire.for_sending(request))
        while True:
            message = joined.receive(timeout=60)
            if isinstance(message, Result):
                break
            if isinstance(message, (OperationFailure, OperationCancellation)):
                raise RuntimeError(f"the app's job ended without a result: {message}")
    finally:
        joined.close()
    return time.perf_counter() - start


def _whole_run(app: _App, args: list[str]) -> tuple[float, str]:
    """Wall seconds of one `python -m engine run …` in a child, start to exit, and where it
    ran."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", *args, "--json"],
        capture_output=True,
        text=True,
        env=app.env,
        cwd=ROOT,
        timeout=600,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"engine run failed ({done.returncode}): {done.stderr[-500:]}")
    return took, str(json.loads(done.stdout).get("engine", ""))


def measure_joined_run(
    table: Table, app: _App, model: Path, label: str, folder: Path, repeats: int
) -> None:
    """A whole joined `engine run` against a standalone one of the same request: process
    start, finding the app, the run and the product; standalone loads its model (from the
    kept optimised copy), joined finds it loaded in the app."""
    photo = test_image(folder / "photo.png", 384, 256)
    joined: list[float] = []
    alone: list[float] = []
    where = ""
    for n in range(repeats):  # alternating: a machine that slows down slows both
        common = ["upscale", str(photo), "--model", str(model)]
        took, where = _whole_run(app, [*common, "--out", str(folder / f"whole-j{n}")])
        joined.append(took)
        took, _ = _whole_run(app, [*common, "--out", str(folder / f"whole-s{n}"), "--standalone"])
        alone.append(took)
    extra = (min(joined) / min(alone) - 1) * 100
    table.add(
        Row(
            f"a joined engine run beyond a standalone one ({label}, 384×256, best of {repeats})",
            extra,
            "%",
            "<= 5 %",
            extra <= 5,
            f"joined ({where}) {min(joined):.2f} s, standalone {min(alone):.2f} s, whole "
            "processes; the app holds the model already",
        )
    )


def measure_join(
    table: Table,
    settings: EngineSettings,
    model: Path,
    label: str,
    work: Path,
    repeats: int = 3,
) -> None:
    folder = work / "join"
    folder.mkdir(parents=True, exist_ok=True)
    app = _App(folder, model)
    try:
        if not app.ready():
            table.say("(join rows skipped: the app did not start here)")
            return
        image = test_image(folder / "join.png", 96, 64)
        args = [str(image), "--model", str(model), "--out", str(folder / "out")]
        _cli_rss(app, ["upscale", *args])  # the app loads the model once
        joined_cli, where = _cli_rss(app, ["upscale", *args])
        joined_total = joined_cli + app.rss()
        alone_cli, _ = _cli_rss(app, ["upscale", *args, "--standalone"])
        alone_total = alone_cli + app.rss()
        table.add(
            Row(
                f"bytes on the machine, app + engine run on one model ({label})",
                joined_total / MIB,
                "MiB",
                "< standalone",
                joined_total < alone_total,
                f"joined ({where}): app {(joined_total - joined_cli) / MIB:.0f} + command line "
                f"{joined_cli / MIB:.0f}; standalone: {alone_total / MIB:.0f} MiB "
                f"(command line {alone_cli / MIB:.0f})",
            )
        )

        assert app.socket is not None
        small = test_image(folder / "small.png", 32, 24)
        request = OperationRequest(
            Operation.UPSCALE, str(model), (small,), output_dir=folder / "timed"
        )
        engine = Engine(settings)
        engine.run(request)  # warm: loaded, probed, optimised
        _through_app(app.socket, model, request)
        local = []
        remote = []
        for _ in range(10):
            start = time.perf_counter()
            engine.run(request)
            local.append(time.perf_counter() - start)
            remote.append(_through_app(app.socket, model, request))
        engine.unload_all()
        extra = (statistics.median(remote) - statistics.median(local)) * 1000
        table.add(
            Row(
                f"a request through the app vs in-process ({label}, 32×24, median of 10)",
                extra,
                "ms",
                "",
                None,
                f"through the app {statistics.median(remote) * 1000:.1f} ms, in-process "
                f"{statistics.median(local) * 1000:.1f} ms",
            )
        )
        measure_joined_run(table, app, model, label, folder, repeats)
    finally:
        app.end()
