"""A deliberately slow ×1 "upscaler" for cancel tests: hundreds of cheap nodes in a chain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_slow_upscaler(path: Path, layers: int = 300, width: int = 16) -> Path:
    """input 1×3×H×W → 1×1 conv to `width` channels → `layers` × (1×1 conv + Relu) → 3 channels."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((width, 3, 1, 1)) * 0.3).astype(np.float32), "w_in"
        ),
        numpy_helper.from_array(
            (np.eye(width, dtype=np.float32).reshape(width, width, 1, 1)), "w_mid"
        ),
        numpy_helper.from_array(
            (rng.standard_normal((3, width, 1, 1)) * 0.1).astype(np.float32), "w_out"
        ),
    ]
    nodes = [helper.make_node("Conv", ["input", "w_in"], ["h0"])]
    for i in range(layers):
        nodes.append(helper.make_node("Conv", [f"h{i}", "w_mid"], [f"c{i}"]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"h{i + 1}"]))
    nodes.append(helper.make_node("Conv", [f"h{layers}", "w_out"], ["output"]))
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "height", "width"])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
