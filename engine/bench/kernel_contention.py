"""The bench of Tessera's CPU kernel beside another busy program: the chain's run of a photo
alone, and again while one process spins on a core (a game, another AI tool, or the PNG
writer of the request itself), alternating. The chain's threads take whatever is left of
each other's share of a step (winograd.c, chain_worker), so a thread the system puts aside
does not hold the other at the step's barrier: with n threads on n cores and one spinner
beside them, the ideal is (n + 1) / n of the time alone (1.5 on 2 cores).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from engine.bench.table import Row, Table, find_model
from engine.runtime import chain, kernel_choice, winograd
from engine.runtime.identity import FileIdentity
from engine.settings import EngineSettings

MODEL = "realesrgan-animevideov3-x4"
SPIN = "while True: pass"


def _seconds(session: chain.ChainSession | chain.GraphSession, x: np.ndarray) -> float:
    start = time.perf_counter()
    session.run(None, {session.get_inputs()[0].name: x})
    return time.perf_counter() - start


def measure_kernel_contention(
    table: Table, settings: EngineSettings, models_dir: Path, quick: bool
) -> None:
    name = "kernel beside one busy process ÷ alone"
    model = find_model(models_dir, MODEL)
    if model is None or not winograd.available():
        why = "not installed" if model is None else (winograd.build_problem() or "no kernel")
        table.add(Row(name, "skipped", "", "", None, why))
        return
    threads = settings.threads or kernel_choice.cores()
    session = chain.load(model, FileIdentity.of(model), threads, ort.InferenceSession)
    if session is None:
        table.add(Row(name, "skipped", "", "", None, f"{MODEL} has no chain for the kernel"))
        return
    width, height = (256, 192) if quick else (1024, 768)
    x = np.random.default_rng(0).random((1, 3, height, width), np.float32)
    _seconds(session, x)  # the first run faults the rings in
    alone: list[float] = []
    beside: list[float] = []
    for _ in range(2 if quick else 3):
        alone.append(_seconds(session, x))
        spinner = subprocess.Popen([sys.executable, "-c", SPIN])
        try:
            time.sleep(0.2)  # running before the kernel starts
            beside.append(_seconds(session, x))
        finally:
            spinner.kill()
            spinner.wait()
    a, b = min(alone), min(beside)
    ideal = (threads + 1) / threads
    table.add(
        Row(
            f"{name}, {width}×{height}",
            b / a,
            "×",
            f"ideal {ideal:.2f}",
            None,
            f"{MODEL}, {threads} threads: alone {a:.2f} s, beside a spinning process {b:.2f} s "
            f"(best of {len(alone)}, alternating)",
        )
    )
