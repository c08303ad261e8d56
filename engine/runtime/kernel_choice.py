"""Which code runs a model's convolutions on the CPU: Tessera's kernel or ONNX Runtime's.

Tessera's Winograd kernel (winograd.c) is faster than ORT's direct convolutions only where it
has a micro-kernel tuned for the CPU's vector unit, and only for layer shapes that suit it. So
the choice is measured on the person's own CPU, not looked up in a table: at a model's first
load, a few milliseconds of each of its layer shapes through both (`measure`), kept beside the
model's kept copy with the CPU's identity, the kernel's instruction set and the threads, as the
overlap is kept, and measured again when any of them changes.

`TESSERA_CPU_KERNELS` decides how the choice is made:
- `auto` (the default): the measurement; an instruction set with no tuned kernel (the portable
  baseline) goes to ORT without one.
- `tessera`: the kernel wherever the graph allows (tests, benchmarks).
- `ort`: never the kernel.
Anything else is a usage error (exit 2).

This module imports the kernel (winograd.py) only when asked about it: the engine an idle
window holds, or a GPU request, never loads it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from engine.errors import UsageError
from engine.runtime import optimize
from engine.runtime.identity import FileIdentity

log = logging.getLogger(__name__)

KERNELS_ENV = "TESSERA_CPU_KERNELS"
ONNXRUNTIME = "onnxruntime"  # what `cpu_kernel` says where ORT's kernels run
UNTUNED = ("baseline",)  # instruction sets with no tuned micro-kernel: ORT under `auto`
MARGIN = 0.9  # the kernel is chosen only when it takes at most this share of ORT's time
SIDE = 48  # the measured image's edge: a few milliseconds per layer shape
ROUNDS = 3  # the best of this many runs of each
CHOICE_VERSION = 1  # bump when what is measured or how it is decided changes


class KernelSetting(Enum):
    AUTO = "auto"
    TESSERA = "tessera"
    ORT = "ort"


def setting() -> KernelSetting:
    """TESSERA_CPU_KERNELS, or a UsageError a person can act on."""
    raw = os.environ.get(KERNELS_ENV, "")
    try:
        return KernelSetting(raw.strip().lower() or "auto")
    except ValueError:
        raise UsageError(
            f"{KERNELS_ENV}={raw!r} is not a choice: use auto (measured per model), tessera "
            "(Tessera's kernel wherever the graph allows) or ort (ONNX Runtime's kernels only)."
        ) from None


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.cache
def cpu_name() -> str:
    """The CPU's model name and machine: what a kept measurement was made on."""
    name = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Hardware", "CPU part")):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.machine()} {name}".strip()


def active_isa() -> str | None:
    """The instruction set the kernel runs with here ("avx512", "avx2", "baseline", "neon"),
    or None where it is not built (or does not load)."""
    from engine.runtime import winograd

    found: Callable[[], str | None] | None = getattr(winograd, "active_isa", None)
    if found is not None:
        return found()
    if winograd._library() is None:
        return None
    # A kernel built with GCC's target_clones runs its x86-64-v4 clone on AVX-512 CPUs, its
    # x86-64-v3 clone on AVX2 ones, else the portable code.
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= flags:
        return "avx512"
    if {"avx2", "fma", "bmi2", "f16c"} <= flags:
        return "avx2"
    return "baseline"


def build_problem() -> str | None:
    """Why the kernel is not there, or None where it is."""
    from engine.runtime import winograd

    found: Callable[[], str | None] | None = getattr(winograd, "build_problem", None)
    if found is not None:
        return found()
    if winograd._library() is None:
        return "it was not built with this install (no C compiler when Tessera was installed)"
    return None


@dataclass(frozen=True)
class Status:
    """What runs CPU convolutions on this machine, before any model: for `engine devices`."""

    kernel: str | None  # the instruction set the kernel would run with, None: not built
    setting: str
    note: str  # why not, or how it is chosen


def status() -> Status:
    try:
        chosen = setting()
    except UsageError as e:
        return Status(None, os.environ.get(KERNELS_ENV, ""), str(e))
    if chosen is KernelSetting.ORT:
        return Status(None, chosen.value, f"{KERNELS_ENV}=ort: ONNX Runtime's kernels only")
    problem = build_problem()
    isa = active_isa() if problem is None else None
    if isa is None:
        return Status(None, chosen.value, f"Tessera's kernel is not used: {problem}")
    if chosen is KernelSetting.TESSERA:
        return Status(isa, chosen.value, f"{KERNELS_ENV}=tessera: the kernel wherever it can")
    if isa in UNTUNED:
        return Status(
            isa, chosen.value, f"no tuned kernel for this CPU ({isa}): ONNX Runtime's kernels run"
        )
    return Status(isa, chosen.value, "measured per model at its first load, the faster one runs")


@dataclass(frozen=True)
class Choice:
    """The measured choice for one model on this CPU."""

    kernel: bool  # Tessera's kernel runs the model's convolutions
    isa: str
    kernel_ms: float  # the model's layer shapes once each, at SIDE², through the kernel
    ort_ms: float  # the same through ORT
    why: str


