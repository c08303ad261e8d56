"""The CPU's plan for the whole request: one run where the image fits the budget, else tiles;
each model's overlap measured once and kept with its contract; and what that plan needs at
start-up — only the modules the first screen needs, compiled bytecode — and the bench's ncnn
tiling it is measured against."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.bench.peers import ncnn_own_tiles
from engine.operations import calibration
from engine.options import UpscaleOptions
from engine.requests import Operation, OperationRequest
from engine.runtime import finished_rows, optimize
from engine.runtime.identity import FileIdentity
from engine.samples.upscaler_models import make_compact_upscaler, make_upscaler
from engine.settings import EngineSettings
from engine.tiling.assembly import TileAssembler
from engine.tiling.plan import Tile
from tests.engine_helpers import photo


def _upscale(
    engine: Engine, model: Path, image: Path, out: Path, tile: int | None = None
) -> tuple[np.ndarray, int, int | None]:
    result = engine.run(
        OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out, tile=tile)
    )
    assert result.ok, result.failures
    (product,) = result.products
    return np.asarray(Image.open(product.path)).astype(np.int16), result.runs, result.tile


# -- the CPU's plan for the whole request ------------------------------------------------------


def test_auto_runs_an_image_that_fits_the_budget_at_once_on_the_cpu(tmp_path: Path) -> None:
    # A light model (the animevideov3 kind): `auto` used to cut 300×200 into 128² tiles with
    # their overlaps (1.8× the pixels); one run of the whole image is the fastest plan.
    model = make_upscaler(tmp_path / "light.onnx", scale=4)
    image = photo(tmp_path / "in.png", 300, 200, seed=4)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    whole, runs, tile = _upscale(engine, model, image, tmp_path / "a")
    assert (runs, tile) == (1, None)
    tiled, tiled_runs, _ = _upscale(engine, model, image, tmp_path / "b", tile=64)
    assert tiled_runs > 1
    assert int(np.abs(whole - tiled).max()) <= 1  # the same product, by the tiling rule


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_a_single_run_on_the_kernel_is_written_as_its_rows_are_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # The whole image in one run: the kernel's chain reports its finished rows, and the PNG
    # writer takes them in bands during the run (not all after it), the same product.
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4)
    image = photo(tmp_path / "in.png", 40, 200, mode=mode, seed=2)
    engine = Engine(EngineSettings(models_dir=tmp_path))
    bands: list[int] = []
    add_rows = TileAssembler.add_rows

    def counted(self: TileAssembler, tile: Tile, rows: np.ndarray, start: int) -> None:
        bands.append(start)
        add_rows(self, tile, rows, start)

    monkeypatch.setattr(TileAssembler, "add_rows", counted)
    streamed, runs, tile = _upscale(engine, model, image, tmp_path / "a")
    assert (runs, tile) == (2 if mode == "RGBA" else 1, None)
    assert len(bands) >= 2 * runs and bands.count(0) == runs
    monkeypatch.setattr(finished_rows, "listener", lambda: None)
    after, _, _ = _upscale(engine, model, image, tmp_path / "b")
    np.testing.assert_array_equal(streamed, after)


def test_an_image_beyond_the_budget_is_still_tiled(tmp_path: Path) -> None:
    # 1200×1000 ×4 would take ~1.7 GB of activations in one run: over the CPU budget (at most
    # 1.5 GiB), so `auto` tiles it.
    model = make_upscaler(tmp_path / "light.onnx", scale=4)
    image = photo(tmp_path / "big.png", 1200, 1000, seed=1)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    result = engine.run(
        OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=tmp_path / "o")
    )
    assert result.ok and result.tile is not None and result.runs > 1


def test_the_requests_own_max_tile_bounds_the_cpu_plan(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "light.onnx", scale=2)
    image = photo(tmp_path / "in.png", 300, 200)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    result = engine.run(
        OperationRequest(
            Operation.UPSCALE,
            str(model),
            (image,),
            output_dir=tmp_path / "o",
            options=UpscaleOptions(max_tile=128),
        )
    )
    assert result.ok and result.tile is not None and result.tile <= 128


# -- each model's overlap, measured once --------------------------------------------------------


def _record(models: Path) -> list[Path]:
    folder = models / optimize.FOLDER
    return sorted(folder.glob("*.overlap.json")) if folder.is_dir() else []


def test_the_overlap_is_measured_once_per_model_and_kept(tmp_path: Path) -> None:
    models = tmp_path / "models"
    # Receptive field 4 px: the assembler's rule (radius ≤ overlap // 4) needs 16.
    narrow = make_compact_upscaler(models / "narrow.onnx", scale=2, convs=3)
    image = photo(tmp_path / "in.png", 64, 48)
    engine = Engine(EngineSettings(models_dir=models))
    _, first_runs, _ = _upscale(engine, narrow, image, tmp_path / "a")
    assert first_runs == 1  # the probe's runs are the engine's, not the request's
    (record,) = _record(models)
    kept = json.loads(record.read_text())
    assert kept["overlap"] == 16
    assert kept["max_diff_by_overlap"]["16"] <= calibration.TOLERANCE
    assert kept["max_diff_by_overlap"]["12"] > calibration.TOLERANCE  # the next one down fails
    # Another engine (another process, as far as the model knows) reads it: no probe.
    before = record.stat().st_mtime_ns
    _, runs, _ = _upscale(Engine(EngineSettings(models_dir=models)), narrow, image, tmp_path / "b")
    assert runs == 1 and record.stat().st_mtime_ns == before
    # A changed file is another model: measured again, the old record replaced.
    make_compact_upscaler(narrow, scale=2, convs=3, seed=1)
    _upscale(Engine(EngineSettings(models_dir=models)), narrow, image, tmp_path / "c")
    (renewed,) = _record(models)
    assert renewed != record


def _blur_chain(path: Path, blurs: int) -> Path:
    """×2 nearest after `blurs` zero-padded 3×3 box blurs: a receptive field of `blurs` px
    whose reach decays slowly (a random walk's), unlike a trained network's."""
    from onnx import TensorProto, helper, numpy_helper, save

    box = numpy_helper.from_array(np.full((3, 1, 3, 3), 1 / 9, np.float32), "box")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [
        helper.make_node("Conv", [f"x{i}", "box"], [f"x{i + 1}"], group=3, pads=[1, 1, 1, 1])
        for i in range(blurs)
    ]
    nodes.append(
        helper.make_node(
            "Resize",
            [f"x{blurs}", "", "scales"],
            ["output"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
    )
    graph = helper.make_graph(
        nodes,
        "blur_chain",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "h2", "w2"])],
        [box, scales],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))
    return path


def test_a_wide_receptive_field_gets_a_wider_overlap_and_its_seams_stay_within_the_rule(
    tmp_path: Path,
) -> None:
    # Reach 60 px: 32 px of overlap (the old fixed value) shows its seams.
    models = tmp_path / "models"
    wide = _blur_chain(models / "wide.onnx", 60)
    image = tmp_path / "in.png"
    # Edges, texture, noise; sized so that 64² tiles overlap by exactly 32 px.
    Image.fromarray(calibration.probe_image(128, 160)).save(image)
    engine = Engine(EngineSettings(models_dir=models))
    whole, _, _ = _upscale(engine, wide, image, tmp_path / "w", tile=4096)
    (record,) = _record(models)
    kept = json.loads(record.read_text())
    assert kept["overlap"] > calibration.DEFAULT_OVERLAP
    assert kept["max_diff_by_overlap"]["32"] > calibration.TOLERANCE
    # (A tile at least twice the overlap: the plan clamps an overlap to half the tile.)
    measured, _, _ = _upscale(engine, wide, image, tmp_path / "m", tile=2 * kept["overlap"])
    assert int(np.abs(measured - whole).max()) <= 1
    old = Engine(EngineSettings(models_dir=models, overlap=32))
    fixed, _, _ = _upscale(old, wide, image, tmp_path / "f", tile=64)
    assert int(np.abs(fixed - whole).max()) > 1  # what the fixed overlap gave


def test_a_model_with_a_memory_cap_is_not_probed(tmp_path: Path) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "capped.onnx", scale=2, convs=3)
    image = photo(tmp_path / "in.png", 64, 48)
    engine = Engine(EngineSettings(models_dir=models, cpu_mem_limit=1 << 30))
    _, runs, _ = _upscale(engine, model, image, tmp_path / "a")
    assert runs == 1 and _record(models) == []


# -- start-up: only what the first screen needs ------------------------------------------------


@pytest.mark.parametrize(
    "module", ["engine.cli", "engine.models.inventory", "engine.runtime.devices", "gui.main_window"]
)
def test_starting_imports_no_onnx(module: str) -> None:
    # `onnx` (protobuf, ml_dtypes) is half a second and 16 MB: only reading a graph needs it.
    code = (
        f"import sys, {module}; "
        "print(sorted(m for m in ('onnx', 'google.protobuf', 'ml_dtypes') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_cpu_kernel_is_imported_only_when_a_cpu_model_loads() -> None:
    # The engine an idle window holds, or a GPU request, never runs Tessera's kernel.
    kernel = ("engine.runtime.chain", "engine.runtime.convgraph", "engine.runtime.winograd")
    code = f"import sys, engine.api, gui.main_window; print([m for m in {kernel!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_runtime_probe_model_is_the_one_onnx_builds() -> None:
    from onnx import TensorProto, helper

    from engine.runtime.devices import PROBE_MODEL

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert model.SerializeToString() == PROBE_MODEL


# -- the bench: ncnn as its users get it -------------------------------------------------------


def test_ncnn_tiles_are_its_grid_with_ten_pixels_of_context() -> None:
    frame = np.arange(300 * 200 * 3, dtype=np.float32).reshape(200, 300, 3)
    tiles = ncnn_own_tiles(frame, 128)
    # 3 × 2 grid of 128² (the last column 44 wide, the last row 72 high), each + 2 × 10 px.
    assert [t.shape for t in tiles[:3]] == [(3, 148, 148), (3, 148, 148), (3, 148, 64)]
    assert tiles[3].shape == (3, 92, 148)
    # The second tile's context is the image's own pixels; the first's, its border repeated.
    assert np.array_equal(tiles[1][:, 10:, :].transpose(1, 2, 0), frame[:138, 118:266])
    assert np.array_equal(tiles[0][:, 0, 10:20], tiles[0][:, 10, 10:20])
    (whole,) = ncnn_own_tiles(frame, None)
    assert whole.shape == (3, 220, 320)


def test_a_models_contract_is_kept_so_a_new_process_needs_no_onnx(tmp_path: Path) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "compact.onnx", scale=2)
    image = photo(tmp_path / "in.png", 32, 24)
    # The first process reads the graph (onnx) and keeps the contract beside the model.
    code = (
        "import sys; from pathlib import Path; from engine.models.contracts import validate_model; "
        f"c = validate_model(Path({str(model)!r})); "
        "print(c.family.value, c.scale, 'onnx' in sys.modules)"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    assert [r.stdout.split() for r in runs] == [["upscale", "2", "True"], ["upscale", "2", "False"]]
    # The kept contract is the one the graph gives, and a changed file is read again.
    from engine.models import contracts

    identity = FileIdentity.read(model)
    record = contracts._contract_record(
        model, None, identity.digest(None, contracts.CONTRACT_RECORD_VERSION)
    )
    kept = contracts._kept_contract(model, record, identity.digest())
    assert kept == contracts.inspect_model(model)
    make_compact_upscaler(model, scale=4)
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert again.stdout.split() == ["upscale", "4", "True"]
    records = list((models / optimize.FOLDER).glob("compact-any-*.contract.json"))
    assert len(records) == 1  # the old one went
    engine = Engine(EngineSettings(models_dir=models, overlap=32))
    assert _upscale(engine, model, image, tmp_path / "o")[0].shape == (96, 128, 3)


def test_the_benchs_starts_read_compiled_bytecode_even_where_writing_it_is_off() -> None:
    # PYTHONDONTWRITEBYTECODE (set on some build machines) made every start compile the
    # engine's sources again; the bench compiles them first, as an installed copy has them.
    import importlib.util

    import engine.cli
    from engine.bench.startup import compile_bytecode

    source = Path(engine.cli.__file__)
    cached = importlib.util.cache_from_source(str(source))
    assert cached is not None
    pyc = Path(cached)
    pyc.unlink(missing_ok=True)
    assert compile_bytecode.__wrapped__()
    header = pyc.read_bytes()[:16]
    # The interpreter takes a .pyc whose header names its source's mtime and size.
    st = source.stat()
    assert int.from_bytes(header[4:8], "little") == 0  # timestamp-checked, not hash-based
    assert int.from_bytes(header[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
    assert int.from_bytes(header[12:16], "little") == st.st_size & 0xFFFFFFFF
