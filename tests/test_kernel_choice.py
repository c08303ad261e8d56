"""Which code runs a model's CPU convolutions (engine/runtime/kernel_choice.py): measured on
this CPU and kept, overridden by TESSERA_CPU_KERNELS, and said by `run --json` and `devices`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest

from engine.runtime import chain, kernel_choice, optimize, winograd
from engine.runtime.identity import FileIdentity
from engine.runtime.providers import Device, Runtime
from engine.runtime.sessions import SessionCache, SessionInfo, SessionKey
from tests.engine_helpers import photo
from tests.kernel_models import srvgg

ROOT = Path(__file__).resolve().parent.parent
CPU = Device("cpu")
needs_kernel = pytest.mark.skipif(
    not winograd.available(), reason="the kernel is not built (no C compiler at install)"
)


def _cli(*args: str | Path, kernels: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), kernel_choice.KERNELS_ENV: kernels},
    )


@pytest.mark.parametrize("command", [("devices",), ("run", "upscale", "x.png", "--model", "m")])
def test_an_unknown_kernel_setting_is_a_usage_error(command: tuple[str, ...]) -> None:
    done = _cli(*command, kernels="fastest")
    assert done.returncode == 2, done.stderr
    assert "TESSERA_CPU_KERNELS='fastest'" in done.stderr and "auto" in done.stderr


@needs_kernel
@pytest.mark.parametrize(
    ("kernels", "said"), [("tessera", kernel_choice.active_isa()), ("ort", "onnxruntime")]
)
def test_run_json_says_which_path_ran_the_cpu_convolutions(
    tmp_path: Path, kernels: str, said: str | None
) -> None:
    model = srvgg(tmp_path / "m" / "m.onnx", features=16, scale=2)
    image = photo(tmp_path / "in.png", 20, 16)
    done = _cli("run", "upscale", image, "--model", model, "--out", tmp_path / "o",
                "--standalone", "--json", kernels=kernels)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cpu_kernel"] == said


def test_devices_names_the_cpu_convolutions_and_why() -> None:
    done = _cli("devices", "--json", kernels="ort")
    assert done.returncode == 0, done.stderr
    (cpu,) = [r for r in json.loads(done.stdout) if r["runtime"] == "cpu"]
    assert cpu["cpu_kernel"] == "onnxruntime"
    assert "TESSERA_CPU_KERNELS=ort" in cpu["cpu_kernel_note"]


@needs_kernel
def test_auto_measures_once_and_keeps_the_choice_beside_the_kept_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kernel_choice.KERNELS_ENV, "auto")
    monkeypatch.delenv(winograd.ISA_ENV, raising=False)  # the CPU as it is, whatever the shell caps
    model = srvgg(tmp_path / "m.onnx", features=32, convs=5, scale=2)
    key = SessionKey.make(model, CPU, Runtime.CPU)
    cache = SessionCache(threads=2)
    entry, _ = cache.get(key)
    (record,) = (tmp_path / optimize.FOLDER).glob("m-*.kernel.json")
    data = json.loads(record.read_text())
    assert data["model"] == FileIdentity.of(model).digest()
    assert data["cpu"] == kernel_choice.cpu_name() and data["isa"] == kernel_choice.active_isa()
    assert data["kernel_ms"] > 0 and data["ort_ms"] > 0
    chose_kernel = isinstance(entry.session, chain.ChainSession)
    assert chose_kernel == data["kernel"]
    assert entry.cpu_kernel == (kernel_choice.active_isa() if chose_kernel else "onnxruntime")
    if not chose_kernel:
        assert "measured on this CPU" in entry.cpu_kernel_note
    cache.release_all()
    stamp = record.stat().st_mtime_ns
    cache = SessionCache(threads=2)
    cache.get(key)  # loaded again: the kept choice, not a second measurement
    assert record.stat().st_mtime_ns == stamp
    cache.release_all()


@needs_kernel
def test_a_kept_choice_for_ort_loads_ort_and_one_of_another_cpu_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose shapes suit ORT better on this CPU runs on ORT; a choice measured on
    another CPU (a copied models folder) is not trusted."""
    monkeypatch.setenv(kernel_choice.KERNELS_ENV, "auto")
    monkeypatch.delenv(winograd.ISA_ENV, raising=False)  # the CPU as it is, whatever the shell caps
    model = srvgg(tmp_path / "m.onnx", features=16, scale=2)
    key = SessionKey.make(model, CPU, Runtime.CPU)
    cache = SessionCache(threads=2)
    cache.get(key)
    cache.release_all()
    (record,) = (tmp_path / optimize.FOLDER).glob("m-*.kernel.json")
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "kernel": False, "why": "measured: ORT was faster"}))
    cache = SessionCache(threads=2)
    entry, _ = cache.get(key)
    assert isinstance(entry.session, ort.InferenceSession)
    assert entry.cpu_kernel == "onnxruntime" and "ORT was faster" in entry.cpu_kernel_note
    cache.release_all()
    record.write_text(json.dumps({**data, "cpu": "another CPU", "kernel_ms": -1.0}))
    cache = SessionCache(threads=2)
    cache.get(key)
    assert json.loads(record.read_text())["kernel_ms"] > 0  # measured again here
    cache.release_all()


@needs_kernel
def test_an_instruction_set_without_a_tuned_kernel_runs_ort_under_auto(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kernel_choice.KERNELS_ENV, "auto")
    monkeypatch.setenv("TESSERA_CPU_ISA", "baseline")
    if kernel_choice.active_isa() != "baseline":
        pytest.skip("this kernel build cannot be capped at its baseline (TESSERA_CPU_ISA)")
    model = srvgg(tmp_path / "m.onnx", features=16, scale=2)
    cache = SessionCache(threads=2)
    entry, _ = cache.get(SessionKey.make(model, CPU, Runtime.CPU))
    assert entry.cpu_kernel == "onnxruntime" and "baseline" in entry.cpu_kernel_note
    cache.release_all()


def test_the_memory_panel_names_what_ran_the_cpu_convolutions_and_why(
    qtbot: Any, tmp_path: Path
) -> None:
    from gui.widgets.memory_panel import MemoryPanel

    def info(name: str, kernel: str | None, note: str = "") -> SessionInfo:
        key = SessionKey(tmp_path / name, CPU, Runtime.CPU)
        return SessionInfo(
            key, name, "cpu", "cpu", "CPUExecutionProvider", 1, 1, 0.0, 0, 0, kernel, note
        )

    panel = MemoryPanel()
    qtbot.addWidget(panel)
    panel.set_sessions(
        (
            info("a.onnx", "avx2"),
            info("b.onnx", "onnxruntime", "measured on this CPU (avx2): ORT was faster"),
        )
    )
    kernel, ort_cell = panel.table.item(0, 3), panel.table.item(1, 3)
    assert kernel is not None and ort_cell is not None
    assert kernel.text() == "CPU · Tessera avx2"
    assert ort_cell.text() == "CPU" and "ORT was faster" in ort_cell.toolTip()
