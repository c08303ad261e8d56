"""Tiny ONNX models that follow the real families' contracts, built with onnx.helper: the bench
measures families that have no starter model with them, and the tests use them everywhere.

Each builder writes one file and returns its path. Names, shapes and dtypes follow
`reference/models.md`; the weights are fixed, so outputs are deterministic and mean something:

- upscaler: nearest ×scale, then a reflect-padded 3×3 binomial blur. An output pixel depends
  on input pixels at most `UPSCALER_RADIUS` (= 1) input pixels away, so a tile overlap ≥ 1
  input pixel reproduces the whole-image result exactly. A constant image stays constant.
- BEN2 / U²-Net: mask = sigmoid(10·(luma − 0.5)) on the raw input values.
- DA3: depth = exp(0.5·luma + 0.5·mean of luma over its 14×14 patch): positive, larger for
  brighter pixels, and H, W must be multiples of 14 (other sizes fail inside the run, like the
  real patch-based model). depth_conf = 1 + exp(luma) ≥ 1.
- MoGe-2: a fronto-parallel pinhole scene. z = 1 + luma, points = ((u−W/2)/F·z, (v−H/2)/F·z, z)
  at pixel centres with F = half the image diagonal, normal = (0, 0, −1), mask =
  sigmoid(20·(0.95 − luma)) (near-white pixels are "sky"), metric_scale = 1.5 per image.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # old enough for any onnxruntime we support
UPSCALER_RADIUS = 1  # receptive-field radius of make_upscaler, in input pixels
LUMA = (0.299, 0.587, 0.114)

Dim = int | str


def _save(
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


def _const(name: str, value: np.ndarray | np.generic) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _luma_weight(name: str) -> onnx.TensorProto:
    return _const(name, np.array(LUMA, np.float32).reshape(1, 3, 1, 1))


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
        _const("scales", np.array([1, 1, scale, scale], np.float32)),
        _const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        _const("blur", np.tile(kernel, (channels, 1, 1, 1))),
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
    return _save(
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
            _const(f"w{i}", rng.normal(0, 0.3, (features, channels, 3, 3)).astype(np.float32)),
            _const(f"b{i}", rng.normal(0, 0.1, features).astype(np.float32)),
            _const(f"slope{i}", rng.uniform(-0.5, 2.0, (features, 1, 1)).astype(np.float32)),
        ]
        nodes += [
            helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("PRelu", [f"c{i}", f"slope{i}"], [f"p{i}"]),
        ]
        x, channels = f"p{i}", features
    out_c = 3 * inner * inner
    inits += [
        _const("w_last", rng.normal(0, 0.05, (out_c, channels, 3, 3)).astype(np.float32)),
        _const("b_last", np.zeros(out_c, np.float32)),
        _const("up_scales", np.array([1, 1, inner, inner], np.float32)),
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
        inits.append(_const("half", np.array([1, 1, downscale, downscale], np.float32)))
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
    return _save(
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
                _const(f"w{i}", rng.normal(0, gain, (cout, cin, 3, 3)).astype(np.float32)),
                _const(f"b{i}", rng.normal(0, 0.02, cout).astype(np.float32)),
            ]
        )
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        if not act:
            return f"c{i}"
        nodes.append(helper.make_node("LeakyRelu", [f"c{i}"], [f"a{i}"], alpha=0.2))
        return f"a{i}"

    def scaled_sum(x: str, residual: str) -> str:
        i = len(nodes)
        inits.append(_const(f"k{i}", np.array(0.2, np.float32)))
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
    inits.append(_const("twice", np.array([1, 1, 2, 2], np.float32)))
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
    return _save(
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
    return _save(
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
        [_const("w", weights)],
        path,
        f"pixelshuffle_x{scale}",
    )


def _mask_nodes(src: str, dst: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """dst = sigmoid(10·(luma(src) − 0.5)), shape 1×1×H×W."""
    inits = [_luma_weight("luma_w"), _const("half", np.float32(0.5)), _const("ten", np.float32(10))]
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
    return _save(
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
    return _save(
        nodes,
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, size, size]) for n in names],
        inits,
        path,
        "u2net_like",
    )


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
        _luma_weight("luma_w"),
        _const("half", np.float32(0.5)),
        _const("one", np.float32(1.0)),
        _const("patch_up", np.array([1, 1, 14, 14], np.float32)),
        _const("axis1", np.array([1], np.int64)),
    ]
    if views is None:
        in_shape: list[Dim] = [1, 3, h, w]
        out_shape: list[Dim] = [1, h, w]
        x = input_name
    else:
        in_shape = [1, views, 3, h, w]
        out_shape = [1, views, h, w]
        inits.append(_const("axis0", np.array([0], np.int64)))
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
    return _save(
        nodes,
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, in_shape)],
        outputs,
        inits,
        path,
        "da3_like",
    )


def make_moge(path: Path, *, num_tokens_rank: int = 0) -> Path:
    """MoGe-2-like: `image` B×3×H×W float32 0…1 (dynamic) and `num_tokens` int64 (scalar by
    default, [1] with num_tokens_rank=1) in; `points`, `normal`, `mask`, `metric_scale` out."""
    f32 = np.float32
    inits = [
        _luma_weight("luma_w"),
        _const("one", f32(1.0)),
        _const("zero", f32(0.0)),
        _const("half", f32(0.5)),
        _const("minus_one", f32(-1.0)),
        _const("white", f32(0.95)),
        _const("twenty", f32(20.0)),
        _const("metric", f32(1.5)),
        _const("idx2", np.array(2, np.int64)),
        _const("idx3", np.array(3, np.int64)),
        _const("shape_h", np.array([1, 1, -1, 1], np.int64)),
        _const("shape_w", np.array([1, 1, 1, -1], np.int64)),
        _const("axis1", np.array([1], np.int64)),
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
    return _save(
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


def make_two_strings(path: Path) -> Path:
    """A valid ONNX graph that fits no image family: two string inputs, concatenated."""
    return _save(
        [helper.make_node("Concat", ["a", "b"], ["c"], axis=0)],
        [
            helper.make_tensor_value_info("a", TensorProto.STRING, [1]),
            helper.make_tensor_value_info("b", TensorProto.STRING, [1]),
        ],
        [helper.make_tensor_value_info("c", TensorProto.STRING, [2])],
        [],
        path,
        "two_strings",
    )


def make_external_data(path: Path, location: str, *, write_data: bool = True) -> Path:
    """A ×1 upscaler whose 3×3 weights live in an external file at `location` (written as
    given, even absolute or with `..`, so tests can check the refusals)."""
    weights = np.zeros((3, 3, 3, 3), np.float32)
    for c in range(3):
        weights[c, c, 1, 1] = 1.0  # identity
    tensor = numpy_helper.from_array(weights, "w")
    path = Path(path)
    if write_data:
        data_path = Path(location) if Path(location).is_absolute() else path.parent / location
        data_path.parent.mkdir(parents=True, exist_ok=True)
        data_path.write_bytes(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(weights.nbytes))):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["output"], pads=[1, 1, 1, 1])],
        "external",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, "height", "width"])],
        initializer=[tensor],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())  # onnx.save would resolve the location
    return path


def make_nonfinite(
    src: Path,
    dst: Path,
    *,
    output: str | None = None,
    value: float = float("nan"),
    above: float = float("-inf"),
    where_mask: str | None = None,
) -> Path:
    """A copy of the model at `src` whose `output` (default: the first) is `value` (NaN, inf)
    wherever its own value exceeds `above` — everywhere by default — like a model whose fp16
    arithmetic overflows. `where_mask` ("valid" or "invalid") instead poisons a MoGe model's
    points where its `mask` output says the pixel is (in)valid (mask > 0.5)."""
    model = onnx.load(str(src))
    graph = model.graph
    name = output or graph.output[0].name
    raw = f"{name}_raw"
    for node in graph.node:
        node.output[:] = [raw if o == name else o for o in node.output]
    for node in graph.node:
        node.input[:] = [raw if i == name else i for i in node.input]
    graph.initializer.append(_const("poison_value", np.array(value, np.float32)))
    if where_mask is None:
        graph.initializer.append(_const("poison_above", np.array(above, np.float32)))
        graph.node.append(helper.make_node("Greater", [raw, "poison_above"], ["poison_if"]))
        condition = "poison_if"
    else:
        graph.initializer.append(_const("poison_half", np.array(0.5, np.float32)))
        graph.initializer.append(_const("poison_axis", np.array([-1], np.int64)))
        op = "Greater" if where_mask == "valid" else "LessOrEqual"
        graph.node.append(helper.make_node(op, ["mask", "poison_half"], ["poison_mask"]))
        graph.node.append(
            helper.make_node("Unsqueeze", ["poison_mask", "poison_axis"], ["poison_if"])
        )
        condition = "poison_if"
    graph.node.append(helper.make_node("Where", [condition, "poison_value", raw], [name]))
    onnx.checker.check_model(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return dst
