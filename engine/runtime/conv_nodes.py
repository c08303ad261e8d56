"""What the kernel takes of a graph's nodes: a plain 3×3 convolution and the activation after
it, asked the same way by both analysers (conv_chain.py: SRVGG chains; convgraph.py: RRDB
whole graphs) and by the PRelu rewrite (optimize.py).

Only the standard ONNX domain is taken: `com.evil:Relu` is not a Relu, and ORT refuses a model
with an operator it does not know, so the kernel must never run one as if it were standard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

STANDARD_DOMAINS = ("", "ai.onnx")


class Unsupported(Exception):
    """The graph has a node or a layout the kernel does not take (the reason is the text)."""


def standard(node: Any) -> bool:
    """The node is an operator of the standard ONNX domain."""
    return str(node.domain) in STANDARD_DOMAINS


def attributes(node: Any) -> dict[str, Any]:
    """The node's attributes, strings decoded."""
    from onnx import helper

    found = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        found[a.name] = value.decode() if isinstance(value, bytes) else value
    return found


def conv3x3(
    node: Any, inits: Mapping[str, np.ndarray], channels: int | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The weight [cout][cin][3][3] and bias of a standard 3×3, stride-1, pad-1, dense
    float32 convolution with constant weights (and `channels` inputs where given)."""
    if node.op_type != "Conv" or not standard(node) or len(node.input) < 2:
        raise Unsupported(f"{node.op_type} is not a convolution")
    weight = inits.get(node.input[1])
    a = attributes(node)
    if (
        weight is None
        or weight.dtype != np.float32
        or weight.ndim != 4
        or weight.shape[2:] != (3, 3)
        or min(weight.shape[:2]) < 1
        or list(a.get("pads", [0] * 4)) != [1, 1, 1, 1]
        or a.get("group", 1) != 1
        or list(a.get("strides", [1, 1])) != [1, 1]
        or list(a.get("dilations", [1, 1])) != [1, 1]
        or a.get("auto_pad", "NOTSET") not in ("NOTSET", "")
    ):
        raise Unsupported("a convolution other than 3×3, stride 1, pad 1")
    if channels is not None and weight.shape[1] != channels:
        raise Unsupported(f"a convolution of {weight.shape[1]} channels after {channels}")
    bias = None
    if len(node.input) > 2 and node.input[2]:
        found = inits.get(node.input[2])
        if found is None or found.shape != (weight.shape[0],):
            raise Unsupported("a bias that is not one constant per output channel")
        bias = found.astype(np.float32)
    return weight, bias


def activation_slope(
    node: Any, x: str, cout: int, inits: Mapping[str, np.ndarray]
) -> np.ndarray | None:
    """The slope per channel of `node` as an activation of `x` ([cout] NCHW channels): Relu
    (0), LeakyRelu (alpha), PRelu (its slopes, one or one per channel); None where the node is
    no standard activation of `x` the kernel folds."""
    if not standard(node) or not node.input or node.input[0] != x or len(node.output) != 1:
        return None
    if node.op_type == "Relu" and len(node.input) == 1:
        return np.zeros(cout, np.float32)
    if node.op_type == "LeakyRelu" and len(node.input) == 1:
        return np.full(cout, attributes(node).get("alpha", 0.01), np.float32)
    if node.op_type == "PRelu" and len(node.input) == 2:
        slope = inits.get(node.input[1])
        return None if slope is None else prelu_slope(slope, cout)
    return None


def prelu_slope(slope: np.ndarray, channels: int) -> np.ndarray | None:
    """The slope per channel of an NCHW PRelu, or None where it is not one per channel: ONNX
    broadcasts from the right, so a slope of shape (C,) runs along the width, not the
    channels, and only (C, 1, 1), (1, C, 1, 1) or a single value are per channel."""
    slope = np.asarray(slope).astype(np.float32)
    if slope.size == 1 and slope.ndim <= 4:
        return np.full(channels, float(slope.reshape(-1)[0]), np.float32)
    if tuple(slope.shape) in ((channels, 1, 1), (1, channels, 1, 1)):
        return slope.reshape(-1).copy()
    return None
