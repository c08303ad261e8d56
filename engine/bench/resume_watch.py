"""Bench rows of resumed batches and watched folders (issue #34).

- the resume's overhead per image: `plan_resume` over a batch whose products are all there
  (each input named, its products found and checked whole), per input — what `--resume`
  adds to every image of a batch before any model loads;
- the watch's latency: from a file's last byte written to `FolderWatch.poll` taking it, with
  the command line's loop (look, then wait the interval) at its default interval and at a
  short one, over files landing at every phase of the loop.

`python -m engine.bench.resume_watch` prints just these rows.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image

from engine.api import Engine
from engine.bench.table import Row, Table, scratch
from engine.options import OutputOptions
from engine.requests import Operation, OperationRequest
from engine.resume import plan_resume
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from engine.watch import FolderWatch
from engine.watch_cli import DEFAULT_INTERVAL_S


def _images(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"img{i:04d}.png"
        Image.fromarray(rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def measure_resume(table: Table, work: Path, count: int = 200) -> None:
    model = make_upscaler(work / "up2.onnx", scale=2)
    inputs = _images(work / "resume-in", count)
    out = work / "resume-out"
    request = OperationRequest(
        Operation.UPSCALE, str(model), tuple(inputs), output_dir=out, output=OutputOptions()
    )
    started = time.perf_counter()
    result = Engine(EngineSettings(models_dir=work)).run(request)
    run_ms = (time.perf_counter() - started) * 1000 / count
    assert result.ok, result.failures
    times = []
    for _ in range(5):
        began = time.perf_counter()
        plan = plan_resume(request, EngineSettings(models_dir=work))
        times.append((time.perf_counter() - began) * 1000 / count)
        assert plan.request is None and len(plan.skipped) == count
    per_image = statistics.median(times)
    table.add(
        Row(
            f"resume: overhead per image ({count} done, median of 5)",
            round(per_image, 3),
            "ms",
            note=f"a tiny ×2 contract model's run is {run_ms:.1f} ms per image",
        )
    )


def measure_watch_latency(
    table: Table, work: Path, interval: float = DEFAULT_INTERVAL_S, files: int = 8
) -> None:
    folder = work / f"watch-{interval:g}"
    folder.mkdir()
    watch = FolderWatch(folder)
    landed: dict[str, float] = {}
    taken: dict[str, float] = {}
    stop = threading.Event()

    def loop() -> None:  # the command line's loop: look, then wait the interval
        while not stop.is_set():
            for arrival in watch.poll():
                taken[arrival.path.name] = time.monotonic()
            stop.wait(interval)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)
    try:
        for i in range(files):
            time.sleep(interval * (0.3 + 0.9 * i / files))  # land at every phase of the loop
            name = f"land{i}.png"
            Image.fromarray(data).save(folder / name)
            landed[name] = time.monotonic()
        deadline = time.monotonic() + 10 * interval + 5
        while len(taken) < files and time.monotonic() < deadline:
            time.sleep(interval / 4)
    finally:
        stop.set()
        thread.join()
    latencies = [(taken[n] - landed[n]) * 1000 for n in landed if n in taken]
    table.add(
        Row(
            f"watch: file landed → job queued, interval {interval:g} s (median of {files})",
            round(statistics.median(latencies), 1) if latencies else "n/a",
            "ms",
            note=f"max {max(latencies):.0f} ms; {len(latencies)} of {files} taken"
            if latencies
            else "none taken",
        )
    )


def measure(table: Table, work: Path, quick: bool) -> None:
    measure_resume(table, work, 100 if quick else 200)
    measure_watch_latency(table, work, DEFAULT_INTERVAL_S, 4 if quick else 8)
    if not quick:
        measure_watch_latency(table, work, 0.1, 8)


if __name__ == "__main__":
    table = Table()
    with scratch() as work:
        measure(table, work, quick=False)
