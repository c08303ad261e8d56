"""The optional OpenVINO bench (engine/bench/openvino_cpu.py): without `openvino` one row
says why and how to get it; with it (TESSERA_OPENVINO_PYTHON or this venv) a contract model
gets a row per instruction set of the kernel."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from engine.bench import openvino_cpu
from engine.bench.table import Table
from engine.runtime import winograd
from engine.samples.upscaler_models import make_compact_upscaler
from engine.settings import EngineSettings


def test_without_openvino_the_bench_skips_and_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An `openvino` that cannot be imported, first on the worker interpreter's path.
    fake = tmp_path / "site" / "openvino"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("no OpenVINO in this venv")\n')
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.delenv(openvino_cpu.PYTHON_ENV, raising=False)
    table = Table(out=io.StringIO())
    openvino_cpu.measure_openvino_cpu(
        table, EngineSettings(models_dir=tmp_path), tmp_path, tmp_path, quick=True
    )
    assert [r.value for r in table.rows] == ["skipped"]
    note = table.rows[0].note
    assert "no OpenVINO in this venv" in note and "scripts/bench_openvino.sh" in note


def test_an_interpreter_that_does_not_run_is_named() -> None:
    reason = openvino_cpu.openvino_unavailable("/nonexistent/python")
    assert reason is not None and "/nonexistent/python" in reason


@pytest.mark.skipif(
    openvino_cpu.openvino_unavailable(openvino_cpu.openvino_python()) is not None,
    reason="openvino is not importable (an optional measurement: scripts/bench_openvino.sh)",
)
@pytest.mark.skipif(not winograd.available(), reason="the kernel is not built")
def test_with_openvino_a_contract_model_gets_a_row_per_set(tmp_path: Path) -> None:
    models = tmp_path / "models"
    make_compact_upscaler(models / "realesrgan-animevideov3-x4.onnx", 4, features=16, convs=4)
    work = tmp_path / "work"
    work.mkdir()
    table = Table(out=io.StringIO())
    openvino_cpu.measure_openvino_cpu(
        table, EngineSettings(models_dir=models), models, work, quick=True, rounds=1
    )
    rows = {r.name: r for r in table.rows}
    for isa in winograd.available_isas():
        row = rows[f"OpenVINO CPU ÷ Tessera kernel, {isa}, realesrgan-animevideov3-x4"]
        # Baseline may be refused by OpenVINO's plugin (a reason, then); the others run.
        assert (isinstance(row.value, float) and row.value > 0) or row.value == "failed", row
        if isinstance(row.value, float):
            assert "OpenVINO 0/255" in row.note or "OpenVINO 1/255" in row.note, row.note
