"""Convert an ncnn graph (`.param` + `.bin`) to an ONNX model.

Covers the layers of image-to-image networks such as Real-ESRGAN's ncnn releases: Input,
Convolution / ConvolutionDepthWise (with fused activation), PReLU, ReLU, Sigmoid, Clip,
Split, Concat, Eltwise, BinaryOp, Interp and PixelShuffle. Any other layer type is refused
with a `ModelError` naming it. Semantics follow ncnn's CPU layers so that the ONNX model
matches the `ncnn` runtime to float rounding (tests/test_ncnn.py checks each layer).

The ONNX model takes `input` float32 [1, C, height, width] and gives `output`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.errors import ModelError

PARAM_MAGIC = 7767517
OPSET = 17
IR_VERSION = 8  # the IR of opset 17: loads in every onnxruntime the app supports

TAG_FP16 = 0x01306B47
TAG_INT8 = 0x000D4B38
TAG_FP32_EXTRA = 0x0002C056  # raw fp32 "with extra scaling": the data itself is plain fp32

ParamValue = int | float | list[int | float]


@dataclass(frozen=True)
class NcnnLayer:
    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, ParamValue] = field(default_factory=dict)

    def get_int(self, key: int, default: int) -> int:
        value = self.params.get(key, default)
        if isinstance(value, list):
            raise ModelError(f"ncnn layer {self.name!r}: parameter {key} should be a number.")
        return int(value)

    def get_float(self, key: int, default: float) -> float:
        value = self.params.get(key, default)
        if isinstance(value, list):
            raise ModelError(f"ncnn layer {self.name!r}: parameter {key} should be a number.")
        return float(value)

    def get_array(self, key: int) -> list[float]:
        value = self.params.get(key, [])
        if not isinstance(value, list):
            raise ModelError(f"ncnn layer {self.name!r}: parameter {key} should be an array.")
        return [float(v) for v in value]


def _number(text: str) -> int | float:
    # ncnn reads a value as float when it has a '.' or an exponent, else as int
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text)


def parse_param(text: str) -> list[NcnnLayer]:
    """Parse the text form of an ncnn `.param` file."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    try:
        magic = int(lines[0])
    except (IndexError, ValueError):
        magic = -1
    if magic != PARAM_MAGIC:
        raise ModelError(f"Not an ncnn .param file: the first line should be {PARAM_MAGIC}.")
    try:
        layer_count, _blob_count = (int(v) for v in lines[1].split())
    except (IndexError, ValueError) as exc:
        raise ModelError("ncnn .param file: the second line should hold two counts.") from exc
    layers: list[NcnnLayer] = []
    for number, line in enumerate(lines[2:], start=3):
        fields = line.split()
        try:
            type_, name = fields[0], fields[1]
            n_bottom, n_top = int(fields[2]), int(fields[3])
            bottoms = fields[4 : 4 + n_bottom]
            tops = fields[4 + n_bottom : 4 + n_bottom + n_top]
            if len(bottoms) != n_bottom or len(tops) != n_top:
                raise ValueError("too few blob names")
            params: dict[int, ParamValue] = {}
            for item in fields[4 + n_bottom + n_top :]:
                key_text, _, value_text = item.partition("=")
                key = int(key_text)
                if key <= -23300:  # array: -23300 - id, "count,v1,v2,…"
                    values = [_number(v) for v in value_text.split(",")]
                    if int(values[0]) != len(values) - 1:
                        raise ValueError(f"array {key} announces {values[0]} values")
                    params[-23300 - key] = values[1:]
                else:
                    params[key] = _number(value_text)
        except (IndexError, ValueError) as exc:
            raise ModelError(f"ncnn .param file: cannot read line {number}: {line!r}.") from exc
        layers.append(NcnnLayer(type_, name, bottoms, tops, params))
    if len(layers) != layer_count:
        raise ModelError(
            f"ncnn .param file announces {layer_count} layers but holds {len(layers)}."
        )
    return layers


