"""One GPU arena per device (issue #22 item 4, M6): the first CUDA session on a device registers
one arena in ORT's environment with the CUDA provider options of DESIGN §3, every session on
that device uses it (`session.use_env_allocators=1`), and each is still shrunk with gpu:<id>.

There is no GPU here: sessions are real CPU sessions reporting CUDA (tests/engine_helpers.py),
and ORT's registration call is replaced by a spy that records its arguments (without CUDA the
real call raises "CUDA Provider not available"). tests/gpu/test_shared_arena.py checks the real
thing on a machine with an NVIDIA GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest

from engine.api import Engine
from engine.requests import Operation, OperationRequest
from engine.runtime import arena
from engine.runtime.arena import USE_ENV_ALLOCATORS
from engine.runtime.providers import CUDA_EP
from engine.runtime.sessions import DEVICE_ALLOCATOR_FOR_INITIALIZERS
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from tests.engine_helpers import Recorder, cuda_shrink, photo

MB = 1 << 20


class RegisterSpy:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, str], Any]] = []

    def __call__(self, provider: str, info: Any, options: dict[str, str], cfg: Any) -> None:
        self.calls.append((provider, info, dict(options), cfg))


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> RegisterSpy:
    """ORT's registration replaced by a spy, and the arenas of this process forgotten, so the
    test sees the registrations its own engine makes (no shared CPU arena either: the GPU
    arena alone must turn `use_env_allocators` on)."""
    recorded = RegisterSpy()
    monkeypatch.setattr(ort, "create_and_register_allocator_v2", recorded)
    monkeypatch.setattr(arena, "_gpu", {}, raising=False)  # absent before the fix
    monkeypatch.setattr(arena, "_registered", False)
    return recorded


def _request(model: Path, image: Path, out: Path, device: str) -> OperationRequest:
    return OperationRequest(
        Operation.UPSCALE, str(model), (image,), device=device, runtime="cuda", output_dir=out
    )


def test_every_session_on_a_device_shares_one_registered_arena(
    spy: RegisterSpy, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    a = make_upscaler(models / "a.onnx", scale=2)
    b = make_upscaler(models / "b.onnx", scale=4)
    recorder = Recorder(CUDA_EP)
    settings = EngineSettings(models_dir=models, keep_cpu_arena=True, gpu_mem_limit=512 * MB)
    engine = Engine(settings, session_wrap=recorder)
    image = photo(tmp_path / "p.png", 24, 16)
    out = tmp_path / "out"
    for _ in range(2):  # two sessions on gpu:0 used in turn
        for model in (a, b):
            assert engine.run(_request(model, image, out, "gpu:0")).ok
    assert engine.run(_request(a, image, out, "gpu:1")).ok

    # One registration per device, whatever the number of sessions.
    assert [(c[0], c[1].device_id) for c in spy.calls] == [(CUDA_EP, 0), (CUDA_EP, 1)]
    for (_, info, options, cfg), device in zip(spy.calls, (0, 1), strict=True):
        assert (
            info.name == "Cuda" and info.allocator_type == ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR
        )
        assert info.mem_type == ort.OrtMemType.DEFAULT
        assert options["device_id"] == str(device)
        assert options["arena_extend_strategy"] == "kSameAsRequested"
        assert options["cudnn_conv_algo_search"] == "HEURISTIC"
        assert options["gpu_mem_limit"] == str(512 * MB)
        assert cfg.max_mem == 512 * MB and cfg.arena_extend_strategy == 1  # kSameAsRequested

    # Each of the three sessions uses the environment's arena, not one of its own.
    assert len(recorder.sessions) == 3
    for session in recorder.sessions:
        assert session.get_session_options().get_session_config_entry(USE_ENV_ALLOCATORS) == "1"
    # ... and is shrunk under the same rules, with its device's id (M2).
    assert {e.shrink_target for e in engine.sessions.entries()} == {"gpu:0", "gpu:1"}
    assert recorder.log[-1] == "gpu:1"


def test_the_shared_gpu_arena_is_shrunk_like_the_cpu_one(spy: RegisterSpy, tmp_path: Path) -> None:
    """With the shared CPU arena on (the default), a CUDA session's last run names both."""
    models = tmp_path / "models"
    model = make_upscaler(models / "a.onnx", scale=2)
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=models), session_wrap=recorder)
    assert engine.run(_request(model, photo(tmp_path / "p.png"), tmp_path / "o", "gpu:0")).ok
    assert len(spy.calls) == 1 and "gpu_mem_limit" not in spy.calls[0][2]
    assert spy.calls[0][3].max_mem == 0  # unlimited
    assert recorder.log[-1] == cuda_shrink(0)


