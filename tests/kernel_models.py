"""Small graphs for the kernel's tests, built with onnx.helper: SRVGG-shaped chains of any
channel count and activation, and graphs the kernel must leave to ORT; and one 3×3 layer with
its input and the float64 convolution it must match."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.runtime import chain
from engine.runtime.identity import FileIdentity
from engine.runtime.providers import Device, Runtime, provider_plan
from engine.runtime.sessions import create_session

OPSET = 17
CPU_PLAN = provider_plan(Device("cpu"), Runtime.CPU)

ACTIVATIONS = ("PRelu", "PRelu1", "PReluC11", "Relu", "LeakyRelu", "none")


def _save(graph: onnx.GraphProto, path: Path, domains: tuple[str, ...] = ()) -> Path:
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def activation(
    kind: str, x: str, out: str, channels: int, rng: np.random.Generator, domain: str = ""
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """One activation node of `kind` (ACTIVATIONS; "none": an Identity) from x to out."""
    if kind.startswith("PRelu"):
        shape = {"PRelu": (1, channels, 1, 1), "PRelu1": (1,), "PReluC11": (channels, 1, 1)}[kind]
        slope = numpy_helper.from_array(
            rng.uniform(-0.5, 2.0, shape).astype(np.float32), f"{out}_s"
        )
        return [helper.make_node("PRelu", [x, slope.name], [out], domain=domain)], [slope]
    if kind == "LeakyRelu":
        return [helper.make_node("LeakyRelu", [x], [out], alpha=0.2, domain=domain)], []
    if kind == "Relu":
        return [helper.make_node("Relu", [x], [out], domain=domain)], []
    return [helper.make_node("Identity", [x], [out])], []


def srvgg(
    path: Path,
    *,
    channels: int = 3,
    features: int = 16,
    convs: int = 4,
    scale: int = 4,
    act: str = "PRelu",
    image_channels: int | None = None,
    act_domain: str = "",
    seed: int = 0,
) -> Path:
    """SRVGG "compact": conv → activation `convs` times, a conv to `image_channels`·scale²
    channels (default: the input's), DepthToSpace(scale) and the nearest-upscaled input added
    (a broadcasting sum where the two channel counts differ, as ONNX allows for 1)."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x, c = "input", channels
    for i in range(convs):
        w = rng.normal(0, 0.6 / np.sqrt(9 * c), (features, c, 3, 3)).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(rng.normal(0, 0.1, features).astype(np.float32), f"b{i}"),
        ]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4))
        more, consts = activation(act, f"c{i}", f"a{i}", features, rng, act_domain)
        nodes += more
        inits += consts
        x, c = f"a{i}", features
    out_c = (image_channels or channels) * scale * scale
    w = rng.normal(0, 0.3 / np.sqrt(9 * c), (out_c, c, 3, 3)).astype(np.float32)
    inits += [
        numpy_helper.from_array(w, "w_last"),
        numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "up"),
    ]
    nodes += [
        helper.make_node("Conv", [x, "w_last"], ["last"], pads=[1] * 4),
        helper.make_node("DepthToSpace", ["last"], ["d2s"], blocksize=scale, mode="CRD"),
        helper.make_node(
            "Resize",
            ["input", "", "up"],
            ["base"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Add", ["d2s", "base"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "srvgg",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        inits,
    )
    return _save(graph, path, (act_domain,) if act_domain else ())


def random_srvgg(path: Path, rng: np.random.Generator) -> tuple[Path, int]:
    """A random SRVGG-shaped chain: 1–70 features (odd ones too), 4–7 convolutions, ×2/3/4,
    each activation form (also a (C,) PRelu slope, which ONNX runs along the width), a grey
    image added to three channels now and then, a cubic ½ after ×4 now and then. Returns the
    path and the width an image must have (a (C,) slope broadcasts only where W = C)."""
    features = int(rng.integers(1, 71))
    convs = int(rng.integers(4, 8))
    scale = int(rng.choice([2, 3, 4]))
    grey = rng.random() < 0.3
    channels, image_channels = (1, 3) if grey else (int(rng.choice([1, 3, 4])),) * 2
    forms = (*ACTIVATIONS, "PReluW")
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x, c, width = "input", channels, 0
    for i in range(convs):
        w = rng.normal(0, 0.8 / np.sqrt(9 * c), (features, c, 3, 3)).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(rng.normal(0, 0.1, features).astype(np.float32), f"b{i}"),
        ]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4))
        form = str(rng.choice(forms))
        if form == "PReluW":
            slope = rng.uniform(-0.5, 2.0, (features,)).astype(np.float32)
            inits.append(numpy_helper.from_array(slope, f"a{i}_s"))
            nodes.append(helper.make_node("PRelu", [f"c{i}", f"a{i}_s"], [f"a{i}"]))
            width = features
        elif form == "none":  # conv straight into conv
            nodes[-1].output[0] = f"a{i}"
        else:
            more, consts = activation(form, f"c{i}", f"a{i}", features, rng)
            nodes += more
            inits += consts
        x, c = f"a{i}", features
    out_c = image_channels * scale * scale
    w = rng.normal(0, 0.3 / np.sqrt(9 * c), (out_c, c, 3, 3)).astype(np.float32)
    inits += [
        numpy_helper.from_array(w, "w_last"),
        numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "up"),
    ]
    downscale = scale == 4 and rng.random() < 0.3
    nodes += [
        helper.make_node("Conv", [x, "w_last"], ["last"], pads=[1] * 4),
        helper.make_node("DepthToSpace", ["last"], ["d2s"], blocksize=scale, mode="CRD"),
        helper.make_node(
            "Resize",
            ["input", "", "up"],
            ["base"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Add", ["d2s", "base"], ["sum" if downscale else "output"]),
    ]
    if downscale:
        inits.append(numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "half"))
        nodes.append(
            helper.make_node(
                "Resize", ["sum", "", "half"], ["output"], mode="cubic",
                coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75,
            )
        )  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "random_srvgg",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        inits,
    )
    return _save(graph, path), width


