"""OpenVINO's CPU plugin against Tessera's kernel per instruction set (issue #30): the same
photos as the kernel's bench (`kernel_isas.MODELS`), whole requests and runs alone, and each
product's largest difference from ONNX Runtime's in 1/255.

OpenVINO is an optional measurement, never a dependency of the app: each measurement runs
`openvino_worker.py` in a process of its own, with the interpreter named by
TESSERA_OPENVINO_PYTHON (a separate venv: `scripts/bench_openvino.sh` makes one) or this one.
A process per run because oneDNN, under OpenVINO's CPU plugin, reads its instruction-set cap
(ONEDNN_MAX_CPU_ISA) once. Without OpenVINO one row says why and nothing else runs.

    python -m engine.bench.openvino_cpu [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from engine.api import Engine
from engine.bench.kernel_isas import _env, bench_photos, warmed_engines
from engine.bench.peers import _request
from engine.bench.table import Row, Table, scratch
from engine.runtime import winograd
from engine.samples.synthetic import test_image
from engine.settings import EngineSettings

PYTHON_ENV = "TESSERA_OPENVINO_PYTHON"
WORKER = Path(__file__).with_name("openvino_worker.py")
# Tessera's sets → oneDNN's caps, tried in order: OpenVINO 2026.4's CPU plugin refuses the
# SSE4.1 cap ("bad combination"), so the baseline row takes its lowest set that runs.
OV_CAPS: dict[str, tuple[str, ...]] = {
    "avx512": ("AVX512_CORE",),
    "avx2": ("AVX2",),
    "baseline": ("SSE41", "AVX"),
}


@dataclass(frozen=True)
class Timed:
    total_s: float
    run_s: float
    product: Path
    cpu_s: float  # the process's CPU seconds for the whole request, every thread


def openvino_python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


def openvino_unavailable(python: str) -> str | None:
    """None when `python` imports openvino (and the worker's numpy and Pillow), else why not."""
    try:
        done = subprocess.run(
            [python, "-c", "import openvino, numpy, PIL"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{PYTHON_ENV}={python} does not run ({e})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return (
            f"openvino is not importable by {python} ({last}); it is an optional measurement: "
            f"scripts/bench_openvino.sh installs it in a separate venv, or set {PYTHON_ENV}"
        )
    return None


def run_openvino(
    python: str,
    model: Path,
    image: Path,
    product: Path,
    cap: str | None,
    precision: str = "f32",
    threads: int = 2,
) -> Timed | str:
    """One whole request through OpenVINO's CPU plugin under oneDNN's cap `cap` (None: the
    CPU's own best): its times, or why it failed."""
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if cap is not None:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    args = [str(model), str(image), str(product), "--precision", precision]
    try:
        done = subprocess.run(
            [python, str(WORKER), *args, "--threads", str(threads)],
            capture_output=True,
            text=True,
            timeout=1800,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return "ran past 30 minutes"
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {done.returncode}"
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Timed(min(data["total_s"]), min(data["run_s"]), product, min(data["total_cpu_s"]))


def run_engine(engine: Engine, model: Path, image: Path, keep: Path) -> Timed:
    """One whole request through Tessera's engine; its product kept at `keep`."""
    cpu = time.process_time()
    result = engine.run(_request(model, image, keep.parent / "engine-out", None))
    cpu = time.process_time() - cpu
    if not result.ok:
        raise RuntimeError("; ".join(f.message for f in result.failures))
    result.products[0].path.replace(keep)
    total = result.timings["total_s"]
    return Timed(total, total - result.timings["io_s"], keep, cpu)


def max_diff_255(a: Path, b: Path) -> int:
    """The largest difference of two 8-bit products, in steps of 1/255."""
    with Image.open(a) as x, Image.open(b) as y:
        first = np.asarray(x.convert("RGB"), dtype=np.int16)
        second = np.asarray(y.convert("RGB"), dtype=np.int16)
    return int(np.abs(first - second).max())


def _best(times: list[Timed]) -> Timed:
    return min(times, key=lambda t: t.total_s)


def measure_openvino_cpu(
    table: Table,
    settings: EngineSettings,
    models_dir: Path,
    work: Path,
    quick: bool,
    rounds: int = 2,
) -> None:
    python = openvino_python()
    missing = openvino_unavailable(python)
    if missing is not None:
        table.add(Row("OpenVINO CPU ÷ Tessera kernel", "skipped", "", "", None, missing))
        return
    isas = winograd.available_isas()
    threads = settings.threads or os.cpu_count() or 2  # as ORT's 0: every core
    warm = test_image(work / "ov-warm.png", 64, 48)
    for model_id, model, (width, height), photo in bench_photos(
        table, models_dir, work, quick, "ov", "OpenVINO CPU, {}"
    ):

        def warm_up(engine: Engine, model: Path = model) -> None:
            run_engine(engine, model, warm, work / "warm.png")  # load, the kept chain, warm

        ours, theirs = warmed_engines(settings, warm_up)
        ort: list[Timed] = []
        kernel: dict[str, list[Timed]] = {isa: [] for isa in isas}
        ov: dict[str, list[Timed]] = {isa: [] for isa in isas}
        ov_cap: dict[str, str] = {}
        ov_failed: dict[str, str] = {}
        bf16: list[Timed] = []
        bf16_failed = ""
        for r in range(rounds):  # alternating, so a slow spell of the machine hits all
            with _env(TESSERA_CPU_KERNELS="ort", TESSERA_CPU_ISA=None):
                ort.append(run_engine(theirs, model, photo, work / "ort.png"))
            for isa in isas:
                with _env(TESSERA_CPU_KERNELS="tessera", TESSERA_CPU_ISA=isa):
                    kernel[isa].append(run_engine(ours, model, photo, work / f"k-{isa}-{r}.png"))
                for cap in (ov_cap[isa],) if isa in ov_cap else OV_CAPS.get(isa, ()):
                    got = run_openvino(
                        python, model, photo, work / f"ov-{isa}-{r}.png", cap, "f32", threads
                    )
                    if isinstance(got, Timed):
                        ov[isa].append(got)
                        ov_cap[isa] = cap
                        break
                    ov_failed[isa] = f"{cap}: {got}"
            got = run_openvino(
                python, model, photo, work / f"ov-bf16-{r}.png", None, "bf16", threads
            )
            if isinstance(got, Timed):
                bf16.append(got)
            else:
                bf16_failed = got
        ours.unload_all()
        theirs.unload_all()
        _rows(table, model_id, (width, height), _best(ort), kernel, ov, ov_cap, ov_failed, rounds)
        if bf16:
            b = _best(bf16)
            widest = isas[-1] if isas else "ORT"  # available_isas: narrowest first
            k = _best(kernel[widest]) if isas else _best(ort)
            table.add(
                Row(
                    f"OpenVINO CPU bf16 ÷ Tessera kernel, {widest}, {model_id}",
                    b.run_s / k.run_s,
                    "×",
                    note=f"OpenVINO bf16 {b.total_s:.2f} s (run {b.run_s:.2f} s), Tessera "
                    f"{k.total_s:.2f} s (runs {k.run_s:.2f} s); bf16 vs ORT "
                    f"{max_diff_255(b.product, _best(ort).product)}/255",
                )
            )
        elif bf16_failed:
            table.add(Row(f"OpenVINO CPU bf16, {model_id}", "failed", "", note=bf16_failed))


def _rows(
    table: Table,
    model_id: str,
    size: tuple[int, int],
    ort: Timed,
    kernel: dict[str, list[Timed]],
    ov: dict[str, list[Timed]],
    ov_cap: dict[str, str],
    ov_failed: dict[str, str],
    rounds: int,
) -> None:
    width, height = size
    for isa, times in kernel.items():
        k = _best(times)
        name = f"OpenVINO CPU ÷ Tessera kernel, {isa}, {model_id}"
        if not ov[isa]:
            table.add(Row(name, "failed", "", note=ov_failed.get(isa, "no cap for this set")))
            continue
        o = _best(ov[isa])
        table.add(
            Row(
                name,
                o.run_s / k.run_s,
                "×",
                note=(
                    f"{width}×{height}, runs alone ÷; whole requests: OpenVINO {o.total_s:.2f} s "
                    f"(cap {ov_cap[isa]}), Tessera {k.total_s:.2f} s, ORT {ort.total_s:.2f} s; "
                    f"runs alone: OpenVINO {o.run_s:.2f} s, Tessera {k.run_s:.2f} s, "
                    f"ORT {ort.run_s:.2f} s; CPU seconds of the whole requests: OpenVINO "
                    f"{o.cpu_s:.2f}, Tessera {k.cpu_s:.2f}, ORT {ort.cpu_s:.2f}; vs ORT's product: OpenVINO "
                    f"{max_diff_255(o.product, ort.product)}/255, Tessera "
                    f"{max_diff_255(k.product, ort.product)}/255 (best of {rounds}, alternating)"
                ),
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench.openvino_cpu")
    parser.add_argument("--quick", action="store_true", help="animevideov3 ×4 at 256×192 only")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="per runtime (0: every core)")
    parser.add_argument("--models", type=Path, help="the models folder (default: the engine's)")
    args = parser.parse_args(argv)
    settings = EngineSettings(models_dir=args.models, threads=args.threads)
    table = Table()
    table.header("OpenVINO's CPU plugin against Tessera's kernel")
    with scratch() as work:
        measure_openvino_cpu(
            table, settings, settings.resolved_models_dir(), work, args.quick, max(1, args.rounds)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