class WeightReader:
    """Reads weight blobs from an ncnn `.bin` in the order the layers load them."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def _take(self, size: int, what: str) -> bytes:
        if self.offset + size > len(self.data):
            raise ModelError(
                f"The ncnn .bin file is too short: {what} needs {size} bytes at offset "
                f"{self.offset}, the file has {len(self.data)}."
            )
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def load(self, count: int, *, tagged: bool, what: str) -> np.ndarray:
        """`tagged`: ncnn's type 0 (a 4-byte storage tag first); else raw fp32 (type 1)."""
        if not tagged:
            return np.frombuffer(self._take(4 * count, what), dtype="<f4").astype(np.float32)
        tag = int.from_bytes(self._take(4, what), "little")
        if tag == TAG_FP16:
            size = 2 * count
            raw = self._take((size + 3) // 4 * 4, what)  # fp16 data is padded to 4 bytes
            return np.frombuffer(raw[:size], dtype="<f2").astype(np.float32)
        if tag in (0, TAG_FP32_EXTRA):
            return np.frombuffer(self._take(4 * count, what), dtype="<f4").astype(np.float32)
        kind = "int8" if tag == TAG_INT8 else "quantised (lookup-table)"
        raise ModelError(
            f"The ncnn .bin file stores {what} as {kind} weights (tag {tag:#010x}); "
            "only fp32 and fp16 weights can be converted."
        )

    def finish(self) -> None:
        left = len(self.data) - self.offset
        if left:
            raise ModelError(
                f"The ncnn .bin file has {left} bytes more than its .param file uses: "
                "the two files do not belong together."
            )


# ncnn's fused activation_type (param 9) → how to emit it (params in array 10)
_ACTIVATIONS = {
    0: "none",
    1: "relu",
    2: "leakyrelu",
    3: "clip",
    4: "sigmoid",
    5: "mish",
    6: "hardswish",
}


class _Builder:
    def __init__(self, input_blob: str, output_blob: str) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.names: dict[str, str] = {input_blob: "input"}  # ncnn blob → ONNX value
        self.channels: dict[str, int | None] = {}
        self.output_blob = output_blob
        self._used = {"input", "output"}
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        name = f"{hint}__{self._count}"
        self._used.add(name)
        return name

    def value_for_top(self, blob: str) -> str:
        if blob == self.output_blob:
            name = "output"
        elif blob in self._used:
            name = self.fresh(blob)
        else:
            name = blob
            self._used.add(name)
        self.names[blob] = name
        return name

    def value(self, layer: NcnnLayer, blob: str) -> str:
        try:
            return self.names[blob]
        except KeyError:
            raise ModelError(
                f"ncnn layer {layer.name!r} reads blob {blob!r}, which no earlier layer makes."
            ) from None

    def const(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op, inputs, outputs, **attrs))

    def activation(self, layer: NcnnLayer, kind: int, args: list[float], x: str, y: str) -> None:
        name = _ACTIVATIONS.get(kind)
        if name is None:
            raise ModelError(f"ncnn layer {layer.name!r}: unknown activation type {kind}.")
        if name == "none":
            self.node("Identity", [x], [y])
        elif name == "relu":
            self.node("Relu", [x], [y])
        elif name == "leakyrelu":
            self.node("LeakyRelu", [x], [y], alpha=args[0] if args else 0.0)
        elif name == "clip":
            lo = self.const("clip_min", np.array(args[0], np.float32))
            hi = self.const("clip_max", np.array(args[1], np.float32))
            self.node("Clip", [x, lo, hi], [y])
        elif name == "sigmoid":
            self.node("Sigmoid", [x], [y])
        elif name == "mish":  # opset 17 has no Mish: x * tanh(softplus(x))
            soft, tanh = self.fresh("softplus"), self.fresh("tanh")
            self.node("Softplus", [x], [soft])
            self.node("Tanh", [soft], [tanh])
            self.node("Mul", [x, tanh], [y])
        else:  # hardswish: x * clip(alpha * x + beta, 0, 1)
            gate = self.fresh("hardsigmoid")
            alpha, beta = (args + [0.2, 0.5][len(args) :])[:2]
            self.node("HardSigmoid", [x], [gate], alpha=alpha, beta=beta)
            self.node("Mul", [x, gate], [y])

    def fixed_sizes(self, x: str, out_h: int, out_w: int) -> str:
        shape, nc, sizes = self.fresh("shape"), self.fresh("nc"), self.fresh("sizes")
        self.node("Shape", [x], [shape])
        starts0 = self.const("start", np.array([0], np.int64))
        starts2 = self.const("start", np.array([2], np.int64))
        self.node("Slice", [shape, starts0, starts2], [nc])
        hw = self.const("hw", np.array([out_h, out_w], np.int64))
        self.node("Concat", [nc, hw], [sizes], axis=0)
        return sizes


