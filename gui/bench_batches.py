"""`python -m gui.bench_batches`: the batch figures of issue #21, measured on a real window.

Two figures, printed as one JSON object on stdout (engine/bench/window_batches.py starts this
as its own process, offscreen, and makes them rows of `python -m engine bench`):

- **stall**: the longest time the event loop did not turn (a 10-ms timer's longest gap) while
  COUNT small images are added, run on a deliberately slow model, cancelled with Cancel all,
  and cleared; with the longest gap of each step, so a slow one is easy to find;
- **estimate**: one real job teaches the model's speed (after a 1×1 image, which must not
  poison it), then the figure above Run for a few more images against the time they took.

`--profile FILE` writes a cProfile of the stall scenario, for finding what costs per job.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ORT_LOGGING_LEVEL", "3")

from PySide6.QtCore import QCoreApplication, QSettings, QTimer
from PySide6.QtWidgets import QApplication

from engine.requests import Operation
from engine.samples.synthetic import slow_model, synthetic_upscaler
from engine.settings import EngineSettings

INSTANCE_ENV = "TESSERA_INSTANCE_NAME"  # gui/single_instance.py's per-instance suffix
TIMEOUT_S = 120.0


class Heartbeat:
    """The longest gap between ticks of a 10-ms timer: how long the event loop stalled, in all
    and in each named step."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.longest = 0.0
        self.step = ""
        self.steps: dict[str, float] = {}
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self.beat)
        self.timer.start()

    def beat(self) -> None:
        now = time.monotonic()
        gap = now - self.last
        self.last = now
        self.longest = max(self.longest, gap)
        if self.step:
            self.steps[self.step] = max(self.steps.get(self.step, 0.0), gap)

    def begin(self, step: str) -> None:
        """The gap up to now belongs to the step before; what follows, to `step`."""
        self.beat()
        self.step = step

    def stop(self) -> None:
        self.beat()
        self.timer.stop()


def wait(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QCoreApplication.processEvents()
        time.sleep(0.002)


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT_S) -> None:
    """Turn the event loop until `condition` holds, asked every 50 ms (a check over 1000 jobs
    must not count as the window's own stall)."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the window did not get there in time")
        wait(0.05)


def small_images(folder: Path, count: int, side: int = 8) -> list[Path]:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    picture = Image.new("RGB", (side, side), (120, 120, 120))
    paths = []
    for i in range(count):
        path = folder / f"p{i:04d}.png"
        picture.save(path)
        paths.append(path)
    return paths


@contextmanager
def a_window(home: Path, models: Path) -> Iterator[object]:
    """A real main window on settings of its own (nothing of the person's is read or kept)."""
    from gui.main_window import MainWindow
    from gui.settings import AppSettings

    os.environ.setdefault(INSTANCE_ENV, f"bench-batches-{os.getpid()}")
    settings = AppSettings(QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat))
    settings.pasted_dir = home / "pasted"
    win = MainWindow(
        settings,
        engine_settings=EngineSettings(models_dir=models),
        data_dir=home / "data",
        calibrate=False,
    )
    win.confirm_close = False
    win.resize(1280, 800)
    win.show()
    try:
        wait_until(lambda: win.inventory is not None, 30.0)
        yield win
    finally:
        win.close()


def choose(win: object, model: Path) -> None:
    panel = win.panel  # type: ignore[attr-defined]
    panel.select_operation(Operation.UPSCALE)
    if not (panel.select_model(str(model)) or panel.select_model(model.stem)):  # a file, or an id
        raise RuntimeError(f"{model.name} is not offered")


@dataclass
class StallFigures:
    count: int
    longest_ms: float
    steps_ms: dict[str, float] = field(default_factory=dict)


def run_jobs(win: object, paths: list[Path], timeout: float = TIMEOUT_S) -> float:
    """Queue `paths` in the window as Run would and wait for their jobs: the seconds they took.
    A job that failed is raised: a bench figure of failed jobs would mean nothing."""
    from gui.inputs import classify_paths

    jobs = win.jobs  # type: ignore[attr-defined]
    workspace = win.workspace  # type: ignore[attr-defined]
    sources = classify_paths(paths).sources
    workspace.add_sources(sources)
    began = time.monotonic()
    ids = jobs.queue(sources, workspace.settings)
    wait_until(lambda: all(workspace.jobs[i].state.ended for i in ids), timeout)
    failed = [workspace.jobs[i].message for i in ids if workspace.jobs[i].message]
    if failed:
        raise RuntimeError(failed[0])
    return time.monotonic() - began


