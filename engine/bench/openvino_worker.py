"""One OpenVINO CPU measurement in its own process, run by path (`python openvino_worker.py`)
from any interpreter that has `openvino`, numpy and Pillow: it imports nothing of Tessera, so
OpenVINO can live in a separate venv and never becomes a dependency of the app.

A process of its own because oneDNN reads its instruction-set cap (ONEDNN_MAX_CPU_ISA) once,
at its first kernel: each cap needs a fresh process. The request is the same as Tessera's: the
PNG decoded, the model run on the whole photo, the product clipped, rounded and written as PNG.
Prints one JSON line: {"run_s": [...], "total_s": [...], "compile_s": ..., "precision": ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import openvino as ov
from PIL import Image


def _request(compiled: ov.CompiledModel, image: str, product: str) -> tuple[float, float, float]:
    """One whole request (decode, run, encode): its total seconds, the run's alone, and the
    process's CPU seconds for the whole request (all threads: robust to a loaded machine)."""
    started = time.perf_counter()
    cpu = time.process_time()
    with Image.open(image) as img:
        rgb = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    tensor = np.ascontiguousarray(rgb.transpose(2, 0, 1)[None])
    request = compiled.create_infer_request()
    ran = time.perf_counter()
    out = request.infer({0: tensor})[compiled.output(0)]
    run_s = time.perf_counter() - ran
    pixels = np.clip(out[0].transpose(1, 2, 0) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(product, compress_level=4)  # Tessera's zlib level
    return time.perf_counter() - started, run_s, time.process_time() - cpu


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("image")
    parser.add_argument("product")
    parser.add_argument("--precision", default="f32", choices=("f32", "bf16"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    core = ov.Core()
    model = core.read_model(args.model)
    with Image.open(args.image) as img:
        width, height = img.size
    model.reshape([1, 3, height, width])  # static shapes: what OpenVINO's users compile
    started = time.perf_counter()
    compiled = core.compile_model(
        model,
        "CPU",
        {
            "INFERENCE_PRECISION_HINT": args.precision,
            "INFERENCE_NUM_THREADS": args.threads,
            "PERFORMANCE_HINT": "LATENCY",
        },
    )
    compile_s = time.perf_counter() - started
    totals, runs, cpus = [], [], []
    for _ in range(args.rounds):
        total, run, cpu = _request(compiled, args.image, args.product)
        totals.append(total)
        runs.append(run)
        cpus.append(cpu)
    print(
        json.dumps(
            {
                "run_s": runs,
                "total_s": totals,
                "total_cpu_s": cpus,
                "compile_s": compile_s,
                "precision": str(compiled.get_property("INFERENCE_PRECISION_HINT")),
                "version": ov.__version__,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
