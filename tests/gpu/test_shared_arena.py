"""One GPU arena per device on the real CUDA provider (issue #22 item 4, M6): two sessions used
in turn for 10 rounds keep device memory flat (onnxruntime#29351: with an arena per session,
two CUDA sessions used in turn grow by up to ~2 GB a round).

Marked `gpu` and skipped unless ONNX Runtime starts a real CUDA session here; run by
tests/gpu/check.sh. Memory is read through NVML (engine.bench.samplers.GpuMeter).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from engine.api import Engine
from engine.bench.samplers import GpuMeter
from engine.requests import Operation, OperationRequest
from engine.runtime import arena
from engine.runtime.arena import USE_ENV_ALLOCATORS
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from tests.engine_helpers import photo
from tests.gpu.test_cuda_contract import REASON

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(REASON is not None, reason=f"no working CUDA provider: {REASON}"),
]

MB = 1 << 20
ROUNDS = 10
FLAT = 32 * MB  # what ten rounds may add over the first one


def test_two_sessions_used_in_turn_keep_device_memory_flat(tmp_path: Path) -> None:
    models = tmp_path / "models"
    a = make_upscaler(models / "a.onnx", scale=2)
    b = make_upscaler(models / "b.onnx", scale=4)
    image = photo(tmp_path / "p.png", 1024, 768)
    # The device's arena is registered once per process, with the limit of the first session
    # there (an earlier test's, perhaps): use that limit, so these sessions share it.
    limit = arena._gpu.get(0)
    engine = Engine(EngineSettings(models_dir=models, gpu_mem_limit=limit or None))
    meter = GpuMeter(0)
    after: list[int] = []
    for _ in range(ROUNDS):
        for model, tile in ((a, 512), (b, 384)):  # two sessions, two tile shapes
            result = engine.run(
                OperationRequest(
                    Operation.UPSCALE,
                    str(model),
                    (image,),
                    device="gpu:0",
                    runtime="cuda",
                    output_dir=tmp_path / "out",
                    tile=tile,
                )
            )
            assert result.ok, result.failures
            for product in result.products:
                product.path.unlink()
        gc.collect()
        after.append(meter.read())
    assert arena.gpu_arena_registered(0)
    entries = engine.sessions.entries()
    assert len(entries) == 2
    for entry in entries:
        assert entry.shared_gpu_arena
        options = entry.session.get_session_options()
        assert options.get_session_config_entry(USE_ENV_ALLOCATORS) == "1"
        assert entry.shrink_target == "cpu:0;gpu:0"
    print(
        f"\ndevice memory after each round ({meter.source}): "
        + ", ".join(f"{m / MB:.0f}" for m in after)
        + " MiB"
    )
    assert max(after) - after[0] <= FLAT, "device memory grew over the rounds"
    engine.unload_all()
