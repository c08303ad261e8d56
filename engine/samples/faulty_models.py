"""Models the engine must refuse or catch: one that fits no family, one whose weights live in
an external file, and copies of good models whose outputs turn non-finite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.samples.onnx_graph import IR_VERSION, OPSET, const, save_graph


def make_two_strings(path: Path) -> Path:
    """A valid ONNX graph that fits no image family: two string inputs, concatenated."""
    return save_graph(
        [helper.make_node("Concat", ["a", "b"], ["c"], axis=0)],
        [
            helper.make_tensor_value_info("a", TensorProto.STRING, [1]),
            helper.make_tensor_value_info("b", TensorProto.STRING, [1]),
        ],
        [helper.make_tensor_value_info("c", TensorProto.STRING, [2])],
        [],
        path,
        "two_strings",
    )


def make_external_data(path: Path, location: str, *, write_data: bool = True) -> Path:
    """A ×1 upscaler whose 3×3 weights live in an external file at `location` (written as
    given, even absolute or with `..`, so tests can check the refusals)."""
    weights = np.zeros((3, 3, 3, 3), np.float32)
    for c in range(3):
        weights[c, c, 1, 1] = 1.0  # identity
    tensor = numpy_helper.from_array(weights, "w")
    path = Path(path)
    if write_data:
        data_path = Path(location) if Path(location).is_absolute() else path.parent / location
        data_path.parent.mkdir(parents=True, exist_ok=True)
        data_path.write_bytes(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(weights.nbytes))):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["output"], pads=[1, 1, 1, 1])],
        "external",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "height", "width"])],
        initializer=[tensor],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())  # onnx.save would resolve the location
    return path


def make_nonfinite(
    src: Path,
    dst: Path,
    *,
    output: str | None = None,
    value: float = float("nan"),
    above: float = float("-inf"),
    where_mask: str | None = None,
) -> Path:
    """A copy of the model at `src` whose `output` (default: the first) is `value` (NaN, inf)
    wherever its own value exceeds `above` — everywhere by default — like a model whose fp16
    arithmetic overflows. `where_mask` ("valid" or "invalid") instead poisons a MoGe model's
    points where its `mask` output says the pixel is (in)valid (mask > 0.5)."""
    model = onnx.load(str(src))
    graph = model.graph
    name = output or graph.output[0].name
    raw = f"{name}_raw"
    for node in graph.node:
        node.output[:] = [raw if o == name else o for o in node.output]
    for node in graph.node:
        node.input[:] = [raw if i == name else i for i in node.input]
    graph.initializer.append(const("poison_value", np.array(value, np.float32)))
    if where_mask is None:
        graph.initializer.append(const("poison_above", np.array(above, np.float32)))
        graph.node.append(helper.make_node("Greater", [raw, "poison_above"], ["poison_if"]))
        condition = "poison_if"
    else:
        graph.initializer.append(const("poison_half", np.array(0.5, np.float32)))
        graph.initializer.append(const("poison_axis", np.array([-1], np.int64)))
        op = "Greater" if where_mask == "valid" else "LessOrEqual"
        graph.node.append(helper.make_node(op, ["mask", "poison_half"], ["poison_mask"]))
        graph.node.append(
            helper.make_node("Unsqueeze", ["poison_mask", "poison_axis"], ["poison_if"])
        )
        condition = "poison_if"
    graph.node.append(helper.make_node("Where", [condition, "poison_value", raw], [name]))
    onnx.checker.check_model(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return dst