def random_rrdb(path: Path, rng: np.random.Generator) -> Path:
    """A random RRDB-shaped whole graph: convolutions of 1–70 channels with LeakyRelu or
    none, scaled residual sums of earlier tensors (a one-channel one now and then: ONNX
    broadcasts it), a Concat of two tensors, a nearest ×2 read by a convolution, a last
    convolution to 3 channels."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    count = 0

    def conv(x: str, cin: int, cout: int, act: bool) -> str:
        nonlocal count
        i = count
        count += 1
        w = rng.normal(0, 0.8 / np.sqrt(9 * cin), (cout, cin, 3, 3)).astype(np.float32)
        inits.extend(
            [
                numpy_helper.from_array(w, f"w{i}"),
                numpy_helper.from_array(rng.normal(0, 0.05, cout).astype(np.float32), f"b{i}"),
            ]
        )
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4))
        if not act:
            return f"c{i}"
        nodes.append(helper.make_node("LeakyRelu", [f"c{i}"], [f"l{i}"], alpha=0.2))
        return f"l{i}"

    features = int(rng.choice([16, 32, 48, int(rng.integers(1, 71))]))
    first = conv("input", 3, features, False)
    made = [(first, features)]  # (tensor, channels)
    x = first
    for _ in range(int(rng.integers(2, 5))):
        y = conv(x, features, features, bool(rng.random() < 0.7))
        if rng.random() < 0.6:
            other = made[int(rng.integers(0, len(made)))][0]
            if rng.random() < 0.2:  # a one-channel tensor added to every channel
                other = conv(x, features, 1, False)
            k = f"k{len(nodes)}"
            inits.append(numpy_helper.from_array(np.array(0.2, np.float32), k))
            nodes.append(helper.make_node("Mul", [y, k], [f"m{len(nodes)}"]))
            nodes.append(helper.make_node("Add", [nodes[-1].output[0], other], [f"s{len(nodes)}"]))
            y = nodes[-1].output[0]
        made.append((y, features))
        x = y
    if rng.random() < 0.5:
        cat = f"cat{len(nodes)}"
        nodes.append(helper.make_node("Concat", [made[-2][0], x], [cat], axis=1))
        x = conv(cat, 2 * features, features, True)
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "twice"))
    nodes.append(
        helper.make_node(
            "Resize", [x, "", "twice"], ["up"], mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor",
        )
    )  # fmt: skip
    x = conv("up", features, features, True)
    conv(x, features, 3, False)
    nodes[-1].output[0] = "output"
    graph = helper.make_graph(
        nodes,
        "random_rrdb",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        inits,
    )
    return _save(graph, path)


@dataclass(frozen=True)
class ConvCase:
    """One 3×3 layer, 40 → 27 channels (both padded, neither a whole number of any instruction
    set's vectors), at an odd size: its weights, bias and slope, its NHWC input padded as the
    kernel wants it, and the float64 result it must match."""

    w: np.ndarray
    b: np.ndarray
    s: np.ndarray
    x: np.ndarray
    expected: np.ndarray


def conv_case(channels_padded: int, seed: int = 3, h: int = 13, wd: int = 30) -> ConvCase:
    """`channels_padded`: the kernel's padded width of 40 input channels (winograd.padded(40))."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.2, (27, 40, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, 27).astype(np.float32)
    s = rng.uniform(-0.5, 2, 27).astype(np.float32)
    x = np.zeros((h, wd, channels_padded), np.float32)
    x[:, :, :40] = rng.normal(0, 1, (h, wd, 40))
    return ConvCase(w, b, s, x, direct_conv3x3(x[:, :, :40], w, b, s))


def direct_conv3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """A 3×3, pad-1 convolution of NHWC `x` in float64, with the bias and the slope."""
    h, wd = x.shape[:2]
    p = np.pad(x.astype(np.float64), ((1, 1), (1, 1), (0, 0)))
    taps = (
        p[dy : dy + h, dx : dx + wd] @ w[:, :, dy, dx].T.astype(np.float64)
        for dy in range(3)
        for dx in range(3)
    )
    ref = sum(taps) + b
    return np.asarray(np.where(ref < 0, ref * s, ref))


def load_chain(path: Path) -> chain.ChainSession | chain.GraphSession | None:
    """The kernel's session of the model at `path` on two threads (None where the kernel
    cannot take the graph), with ORT's CPU sessions for the parts it leaves."""
    return chain.load(
        path, FileIdentity.of(path), 2, lambda g: create_session(g, CPU_PLAN, threads=2)
    )