def _record(path: Path, identity: FileIdentity) -> Path:
    return (
        path.parent / optimize.FOLDER / f"{path.stem}-{optimize.copy_digest(identity)}.kernel.json"
    )


def _wanted(identity: FileIdentity, isa: str, threads: int) -> dict[str, object]:
    """What a kept choice must name to be used: this model version, CPU, ISA and threads."""
    return {
        "version": CHOICE_VERSION,
        "model": identity.digest(),
        "cpu": cpu_name(),
        "isa": isa,
        "threads": threads,
    }


def kept(path: Path, identity: FileIdentity, threads: int) -> Choice | None:
    """The choice measured earlier for this model on this CPU, or None (not measured yet, or
    measured on another CPU, ISA or thread count): read before any analysis of the graph, so
    a model ORT runs better costs a stat and a small read at each load."""
    isa = active_isa() or "none"
    if isa in UNTUNED:
        return Choice(False, isa, 0.0, 0.0, f"no tuned kernel for this CPU ({isa})")
    try:
        data = json.loads(_record(path, identity).read_text(encoding="utf-8"))
        if isinstance(data, dict) and all(
            data.get(k) == v for k, v in _wanted(identity, isa, threads).items()
        ):
            return Choice(
                bool(data["kernel"]),
                str(data["isa"]),
                float(data["kernel_ms"]),
                float(data["ort_ms"]),
                str(data["why"]),
            )
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not measured yet, or damaged: measured when asked
    return None


def choose(
    path: Path,
    identity: FileIdentity,
    shapes: Iterable[tuple[int, int]],
    threads: int,
) -> Choice:
    """The kernel or ORT for this model (`shapes`: its layers' (cin, cout)): the kept choice,
    or measured now on this CPU and kept."""
    known = kept(path, identity, threads)
    if known is not None:
        return known
    isa = active_isa() or "none"
    kernel_ms, ort_ms = measure(Counter(shapes), threads)
    use = kernel_ms <= MARGIN * ort_ms
    why = (
        f"measured on this CPU ({isa}): Tessera's kernel {kernel_ms:.1f} ms, "
        f"ONNX Runtime {ort_ms:.1f} ms"
    )
    choice = Choice(use, isa, round(kernel_ms, 3), round(ort_ms, 3), why)
    _keep(_record(path, identity), {**_wanted(identity, isa, threads), **asdict(choice)})
    return choice


def _keep(record: Path, data: dict[str, object]) -> None:
    try:
        record.parent.mkdir(exist_ok=True)
        partial = record.with_name(f".{record.name}.partial-{os.getpid()}")
        partial.write_text(json.dumps(data), encoding="utf-8")
        os.replace(partial, record)
    except OSError as e:  # a read-only folder: measured again at the next load
        log.info("the kernel choice %s is not kept (%s)", record.name, e)
        return
    stem = record.name.split(".", 1)[0].rsplit("-", 1)[0]
    try:
        for old in record.parent.glob(f"{stem}-*.kernel.json"):
            if old != record and old.name.split(".", 1)[0].rsplit("-", 1)[0] == stem:
                old.unlink(missing_ok=True)
    except OSError:
        pass


def measure(counts: Counter[tuple[int, int]], threads: int) -> tuple[float, float]:
    """Milliseconds of one SIDE² image through each layer shape (times its count), by the
    kernel and by ORT, each the best of ROUNDS after a warm-up."""
    from engine.runtime import winograd

    rng = np.random.default_rng(0)
    everyone = cores()
    kernel = ort_total = 0.0
    for (cin, cout), count in counts.items():
        weight = rng.normal(0, 0.1, (cout, cin, 3, 3)).astype(np.float32)
        bias = np.zeros(cout, np.float32)
        layer = winograd.Conv3x3.make(weight, bias, np.full(cout, 0.2, np.float32))
        source = rng.random((SIDE, SIDE, winograd.padded(cin)), dtype=np.float32)
        target = np.empty((SIDE, SIDE, winograd.padded(cout)), np.float32)

        def by_kernel(
            layer: winograd.Conv3x3 = layer,
            source: np.ndarray = source,
            target: np.ndarray = target,
        ) -> None:
            winograd.conv(
                layer, winograd.Slice(source), winograd.Slice(target), threads or everyone
            )

        kernel += count * _best(by_kernel)
        ort_total += count * _best(_ort_conv(weight, bias, threads))
    return kernel * 1e3, ort_total * 1e3


def _best(run: Callable[[], object]) -> float:
    run()
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _ort_conv(weight: np.ndarray, bias: np.ndarray, threads: int) -> Callable[[], object]:
    """One ORT session of conv 3×3 → LeakyRelu with these weights, as a callable run."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    cout, cin = weight.shape[:2]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2),
        ],
        "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, SIDE, SIDE])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {"x": np.random.default_rng(1).random((1, cin, SIDE, SIDE), dtype=np.float32)}
    return lambda: session.run(None, feeds)


def cores() -> int:
    """The threads a kernel run takes where the engine names none: one per physical core."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1
