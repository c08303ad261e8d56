"""`python -m engine bench --quick --json` end to end on this machine.

Only what the bench must do is asserted — every figure of DESIGN §7 present and a finite
number, the JSON alone on stdout, the cached request creating no session, the tiled result
matching the whole one — never how fast or how small a figure is (that is the bench's report).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from engine.cli import main as cli_main
from engine.runtime import optimize
from engine.samples.background_models import make_u2net

FIGURES = (
    "overhead vs bare ORT, synthetic-x4",
    "overhead vs bare ORT, u2netp, 640×480",
    "engine work beside its ORT runs, synthetic-x4",
    "engine work beside its ORT runs, u2netp, 640×480",
    "cold load (session creation)",
    "cached request: request → first run (median of 10)",
    "peak RSS above loaded, ×4 of 768² / output size",
    "cancel between runs: cancel → request ended",
    "cancel inside a run (terminate) latency",
    "RSS growth over 12 repeated jobs after warm-up",
    "tiled (96 px, overlap 32) vs whole: max |diff|",
    "preview: first pixels, 600×440 view of a 2 Mpx JPEG",
    "preview: pan → first pixels (decoded photo kept)",
    "preview: pan → the whole view refined",
    "preview vs final product: max |diff|, upscale, default tiles",
    # Issue 24: start-up and idle, each a real process; the bench's own duration.
    "window shown (cold: first start of this run)",
    "window shown (warm)",
    "idle window RSS",
    "idle window CPU time per minute",
    "command line to first run",
    # Issue 21: the window with a batch (200 jobs in --quick), the estimate after one job.
    "longest event-loop stall, 200 jobs queued, cancelled and cleared",
    "estimate error after one job",
    # Issue 35: the estimate after one job of each size, for small images after a real one,
    # and after a restart (a new process reading the kept speeds).
    "estimate error after one job, 1024×768",
    "estimate error for 20 64×48 after one 1024×768 job",
    "estimate error after a restart, 64×48",
    "estimate error after a restart, 1024×768",
    "bench duration (--quick)",
    "bytes on the machine, app + engine run on one model",
    "a request through the app vs in-process",
    # Issue 34: what --resume adds per image, and a watched folder's latency.
    "resume: overhead per image",
    "watch: file landed → job queued, interval 0.5 s",
)


def test_quick_bench_reports_every_figure_as_json(
    models_dir: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # No upscaler installed: the synthetic ×4 network stands in. A contract U²-Net-p (same
    # input and outputs as the starter model) gives the background-removal overhead row.
    make_u2net(Path(models_dir) / "u2netp.onnx")
    assert cli_main(["bench", "--quick", "--json"]) == 0
    captured = capsys.readouterr()

    data = json.loads(captured.out)  # nothing but the JSON on stdout
    assert data["models"] == "synthetic"
    rows = {row["name"]: row for row in data["rows"]}
    for figure in FIGURES:
        matches = [name for name in rows if name.startswith(figure)]
        assert matches, f"{figure!r} missing from {sorted(rows)}"
        value = rows[matches[0]]["value"]
        assert isinstance(value, int | float) and math.isfinite(value), (figure, value)

    # The printed table went to stderr, with the stand-in said out loud.
    assert "synthetic ×4 network stands in" in captured.err
    assert "cached request: request → first run" in captured.err

    cached = rows["cached request: request → first run (median of 10)"]
    assert cached["note"] == "sessions created 1, reused 10"  # M1: one load, then reuse
    assert rows["tiled (96 px, overlap 32) vs whole: max |diff|"]["value"] <= 1
    assert rows["tiled (96 px, overlap 32) vs whole: max |diff|"]["met"] is True
    identity = rows["preview vs final product: max |diff|, upscale, default tiles"]
    assert identity["value"] == 0 and identity["met"] is True  # the preview is the product's
    assert "photo decoded again 0 times" in rows[FIGURES[12]]["note"]
    (overhead,) = [r for n, r in rows.items() if n.startswith(FIGURES[0])]
    assert "(6 runs)" in overhead["name"]  # 256×192 at tile 128 with overlap: 3 × 2 tiles
    (u2netp,) = [r for n, r in rows.items() if n.startswith(FIGURES[1])]
    assert "(1 run)" in u2netp["name"]  # one 320² run per image, as the engine fed it
    joined = next(r for n, r in rows.items() if n.startswith("bytes on the machine"))
    assert joined["note"].startswith("joined (app (pid ")  # the command line did join the app
    # Nothing measured is left behind in the models folder.
    # (The hidden folder is the engine's own: the contract it read, kept for the next start.)
    left = sorted(p.name for p in Path(models_dir).iterdir() if p.name != optimize.FOLDER)
    assert left == ["u2netp.onnx"]