def _conv(b: _Builder, layer: NcnnLayer, weights: WeightReader, depthwise: bool) -> None:
    p = layer.get_int
    num_output = p(0, 0)
    kernel_w = p(1, 0)
    kernel_h = p(11, kernel_w)
    dilation_w = p(2, 1)
    dilation_h = p(12, dilation_w)
    stride_w = p(3, 1)
    stride_h = p(13, stride_w)
    pad_left = p(4, 0)
    pad_right = p(15, pad_left)
    pad_top = p(14, pad_left)
    pad_bottom = p(16, pad_top)
    bias_term = p(5, 0)
    weight_size = p(6, 0)
    group = p(7, 1) if depthwise else 1
    if p(8, 0) or p(19, 0):
        raise ModelError(
            f"ncnn layer {layer.name!r} is an int8 or dynamic-weight convolution, "
            "which cannot be converted."
        )
    if layer.get_float(18, 0.0) != 0.0:
        raise ModelError(f"ncnn layer {layer.name!r} pads with a non-zero value.")
    if num_output <= 0 or kernel_w <= 0 or kernel_h <= 0 or group <= 0:
        raise ModelError(f"ncnn layer {layer.name!r} has a bad output count or kernel size.")
    if weight_size % (num_output * kernel_h * kernel_w):
        raise ModelError(f"ncnn layer {layer.name!r}: weight size does not fit its shape.")
    in_per_group = weight_size // (num_output * kernel_h * kernel_w)
    w = weights.load(weight_size, tagged=True, what=f"the weights of {layer.name!r}")
    w = w.reshape(num_output, in_per_group, kernel_h, kernel_w)
    inputs = [b.value(layer, layer.bottoms[0]), b.const(f"{layer.name}.weight", w)]
    if bias_term:
        bias = weights.load(num_output, tagged=False, what=f"the bias of {layer.name!r}")
        inputs.append(b.const(f"{layer.name}.bias", bias))
    attrs: dict[str, Any] = {
        "kernel_shape": [kernel_h, kernel_w],
        "strides": [stride_h, stride_w],
        "dilations": [dilation_h, dilation_w],
        "group": group,
    }
    pads = {pad_left, pad_right, pad_top, pad_bottom}
    if pads == {-233}:
        attrs["auto_pad"] = "SAME_UPPER"
    elif pads == {-234}:
        attrs["auto_pad"] = "SAME_LOWER"
    elif min(pads) < 0:
        raise ModelError(f"ncnn layer {layer.name!r} mixes automatic and explicit padding.")
    else:
        attrs["pads"] = [pad_top, pad_left, pad_bottom, pad_right]
    kind = p(9, 0)
    top = b.value_for_top(layer.tops[0])
    if kind == 0:
        b.node("Conv", inputs, [top], **attrs)
    else:
        raw = b.fresh(f"{layer.name}_conv")
        b.node("Conv", inputs, [raw], **attrs)
        b.activation(layer, kind, layer.get_array(10), raw, top)
    b.channels[layer.tops[0]] = num_output


def _prelu(b: _Builder, layer: NcnnLayer, weights: WeightReader) -> None:
    num_slope = layer.get_int(0, 0)
    slope = weights.load(num_slope, tagged=False, what=f"the slopes of {layer.name!r}")
    slope = slope.reshape(num_slope, 1, 1)  # per channel of [1, C, H, W]
    x = b.value(layer, layer.bottoms[0])
    b.node("PRelu", [x, b.const(f"{layer.name}.slope", slope)], [b.value_for_top(layer.tops[0])])


_BINARY = {
    0: ("Add", False),
    1: ("Sub", False),
    2: ("Mul", False),
    3: ("Div", False),
    4: ("Max", False),
    5: ("Min", False),
    6: ("Pow", False),
    7: ("Sub", True),
    8: ("Div", True),
    9: ("Pow", True),
}  # op_type → (ONNX op, operands swapped)


def _binary(b: _Builder, layer: NcnnLayer) -> None:
    op_type = layer.get_int(0, 0)
    if op_type not in _BINARY:
        raise ModelError(f"ncnn layer {layer.name!r}: BinaryOp type {op_type} is not supported.")
    op, swapped = _BINARY[op_type]
    a = b.value(layer, layer.bottoms[0])
    if layer.get_int(1, 0):  # with_scalar: b is param 2
        other = b.const(f"{layer.name}.b", np.array(layer.get_float(2, 0.0), np.float32))
    elif len(layer.bottoms) == 2:
        other = b.value(layer, layer.bottoms[1])
    else:
        raise ModelError(f"ncnn layer {layer.name!r}: BinaryOp needs two inputs or a scalar.")
    operands = [other, a] if swapped else [a, other]
    b.node(op, operands, [b.value_for_top(layer.tops[0])])


