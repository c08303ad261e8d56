"""`python -m engine bench`: the performance table of DESIGN §7, measured in one run here.

`cpu` measures the CPU figures; `gpu` (`--gpu`) the device memory of one upscale on an NVIDIA
GPU, with and without the arena shrink, or says why it cannot here. The stand-in models are
engine/samples/'s; `samplers` watches memory, `table` prints and keeps the rows.
"""

from __future__ import annotations

import argparse


def run_bench(args: argparse.Namespace) -> int:
    # Imported here: each side pulls onnxruntime and the whole engine, which `--help` need not.
    if getattr(args, "gpu", False):
        from engine.bench.gpu import run_gpu_bench

        return run_gpu_bench(args)
    from engine.bench.cpu import run_cpu_bench

    return run_cpu_bench(args)
