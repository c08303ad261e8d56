"""Models and images the bench (and the tests) build on the spot: no download, no hub."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from PIL import Image


def synthetic_upscaler(path: Path, scale: int = 4, features: int = 32, blocks: int = 6) -> Path:
    """An SRVGGNetCompact-shaped stand-in (conv + PReLU body, PixelShuffle, nearest residual)."""
    rng = np.random.default_rng(0)
    inits = []
    nodes = []

    def conv(name: str, src: str, cin: int, cout: int) -> str:
        w = (rng.standard_normal((cout, cin, 3, 3)) * (0.5 / np.sqrt(cin * 9))).astype(np.float32)
        b = np.zeros(cout, np.float32)
        inits.extend(
            [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
        )
        nodes.append(
            helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [name], pads=[1, 1, 1, 1])
        )
        return name

    def prelu(name: str, src: str, ch: int) -> str:
        inits.append(numpy_helper.from_array(np.full((ch, 1, 1), 0.1, np.float32), f"{name}_s"))
        nodes.append(helper.make_node("PRelu", [src, f"{name}_s"], [name]))
        return name

    x = prelu("p0", conv("c0", "input", 3, features), features)
    for i in range(blocks):
        x = prelu(f"p{i + 1}", conv(f"c{i + 1}", x, features, features), features)
    x = conv("cout", x, features, 3 * scale * scale)
    nodes.append(helper.make_node("DepthToSpace", [x], ["ps"], blocksize=scale, mode="CRD"))
    inits.append(numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales"))
    nodes.append(
        helper.make_node(
            "Resize",
            ["input", "", "scales"],
            ["up"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
    )
    nodes.append(helper.make_node("Add", ["ps", "up"], ["output"]))
    graph = helper.make_graph(
        nodes,
        "synthetic_upscaler",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "height", "width"])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.metadata_props.add(key="tessera.scale", value=str(scale))
    save(model, str(path))
    return path


def test_image(path: Path, width: int, height: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack(
        [np.sin(x / 17) * 0.5 + 0.5, np.cos(y / 23) * 0.5 + 0.5, (x + y) / (width + height)], 2
    )
    img = np.clip(img * 255 + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)
    Image.fromarray(img).save(path)
    return path


def slow_model(path: Path, layers: int = 200, width: int = 16) -> Path:
    """A deliberately slow ×1 "upscaler": input → 1×1 conv to `width` channels → `layers` ×
    (1×1 conv + Relu) → 3 channels. Many cheap nodes, so `terminate` has places to stop."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((width, 3, 1, 1)) * 0.3).astype(np.float32), "wi"
        ),
        numpy_helper.from_array(np.eye(width, dtype=np.float32).reshape(width, width, 1, 1), "wm"),
        numpy_helper.from_array(
            (rng.standard_normal((3, width, 1, 1)) * 0.1).astype(np.float32), "wo"
        ),
    ]
    nodes = [helper.make_node("Conv", ["input", "wi"], ["h0"])]
    for i in range(layers):
        nodes.append(helper.make_node("Conv", [f"h{i}", "wm"], [f"c{i}"]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"h{i + 1}"]))
    nodes.append(helper.make_node("Conv", [f"h{layers}", "wo"], ["output"]))
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "height", "width"])],
        initializer=inits,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        str(path),
    )
    return path
