"""The memory contract M1–M5 on the real CUDA provider: no session wrappers, real
`get_providers()`, device memory read through NVML (nvidia-ml-py).

Marked `gpu` and skipped unless ONNX Runtime starts a real CUDA session here; run by
tests/gpu/check.sh on a machine with an NVIDIA GPU. Memory is read as this process's own
usage where the driver reports it, else the device's (see engine.bench.cpu.GpuMeter).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.api import Engine
from engine.bench.gpu import GpuRun, gpu_unavailable, measure_cpu_frames, measure_gpu_run
from engine.bench.samplers import GpuMeter
from engine.errors import ErrorKind
from engine.io.reading import load_image
from engine.requests import Operation, OperationRequest
from engine.runtime.devices import _probe_model
from engine.runtime.providers import CUDA_EP, Device, Runtime, provider_plan
from engine.runtime.sessions import create_session
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from tests.engine_helpers import photo

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20
GPU = "gpu:0"


def _cuda_unavailable() -> str | None:
    reason = gpu_unavailable(0)
    if reason is not None:
        return reason
    # The libraries may load and the provider still fail to start: ask for a real session.
    try:
        session = create_session(
            _probe_model(), provider_plan(Device("gpu", 0), Runtime.CUDA), name="probe"
        )
    except Exception as e:  # any failure to start means: not here
        return f"a CUDA session cannot be created: {e}"
    providers = session.get_providers()
    del session
    if providers[0] != CUDA_EP:
        return f"ONNX Runtime gave {providers} for a CUDA request"
    return None


REASON = _cuda_unavailable()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(REASON is not None, reason=f"no working CUDA provider: {REASON}"),
]


@pytest.fixture(scope="module")
def up4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_upscaler(tmp_path_factory.mktemp("models") / "up4.onnx", scale=4)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # ×4 at tile 1024: ~200 MB per float activation, far above the 64 MB target. Two tiles,
    # so the arena stays at its peak between runs long enough for the NVML sampler to see it
    # (a single run on a fast GPU may grow and shrink within one sampling interval).
    return photo(tmp_path_factory.mktemp("img") / "big.png", 1536, 1024)


def request(
    model: Path, image: Path, out: Path, *, device: str = GPU, **kw: object
) -> OperationRequest:
    runtime = "cpu" if device == "cpu" else "cuda"
    return OperationRequest(
        Operation.UPSCALE,
        str(model),
        (image,),
        device=device,
        runtime=runtime,
        output_dir=out,
        **kw,  # type: ignore[arg-type]
    )


def report(run: GpuRun, label: str) -> None:
    print(
        f"\n{label}: after load {run.load / MB:.0f} MiB, peak +{(run.peak - run.load) / MB:.0f} MiB, "
        f"after +{(run.after - run.load) / MB:.1f} MiB ({run.samples} samples, {run.runs} runs, "
        f"shrinks {run.shrinks}, source {GpuMeter(0).source})"
    )


def test_m7_the_session_really_runs_on_cuda_and_takes_the_shrink(up4: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings())
    result = engine.run(request(up4, photo(tmp_path / "a.png", 64, 48), tmp_path / "o", tile=32))
    assert result.ok, result.failures
    [entry] = engine.sessions.entries()
    assert type(entry.session).__name__ == "InferenceSession"  # no wrapper anywhere
    assert entry.session.get_providers()[0] == CUDA_EP == entry.providers[0]
    assert entry.shrink_target == "cpu:0;gpu:0"  # the GPU arena and the shared CPU arena (M11)
    # The shrink run option went to ORT on the last run, and the run succeeded (M2, M3).
    assert result.shrinks == 1 and result.runs > 1
    engine.unload_all()


def test_m1_the_same_session_serves_every_request(up4: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings())
    img = photo(tmp_path / "a.png", 64, 48)
    r1 = engine.run(request(up4, img, tmp_path / "o"))
    first = engine.sessions.entries()[0].session
    r2 = engine.run(request(up4, img, tmp_path / "o"))
    assert (r1.sessions_created, r2.sessions_created, r2.sessions_reused) == (1, 0, 1)
    assert engine.sessions.entries()[0].session is first and len(engine.sessions) == 1
    engine.unload_all()


@pytest.fixture(scope="module")
def runs(up4: Path, big: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, GpuRun]:
    out = tmp_path_factory.mktemp("gpu-out")
    req = request(up4, big, out, tile=1024)
    return {
        shrink: measure_gpu_run(EngineSettings(), req, shrink=shrink) for shrink in (True, False)
    }


def test_m2_gpu_memory_returns_to_the_loaded_level_after_the_operation(
    runs: dict[bool, GpuRun],
) -> None:
    run = runs[True]
    report(run, "with shrink")
    assert run.shrinks == 1
    assert run.peak - run.load >= 128 * MB, "the job did not use enough memory to tell"
    assert run.after - run.load <= 64 * MB


def test_m2_without_the_shrink_gpu_memory_stays_high(runs: dict[bool, GpuRun]) -> None:
    run = runs[False]
    report(run, "without shrink")
    assert run.shrinks == 0
    assert run.after - run.load >= (run.peak - run.load) / 2


def test_m3_a_cpu_session_on_this_machine_gets_no_shrink(up4: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings())
    result = engine.run(request(up4, photo(tmp_path / "a.png"), tmp_path / "o", device="cpu"))
    assert result.ok and result.shrinks == 0
    assert engine.sessions.entries()[0].shrink_target is None


def test_m4_products_identical_with_and_without_the_shrink_and_close_to_the_cpu(
    runs: dict[bool, GpuRun], up4: Path, big: Path, tmp_path: Path
) -> None:
    with_shrink, without = runs[True].frames, runs[False].frames
    assert all(np.array_equal(a, b) for a, b in zip(with_shrink, without, strict=True))
    cpu = measure_cpu_frames(EngineSettings(), request(up4, big, tmp_path, device="cpu", tile=1024))
    diff = max(
        int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())
        for a, b in zip(with_shrink, cpu, strict=True)
    )
    print(f"\nGPU vs CPU: max |diff| {diff}/255")
    assert diff <= 1


def test_m5_real_gpu_out_of_memory_releases_the_session_and_auto_tile_completes(
    up4: Path, big: Path, tmp_path: Path
) -> None:
    limit = 256 * MB  # the arena cap: a 1024 tile (~600 MB of activations) cannot fit
    engine = Engine(EngineSettings(gpu_mem_limit=limit))
    meter = GpuMeter(0)
    before = meter.read()
    failed = engine.run(request(up4, big, tmp_path / "fixed", tile=1024))
    [failure] = failed.failures
    assert failure.kind is ErrorKind.RESOURCE and "Out of memory" in failure.message
    assert len(engine.sessions) == 0 and engine.sessions.released == 1
    gc.collect()
    released = meter.read()
    auto = engine.run(request(up4, big, tmp_path / "auto", options={"auto_start": 1024}))
    assert auto.ok, auto.failures
    assert auto.tile is not None and auto.tile < 1024 and auto.sessions_created >= 2
    out = load_image(auto.products[0].path, 1 << 28).frames[0]
    assert out.shape[:2] == (4096, 6144)
    print(
        f"\nOOM at tile 1024 under {limit // MB} MB; after release {released / MB:.0f} MiB "
        f"(before {before / MB:.0f} MiB); auto tile finished at {auto.tile}"
    )
    engine.unload_all()


def test_m5_the_failed_sessions_gpu_memory_is_back_before_the_retry_loads(
    up4: Path, big: Path, tmp_path: Path
) -> None:
    # Device memory read by NVML as each session is created (the wrap runs right after): the
    # retry's fresh session must find the failed one's weights and arena already gone (M5).
    meter = GpuMeter(0)
    at_creation: list[int] = []

    def wrap(session: object, _key: object) -> object:
        at_creation.append(meter.read())
        return session

    engine = Engine(EngineSettings(gpu_mem_limit=256 * MB), session_wrap=wrap)
    auto = engine.run(request(up4, big, tmp_path / "auto", options={"auto_start": 1024}))
    assert auto.ok, auto.failures
    assert len(at_creation) >= 2 and auto.sessions_created == len(at_creation)
    first = at_creation[0]
    print(
        "\nGPU memory as each session was created (MiB): "
        + ", ".join(f"{m / MB:.0f}" for m in at_creation)
    )
    for later in at_creation[1:]:
        assert later <= first + 64 * MB, "a failed session still held its memory at the retry"
    engine.unload_all()


def test_m5_through_the_command_line(up4: Path, big: Path, tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "engine",
                "run",
                "upscale",
                str(big),
                "--model",
                str(up4),
                "--device",
                GPU,
                "--runtime",
                "cuda",
                "--gpu-mem-limit",
                "256",
                "--json",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )

    fixed = cli("--out", str(tmp_path / "fixed"), "--tile", "1024")
    assert fixed.returncode == 3, fixed.stderr[-2000:]
    assert "Out of memory" in fixed.stderr and "big.png" in fixed.stderr
    assert not (tmp_path / "fixed").exists() or not list((tmp_path / "fixed").iterdir())
    auto = cli("--out", str(tmp_path / "auto"), "--tile", "auto", "--option", "auto_start=1024")
    assert auto.returncode == 0, auto.stderr[-2000:]
    data = json.loads(auto.stdout)
    assert data["tile"] < 1024 and data["sessions"]["created"] >= 2