def _eltwise(b: _Builder, layer: NcnnLayer) -> None:
    op_type = layer.get_int(0, 0)
    coeffs = layer.get_array(1)
    xs = [b.value(layer, blob) for blob in layer.bottoms]
    top = b.value_for_top(layer.tops[0])
    if op_type == 0:
        op = "Mul"
    elif op_type == 2:
        op = "Max"
    elif op_type == 1:
        op = "Sum"
        if coeffs:  # ncnn: Σ coeff_i · x_i
            if len(coeffs) != len(xs):
                raise ModelError(f"ncnn layer {layer.name!r}: one coefficient per input needed.")
            scaled = []
            for x, c in zip(xs, coeffs, strict=True):
                if c == 1.0:
                    scaled.append(x)
                    continue
                y = b.fresh(f"{layer.name}_scaled")
                b.node("Mul", [x, b.const(f"{layer.name}.coeff", np.array(c, np.float32))], [y])
                scaled.append(y)
            xs = scaled
    else:
        raise ModelError(f"ncnn layer {layer.name!r}: Eltwise type {op_type} is not supported.")
    # fold pairwise in input order, as ncnn accumulates
    pair_op = "Add" if op == "Sum" else op
    acc = xs[0]
    if len(xs) == 1:
        b.node("Identity", [acc], [top])
    for i, x in enumerate(xs[1:], start=2):
        out = top if i == len(xs) else b.fresh(f"{layer.name}_acc")
        b.node(pair_op, [acc, x], [out])
        acc = out


def _interp(b: _Builder, layer: NcnnLayer) -> None:
    resize_type = layer.get_int(0, 0)
    scale_h = layer.get_float(1, 1.0)
    scale_w = layer.get_float(2, 1.0)
    out_h = layer.get_int(3, 0)
    out_w = layer.get_int(4, 0)
    align_corner = layer.get_int(6, 0)
    if layer.get_int(5, 0) or len(layer.bottoms) != 1:
        raise ModelError(f"ncnn layer {layer.name!r}: Interp to a dynamic size is not supported.")
    x = b.value(layer, layer.bottoms[0])
    top = b.value_for_top(layer.tops[0])
    if resize_type not in (1, 2, 3):
        raise ModelError(f"ncnn layer {layer.name!r}: Interp type {resize_type} is not supported.")
    # ncnn: out = (int)(in · scale) and source = f(out / scale) when scales are given, the
    # size ratio when sizes are; ONNX Resize does the same with `scales` or `sizes`
    if out_h and out_w:
        inputs = [x, "", "", b.fixed_sizes(x, out_h, out_w)]
    else:
        inputs = [x, "", b.const("scales", np.array([1, 1, scale_h, scale_w], np.float32))]
    attrs: dict[str, Any]
    if resize_type == 1:  # nearest: min(floor(out / scale), in - 1)
        attrs = {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        }
    else:  # half-pixel (or align_corner), clamped at the border; ncnn's cubic a = -0.75
        attrs = {
            "mode": "linear" if resize_type == 2 else "cubic",
            "coordinate_transformation_mode": "align_corners" if align_corner else "half_pixel",
        }
        if resize_type == 3:
            attrs.update(cubic_coeff_a=-0.75, exclude_outside=0)
    b.node("Resize", inputs, [top], **attrs)
    b.channels[layer.tops[0]] = b.channels.get(layer.bottoms[0])


def _pixelshuffle(b: _Builder, layer: NcnnLayer) -> None:
    factor = layer.get_int(0, 1)
    mode = layer.get_int(1, 0)
    if mode not in (0, 1) or factor < 1:
        raise ModelError(f"ncnn layer {layer.name!r}: PixelShuffle mode {mode} is not supported.")
    x = b.value(layer, layer.bottoms[0])
    # ncnn mode 0 takes channel p·r² + i·r + j (PyTorch's order, DepthToSpace CRD);
    # mode 1 takes (i·r + j)·C + p (DCR)
    b.node(
        "DepthToSpace",
        [x],
        [b.value_for_top(layer.tops[0])],
        blocksize=factor,
        mode="CRD" if mode == 0 else "DCR",
    )
    c = b.channels.get(layer.bottoms[0])
    b.channels[layer.tops[0]] = c // (factor * factor) if c else None


def _concat(b: _Builder, layer: NcnnLayer) -> None:
    axis = layer.get_int(0, 0)
    onnx_axis = axis + 1 if axis >= 0 else axis  # ncnn's axes are [C, H, W]; ONNX adds N
    xs = [b.value(layer, blob) for blob in layer.bottoms]
    b.node("Concat", xs, [b.value_for_top(layer.tops[0])], axis=onnx_axis)
    if onnx_axis == 1:
        cs = [b.channels.get(blob) for blob in layer.bottoms]
        b.channels[layer.tops[0]] = None if None in cs else sum(c for c in cs if c)
    else:
        b.channels[layer.tops[0]] = b.channels.get(layer.bottoms[0])


