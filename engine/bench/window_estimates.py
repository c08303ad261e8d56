"""The window's estimate against the time a batch took, after one job of each size and after a
restart (issue #35: 64×48 was 2.1× off, 2.9× after a restart; 1000 small images "about 20 s"
for 80 s after one real job).

`python -m gui.bench_estimates` measures it in a process of its own (the engine imports no Qt),
twice on the same data folders: first one job of each size teaches the speed and the figure for
a few more is timed, then a new process reads the kept speeds and is timed again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from engine.bench.table import Row, Table

INSTANCE_ENV = "TESSERA_INSTANCE_NAME"  # gui/single_instance.py's per-instance suffix
TIMEOUT_S = 3600
GOAL = 2.0
ROW = "estimate error after one job, {w}×{h}"
SMALL_ROW = "estimate error for 20 64×48 after one {w}×{h} job"
RESTART_ROW = "estimate error after a restart, {w}×{h}"


def _run(args: list[str]) -> list[dict[str, float]]:
    env = dict(os.environ)
    env.update({"QT_QPA_PLATFORM": "offscreen", INSTANCE_ENV: f"bench-estimates-{os.getpid()}"})
    done = subprocess.run(
        [sys.executable, "-m", "gui.bench_estimates", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    try:
        return list(json.loads(done.stdout.strip().splitlines()[-1])["sizes"])
    except (ValueError, IndexError, KeyError) as e:
        raise RuntimeError(f"no figures printed: {done.stderr.strip()[-200:]}") from e


def _row(
    table: Table, name: str, estimate: float, measured: float, error: float, note: str
) -> None:
    table.add(
        Row(
            name,
            round(error, 2),
            "×",
            "<= 2×",
            error <= GOAL,
            f"estimated {estimate:.2f} s, took {measured:.2f} s; {note}",
        )
    )


def measure_estimates(
    table: Table, model: Path | None, sizes: list[tuple[int, int]], images: list[int]
) -> None:
    """Rows for the figure above Run against the time taken, per size, after one job of it
    (and, for a real size, for 20 small images after it), then after a restart."""
    what = "synthetic ×4" if model is None else model.stem
    args = ["--sizes", *[f"{w}x{h}" for w, h in sizes], "--images", *map(str, images)]
    if model is not None:
        args += ["--model", str(model)]
    with tempfile.TemporaryDirectory(prefix="tessera-bench-estimates-") as home:
        try:
            first = _run([*args, "--home", home])
            again = _run([*args, "--home", home, "--restart"])
        except (OSError, subprocess.TimeoutExpired, RuntimeError) as e:
            table.add(Row(ROW.format(w="each", h="size"), "skipped", "", "<= 2×", None, str(e)))
            return
    for one in first:
        w, h, n = int(one["width"]), int(one["height"]), int(one["images"])
        note = f"{n} images after one of {one['first_s']:.2f} s, {what}"
        _row(table, ROW.format(w=w, h=h), one["estimate_s"], one["measured_s"], one["error"], note)
        if one["tiny_measured_s"] > 0:
            _row(
                table,
                SMALL_ROW.format(w=w, h=h),
                one["tiny_estimate_s"],
                one["tiny_measured_s"],
                one["tiny_error"],
                what,
            )
    for one in again:
        w, h, n = int(one["width"]), int(one["height"]), int(one["images"])
        note = f"{n} images in a new process, the model not loaded yet, {what}"
        _row(
            table,
            RESTART_ROW.format(w=w, h=h),
            one["estimate_s"],
            one["measured_s"],
            one["error"],
            note,
        )
