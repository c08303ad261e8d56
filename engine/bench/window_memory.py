"""What the window holds with a large product in view (issue #21): the app's RSS above its idle
size after a ×2 upscale of a 6000×4000 image with its 12000×8000 product beside it (fit, then
1:1 and zoomed), and after Unload all.

The window is a real process (`python -m gui.bench_pictures`, offscreen, on temporary data
and settings folders, as the start-up rows run it) that runs the job and prints its readings as
one JSON line. The input is written here, band by band; the model is a small ×2 network made
with onnx's helper (the rows measure the window, not a model's weights). After Unload all the
figure is told in two: mapped files (the libraries a job imported, which stay) and anonymous
memory (what the process could hand back).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from engine.bench.startup import _app_env
from engine.bench.table import Row, Table
from engine.io.image import Rows
from engine.io.png import encode_png
from engine.samples.upscaler_models import make_upscaler

IN_VIEW_GOAL = 300e6  # bytes above the idle window
UNLOADED_GOAL = 50e6
TIMEOUT_S = 600


def product_rows(width: int, height: int) -> Rows:
    """A picture with detail at every pixel (gradients and a hash pattern), made a band at a
    time: the same pixels on every call, so a test can compare a region with them."""
    x = np.arange(width, dtype=np.uint32)[None, :]

    def make(start: int, stop: int) -> np.ndarray:
        y = np.arange(start, stop, dtype=np.uint32)[:, None]
        red = (x * 255 // max(width - 1, 1)) + 0 * y
        green = (y * 255 // max(height - 1, 1)) + 0 * x
        blue = ((x * 2654435761 + y * 40503) >> 13) & 0x3F
        return np.stack([red, green, (blue + (x + y) // 5) % 256], axis=2).astype(np.uint8)

    return Rows((height, width, 3), np.dtype(np.uint8), make)


def make_product(path: Path, width: int, height: int) -> Path:
    """A width×height RGB PNG written band by band (Tessera's own encoder, as a job writes)."""
    encode_png(path, [product_rows(width, height)], durations=[0])
    return path


def measure_window_memory(table: Table, size: tuple[int, int]) -> None:
    """The two rows: RSS above the idle window with the product (of `size`) in view, and after
    Unload all."""
    width, height = size
    label = f"{width}×{height} product in view"
    with tempfile.TemporaryDirectory(prefix="tessera-bench-pictures-") as d:
        home = Path(d)
        started = time.perf_counter()
        image = make_product(home / "photo.png", width // 2, height // 2)
        small = make_product(home / "small.png", 96, 64)
        made = time.perf_counter() - started
        (home / "models").mkdir()
        model = make_upscaler(home / "models" / "up2.onnx", scale=2)
        env = _app_env(home, model.parent)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "gui.bench_pictures", str(image), str(model), str(small)],
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            figures = json.loads(line)
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
            why = str(e) if not isinstance(e, ValueError) else done.stderr.strip()[-200:]
            table.add(Row(f"window RSS above idle, {label}", "skipped", "", "<= 300 MB", None, why))
            return
    mib = 2**20
    idle = figures["idle"]
    in_view = figures["in_view"]["rss"] - idle["rss"]
    table.add(
        Row(
            f"window RSS above idle, {label}",
            in_view / mib,
            "MiB",
            "<= 300 MB",
            in_view <= IN_VIEW_GOAL,
            f"most of fit, 1:1 and zoomed views; fit {(figures['fit']['rss'] - idle['rss']) / mib:.0f} "
            f"MiB; the window's pictures {figures['pictures'] / mib:.1f} MiB; idle "
            f"{idle['rss'] / mib:.0f} MiB; a ×2 job of {width // 2}×{height // 2} run and "
            f"shown in {figures['shown_s']:.0f} s (input written in {made:.0f} s)",
        )
    )
    unloaded = figures["unloaded"]
    after = unloaded["rss"] - idle["rss"]
    anonymous = (unloaded["anonymous"] - idle["anonymous"]) / mib
    files = (unloaded["files"] - idle["files"]) / mib
    engine = figures["engine_loaded"]
    table.add(
        Row(
            f"window RSS above idle, {label}, after Unload all",
            after / mib,
            "MiB",
            "<= 50 MB",
            after <= UNLOADED_GOAL,
            f"{files:.0f} MiB of it mapped files (the libraries a job imports, ONNX "
            f"Runtime's and onnx's: they stay once imported), {anonymous:.0f} MiB anonymous "
            f"(heaps, arenas, buffers: the window's pictures "
            f"{figures['pictures_unloaded'] / mib:.1f} MiB of what is on screen, the rest the "
            f"imported modules' own); the engine loaded after a 96×64 job: "
            f"{(engine['rss'] - idle['rss']) / mib:.0f} MiB "
            f"({(engine['files'] - idle['files']) / mib:.0f} MiB files)",
        )
    )
