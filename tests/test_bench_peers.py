"""The bench against the peers' runtime (issue #15), on the real starter models and the ncnn
originals they were converted from: every row present and finite, on Tessera's own tile plan.
Only that the bench measures is asserted, never how fast anything is."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from engine.bench.peers import (
    NcnnModel,
    conv_macs_per_pixel,
    measure_against_ncnn,
    measure_session_options,
    measure_tile_choice,
    ncnn_unavailable,
)
from engine.bench.table import Table
from engine.samples.upscaler_models import make_compact_upscaler
from engine.settings import EngineSettings
from tests.starter_fixtures import StarterEnv, starter_env  # noqa: F401 - a fixture

pytest.importorskip("ncnn")
pytestmark = pytest.mark.starter


def _table(tmp_path: Path) -> Table:
    return Table(io.StringIO())


def test_conv_macs_are_counted_per_input_pixel(tmp_path: Path) -> None:
    model = make_compact_upscaler(tmp_path / "c.onnx", scale=4, features=8, convs=3)
    # 3→8, 8→8, 8→8, then 8→48 (3·4²), all 3×3 at the input's resolution.
    assert conv_macs_per_pixel(model) == 8 * 3 * 9 + 2 * 8 * 8 * 9 + 48 * 8 * 9


def test_ncnn_runs_the_original_and_agrees_with_the_starter_model(
    starter_env: StarterEnv,  # noqa: F811
) -> None:
    import numpy as np
    import onnxruntime as ort

    packages = starter_env.models_dir.parent / "packages"
    assert ncnn_unavailable(packages, download=False) is None
    net = NcnnModel(packages, "realesrgan-animevideov3-x4", 2)
    x = np.random.default_rng(0).random((3, 24, 32), np.float32)
    theirs = net.run(x)
    session = ort.InferenceSession(
        str(starter_env.models_dir / "realesrgan-animevideov3-x4.onnx"),
        providers=["CPUExecutionProvider"],
    )
    ours = session.run(None, {session.get_inputs()[0].name: x[None]})[0][0]
    assert theirs.shape == ours.shape == (3, 96, 128)
    assert float(np.abs(theirs - ours).max()) < 1e-4


def test_the_peers_rows_are_measured_on_tesseras_tile_plan(
    starter_env: StarterEnv,  # noqa: F811
    tmp_path: Path,
) -> None:
    models = starter_env.models_dir
    packages = models.parent / "packages"
    settings = EngineSettings(models_dir=models)
    table = _table(tmp_path)
    measure_against_ncnn(
        table, settings, models, packages, tmp_path, True, models=("realesrgan-animevideov3-x4",)
    )
    anime = models / "realesrgan-animevideov3-x4.onnx"
    measure_session_options(table, anime, 0, 1)
    measure_tile_choice(table, settings, anime, tmp_path, True)
    rows = {r.name: r for r in table.rows}
    (peer,) = [
        r for n, r in rows.items() if n.startswith("realesrgan-animevideov3-x4: Tessera ÷ ncnn per")
    ]
    assert isinstance(peer.value, float) and math.isfinite(peer.value) and peer.value > 0
    assert "Tessera's own plan (tile whole)" in peer.note  # 256×192 fits in one run
    # ncnn as its users get it: its own tiles (10-px pre-padding), the best of them.
    (best,) = [r for n, r in rows.items() if "at ncnn's best tile" in n]
    assert isinstance(best.value, float) and math.isfinite(best.value) and best.value > 0
    assert "s/Mpx by tile: 128 " in best.note and "whole " in best.note
    # The light model's efficiency against the machine's matmul peak, both ways of counting.
    assert any(n.startswith("animevideov3-x4: achieved GFLOP/s (whole request)") for n in rows)
    kernels = rows[
        "animevideov3-x4: achieved GFLOP/s (model runs, computed pixels) vs the matmul peak"
    ]
    assert 0 < float(kernels.value) < 1000
    options = [r for n, r in rows.items() if n.startswith("session option:")]
    assert len(options) == 6 and all(math.isfinite(float(r.value)) for r in options)
    assert rows["session option: Tessera's (optimised copy, level all)"].value == 1.0
    assert any(n.startswith("auto tile on the CPU") for n in rows)
    assert any(n.startswith("auto plan on the CPU ÷ 128² tiles") for n in rows)
    assert any(n.startswith("tiles prepared, blended and written on side threads") for n in rows)
    assert any(n.startswith("file I/O outside the runs, band writing") for n in rows)


def test_without_the_originals_the_row_says_why(tmp_path: Path) -> None:
    table = _table(tmp_path)
    settings = EngineSettings(models_dir=tmp_path)
    measure_against_ncnn(table, settings, tmp_path, tmp_path / "none", tmp_path, True)
    (row,) = table.rows
    assert row.value == "skipped" and "fetch-starter" in row.note
