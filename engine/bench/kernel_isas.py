"""The bench of Tessera's CPU kernel per instruction set (issue #30): for each set this CPU
has (TESSERA_CPU_ISA caps the kernel to it), the kernel's whole request ÷ ORT's own kernels'
(TESSERA_CPU_KERNELS=ort) on the same photo, and Tessera ÷ ncnn at ncnn's own best tile.

ORT's kernels pick their own instruction set from the CPU (MLAS has no cap): on an AVX-512
machine the AVX2 rows set Tessera's 8-float path against ORT's 16-float one, the hardest form
of the AVX2 goal. Whole requests (decoding, runs, the PNG) for both; ncnn's runs alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.api import Engine
from engine.bench.peers import (
    NCNN_TILES,
    NcnnModel,
    _fastest,
    _frame,
    _ncnn_seconds,
    _request,
    _timed,
    ncnn_own_tiles,
    ncnn_unavailable,
)
from engine.bench.table import Row, Table, find_model
from engine.runtime import winograd
from engine.samples.synthetic import test_image
from engine.settings import EngineSettings

# (model, full size, --quick size or None: not in --quick)
MODELS: tuple[tuple[str, tuple[int, int], tuple[int, int] | None], ...] = (
    ("realesrgan-animevideov3-x4", (1024, 768), (256, 192)),
    ("realesrgan-x4plus-anime", (384, 288), None),
    ("realesrgan-x4plus", (256, 192), None),
)
# The goals: the kernel ÷ ORT per set (a set without a goal falls back to ORT where
# it loses: cpusafe's measured choice), and AVX-512 against ncnn.
ORT_GOALS = {"avx512": 0.6, "avx2": 0.8, "neon": 1.0}
NCNN_GOAL = {"avx512": 0.75}


def bench_photos(
    table: Table, models_dir: Path, work: Path, quick: bool, prefix: str, skipped: str
) -> Iterator[tuple[str, Path, tuple[int, int], Path]]:
    """Each model of MODELS measured in this run (its --quick size, or its full one), with a
    photo of that size; a model not installed gets the row `skipped` (formatted with its id)."""
    for model_id, full, small in MODELS:
        size = small if quick else full
        if size is None:
            continue
        model = find_model(models_dir, model_id)
        if model is None:
            table.add(Row(skipped.format(model_id), "skipped", "", "", None, "not installed"))
            continue
        width, height = size
        photo = test_image(work / f"{prefix}-{width}x{height}.png", width, height)
        yield model_id, model, size, photo


def warmed_engines(
    settings: EngineSettings, warm: Callable[[Engine], object]
) -> tuple[Engine, Engine]:
    """Two engines on `settings`, each loaded and warmed by `warm` (the kept chain made): one
    that runs Tessera's kernel wherever the graph allows, one that runs ORT's kernels only."""
    engines = []
    for kernels in ("tessera", "ort"):
        with _env(TESSERA_CPU_KERNELS=kernels, TESSERA_CPU_ISA=None):
            engine = Engine(settings)
            warm(engine)
            engines.append(engine)
    return engines[0], engines[1]


@contextlib.contextmanager
def _env(**values: str | None) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure_kernel_isas(
    table: Table,
    settings: EngineSettings,
    models_dir: Path,
    packages: Path,
    work: Path,
    quick: bool,
) -> None:
    isas = winograd.available_isas()
    if not isas:
        reason = winograd.build_problem() or "the kernel is not built"
        table.add(Row("kernel ÷ ORT per instruction set", "skipped", "", "", None, reason))
        return
    no_ncnn = ncnn_unavailable(packages, download=False)
    warm = test_image(work / "isa-warm.png", 64, 48)
    rounds = 1 if quick else 2
    out = work / "isa-out"
    for model_id, model, (width, height), photo in bench_photos(
        table, models_dir, work, quick, "isa", "{}: kernel ÷ ORT"
    ):

        def warm_up(engine: Engine, model: Path = model) -> None:
            _timed(engine, _request(model, warm, out, None))  # load, the kept chain, warm

        ours, theirs = warmed_engines(settings, warm_up)
        kernel: dict[str, list[float]] = {isa: [] for isa in isas}
        ort_s: list[float] = []
        for _ in range(rounds):  # alternating, so a slow spell of the machine hits all
            with _env(TESSERA_CPU_KERNELS="ort", TESSERA_CPU_ISA=None):
                ort_s.append(_timed(theirs, _request(model, photo, out, None))[0])
            for isa in isas:
                with _env(TESSERA_CPU_KERNELS="tessera", TESSERA_CPU_ISA=isa):
                    kernel[isa].append(_timed(ours, _request(model, photo, out, None))[0])
        ours.unload_all()
        theirs.unload_all()
        ncnn_s: float | None = None
        tile: int | None = None
        if no_ncnn is None:
            net = NcnnModel(packages, model_id, settings.threads)
            frame = _frame(photo)
            seconds: dict[int | None, list[float]] = {}
            for edge in NCNN_TILES:
                if edge is None or edge < max(width, height):
                    seconds[edge] = [_ncnn_seconds(net, ncnn_own_tiles(frame, edge))]
            tile = _fastest(seconds)
            ncnn_s = min(seconds[tile])
            del net
        o = min(ort_s)
        for isa in isas:
            t = min(kernel[isa])
            goal = ORT_GOALS.get(isa)
            table.add(
                Row(
                    f"{model_id}: kernel ÷ ORT, {isa}, {width}×{height}",
                    t / o,
                    "×",
                    f"<= {goal}" if goal else "",
                    t / o <= goal if goal else None,
                    f"kernel {t:.2f} s, ORT {o:.2f} s (whole requests, best of {rounds}, "
                    "alternating; ORT on its own widest set)",
                )
            )
            if ncnn_s is None:
                continue
            goal = NCNN_GOAL.get(isa)
            table.add(
                Row(
                    f"{model_id}: Tessera ÷ ncnn at ncnn's best tile, {isa}, {width}×{height}",
                    t / ncnn_s,
                    "×",
                    f"<= {goal}" if goal else "",
                    t / ncnn_s <= goal if goal else None,
                    f"ncnn {ncnn_s:.2f} s at {tile or 'whole'} (runs alone, its own best set)",
                )
            )
    if no_ncnn is not None:
        table.add(Row("Tessera ÷ ncnn per instruction set", "skipped", "", "", None, no_ncnn))