def _find_output(layers: list[NcnnLayer], output_blob: str | None) -> str:
    made = {top for layer in layers for top in layer.tops}
    if output_blob is not None:
        if output_blob not in made:
            raise ModelError(f"The ncnn graph has no blob named {output_blob!r}.")
        return output_blob
    if "output" in made:
        return "output"
    used = {bottom for layer in layers for bottom in layer.bottoms}
    ends = [
        top for layer in layers if layer.type != "Split" for top in layer.tops if top not in used
    ]
    if len(ends) != 1:
        raise ModelError(
            "Cannot tell the ncnn graph's output: blobs "
            + ", ".join(ends or ["(none)"])
            + " are not read by any layer; name one."
        )
    return ends[0]


def convert(
    param_text: str,
    weights: bytes,
    *,
    graph_name: str = "ncnn",
    output_blob: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> onnx.ModelProto:
    """Convert an ncnn graph to ONNX; `ModelError` names what cannot be converted."""
    layers = parse_param(param_text)
    inputs = [layer for layer in layers if layer.type == "Input"]
    if len(inputs) != 1 or len(inputs[0].tops) != 1:
        raise ModelError("The ncnn graph must have exactly one Input layer with one blob.")
    input_blob = inputs[0].tops[0]
    input_channels = inputs[0].get_int(2, 0) or 3
    out_blob = _find_output(layers, output_blob)
    b = _Builder(input_blob, out_blob)
    b.channels[input_blob] = input_channels
    reader = WeightReader(weights)
    for layer in layers:
        kind = layer.type
        if kind == "Input":
            continue
        if not layer.bottoms or not layer.tops:
            raise ModelError(f"ncnn layer {layer.name!r} ({kind}) has no input or no output.")
        first = layer.bottoms[0]
        if kind == "Split":
            for top in layer.tops:  # a Split only fans a blob out
                if top == out_blob:
                    b.node("Identity", [b.value(layer, first)], [b.value_for_top(top)])
                else:
                    b.names[top] = b.value(layer, first)
                b.channels[top] = b.channels.get(first)
            continue
        if kind in ("Convolution", "ConvolutionDepthWise"):
            _conv(b, layer, reader, depthwise=kind == "ConvolutionDepthWise")
            continue
        if kind == "PReLU":
            _prelu(b, layer, reader)
        elif kind == "BinaryOp":
            _binary(b, layer)
        elif kind == "Eltwise":
            _eltwise(b, layer)
        elif kind == "Interp":
            _interp(b, layer)
            continue
        elif kind == "PixelShuffle":
            _pixelshuffle(b, layer)
            continue
        elif kind == "Concat":
            _concat(b, layer)
            continue
        elif kind == "ReLU":
            slope = layer.get_float(0, 0.0)
            kind_id, args = (1, []) if slope == 0.0 else (2, [slope])
            b.activation(
                layer, kind_id, args, b.value(layer, first), b.value_for_top(layer.tops[0])
            )
        elif kind == "Sigmoid":
            b.activation(layer, 4, [], b.value(layer, first), b.value_for_top(layer.tops[0]))
        elif kind == "Clip":
            bounds = [layer.get_float(0, -3.4e38), layer.get_float(1, 3.4e38)]
            b.activation(layer, 3, bounds, b.value(layer, first), b.value_for_top(layer.tops[0]))
        else:
            raise ModelError(
                f"The ncnn graph uses a layer of type {kind!r} ({layer.name!r}), "
                "which the converter does not support."
            )
        b.channels[layer.tops[0]] = b.channels.get(first)
    reader.finish()
    if out_blob not in b.names or b.names[out_blob] != "output":
        raise ModelError(f"The ncnn graph's output blob {out_blob!r} is not made by a layer.")

    graph = helper.make_graph(
        b.nodes,
        graph_name,
        [
            helper.make_tensor_value_info(
                "input", TensorProto.FLOAT, [1, input_channels, "height", "width"]
            )
        ],
        [
            helper.make_tensor_value_info(
                "output",
                TensorProto.FLOAT,
                [1, b.channels.get(out_blob), "out_height", "out_width"],
            )
        ],
        initializer=b.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="tessera-ncnn",
        ir_version=IR_VERSION,
    )
    if metadata:
        helper.set_model_props(model, dict(metadata))
    try:
        onnx.checker.check_model(model, full_check=False)
    except onnx.checker.ValidationError as exc:
        raise ModelError(f"The converted ncnn graph is not a valid ONNX model: {exc}") from exc
    return model
