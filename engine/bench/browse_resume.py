"""The model browser's start and the window's queue journal (issue #34), as bench rows.

Measured by `python -m gui.bench_browse_resume` in a process of its own (offscreen, temporary
folders): the engine imports no Qt. That process prints one JSON object; its figures become
the rows here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from engine.bench.table import Row, Table

TIMEOUT_S = 300
BROWSER_ROW = "model browser opened on the whole catalogue"
QUEUE_ROW = "queue journal: cost per job ({n}-job batch)"
READ_ROW = "queue journal: read at start, products checked whole, per job"


def measure_browse_resume(table: Table, count: int = 1000) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    command = [sys.executable, "-m", "gui.bench_browse_resume", "--count", str(count)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        why = str(e) if not isinstance(e, (ValueError, IndexError)) else "no figures printed"
        for name in (BROWSER_ROW, QUEUE_ROW.format(n=count), READ_ROW):
            table.add(Row(name, "skipped", "", "", None, why[-200:]))
        return
    b, q = figures["browser"], figures["queue"]
    table.add(
        Row(
            BROWSER_ROW,
            round(b["median_ms"], 1),
            "ms",
            "",
            None,
            f"{b['rows']} models, {b['snapshot_bytes'] // 1000} kB snapshot; the first open "
            f"(reads the file) {b['first_ms']:.0f} ms; offscreen",
        )
    )
    table.add(
        Row(
            QUEUE_ROW.format(n=count),
            round(q["end_append_us_per_job"], 1),
            "µs",
            "",
            None,
            f"an ending appended per job ({q['journal_bytes_per_job']:.0f} B/job); the Run's "
            f"line {q['record_batch_ms']:.1f} ms once, synced; one sync per 500 ms "
            f"{q['sync_ms']:.1f} ms",
        )
    )
    table.add(Row(READ_ROW, round(q["read_ms_per_job"] * 1000, 1), "µs", "", None, "PNG products"))
