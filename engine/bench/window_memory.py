"""The audit's Unload-all scenario (issue #35): a fresh window opens 3 images, runs them with a
×2 model (the largest, 6000×4000, makes a 12000×8000 product), shows that product at 1:1, then
Unload all. Rows: the window's RSS above the fresh window with the product at 1:1, and after
Unload all (goal: within 50 MB), with the memory panel's parts of the RSS.

The window is a real process (`python -m gui.bench_pictures`, offscreen, on temporary data
and settings folders, as the start-up rows run it) that prints its readings as one JSON line.
The inputs are written here, band by band; the model is a small ×2 network of
animevideov3's shape made with onnx's helper (the rows measure the window, not a model's
weights), run once from the command line first, as a person's model has been. After Unload all the figure is
told in two: mapped files (the libraries a job imported, which stay) and anonymous memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from engine.bench.startup import _app_env
from engine.bench.table import Row, Table
from engine.io.image import Rows
from engine.io.png import encode_png
from engine.samples.upscaler_models import make_compact_upscaler

IN_VIEW_GOAL = 300e6  # bytes above the idle window
UNLOADED_GOAL = 50 * 2**20  # the goal: within 50 MiB of the fresh window
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


OTHERS = ((1024, 768), (640, 480))  # the audit opened 3 images and ran them all


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def _parts(reading: dict[str, Any]) -> str:
    parts = reading["parts"]
    return (
        f"models {_mib(parts['models'])}, pictures {_mib(parts['pictures'])}, interpreter and "
        f"libraries {_mib(parts['code'])}, heap kept {_mib(parts['free_heap'])}, other "
        f"{_mib(parts['other'])}"
    )


def _warm(model: Path, image: Path, out: Path, env: dict[str, str]) -> str:
    """A command-line job with the model first, as the audit's person had run it before: its
    optimised copy is kept, so the window loads it without onnx (a first-ever load parses the
    model with onnx, whose import stays: 11 MiB anonymous and 4 MiB of libraries, measured).
    Returns why it failed, or ""."""
    args = [sys.executable, "-m", "engine", "run", "upscale", "--model", str(model)]
    args += ["--out", str(out), "--standalone", "--quiet", str(image)]
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the warm-up job failed: {e}"
    return "" if done.returncode == 0 else f"the warm-up job failed: {done.stderr[-200:]}"


def measure_window_memory(table: Table, size: tuple[int, int]) -> None:
    """The two rows of the audit's scenario: a fresh window opens 3 images, runs them (a ×2
    model: the largest makes a product of `size`), shows that product at 1:1, then Unload all.
    RSS above the fresh window with the product at 1:1, and after Unload all."""
    width, height = size
    label = f"{width}×{height} product at 1:1"
    with tempfile.TemporaryDirectory(prefix="tessera-bench-pictures-") as d:
        home = Path(d)
        started = time.perf_counter()
        images = [make_product(home / "photo.png", width // 2, height // 2)]
        images += [make_product(home / f"other-{w}.png", w, h) for w, h in OTHERS]
        made = time.perf_counter() - started
        (home / "models").mkdir()
        model = make_compact_upscaler(home / "models" / "up2.onnx", scale=2)
        env = _app_env(home, model.parent)
        warm = _warm(model, images[-1], home / "warm", env)
        if warm:
            table.add(
                Row(f"window RSS above fresh, {label}", "skipped", "", "<= 300 MB", None, warm)
            )
            return
        args = [sys.executable, "-m", "gui.bench_pictures", str(model), *map(str, images)]
        try:
            done = subprocess.run(
                args, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
            )
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            figures = json.loads(line)
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
            why = str(e) if not isinstance(e, ValueError) else done.stderr.strip()[-200:]
            table.add(
                Row(f"window RSS above fresh, {label}", "skipped", "", "<= 300 MB", None, why)
            )
            return
    fresh = figures["fresh"]
    in_view = figures["at_1_1"]["rss"] - fresh["rss"]
    table.add(
        Row(
            f"window RSS above fresh, {label}",
            in_view / 2**20,
            "MiB",
            "<= 300 MB",
            in_view <= IN_VIEW_GOAL,
            f"fresh window {_mib(fresh['rss'])}; 3 images run ({width // 2}×{height // 2}, "
            f"1024×768, 640×480, ×2) and shown in {figures['ran_s']:.0f} s (inputs written in "
            f"{made:.0f} s); the window's pictures {_mib(figures['pictures'])}",
        )
    )
    unloaded = figures["unloaded"]
    after = unloaded["rss"] - fresh["rss"]
    table.add(
        Row(
            f"window RSS above fresh, {label}, after Unload all",
            after / 2**20,
            "MiB",
            "<= 50 MiB",
            after <= UNLOADED_GOAL,
            f"{_mib(unloaded['files'] - fresh['files'])} of it mapped files (the libraries a job "
            f"imports: they stay), {_mib(unloaded['anonymous'] - fresh['anonymous'])} anonymous; "
            f"the panel's parts after Unload all: {_parts(unloaded)}; fresh: {_parts(fresh)}",
        )
    )