def test_a_failed_registration_keeps_one_arena_per_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where ORT cannot register the arena (no CUDA here: the real call), sessions run as before."""
    monkeypatch.setattr(arena, "_gpu", {}, raising=False)  # absent before the fix
    monkeypatch.setattr(arena, "_registered", False)
    models = tmp_path / "models"
    model = make_upscaler(models / "a.onnx", scale=2)
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=models, keep_cpu_arena=True), session_wrap=recorder)
    assert engine.run(_request(model, photo(tmp_path / "p.png"), tmp_path / "o", "gpu:0")).ok
    assert arena._gpu == {0: False}
    (session,) = recorder.sessions
    options = session.get_session_options()
    with pytest.raises(Exception, match="does not have configuration"):
        options.get_session_config_entry(USE_ENV_ALLOCATORS)


def test_an_unloaded_gpu_session_hands_the_shared_arena_back(
    spy: RegisterSpy, tmp_path: Path
) -> None:
    """A session's runs leave their memory in the shared arena, not in the session: once it is
    gone (Unload, or M5's release after an out-of-memory), one tiny run shrinks the arena, and
    the weights never were in it (the device allocator holds them)."""
    models = tmp_path / "models"
    model = make_upscaler(models / "a.onnx", scale=2)
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=models, keep_cpu_arena=True), session_wrap=recorder)
    assert engine.run(_request(model, photo(tmp_path / "p.png"), tmp_path / "o", "gpu:3")).ok
    (loaded,) = recorder.sessions
    options = loaded.get_session_options()
    assert options.get_session_config_entry(DEVICE_ALLOCATOR_FOR_INITIALIZERS) == "1"
    recorder.log.clear()
    assert engine.unload_all() == 1
    assert len(recorder.sessions) == 2  # the shrinker, seen through the same session boundary
    assert recorder.log == ["gpu:3"]
    assert engine.sessions.released == 1 and len(engine.sessions) == 0


def test_a_session_with_another_gpu_limit_keeps_its_own_arenas(
    spy: RegisterSpy, tmp_path: Path
) -> None:
    """The shared arena's limit is fixed at registration (no ORT call changes it); a later
    session asking for a smaller limit must still get that limit (M9), so it does not share."""
    models = tmp_path / "models"
    model = make_upscaler(models / "a.onnx", scale=2)
    image = photo(tmp_path / "p.png")
    first = Recorder(CUDA_EP)
    settings = EngineSettings(models_dir=models, keep_cpu_arena=True, gpu_mem_limit=512 * MB)
    assert (
        Engine(settings, session_wrap=first).run(_request(model, image, tmp_path / "o", "gpu:0")).ok
    )
    second = Recorder(CUDA_EP)
    capped = EngineSettings(models_dir=models, keep_cpu_arena=True, gpu_mem_limit=256 * MB)
    engine = Engine(capped, session_wrap=second)
    assert engine.run(_request(model, image, tmp_path / "o", "gpu:0")).ok
    assert len(spy.calls) == 1  # registered once, at 512 MB
    (own,) = second.sessions
    options = own.get_session_options()
    with pytest.raises(Exception, match="does not have configuration"):
        options.get_session_config_entry(USE_ENV_ALLOCATORS)
    (entry,) = engine.sessions.entries()
    assert not entry.shared_gpu_arena and entry.shrink_target == "gpu:0"
    assert engine.unload_all() == 1 and len(second.sessions) == 1  # its arena goes with it
