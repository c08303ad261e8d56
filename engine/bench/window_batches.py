"""Batch figures of the window (issue #21): the longest event-loop stall while 1000 jobs are
queued, cancelled and cleared, and an estimate's error after one job.

Both are measured by `python -m gui.bench_batches` in a process of its own (offscreen, its own
temporary settings, data and models folders, and the bench's own single-instance name), as
engine/bench/startup.py starts the app: the engine imports no Qt. That process prints one JSON
object; its figures become the rows here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.bench.table import Row, Table

INSTANCE_ENV = "TESSERA_INSTANCE_NAME"  # gui/single_instance.py's per-instance suffix
TIMEOUT_S = 600
STALL_GOAL_MS = 100.0
ESTIMATE_GOAL = 2.0
STALL_ROW = "longest event-loop stall, {n} jobs queued, cancelled and cleared"
ESTIMATE_ROW = "estimate error after one job"


def measure_batches(table: Table, count: int, model: Path | None = None, images: int = 6) -> None:
    """Rows for `count` small images added, run, cancelled and cleared, and for the figure
    above Run after one job of `model` (a synthetic upscaler when None) against the time the
    next `images` images took."""
    env = dict(os.environ)
    env.update({"QT_QPA_PLATFORM": "offscreen", INSTANCE_ENV: f"bench-batches-{os.getpid()}"})
    command = [
        sys.executable,
        "-m",
        "gui.bench_batches",
        "--count",
        str(count),
        "--images",
        str(images),
    ]
    if model is not None:
        command += ["--model", str(model)]
    stall_name = STALL_ROW.format(n=count)
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        why = str(e) if not isinstance(e, (ValueError, IndexError)) else "no figures printed"
        for name, goal in ((stall_name, "<= 100 ms"), (ESTIMATE_ROW, "<= 2×")):
            table.add(Row(name, "skipped", "", goal, None, why[-200:]))
        return
    stall = figures["stall"]
    longest = float(stall["longest_ms"])
    steps = ", ".join(f"{k} {v:.0f}" for k, v in stall["steps_ms"].items())
    table.add(
        Row(
            stall_name,
            longest,
            "ms",
            "<= 100 ms",
            longest <= STALL_GOAL_MS,
            f"a 10-ms timer's longest gap; per step (ms): {steps}; offscreen, shared machine",
        )
    )
    estimate = figures.get("estimate")
    if estimate is None:
        return
    error = float(estimate["error"])
    table.add(
        Row(
            ESTIMATE_ROW,
            error,
            "×",
            "<= 2×",
            error <= ESTIMATE_GOAL,
            f"{estimate['images']} images: estimated {estimate['estimate_s']:.2f} s, took "
            f"{estimate['measured_s']:.2f} s (after a 1×1 image: {estimate['after_tiny_s']:.2f} s)"
            f", {'synthetic ×4' if model is None else model.stem}",
        )
    )
