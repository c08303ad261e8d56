"""Sample background removers, BEN2 and U²-Net: mask = sigmoid(10·(luma − 0.5)) on the raw
input values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from engine.samples.onnx_graph import const, luma_weight, save_graph


def _mask_nodes(src: str, dst: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """dst = sigmoid(10·(luma(src) − 0.5)), shape 1×1×H×W."""
    inits = [luma_weight("luma_w"), const("half", np.float32(0.5)), const("ten", np.float32(10))]
    nodes = [
        helper.make_node("Conv", [src, "luma_w"], ["luma"]),
        helper.make_node("Sub", ["luma", "half"], ["centred"]),
        helper.make_node("Mul", ["centred", "ten"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], [dst]),
    ]
    return nodes, inits


def make_ben2(path: Path, *, size: int = 1024, output_fp16: bool = True) -> Path:
    """BEN2_Base-like: static float32 1×3×1024×1024 in (auto-generated name), sigmoid mask
    1×1×1024×1024 out, declared float16 like the official mixed-precision export."""
    nodes, inits = _mask_nodes("input.1", "mask32")
    out_type = TensorProto.FLOAT16 if output_fp16 else TensorProto.FLOAT
    nodes.append(helper.make_node("Cast", ["mask32"], ["output"], to=out_type))
    return save_graph(
        nodes,
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output", out_type, [1, 1, size, size])],
        inits,
        path,
        "ben2_like",
    )


def make_u2net(path: Path, *, size: int = 320, side_outputs: int = 6) -> Path:
    """U²-Net-p-like: static 1×3×320×320 in; seven 1×1×320×320 sigmoid maps out (d0 first)."""
    names = ["d0"] + [f"d{i}" for i in range(1, side_outputs + 1)]
    nodes, inits = _mask_nodes("input.1", "d0")
    nodes += [helper.make_node("Identity", ["d0"], [n]) for n in names[1:]]
    return save_graph(
        nodes,
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, size, size]) for n in names],
        inits,
        path,
        "u2net_like",
    )
