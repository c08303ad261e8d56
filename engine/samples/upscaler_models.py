"""Sample upscalers: the plain contract model and the shapes of the real architectures.

make_upscaler: nearest ×scale, then a reflect-padded 3×3 binomial blur. An output pixel depends
on input pixels at most `UPSCALER_RADIUS` (= 1) input pixels away, so a tile overlap ≥ 1 input
pixel reproduces the whole-image result exactly. A constant image stays constant.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from engine.samples.onnx_graph import Dim, const, save_graph

UPSCALER_RADIUS = 1  # receptive-field radius of make_upscaler, in input pixels


def make_upscaler(
    path: Path,
    scale: int = 2,
    fp16: bool = False,
    *,
    layout: str = "NCHW",
    channels: int = 3,
    multiple_of: int = 1,
    dynamic: bool = True,
    dynamic_channels: bool = False,
    size: int = 64,
    input_name: str = "input",
    output_name: str = "output",
) -> Path:
    """An upscaler: nearest ×scale then a 3×3 blur (radius `UPSCALER_RADIUS` input pixels).

    `multiple_of` > 1 adds a SpaceToDepth/DepthToSpace round trip (exact identity), so H and W
    must be multiples of it — like Real-ESRGAN x2plus's pixel-unshuffle. `dynamic=False` fixes
    the input at size×size; `dynamic_channels=True` declares the channel dim as a name too.
    """
    dtype = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    h: Dim = "height" if dynamic else size
    w: Dim = "width" if dynamic else size
    b: Dim = "batch" if dynamic else 1
    oh: Dim = f"height*{scale}" if dynamic else size * scale
    ow: Dim = f"width*{scale}" if dynamic else size * scale
    c: Dim = "channels" if dynamic_channels else channels
    if layout == "NCHW":
        in_shape: list[Dim] = [b, c, h, w]
        out_shape: list[Dim] = [b, c, oh, ow]
    elif layout == "NHWC":
        in_shape = [b, h, w, c]
        out_shape = [b, oh, ow, c]
    else:
        raise ValueError(f"layout must be NCHW or NHWC, not {layout!r}")

    nodes: list[onnx.NodeProto] = []
    x = input_name
    if fp16:  # mixed-precision graphs compute in float32 between fp16 ends
        nodes.append(helper.make_node("Cast", [x], ["x32"], to=TensorProto.FLOAT))
        x = "x32"
    if layout == "NHWC":
        nodes.append(helper.make_node("Transpose", [x], ["xchw"], perm=[0, 3, 1, 2]))
        x = "xchw"
    if multiple_of > 1:
        nodes.append(helper.make_node("SpaceToDepth", [x], ["s2d"], blocksize=multiple_of))
        nodes.append(
            helper.make_node("DepthToSpace", ["s2d"], ["d2s"], blocksize=multiple_of, mode="DCR")
        )
        x = "d2s"
    kernel = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], np.float32) / 16.0
    inits = [
        const("scales", np.array([1, 1, scale, scale], np.float32)),
        const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        const("blur", np.tile(kernel, (channels, 1, 1, 1))),
    ]
    nodes += [
        helper.make_node(
            "Resize",
            [x, "", "scales"],
            ["up"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Pad", ["up", "pads"], ["padded"], mode="reflect"),
        helper.make_node("Conv", ["padded", "blur"], ["y"], group=channels),
    ]
    y = "y"
    if layout == "NHWC":
        nodes.append(helper.make_node("Transpose", [y], ["yhwc"], perm=[0, 2, 3, 1]))
        y = "yhwc"
    if fp16:
        nodes.append(helper.make_node("Cast", [y], [output_name], to=TensorProto.FLOAT16))
    else:
        nodes.append(helper.make_node("Identity", [y], [output_name]))
    return save_graph(
        nodes,
        [helper.make_tensor_value_info(input_name, dtype, in_shape)],
        [helper.make_tensor_value_info(output_name, dtype, out_shape)],
        inits,
        path,
        f"upscaler_x{scale}",
    )


def make_compact_upscaler(
    path: Path,
    scale: int = 4,
    *,
    features: int = 8,
    convs: int = 3,
    downscale: float | None = None,
    seed: int = 0,
) -> Path:
    """Real-ESRGAN's compact (SRVGG) shape: conv → PRelu, `convs` times, a conv to 3·s²
    channels, DepthToSpace(s), plus the nearest-upscaled input. With `downscale` (½ or ¾) it
    upscales by scale ÷ downscale inside and ends with that bicubic Resize, like
    animevideov3-x2 (×4, then ½) and -x3 (×4, then ¾). Random weights (fixed by `seed`) and
    PRelu slopes on both sides of 1, so every rewrite case of engine/runtime/optimize.py is
    met. Receptive field: `convs` + 1 input pixels."""
    rng = np.random.default_rng(seed)
    inner = round(scale / downscale) if downscale else scale
    downscaled = downscale is not None
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x, channels = "input", 3
    for i in range(convs):
        inits += [
            const(f"w{i}", rng.normal(0, 0.3, (features, channels, 3, 3)).astype(np.float32)),
            const(f"b{i}", rng.normal(0, 0.1, features).astype(np.float32)),
            const(f"slope{i}", rng.uniform(-0.5, 2.0, (features, 1, 1)).astype(np.float32)),
        ]
        nodes += [
            helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("PRelu", [f"c{i}", f"slope{i}"], [f"p{i}"]),
        ]
        x, channels = f"p{i}", features
    out_c = 3 * inner * inner
    inits += [
        const("w_last", rng.normal(0, 0.05, (out_c, channels, 3, 3)).astype(np.float32)),
        const("b_last", np.zeros(out_c, np.float32)),
        const("up_scales", np.array([1, 1, inner, inner], np.float32)),
    ]
    nodes += [
        helper.make_node("Conv", [x, "w_last", "b_last"], ["last"], pads=[1, 1, 1, 1]),
        helper.make_node("DepthToSpace", ["last"], ["d2s"], blocksize=inner, mode="CRD"),
        helper.make_node(
            "Resize",
            ["input", "", "up_scales"],
            ["base"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Add", ["d2s", "base"], ["sum" if downscaled else "output"]),
    ]
    if downscaled:
        assert downscale is not None
        inits.append(const("half", np.array([1, 1, downscale, downscale], np.float32)))
        nodes.append(
            helper.make_node(
                "Resize",
                ["sum", "", "half"],
                ["output"],
                mode="cubic",
                coordinate_transformation_mode="half_pixel",
                cubic_coeff_a=-0.75,
                exclude_outside=0,
            )
        )
    return save_graph(
        nodes,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [
            helper.make_tensor_value_info(
                "output", TensorProto.FLOAT, [1, 3, f"height*{scale}", f"width*{scale}"]
            )
        ],
        inits,
        path,
        f"compact_x{scale}",
    )


def make_rrdb_upscaler(
    path: Path,
    *,
    features: int = 16,
    growth: int = 16,
    blocks: int = 1,
    dense_blocks: int = 2,
    seed: int = 0,
) -> Path:
    """Real-ESRGAN's RRDBNet ×4 (x4plus, x4plus-anime), node for node as in the starter
    models, only narrower and shallower: conv; `blocks` residual-in-residual blocks of
    `dense_blocks` dense blocks (five convs, each reading the Concat of all before it, four
    LeakyRelu, `x + 0.2 × conv`), each block `x + 0.2 × its last`; a trunk conv added to the
    first; two nearest ×2 Resizes each with a conv and LeakyRelu; a conv, LeakyRelu, and the
    last conv to 3 channels. Random weights (fixed by `seed`)."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    count = 0

    def conv(x: str, cin: int, cout: int, act: bool, gain: float = 0.15) -> str:
        nonlocal count
        i = count
        count += 1
        inits.extend(
            [
                const(f"w{i}", rng.normal(0, gain, (cout, cin, 3, 3)).astype(np.float32)),
                const(f"b{i}", rng.normal(0, 0.02, cout).astype(np.float32)),
            ]
        )
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        if not act:
            return f"c{i}"
        nodes.append(helper.make_node("LeakyRelu", [f"c{i}"], [f"a{i}"], alpha=0.2))
        return f"a{i}"

    def scaled_sum(x: str, residual: str) -> str:
        i = len(nodes)
        inits.append(const(f"k{i}", np.array(0.2, np.float32)))
        nodes.append(helper.make_node("Mul", [x, f"k{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Add", [f"m{i}", residual], [f"s{i}"]))
        return f"s{i}"

    def dense(x: str) -> str:
        members = [x]
        for k in range(4):
            cat = members[0]
            if len(members) > 1:
                cat = f"cat{len(nodes)}"
                nodes.append(helper.make_node("Concat", list(members), [cat], axis=1))
            members.append(conv(cat, features + k * growth, growth, True))
        cat = f"cat{len(nodes)}"
        nodes.append(helper.make_node("Concat", list(members), [cat], axis=1))
        return scaled_sum(conv(cat, features + 4 * growth, features, False), x)

    first = conv("input", 3, features, False)
    x = first
    for _ in range(blocks):
        inner = x
        for _ in range(dense_blocks):
            inner = dense(inner)
        x = scaled_sum(inner, x)
    trunk = conv(x, features, features, False)
    nodes.append(helper.make_node("Add", [first, trunk], ["trunk"]))
    x = "trunk"
    inits.append(const("twice", np.array([1, 1, 2, 2], np.float32)))
    for k in range(2):
        nodes.append(
            helper.make_node(
                "Resize",
                [x, "", "twice"],
                [f"up{k}"],
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        )
        x = conv(f"up{k}", features, features, True)
    x = conv(x, features, features, True)
    conv(x, features, 3, False)
    nodes[-1].output[0] = "output"
    return save_graph(
        nodes,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "height*4", "width*4"])],
        inits,
        path,
        "rrdb_x4",
    )


def make_pixelshuffle_upscaler(path: Path, scale: int = 2) -> Path:
    """A Real-ESRGAN-style tail: 3×3 conv to 3·scale² channels, then DepthToSpace (CRD).
    The weights copy each pixel to its scale² sub-pixels, so the result is nearest ×scale;
    its weight tensor is large enough to exercise the weight stripping before inference."""
    weights = np.zeros((3 * scale * scale, 3, 3, 3), np.float32)
    for c in range(3):
        weights[c * scale * scale : (c + 1) * scale * scale, c, 1, 1] = 1.0
    return save_graph(
        [
            helper.make_node("Conv", ["input", "w"], ["feat"], pads=[1, 1, 1, 1]),
            helper.make_node("DepthToSpace", ["feat"], ["output"], blocksize=scale, mode="CRD"),
        ],
        [
            helper.make_tensor_value_info(
                "input", TensorProto.FLOAT, ["batch", 3, "height", "width"]
            )
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3, "oh", "ow"])],
        [const("w", weights)],
        path,
        f"pixelshuffle_x{scale}",
    )
