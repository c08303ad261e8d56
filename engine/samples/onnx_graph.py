"""What every sample model shares: the opset, the luma weights, and saving a checked graph.

The sample models (`engine/samples/*_models.py`) are tiny ONNX graphs built with onnx.helper
that follow the real families' contracts (`reference/models.md`); the bench measures families
that have no starter model with them, and the tests use them everywhere. Their weights are
fixed, so outputs are deterministic and mean something.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # old enough for any onnxruntime we support
LUMA = (0.299, 0.587, 0.114)

Dim = int | str


def save_graph(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto],
    path: Path,
    name: str,
) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="tessera-tests",
    )
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def const(name: str, value: np.ndarray | np.generic) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def luma_weight(name: str) -> onnx.TensorProto:
    return const(name, np.array(LUMA, np.float32).reshape(1, 3, 1, 1))
