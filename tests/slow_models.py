"""Deliberately slow ×1 "upscalers" for cancel tests (the first is the one the bench uses)."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from engine.samples.synthetic import slow_model as make_slow_upscaler

__all__ = ["make_slow_upscaler", "make_unstated_upscaler"]


def make_unstated_upscaler(path: Path, layers: int = 4) -> Path:
    """The slow upscaler ending in an op ONNX shape inference does not know (ORT's contrib
    Gelu): its graph no longer states its output size, so the engine must probe it by a run."""
    make_slow_upscaler(path, layers=layers)
    model = onnx.load(str(path))
    model.graph.node[-1].output[0] = "before_gelu"
    model.graph.node.append(
        helper.make_node("Gelu", ["before_gelu"], ["output"], domain="com.microsoft")
    )
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(path))
    return path
