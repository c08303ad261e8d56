"""Tessera's engine: ONNX sessions, memory lifecycle, tiling and operations. Imports no Qt."""

__version__ = "0.1.0"
