"""Sample MoGe-2: a fronto-parallel pinhole scene. z = 1 + luma, points = ((u−W/2)/F·z,
(v−H/2)/F·z, z) at pixel centres with F = half the image diagonal, normal = (0, 0, −1), mask =
sigmoid(20·(0.95 − luma)) (near-white pixels are "sky"), metric_scale = 1.5 per image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from engine.samples.onnx_graph import Dim, const, luma_weight, save_graph


def make_moge(path: Path, *, num_tokens_rank: int = 0) -> Path:
    """MoGe-2-like: `image` B×3×H×W float32 0…1 (dynamic) and `num_tokens` int64 (scalar by
    default, [1] with num_tokens_rank=1) in; `points`, `normal`, `mask`, `metric_scale` out."""
    f32 = np.float32
    inits = [
        luma_weight("luma_w"),
        const("one", f32(1.0)),
        const("zero", f32(0.0)),
        const("half", f32(0.5)),
        const("minus_one", f32(-1.0)),
        const("white", f32(0.95)),
        const("twenty", f32(20.0)),
        const("metric", f32(1.5)),
        const("idx2", np.array(2, np.int64)),
        const("idx3", np.array(3, np.int64)),
        const("shape_h", np.array([1, 1, -1, 1], np.int64)),
        const("shape_w", np.array([1, 1, 1, -1], np.int64)),
        const("axis1", np.array([1], np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "luma_w"], ["luma"]),  # B×1×H×W
        helper.make_node("Add", ["luma", "one"], ["z"]),
        # Pixel-centre coordinates relative to the image centre, as B×1×H×1 and B×1×1×W.
        helper.make_node("Shape", ["image"], ["shape"]),
        helper.make_node("Gather", ["shape", "idx2"], ["h_i"]),
        helper.make_node("Gather", ["shape", "idx3"], ["w_i"]),
        helper.make_node("Cast", ["h_i"], ["h_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["w_i"], ["w_f"], to=TensorProto.FLOAT),
        helper.make_node("Range", ["half", "h_f", "one"], ["rows0"]),
        helper.make_node("Range", ["half", "w_f", "one"], ["cols0"]),
        helper.make_node("Mul", ["h_f", "half"], ["cy"]),
        helper.make_node("Mul", ["w_f", "half"], ["cx"]),
        helper.make_node("Sub", ["rows0", "cy"], ["rows1"]),
        helper.make_node("Sub", ["cols0", "cx"], ["cols1"]),
        helper.make_node("Mul", ["h_f", "h_f"], ["h2"]),
        helper.make_node("Mul", ["w_f", "w_f"], ["w2"]),
        helper.make_node("Add", ["h2", "w2"], ["d2"]),
        helper.make_node("Sqrt", ["d2"], ["diag"]),
        helper.make_node("Mul", ["diag", "half"], ["focal"]),
        helper.make_node("Div", ["rows1", "focal"], ["rows2"]),
        helper.make_node("Div", ["cols1", "focal"], ["cols2"]),
        helper.make_node("Reshape", ["rows2", "shape_h"], ["v"]),
        helper.make_node("Reshape", ["cols2", "shape_w"], ["u"]),
        helper.make_node("Mul", ["u", "z"], ["px"]),
        helper.make_node("Mul", ["v", "z"], ["py"]),
        helper.make_node("Concat", ["px", "py", "z"], ["p4"], axis=1),
        helper.make_node("Transpose", ["p4"], ["points"], perm=[0, 2, 3, 1]),
        helper.make_node("Mul", ["z", "zero"], ["zeros"]),
        helper.make_node("Add", ["zeros", "minus_one"], ["minus"]),
        helper.make_node("Concat", ["zeros", "zeros", "minus"], ["n4"], axis=1),
        helper.make_node("Transpose", ["n4"], ["normal"], perm=[0, 2, 3, 1]),
        helper.make_node("Sub", ["white", "luma"], ["m0"]),
        helper.make_node("Mul", ["m0", "twenty"], ["m1"]),
        helper.make_node("Sigmoid", ["m1"], ["m2"]),
        helper.make_node("Squeeze", ["m2", "axis1"], ["mask"]),
        # metric_scale: 1.5 per image; num_tokens joins the graph (×0) as the real one uses it.
        helper.make_node("Cast", ["num_tokens"], ["nt_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["nt_f", "zero"], ["nt0"]),
        helper.make_node("ReduceMean", ["zeros"], ["zb"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Add", ["zb", "metric"], ["ms0"]),
        helper.make_node("Add", ["ms0", "nt0"], ["metric_scale"]),
    ]
    nt_shape: list[Dim] = [] if num_tokens_rank == 0 else [1]
    dims: list[Dim] = ["batch", "height", "width"]
    return save_graph(
        nodes,
        [
            helper.make_tensor_value_info(
                "image", TensorProto.FLOAT, ["batch", 3, "height", "width"]
            ),
            helper.make_tensor_value_info("num_tokens", TensorProto.INT64, nt_shape),
        ],
        [
            helper.make_tensor_value_info("points", TensorProto.FLOAT, [*dims, 3]),
            helper.make_tensor_value_info("normal", TensorProto.FLOAT, [*dims, 3]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, dims),
            helper.make_tensor_value_info("metric_scale", TensorProto.FLOAT, ["batch"]),
        ],
        inits,
        path,
        "moge_like",
    )
