"""Sample Depth Anything 3: depth = exp(0.5·luma + 0.5·mean of luma over its 14×14 patch):
positive, larger for brighter pixels, and H, W must be multiples of 14 (other sizes fail inside
the run, like the real patch-based model). depth_conf = 1 + exp(luma) ≥ 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from engine.samples.onnx_graph import Dim, const, luma_weight, save_graph


def make_da3(
    path: Path,
    fixed: bool = True,
    *,
    size: tuple[int, int] = (504, 504),
    views: int | None = None,
    input_name: str = "image",
    output_name: str = "depth",
    with_conf: bool = True,
) -> Path:
    """Depth Anything 3-like: 1×3×H×W (or 1×N×3×H×W with `views=N`) ImageNet-normalised in,
    `depth` 1×H×W (or 1×N×H×W) positive out; H and W must be multiples of 14."""
    h: Dim = size[0] if fixed else "height"
    w: Dim = size[1] if fixed else "width"
    nodes: list[onnx.NodeProto] = []
    inits = [
        luma_weight("luma_w"),
        const("half", np.float32(0.5)),
        const("one", np.float32(1.0)),
        const("patch_up", np.array([1, 1, 14, 14], np.float32)),
        const("axis1", np.array([1], np.int64)),
    ]
    if views is None:
        in_shape: list[Dim] = [1, 3, h, w]
        out_shape: list[Dim] = [1, h, w]
        x = input_name
    else:
        in_shape = [1, views, 3, h, w]
        out_shape = [1, views, h, w]
        inits.append(const("axis0", np.array([0], np.int64)))
        nodes.append(helper.make_node("Squeeze", [input_name, "axis0"], ["frames"]))
        x = "frames"
    nodes += [
        helper.make_node("Conv", [x, "luma_w"], ["luma"]),
        helper.make_node(
            "AveragePool", ["luma"], ["patch"], kernel_shape=[14, 14], strides=[14, 14]
        ),
        helper.make_node(
            "Resize",
            ["patch", "", "patch_up"],
            ["patch_full"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Add", ["luma", "patch_full"], ["mix2"]),
        helper.make_node("Mul", ["mix2", "half"], ["mix"]),
        helper.make_node("Exp", ["mix"], ["depth4"]),
        helper.make_node("Exp", ["luma"], ["conf_e"]),
        helper.make_node("Add", ["conf_e", "one"], ["conf4"]),
    ]
    outs = [("depth4", output_name)] + ([("conf4", "depth_conf")] if with_conf else [])
    for src, dst in outs:
        if views is None:
            nodes.append(helper.make_node("Squeeze", [src, "axis1"], [dst]))
        else:
            nodes.append(helper.make_node("Squeeze", [src, "axis1"], [dst + "_n"]))
            nodes.append(helper.make_node("Unsqueeze", [dst + "_n", "axis0"], [dst]))
    outputs = [helper.make_tensor_value_info(dst, TensorProto.FLOAT, out_shape) for _, dst in outs]
    return save_graph(
        nodes,
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, in_shape)],
        outputs,
        inits,
        path,
        "da3_like",
    )
