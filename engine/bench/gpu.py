"""`bench --gpu`: device memory of one operation on an NVIDIA GPU, with and without the shrink (M2)."""

from __future__ import annotations

import argparse
import gc
import json
from dataclasses import dataclass, field

import numpy as np

from engine.api import Engine
from engine.bench.cpu import measure_overhead
from engine.bench.samplers import GpuMeter, PeakGpu
from engine.bench.table import Row, find_model, scratch, table_for
from engine.io.reading import load_image
from engine.requests import Operation, OperationRequest
from engine.runtime import memory
from engine.runtime.providers import Runtime, missing_requirement
from engine.samples.synthetic import synthetic_upscaler, test_image
from engine.settings import EngineSettings

GPU_TARGET = 64 << 20  # after an operation, within 64 MB of the level right after loading


def gpu_unavailable(index: int = 0) -> str | None:
    """Why the GPU figures cannot be measured here, or None when they can."""
    reason = missing_requirement(Runtime.CUDA)
    if reason is not None:
        return f"CUDA is not usable: {reason}"
    if memory.nvml_status() != "ok":
        return f"GPU memory cannot be read: {memory.nvml_status()}"
    if not any(g.index == index for g in memory.gpu_snapshots()):
        return f"NVML sees no GPU {index}"
    return None


@dataclass
class GpuRun:
    """Device memory around one operation: right after load, at the peak, after it."""

    shrink: bool
    load: int
    peak: int
    after: int
    samples: int
    providers: tuple[str, ...]
    shrinks: int
    runs: int
    tile: int | None
    frames: list[np.ndarray] = field(repr=False)  # the products' pixels, for M4

    def as_dict(self) -> dict[str, object]:
        return {
            "shrink": self.shrink,
            "after_load_bytes": self.load,
            "peak_bytes": self.peak,
            "after_operation_bytes": self.after,
            "samples": self.samples,
            "providers": list(self.providers),
            "shrinks": self.shrinks,
            "runs": self.runs,
            "tile": self.tile,
        }


def measure_gpu_run(
    settings: EngineSettings, request: OperationRequest, *, shrink: bool, index: int = 0
) -> GpuRun:
    """Load the request's model on a fresh engine, then run it once while sampling memory.

    `shrink=False` suppresses the arena shrink on that one session (its shrink target is
    cleared after loading), the same job without M2, for the comparison of DESIGN §7.
    """
    engine = Engine(settings)
    try:
        _, key = engine.resolve(request)
        entry, _ = engine.sessions.get(key)  # load only: no run yet
        if not shrink:
            entry.shrink_target = None
        gc.collect()
        meter = GpuMeter(index)
        load = meter.read()
        with PeakGpu(meter) as peak:
            result = engine.run(request)
        after = meter.read()
        if not result.ok:
            raise RuntimeError("; ".join(f.message for f in result.failures))
        frames = [np.asarray(load_image(p.path, 1 << 31).frames[0]) for p in result.products]
        for p in result.products:
            p.path.unlink()
        return GpuRun(
            shrink,
            load,
            peak.peak,
            after,
            peak.samples,
            entry.providers,
            result.shrinks,
            result.runs,
            result.tile,
            frames,
        )
    finally:
        engine.unload_all()
        del engine
        gc.collect()


def run_gpu_bench(args: argparse.Namespace) -> int:
    as_json = bool(getattr(args, "json", False))
    index = 0
    reason = gpu_unavailable(index)
    table = table_for(args)
    if reason is not None:
        table.say(f"GPU figures: unrun. {reason}")
        if as_json:
            print(json.dumps({"gpu": {"run": False, "reason": reason}, "rows": []}, indent=2))
        return 0
    settings = EngineSettings(models_dir=getattr(args, "models_dir", None))
    quick = bool(getattr(args, "quick", False))
    gpu = memory.gpu_snapshots()[index]
    table.header(f"Tessera bench --gpu on {gpu.name} ({gpu.total >> 30} GiB), GPU {index}")
    mib = float(1 << 20)
    with scratch() as work:
        model = find_model(settings.resolved_models_dir(), "realesrgan-animevideov3-x4")
        label = "animevideov3-x4"
        if model is None:
            model, label = synthetic_upscaler(work / "synthetic-x4.onnx"), "synthetic-x4"
        side = 512 if quick else 1024
        img = test_image(work / "gpu.png", side, side)

        def request(device: str, runtime: str) -> OperationRequest:
            return OperationRequest(
                Operation.UPSCALE,
                str(model),
                (img,),
                device=device,
                runtime=runtime,
                output_dir=work / "out",
                tile=512,
            )

        gpu_request = request(f"gpu:{index}", "cuda")
        runs = {
            shrink: measure_gpu_run(settings, gpu_request, shrink=shrink, index=index)
            for shrink in (True, False)
        }
        source = GpuMeter(index).source
        for shrink, run in runs.items():
            mode = "with shrink" if shrink else "without shrink"
            held = run.after - run.load
            grown = run.peak - run.load
            if shrink:
                target, met = "<= 64 MB", held <= GPU_TARGET
            else:
                target, met = "stays high", held >= grown / 2
            table.add(Row(f"GPU after load, {mode}", run.load / mib, "MiB", note=source))
            table.add(
                Row(
                    f"GPU peak above load, {mode}",
                    grown / mib,
                    "MiB",
                    note=f"{run.samples} samples, {run.runs} runs, tile {run.tile}",
                )
            )
            table.add(
                Row(
                    f"GPU after operation above load, {mode}",
                    held / mib,
                    "MiB",
                    target,
                    met,
                    f"{label} ×4 of {side}², providers {', '.join(run.providers[:1])}, "
                    f"shrinks {run.shrinks}",
                )
            )
        cpu = measure_cpu_frames(settings, request("cpu", "cpu"))
        same = all(
            np.array_equal(a, b) for a, b in zip(runs[True].frames, runs[False].frames, strict=True)
        )
        table.add(
            Row("GPU result with vs without shrink identical (M4)", str(same), "", "True", same)
        )
        diff = max(
            int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())
            for a, b in zip(runs[True].frames, cpu, strict=True)
        )
        table.add(Row("GPU vs CPU result: max |diff|", diff, "/255", "<= 1", diff <= 1))
        # Speed on CUDA (issue 15): tiles go in and out through IO binding, one copy each way,
        # against a bare ORT loop over the very tensors the engine fed.
        busy, bare = measure_overhead(
            table, settings, f"{label} on CUDA, {side}²", gpu_request, 2 if quick else 5, Engine
        )
        mpx = side * side / 1e6
        table.add(
            Row(
                f"CUDA time per Mpx of input, {label}: Tessera / bare ORT loop",
                f"{busy / mpx:.3f} / {bare / mpx:.3f}",
                "s/Mpx",
                note=f"tile 512, {side}² input",
            )
        )
    if as_json:
        data = {
            "gpu": {
                "run": True,
                "device": gpu.name,
                "memory_source": source,
                "model": label,
                "runs": {
                    ("with_shrink" if k else "without_shrink"): v.as_dict() for k, v in runs.items()
                },
            },
            "rows": [r.__dict__ for r in table.rows],
        }
        print(json.dumps(data, indent=2))
    return 0


def measure_cpu_frames(settings: EngineSettings, request: OperationRequest) -> list[np.ndarray]:
    result = Engine(settings).run(request)
    if not result.ok:
        raise RuntimeError("; ".join(f.message for f in result.failures))
    frames = [np.asarray(load_image(p.path, 1 << 31).frames[0]) for p in result.products]
    for p in result.products:
        p.path.unlink()
    return frames
