"""The CPU's optimised copy of a model (engine/runtime/optimize.py, issue #15): the rewrites are
exact within float rounding, the copy is kept beside the original and reused, a new version
of the file gets a new copy, and nothing about a copy can cost the user the model."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from PIL import Image

from engine.api import Engine
from engine.requests import Operation, OperationRequest
from engine.runtime import optimize
from engine.runtime.identity import FileIdentity
from engine.samples.upscaler_models import make_compact_upscaler, make_upscaler
from engine.settings import EngineSettings


def _session(source: Path | bytes) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    data = source if isinstance(source, bytes) else str(source)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _outputs(source: Path | bytes, x: np.ndarray) -> np.ndarray:
    return np.asarray(_session(source).run(None, {"input": x})[0])


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("downscale", [None, 0.5, 0.75])
@pytest.mark.parametrize("size", [(24, 32), (17, 23)])
def test_rewrites_keep_the_outputs(
    tmp_path: Path, downscale: float | None, size: tuple[int, int]
) -> None:
    scale = {None: 4, 0.5: 2, 0.75: 3}[downscale]
    path = make_compact_upscaler(tmp_path / "compact.onnx", scale=scale, downscale=downscale)
    model = onnx.load(str(path))
    done = optimize.rewrite_for_cpu(model)
    onnx.checker.check_model(model)
    assert "PRelu" not in _ops(model)  # all three folded
    assert done[0] == "3 PRelu folded"
    if downscale is not None:
        assert "Resize" in _ops(model)  # the nearest one stays; the cubic ½ became a conv
        assert done[1] == "1 cubic downscale as a conv"
        cubic = [
            n
            for n in model.graph.node
            if n.op_type == "Resize" and b"cubic" in n.SerializeToString()
        ]
        assert not cubic
    x = np.random.default_rng(1).random((1, 3, *size), np.float32)
    before = _outputs(path, x)
    after = _outputs(model.SerializeToString(), x)
    assert before.shape == after.shape
    # Slopes on both sides of 1 were drawn, so a wrong sign anywhere would show by far more.
    assert np.abs(before - after).max() <= 1e-5 * max(1.0, float(np.abs(before).max()))


def test_a_prelu_read_elsewhere_is_left_as_it_is(tmp_path: Path) -> None:
    path = make_compact_upscaler(tmp_path / "compact.onnx", convs=2)
    model = onnx.load(str(path))
    # The first conv's output is also a graph output: flipping its sign would change it.
    model.graph.output.append(
        onnx.helper.make_tensor_value_info("c0", onnx.TensorProto.FLOAT, None)
    )
    assert optimize.fold_prelu_signs(model) == 1
    assert _ops(model).count("PRelu") == 1
    x = np.random.default_rng(2).random((1, 3, 16, 16), np.float32)
    original = _session(path)
    rewritten = _session(model.SerializeToString())
    a = original.run(None, {"input": x})[0]
    b, c0 = rewritten.run(["output", "c0"], {"input": x})
    assert np.abs(a - b).max() < 1e-5
    c0_before = onnx.load(str(path))
    c0_before.graph.output.append(
        onnx.helper.make_tensor_value_info("c0", onnx.TensorProto.FLOAT, None)
    )
    assert np.array_equal(_session(c0_before.SerializeToString()).run(["c0"], {"input": x})[0], c0)


def test_a_three_quarter_resize_of_any_size_is_left_as_it_is() -> None:
    # ¾ is only exact as a conv where H and W are multiples of 4: a Resize fed straight from
    # the input (any size) keeps its Resize.
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node(
                "Resize",
                ["input", "", "scales"],
                ["output"],
                mode="cubic",
                coordinate_transformation_mode="half_pixel",
                cubic_coeff_a=-0.75,
            )
        ],
        "resize",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "oh", "ow"])],
        initializer=[numpy_helper.from_array(np.array([1, 1, 0.75, 0.75], np.float32), "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert optimize.cubic_downscales_as_convs(model) == 0
    assert _ops(model) == ["Resize"]
    model.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "scales")
    )
    assert optimize.cubic_downscales_as_convs(model) == 1  # ½ holds for any size


def test_a_graph_with_nothing_to_rewrite_gets_no_copy(tmp_path: Path) -> None:
    path = make_upscaler(tmp_path / "plain.onnx")
    assert optimize.cpu_copy(path, FileIdentity.read(path)) is None
    assert not (tmp_path / optimize.FOLDER).exists()


def _image(path: Path) -> Path:
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 255, (40, 56, 3), np.uint8)).save(path)
    return path


def _upscale(engine: Engine, model: Path, image: Path, out: Path) -> np.ndarray:
    result = engine.run(
        OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out, tile=32)
    )
    assert result.ok, result.failures
    (product,) = result.products
    return np.asarray(Image.open(product.path))


def _copies(models: Path) -> list[Path]:
    folder = models / optimize.FOLDER
    # The measured tile overlap and the contract kept beside the copy are not copies.
    listed = sorted(folder.iterdir()) if folder.is_dir() else []
    return [p for p in listed if not p.name.endswith((".overlap.json", ".contract.json"))]


def test_the_copy_is_kept_reused_and_renewed_with_the_file(tmp_path: Path) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "compact.onnx", scale=2, downscale=0.5)
    image = _image(tmp_path / "in.png")
    plain = _upscale(
        Engine(EngineSettings(models_dir=models, optimized_copies=False, cpu_kernels=False)),
        model,
        image,
        tmp_path / "a",
    )
    assert _copies(models) == []

    first = _upscale(
        Engine(EngineSettings(models_dir=models, cpu_kernels=False)), model, image, tmp_path / "b"
    )
    (kept,) = _copies(models)
    assert kept.name.startswith("compact-") and kept.suffix == ".onnx"
    # The products agree within 1/255 (float order changes; 8-bit rounding may differ by one).
    assert np.abs(plain.astype(int) - first.astype(int)).max() <= 1

    stamp = kept.stat().st_mtime_ns
    again = _upscale(
        Engine(EngineSettings(models_dir=models, cpu_kernels=False)), model, image, tmp_path / "c"
    )
    assert _copies(models) == [kept] and kept.stat().st_mtime_ns == stamp  # reused, not remade
    assert np.array_equal(first, again)

    # A new version of the model (another download, a re-fetch) gets its own copy; the old one
    # goes.
    make_compact_upscaler(model, scale=2, downscale=0.5, seed=5)
    _upscale(
        Engine(EngineSettings(models_dir=models, cpu_kernels=False)), model, image, tmp_path / "d"
    )
    (renewed,) = _copies(models)
    assert renewed != kept


def test_a_damaged_copy_falls_back_to_the_original(tmp_path: Path) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "compact.onnx")
    image = _image(tmp_path / "in.png")
    good = _upscale(
        Engine(EngineSettings(models_dir=models, cpu_kernels=False)), model, image, tmp_path / "a"
    )
    (kept,) = _copies(models)
    kept.write_bytes(b"not a model")
    again = _upscale(
        Engine(EngineSettings(models_dir=models, cpu_kernels=False)), model, image, tmp_path / "b"
    )
    assert np.abs(good.astype(int) - again.astype(int)).max() <= 1
    assert not kept.exists()  # dropped: the next load makes a good one


def test_an_unwritable_folder_rewrites_in_memory(tmp_path: Path) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "compact.onnx")
    # A file where the folder would go stands for a folder that cannot be written (as root,
    # permissions would not stop us).
    (models / optimize.FOLDER).write_text("")
    copy = optimize.cpu_copy(model, FileIdentity.read(model))
    assert copy is not None and isinstance(copy.source, bytes) and copy.save_to is None
    image = _image(tmp_path / "in.png")
    out = _upscale(
        Engine(EngineSettings(models_dir=models, cpu_kernels=False)), model, image, tmp_path / "a"
    )
    assert out.shape == (160, 224, 3)
    assert sorted(p.name for p in models.iterdir()) == [optimize.FOLDER, "compact.onnx"]


def test_no_partial_copy_is_left_when_the_load_fails(tmp_path: Path) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "compact.onnx")
    copy = optimize.cpu_copy(model, FileIdentity.read(model))
    assert copy is not None and copy.save_to is not None
    copy.save_to.write_bytes(b"half")  # as if ORT had begun writing
    optimize.discard(copy)
    assert [p for p in _copies(models) if p.name.startswith(".")] == []
    assert os.listdir(models / optimize.FOLDER) == []
