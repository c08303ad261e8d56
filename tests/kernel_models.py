"""Small graphs for the kernel's tests, built with onnx.helper: SRVGG-shaped chains of any
channel count and activation, and graphs the kernel must leave to ORT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

ACTIVATIONS = ("PRelu", "PRelu1", "PReluC11", "Relu", "LeakyRelu", "none")


def _save(graph: onnx.GraphProto, path: Path, domains: tuple[str, ...] = ()) -> Path:
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def activation(
    kind: str, x: str, out: str, channels: int, rng: np.random.Generator, domain: str = ""
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """One activation node of `kind` (ACTIVATIONS; "none": an Identity) from x to out."""
    if kind.startswith("PRelu"):
        shape = {"PRelu": (1, channels, 1, 1), "PRelu1": (1,), "PReluC11": (channels, 1, 1)}[kind]
        slope = numpy_helper.from_array(
            rng.uniform(-0.5, 2.0, shape).astype(np.float32), f"{out}_s"
        )
        return [helper.make_node("PRelu", [x, slope.name], [out], domain=domain)], [slope]
    if kind == "LeakyRelu":
        return [helper.make_node("LeakyRelu", [x], [out], alpha=0.2, domain=domain)], []
    if kind == "Relu":
        return [helper.make_node("Relu", [x], [out], domain=domain)], []
    return [helper.make_node("Identity", [x], [out])], []


def srvgg(
    path: Path,
    *,
    channels: int = 3,
    features: int = 16,
    convs: int = 4,
    scale: int = 4,
    act: str = "PRelu",
    image_channels: int | None = None,
    act_domain: str = "",
    seed: int = 0,
) -> Path:
    """SRVGG "compact": conv → activation `convs` times, a conv to `image_channels`·scale²
    channels (default: the input's), DepthToSpace(scale) and the nearest-upscaled input added
    (a broadcasting sum where the two channel counts differ, as ONNX allows for 1)."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x, c = "input", channels
    for i in range(convs):
        w = rng.normal(0, 0.6 / np.sqrt(9 * c), (features, c, 3, 3)).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(rng.normal(0, 0.1, features).astype(np.float32), f"b{i}"),
        ]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4))
        more, consts = activation(act, f"c{i}", f"a{i}", features, rng, act_domain)
        nodes += more
        inits += consts
        x, c = f"a{i}", features
    out_c = (image_channels or channels) * scale * scale
    w = rng.normal(0, 0.3 / np.sqrt(9 * c), (out_c, c, 3, 3)).astype(np.float32)
    inits += [
        numpy_helper.from_array(w, "w_last"),
        numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "up"),
    ]
    nodes += [
        helper.make_node("Conv", [x, "w_last"], ["last"], pads=[1] * 4),
        helper.make_node("DepthToSpace", ["last"], ["d2s"], blocksize=scale, mode="CRD"),
        helper.make_node(
            "Resize",
            ["input", "", "up"],
            ["base"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Add", ["d2s", "base"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "srvgg",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        inits,
    )
    return _save(graph, path, (act_domain,) if act_domain else ())
