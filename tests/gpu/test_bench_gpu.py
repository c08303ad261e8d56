"""`python -m engine bench --gpu` on a machine without a GPU: it says it is unrun and why, and
its measuring code runs end to end against a stand-in GPU (a CPU session that reports CUDA,
as in tests/test_memory_contract.py, and a meter that reads RSS) so the real run on an NVIDIA
machine (tests/gpu/check.sh) does not meet its first bug there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import engine.bench.gpu as bench
from engine.api import Engine
from engine.cli import main as cli_main
from engine.runtime import memory
from engine.runtime.memory import GpuSnapshot
from engine.runtime.providers import CUDA_EP
from engine.runtime.sessions import SessionKey
from engine.settings import EngineSettings
from tests.engine_helpers import Recorder, cuda_shrink


def test_bench_gpu_without_a_gpu_says_unrun_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    reason = bench.gpu_unavailable()
    if reason is None:
        pytest.skip("this machine has a usable NVIDIA GPU: tests/gpu/check.sh measures it")
    assert cli_main(["bench", "--gpu", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("GPU figures: unrun.") and reason in captured.err
    assert json.loads(captured.out) == {"gpu": {"run": False, "reason": reason}, "rows": []}


class RssMeter:
    """Stands in for GpuMeter: reads this process's RSS."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.source = "rss (stand-in)"

    def read(self) -> int:
        return memory.process_rss()


def test_bench_gpu_measures_with_and_without_the_shrink_on_a_stand_in_gpu(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = Recorder(CUDA_EP)

    def wrap(session: Any, key: SessionKey) -> Any:
        return recorder(session, key) if key.device.is_gpu else session

    def engine(settings: EngineSettings, session_wrap: Any = None) -> Engine:
        if session_wrap is None:
            return Engine(settings, session_wrap=wrap)
        # The speed rows time runs through their own wrap; a second stand-in reports CUDA
        # for them (its shrink log is not the memory runs').
        stand_in = Recorder(CUDA_EP)
        return Engine(settings, session_wrap=lambda s, k: stand_in(session_wrap(s, k), k))

    small_net = bench.synthetic_upscaler

    def synthetic(path: Path) -> Path:
        return small_net(path, features=8, blocks=1)  # the figures are not the point here

    image = bench.test_image

    def smaller_image(path: Path, width: int, height: int, seed: int = 0) -> Path:
        return image(path, width * 3 // 4, height * 3 // 4, seed)  # a quicker stand-in run

    snapshot = GpuSnapshot(0, "Stand-in GPU", 80 << 30, 1 << 30, 79 << 30, None, ())
    monkeypatch.setattr(bench, "Engine", engine)
    monkeypatch.setattr(bench, "GpuMeter", RssMeter)
    monkeypatch.setattr(bench, "gpu_unavailable", lambda index=0: None)
    monkeypatch.setattr(bench, "synthetic_upscaler", synthetic)
    monkeypatch.setattr(bench, "test_image", smaller_image)
    monkeypatch.setattr(bench.memory, "gpu_snapshots", lambda: (snapshot,))

    assert cli_main(["bench", "--gpu", "--json", "--quick"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # stdout holds the JSON alone; the table went to stderr
    assert "GPU after operation above load, with shrink" in captured.err
    gpu = data["gpu"]
    assert gpu["run"] and gpu["device"] == "Stand-in GPU" and gpu["model"] == "synthetic-x4"
    with_shrink, without = gpu["runs"]["with_shrink"], gpu["runs"]["without_shrink"]
    assert with_shrink["providers"][0] == without["providers"][0] == CUDA_EP
    assert with_shrink["shrinks"] == 1 and without["shrinks"] == 0  # only the shrink is switched
    assert with_shrink["runs"] == without["runs"] >= 1  # no probe run: the graph tells the scale
    for run in (with_shrink, without):
        assert run["after_load_bytes"] > 0 and run["peak_bytes"] >= run["after_load_bytes"]
        assert run["samples"] >= 1
    rows = {r["name"]: r for r in data["rows"]}
    assert rows["GPU result with vs without shrink identical (M4)"]["met"] is True
    assert rows["GPU vs CPU result: max |diff|"]["value"] <= 1
    # Issue 15: the CUDA time per Mpx next to a bare ORT loop over the same tensors.
    speed = [r for n, r in rows.items() if n.startswith("CUDA time per Mpx of input")]
    assert len(speed) == 1 and speed[0]["unit"] == "s/Mpx"
    assert any(n.startswith("overhead vs bare ORT, synthetic-x4 on CUDA") for n in rows)
    # The session of the with-shrink run asked for the shrink at its last run only (M2).
    shrink_log = [v for v in recorder.log if v is not None]
    assert shrink_log == [cuda_shrink()]