def measure_stall(
    home: Path, count: int, profile: Path | None = None, shots: Path | None = None
) -> StallFigures:
    """COUNT small images added, run, cancelled and cleared: the event loop's longest gap."""
    models = home / "models"
    model = slow_model(models / "slow.onnx", layers=300)
    paths = small_images(home / "images", count)
    with a_window(home / "stall", models) as win:
        choose(win, model)
        # One job first: the process's first add loads Pillow's plug-ins and its first job
        # imports the engine and loads the model (one-time costs, not the batch's).
        warm = small_images(home / "warm", 1)
        win.accept_paths(warm, run=False)  # type: ignore[attr-defined]
        (first,) = win.run_selected()  # type: ignore[attr-defined]
        wait_until(lambda: win.workspace.jobs[first].state.ended)  # type: ignore[attr-defined]
        win.clear_finished()  # type: ignore[attr-defined]
        win.clear_inputs()  # type: ignore[attr-defined]
        wait(0.3)
        profiler = cProfile.Profile() if profile is not None else None
        if profiler is not None:
            profiler.enable()
        beat = Heartbeat()
        try:
            beat.begin("add")
            win.accept_paths(paths, run=False)  # type: ignore[attr-defined]
            sources = win.workspace.sources  # type: ignore[attr-defined]
            wait_until(lambda: len(sources) == count)  # the rest come a part per turn
            wait(1.0)  # thumbnails come in
            beat.begin("run")
            ids = win.run_selected()  # type: ignore[attr-defined]
            jobs = win.workspace.jobs  # type: ignore[attr-defined]
            beat.begin("running")
            wait_until(lambda: len(jobs) == count and jobs[ids[0]].state.ended)
            wait(1.5)  # a few jobs end meanwhile
            if shots is not None:
                from gui.messages import Topic

                win.notice.clear_topic(Topic.INPUTS)  # type: ignore[attr-defined]
                for size in ((1280, 800), (1024, 640)):
                    win.resize(*size)  # type: ignore[attr-defined]
                    wait(1.2)
                    name = f"batch-{size[0]}x{size[1]}.png"
                    QCoreApplication.sendPostedEvents()  # the layouts of rows just rebound
                    win.grab().save(str(shots / name))  # type: ignore[attr-defined]
            beat.begin("cancel all")
            win.job_list.cancel_all_button.click()  # type: ignore[attr-defined]
            wait_until(lambda: not win.jobs.active())  # type: ignore[attr-defined]
            wait(0.3)
            beat.begin("clear finished")
            win.clear_finished()  # type: ignore[attr-defined]
            wait(0.3)
            beat.begin("clear")
            win.clear_inputs()  # type: ignore[attr-defined]
            wait(0.3)
        finally:
            beat.stop()
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(str(profile))
        if len(ids) != count:
            raise RuntimeError(f"Run queued {len(ids)} jobs, not {count}")
    return StallFigures(
        count, beat.longest * 1000, {k: round(v * 1000, 1) for k, v in beat.steps.items()}
    )


@dataclass
class EstimateFigures:
    images: int
    estimate_s: float  # the figure above Run for the images, after one job and a 1×1 image
    measured_s: float  # from Run to the last of them done
    after_tiny_s: float  # the figure right after the 1×1 image ran
    after_first_s: float  # the figure right after the first job, before the 1×1 image

    @property
    def error(self) -> float:
        """How many times off the figure was, either way (1.0: exact)."""
        low, high = sorted((self.estimate_s, self.measured_s))
        return high / low if low > 0 else float("inf")


def measure_estimate(home: Path, model: Path | None, images: int) -> EstimateFigures:
    """One real job teaches the speed; a 1×1 image runs; then the estimate for `images` more
    against the time from Run to the last of them done."""
    from PIL import Image

    from gui.inputs import classify_paths

    models = home / "models"
    if model is None:
        model = synthetic_upscaler(models / "synthetic-x4.onnx")
    folder = home / "estimate"
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / "first.png"
    Image.effect_noise((320, 240), 40).convert("RGB").save(first)
    tiny = folder / "tiny.png"
    Image.new("RGB", (1, 1), (10, 20, 30)).save(tiny)
    sizes = [(256, 192), (384, 288), (320, 320), (448, 256), (200, 300), (352, 240)]
    batch = []
    for i in range(images):
        path = folder / f"b{i}.png"
        Image.effect_noise(sizes[i % len(sizes)], 40).convert("RGB").save(path)
        batch.append(path)
    with a_window(home / "estimate-window", model.parent) as win:
        choose(win, model)
        jobs = win.jobs  # type: ignore[attr-defined]
        workspace = win.workspace  # type: ignore[attr-defined]

        def run(paths: list[Path]) -> float:
            return run_jobs(win, paths)

        def figure(paths: list[Path]) -> float:
            guess = jobs.estimate(classify_paths(paths).sources, workspace.settings)
            if guess is None:
                raise RuntimeError("no estimate after a finished job")
            return float(guess.seconds)

        run([first])
        after_first = figure(batch)
        run([tiny])
        estimate = figure(batch)
        measured = run(batch)
    return EstimateFigures(images, estimate, measured, estimate, after_first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gui.bench_batches", description=__doc__)
    parser.add_argument("--count", type=int, default=1000, help="images in the stall scenario")
    parser.add_argument("--images", type=int, default=6, help="images the estimate is for")
    parser.add_argument("--model", type=Path, help="the estimate's model (default: synthetic)")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the stall scenario")
    parser.add_argument("--shots", type=Path, help="save screenshots of the batch running here")
    parser.add_argument("--skip-estimate", action="store_true")
    args = parser.parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="tessera-bench-batches-") as d:
        home = Path(d)
        stall = measure_stall(home, args.count, args.profile, args.shots)
        out["stall"] = asdict(stall)
        if not args.skip_estimate:
            estimate = measure_estimate(home, args.model, args.images)
            out["estimate"] = {**asdict(estimate), "error": estimate.error}
    del app
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
