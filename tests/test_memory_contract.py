"""The memory contract (DESIGN §2) on real ORT sessions over contract models."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.cancel import CancelToken
from engine.errors import Cancelled, DeviceUnavailable
from engine.requests import Operation, OperationRequest, Progress, ProgressKind
from engine.runtime.providers import (
    COREML_EP,
    CPU_EP,
    CUDA_EP,
    DIRECTML_EP,
    Device,
    Runtime,
    provider_plan,
    shrink_target,
)
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from tests.engine_helpers import Recorder, SessionProxy, cuda_shrink, gif3, photo


def _request(model: Path, inputs: list[Path], out: Path, **kw: object) -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, str(model), tuple(inputs), output_dir=out, **kw)  # type: ignore[arg-type]


@pytest.fixture
def upscaler(tmp_path: Path) -> Path:
    return make_upscaler(tmp_path / "models" / "up2.onnx", scale=2)


def test_m1_same_key_reuses_the_same_session_object(upscaler: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=tmp_path))
    img = photo(tmp_path / "a.png")
    r1 = engine.run(_request(upscaler, [img], tmp_path / "o"))
    first = engine.sessions.entries()[0].session
    r2 = engine.run(_request(upscaler, [img], tmp_path / "o"))
    assert (r1.sessions_created, r2.sessions_created, r2.sessions_reused) == (1, 0, 1)
    assert engine.sessions.entries()[0].session is first
    assert len(engine.sessions) == 1


def test_a_sessions_last_use_is_when_its_last_run_ended(upscaler: Path, tmp_path: Path) -> None:
    """The models list's "Last used" is the end of the job's work, not its start: a job of
    minutes read "5 min ago" 35 s after it ended."""
    import time

    engine = Engine(EngineSettings(models_dir=tmp_path))
    img = photo(tmp_path / "a.png", 96, 64)
    engine.run(_request(upscaler, [img], tmp_path / "o"))  # loads the session
    runs: list[float] = []

    def seen(event: Progress) -> None:
        if event.kind is ProgressKind.RUN_FINISHED:
            runs.append(time.time())

    engine.run(_request(upscaler, [img], tmp_path / "o", tile=32), seen)
    (info,) = engine.loaded()
    assert len(runs) > 1
    assert info.last_used >= runs[-1] - 0.001, (info.last_used, runs)


def test_m1_other_device_or_runtime_creates_another(upscaler: Path, tmp_path: Path) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=tmp_path), session_wrap=recorder)
    img = photo(tmp_path / "a.png")
    engine.run(_request(upscaler, [img], tmp_path / "o", device="gpu:0", runtime="cuda"))
    engine.run(_request(upscaler, [img], tmp_path / "o", device="gpu:1", runtime="cuda"))
    engine.run(_request(upscaler, [img], tmp_path / "o", device="gpu:0", runtime="cuda"))
    assert engine.sessions.created == 2
    assert {str(k.key.device) for k in engine.sessions.entries()} == {"gpu:0", "gpu:1"}


def _shrinks(log: list[str | None]) -> list[int]:
    return [i for i, v in enumerate(log) if v is not None]


def test_m2_single_run_shrinks_at_its_only_run(upscaler: Path, tmp_path: Path) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=tmp_path), session_wrap=recorder)
    result = engine.run(
        _request(
            upscaler, [photo(tmp_path / "a.png")], tmp_path / "o", device="gpu:0", runtime="cuda"
        )
    )
    assert result.ok and result.shrinks == 1
    assert _shrinks(recorder.log) == [len(recorder.log) - 1]
    assert recorder.log[-1] == cuda_shrink()


def test_m2_only_the_last_frame_shrinks(upscaler: Path, tmp_path: Path) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=tmp_path), session_wrap=recorder)
    engine.run(
        _request(
            upscaler, [photo(tmp_path / "warm.png")], tmp_path / "o", device="gpu:0", runtime="cuda"
        )
    )
    recorder.log.clear()
    result = engine.run(
        _request(
            upscaler, [gif3(tmp_path / "anim.gif")], tmp_path / "o", device="gpu:0", runtime="cuda"
        )
    )
    assert result.ok and result.runs == 3
    assert recorder.log == [None, None, cuda_shrink()]


def test_m2_tiles_of_two_frames_shrink_only_at_the_very_last(
    upscaler: Path, tmp_path: Path
) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=8), session_wrap=recorder)
    frames = []
    for i in range(2):
        frames.append(photo(tmp_path / f"f{i}.png", width=80, height=48, seed=i))
    engine.run(_request(upscaler, [frames[0]], tmp_path / "o", device="gpu:1", runtime="cuda"))
    recorder.log.clear()
    # 80×48 with 32-px tiles and overlap 8: 3 columns × 2 rows = 6 tiles per frame.
    result = engine.run(
        _request(
            upscaler, frames, tmp_path / "o", device="gpu:1", runtime="cuda", tile=32, sequence=True
        )
    )
    assert result.ok and result.runs == 12
    assert recorder.log == [None] * 11 + [cuda_shrink(1)]  # gpu:1 named for device gpu:1


@pytest.mark.parametrize("provider", [CPU_EP, DIRECTML_EP, COREML_EP])
def test_m3_other_providers_never_get_the_shrink(
    upscaler: Path, tmp_path: Path, provider: str
) -> None:
    recorder = Recorder(provider)
    # A CPU session without the CPU hand-back (keep_cpu_arena) has nothing to shrink either.
    settings = EngineSettings(models_dir=tmp_path, keep_cpu_arena=provider == CPU_EP)
    engine = Engine(settings, session_wrap=recorder)
    runtime = {CPU_EP: "cpu", DIRECTML_EP: "directml", COREML_EP: "coreml"}[provider]
    device = "cpu" if provider == CPU_EP else "gpu:0"
    result = engine.run(
        _request(
            upscaler, [photo(tmp_path / "a.png")], tmp_path / "o", device=device, runtime=runtime
        )
    )
    assert result.ok and result.shrinks == 0
    assert recorder.log and all(v is None for v in recorder.log)
    plan = provider_plan(Device.parse(device), Runtime(runtime))
    assert all("arena_extend_strategy" not in opts for _, opts in plan.providers)


def test_m3_shrink_target_comes_from_actual_providers() -> None:
    assert shrink_target([CUDA_EP, CPU_EP], {CUDA_EP: {"device_id": "3"}}) == "gpu:3"
    assert (
        shrink_target(
            ["TensorrtExecutionProvider", CUDA_EP],
            {"TensorrtExecutionProvider": {"device_id": "1"}},
        )
        == "gpu:1"
    )
    # A CUDA request that ORT silently put on the CPU gets nothing.
    assert shrink_target([CPU_EP], {CPU_EP: {}}) is None
    assert shrink_target([DIRECTML_EP, CPU_EP], {DIRECTML_EP: {"device_id": "0"}}) is None
    # With Tessera's shared CPU arena handed back (M11): CPU and GPU-arena sessions shrink it
    # too; DirectML and CoreML still get nothing (M3).
    assert shrink_target([CPU_EP], {CPU_EP: {}}, cpu_arena=True) == "cpu:0"
    assert shrink_target([CUDA_EP, CPU_EP], {CUDA_EP: {"device_id": "3"}}, True) == "cpu:0;gpu:3"
    assert shrink_target([DIRECTML_EP, CPU_EP], {DIRECTML_EP: {"device_id": "0"}}, True) is None
    assert shrink_target([COREML_EP, CPU_EP], {}, cpu_arena=True) is None
    cuda = provider_plan(Device.parse("gpu:2"), Runtime.CUDA).providers[0][1]
    assert cuda["device_id"] == "2" and cuda["arena_extend_strategy"] == "kSameAsRequested"
    assert cuda["cudnn_conv_algo_search"] == "HEURISTIC" and "enable_cuda_graph" not in cuda


def test_m4_products_identical_with_and_without_cleanup(upscaler: Path, tmp_path: Path) -> None:
    img = photo(tmp_path / "a.png", width=70, height=50, mode="RGBA")
    plain = Engine(EngineSettings(models_dir=tmp_path, overlap=8, keep_cpu_arena=True)).run(
        _request(upscaler, [img], tmp_path / "plain", tile=32)
    )
    recorder = Recorder(CUDA_EP)
    cleaned = Engine(EngineSettings(models_dir=tmp_path, overlap=8), session_wrap=recorder).run(
        _request(upscaler, [img], tmp_path / "cleaned", tile=32, device="gpu:0", runtime="cuda")
    )
    assert cleaned.shrinks == 1 and plain.shrinks == 0
    assert plain.runs == cleaned.runs
    a, b = plain.products[0].path, cleaned.products[0].path
    assert a.name == b.name
    assert a.read_bytes() == b.read_bytes()


def test_m7_cuda_request_is_refused_not_run_on_cpu(upscaler: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=tmp_path))
    out = tmp_path / "o"
    with pytest.raises(DeviceUnavailable) as info:
        engine.run(
            _request(upscaler, [photo(tmp_path / "a.png")], out, device="gpu:0", runtime="cuda")
        )
    assert "cuda" in str(info.value) and (
        "driver" in str(info.value) or "library" in str(info.value)
    )
    assert engine.sessions.runs == 0
    assert not out.exists() or not any(out.iterdir())


def test_m8_cancel_between_tiles_runs_no_further_tile(upscaler: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=8))
    img = photo(tmp_path / "a.png", width=96, height=64)
    token = CancelToken()
    seen: list[int] = []

    def progress(p: Progress) -> None:
        if p.kind is ProgressKind.RUN_FINISHED:
            seen.append(p.run)
            if p.run == 2:
                token.cancel()

    out = tmp_path / "o"
    engine.run(_request(upscaler, [photo(tmp_path / "w.png")], tmp_path / "warm"))  # load + probe
    runs_before, shrinks_before = engine.sessions.runs, engine.sessions.shrinks
    with pytest.raises(Cancelled):
        engine.run(_request(upscaler, [img], out, tile=32), progress, token)
    assert seen == [1, 2]
    # Two tile runs, then the M10 clean-up run that hands the CPU arena back.
    assert engine.sessions.runs - runs_before == 3 and engine.sessions.shrinks == shrinks_before + 1
    assert len(engine.sessions) == 1  # the session stays cached
    assert not out.exists() or not list(out.iterdir())  # no product, no partial file


def test_m8_terminate_interrupts_a_long_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import time

    from tests.slow_models import make_slow_upscaler

    model = make_slow_upscaler(tmp_path / "slow.onnx", layers=300)
    engine = Engine(EngineSettings(models_dir=tmp_path))
    # Warm-up: load and learn the model's scale, so the next request starts its one run at once.
    engine.run(_request(model, [photo(tmp_path / "tiny.png", 8, 8)], tmp_path / "w"))
    t0 = time.perf_counter()
    engine.run(_request(model, [photo(tmp_path / "mid.png", 96, 96)], tmp_path / "w"))
    small = time.perf_counter() - t0  # a run on 1/16 of the pixels of the cancelled one
    img = photo(tmp_path / "a.png", width=384, height=384)
    token = CancelToken()
    engine.sessions.last_run_started = None

    def cancel_when_running() -> None:
        while engine.sessions.last_run_started is None:
            time.sleep(0.005)
        time.sleep(0.05)
        token.cancel()

    watcher = threading.Thread(target=cancel_when_running)
    watcher.start()
    caplog.set_level(logging.DEBUG, logger="engine")
    runs_before, shrinks_before = engine.sessions.runs, engine.sessions.shrinks
    t1 = time.perf_counter()
    try:
        with pytest.raises(Cancelled):
            engine.run(_request(model, [img], tmp_path / "o", tile=4096), cancel=token)
    finally:
        watcher.join()
    elapsed = time.perf_counter() - t1
    print(f"cancelled after {elapsed:.3f}s; a run on 1/16 of the pixels takes {small:.3f}s")
    # The run did not complete (terminated); the one run that did is the M10 clean-up.
    assert engine.sessions.runs == runs_before + 1
    assert engine.sessions.shrinks == shrinks_before + 1
    assert len(engine.sessions) == 1
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())
    # A stop the person asked for is no fault: nothing at WARNING (the CLI prints those).
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == []


def test_tiled_equals_whole_image(upscaler: Path, tmp_path: Path) -> None:
    img = photo(tmp_path / "a.png", width=101, height=67, mode="RGBA", seed=3)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=8))
    whole = engine.run(_request(upscaler, [img], tmp_path / "whole", tile=4096)).products[0].path
    tiled = engine.run(_request(upscaler, [img], tmp_path / "tiled", tile=32)).products[0].path
    a = np.asarray(Image.open(whole), np.int16)
    b = np.asarray(Image.open(tiled), np.int16)
    assert a.shape == b.shape == (134, 202, 4)
    assert np.abs(a - b).max() <= 1


def test_m10_cancelled_job_still_hands_back_its_peak(upscaler: Path, tmp_path: Path) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=8), session_wrap=recorder)
    engine.run(
        _request(
            upscaler, [photo(tmp_path / "w.png")], tmp_path / "o", device="gpu:0", runtime="cuda"
        )
    )
    recorder.log.clear()
    token = CancelToken()

    def progress(p: Progress) -> None:
        if p.kind is ProgressKind.RUN_FINISHED and p.run == 2:
            token.cancel()

    img = photo(tmp_path / "a.png", width=96, height=64)
    with pytest.raises(Cancelled):
        engine.run(
            _request(upscaler, [img], tmp_path / "c", tile=32, device="gpu:0", runtime="cuda"),
            progress,
            token,
        )
    # Two tile runs without the shrink, then one smallest run that asks for it.
    assert recorder.log == [None, None, cuda_shrink()]


def test_m10_batch_whose_last_input_fails_still_shrinks(upscaler: Path, tmp_path: Path) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=tmp_path), session_wrap=recorder)
    good = photo(tmp_path / "good.png")
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    engine.run(_request(upscaler, [good], tmp_path / "o", device="gpu:0", runtime="cuda"))
    recorder.log.clear()
    result = engine.run(
        _request(upscaler, [good, bad], tmp_path / "o", device="gpu:0", runtime="cuda")
    )
    assert len(result.products) == 1 and len(result.failures) == 1
    assert recorder.log == [None, cuda_shrink()]


def test_progress_events_come_in_order(upscaler: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=8))
    events: list[Progress] = []
    img = photo(tmp_path / "a.png", width=80, height=48)
    engine.run(_request(upscaler, [img], tmp_path / "o", tile=32), events.append)
    kinds = [e.kind for e in events]
    assert kinds[:2] == [ProgressKind.STARTED, ProgressKind.LOADED]
    assert kinds[-2:] == [ProgressKind.FRAME_FINISHED, ProgressKind.INPUT_FINISHED]
    runs = [e for e in events if e.kind is ProgressKind.RUN_FINISHED]
    assert [e.run for e in runs] == list(range(1, 7)) and all(e.run_count == 6 for e in runs)
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_cancel_while_the_model_is_being_probed_is_a_cancel(tmp_path: Path) -> None:
    # A model whose size rule the graph does not state, so the engine probes it before the
    # first tile; the cancel lands during that probe run and must end the request as cancelled.
    from typing import Any

    from engine.runtime.sessions import SessionKey
    from tests.slow_models import make_unstated_upscaler

    model = make_unstated_upscaler(tmp_path / "m" / "slow.onnx", layers=4)
    token = CancelToken()

    class CancelOnFirstRun(SessionProxy):
        def before_run(self, feeds: dict[str, np.ndarray], run_options: Any) -> Any:
            token.cancel()  # sets `terminate` on the RunOptions the handle attached
            return run_options

    def wrap(session: Any, _key: SessionKey) -> Any:
        return CancelOnFirstRun(session)

    engine = Engine(EngineSettings(models_dir=tmp_path), session_wrap=wrap)
    with pytest.raises(Cancelled):
        engine.run(_request(model, [photo(tmp_path / "a.png")], tmp_path / "o"), cancel=token)
    assert len(engine.sessions) == 1
