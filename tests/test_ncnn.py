"""The ncnn → ONNX converter against Tencent's own `ncnn` runtime, layer by layer.

Each case writes a tiny `.param`/`.bin` pair, runs it through `ncnn` (fp32 on the CPU) and
through onnxruntime after conversion, and wants the two to agree to 1e-5.
"""

from __future__ import annotations

from pathlib import Path

import ncnn
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from engine.errors import ModelError
from engine.models.ncnn import TAG_FP16, TAG_INT8, convert, parse_param

TOLERANCE = 1e-5
RNG_SEED = 1234


def fp32(array: np.ndarray) -> bytes:
    """ncnn's type-0 blob with the fp32 tag (0)."""
    return b"\0\0\0\0" + np.asarray(array, "<f4").tobytes()


def fp16(array: np.ndarray) -> bytes:
    """ncnn's type-0 blob with the fp16 tag, padded to 4 bytes."""
    data = np.asarray(array, "<f2").tobytes()
    return TAG_FP16.to_bytes(4, "little") + data + b"\0" * (-len(data) % 4)


def raw(array: np.ndarray) -> bytes:
    """ncnn's type-1 blob (biases, PReLU slopes): plain fp32."""
    return np.asarray(array, "<f4").tobytes()


class Graph:
    """Writes an ncnn graph: one Input blob `data`, layers in order, weights alongside."""

    def __init__(self, channels: int = 3) -> None:
        self.lines = [f"Input input 0 1 data 0=0 1=0 2={channels}"]
        self.blobs = {"data"}
        self.weights = bytearray()

    def add(self, type_: str, bottoms: list[str], tops: list[str], params: str = "",
            *blobs: bytes) -> Graph:  # fmt: skip
        name = f"{type_.lower()}_{len(self.lines)}"
        line = f"{type_} {name} {len(bottoms)} {len(tops)} {' '.join(bottoms + tops)} {params}"
        self.lines.append(line.rstrip())
        self.blobs.update(tops)
        for blob in blobs:
            self.weights += blob
        return self

    def param(self) -> str:
        head = f"7767517\n{len(self.lines)} {len(self.blobs)}\n"
        return head + "\n".join(self.lines) + "\n"


def run_ncnn(param: str, weights: bytes, x: np.ndarray, folder: Path,
             output: str = "out") -> np.ndarray:  # fmt: skip
    (folder / "g.param").write_text(param)
    (folder / "g.bin").write_bytes(weights)
    net = ncnn.Net()
    # fp32 on the CPU: the reference must not round through fp16 or bf16
    net.opt.use_vulkan_compute = False
    net.opt.use_fp16_packed = False
    net.opt.use_fp16_storage = False
    net.opt.use_fp16_arithmetic = False
    net.opt.use_bf16_storage = False
    net.opt.use_bf16_packed = False
    net.opt.num_threads = 1
    assert net.load_param(str(folder / "g.param")) == 0
    assert net.load_model(str(folder / "g.bin")) == 0
    extractor = net.create_extractor()
    data = np.ascontiguousarray(x[0], dtype=np.float32)
    # a clone: an in-place first layer (PReLU) on a Mat over numpy memory crashes ncnn
    extractor.input("data", ncnn.Mat(data).clone())
    ret, out = extractor.extract(output)
    assert ret == 0
    result = np.array(out)[None].copy()
    del extractor
    net.clear()
    return result


def run_onnx(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input": x})[0])


def compare(graph: Graph, x: np.ndarray, folder: Path, output: str = "out") -> float:
    model = convert(graph.param(), bytes(graph.weights), output_blob=output)
    onnx.checker.check_model(model)
    got = run_onnx(model, x)
    want = run_ncnn(graph.param(), bytes(graph.weights), x, folder, output)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOLERANCE, atol=TOLERANCE)
    return float(np.abs(got - want).max())


def image(c: int = 3, h: int = 11, w: int = 13, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(RNG_SEED)
    return rng.uniform(low, high, (1, c, h, w)).astype(np.float32)


def weights(*shape: int) -> np.ndarray:
    rng = np.random.default_rng(RNG_SEED + sum(shape))
    return rng.uniform(-0.5, 0.5, shape).astype(np.float32)


# --------------------------------------------------------------------- convolution


@pytest.mark.parametrize(
    "activation",
    ["", "9=1", "9=2 -23310=1,1.000000e-01", "9=3 -23310=2,-2.500000e-01,3.000000e-01",
     "9=4", "9=5", "9=6 -23310=2,2.000000e-01,5.000000e-01"],
    ids=["none", "relu", "leakyrelu", "clip", "sigmoid", "mish", "hardswish"],
)  # fmt: skip
def test_convolution_with_fused_activation(activation: str, tmp_path: Path) -> None:
    w, b = weights(5, 3, 3, 3), weights(5)
    g = Graph().add("Convolution", ["data"], ["out"],
                    f"0=5 1=3 4=1 5=1 6={w.size} {activation}", fp32(w), raw(b))  # fmt: skip
    compare(g, image(), tmp_path)


def test_convolution_stride_dilation_asymmetric_pads_fp16(tmp_path: Path) -> None:
    # kernel 3 wide × 2 high, 7 outputs from 3 inputs: 126 fp16 values, then a padded tail
    w = weights(7, 3, 2, 3)
    params = "0=7 1=3 11=2 2=2 12=1 3=2 13=1 4=1 15=0 14=2 16=1 5=0 6=126"
    g = Graph().add("Convolution", ["data"], ["out"], params, fp16(w))
    compare(g, image(h=12, w=15), tmp_path)


def test_fp16_weights_with_odd_count_are_padded(tmp_path: Path) -> None:
    # 1×1 kernel, 3 → 1: three fp16 values (6 bytes, padded to 8) before the bias
    w, b = weights(1, 3, 1, 1), weights(1)
    g = (Graph()
         .add("Convolution", ["data"], ["c"], "0=1 1=1 5=1 6=3", fp16(w), raw(b))
         .add("PReLU", ["c"], ["out"], "0=1", raw(np.array([0.25]))))  # fmt: skip
    compare(g, image(), tmp_path)


@pytest.mark.parametrize("pad", [-233, -234])
@pytest.mark.parametrize("stride", [1, 2])
def test_convolution_same_padding(pad: int, stride: int, tmp_path: Path) -> None:
    w = weights(4, 3, 4, 4)
    g = Graph().add("Convolution", ["data"], ["out"],
                    f"0=4 1=4 3={stride} 4={pad} 5=0 6={w.size}", fp32(w))  # fmt: skip
    compare(g, image(h=10, w=9), tmp_path)


@pytest.mark.parametrize("group", [2, 4])
def test_convolution_depthwise(group: int, tmp_path: Path) -> None:
    w, b = weights(4, 4 // group, 3, 3), weights(4)
    g = Graph(channels=4).add(
        "ConvolutionDepthWise",
        ["data"],
        ["out"],
        f"0=4 1=3 4=1 5=1 6={w.size} 7={group} 9=1",
        fp32(w),
        raw(b),
    )
    compare(g, image(c=4), tmp_path)


# --------------------------------------------------------------------- activations


@pytest.mark.parametrize("slopes", [3, 1])
def test_prelu(slopes: int, tmp_path: Path) -> None:
    g = Graph().add("PReLU", ["data"], ["out"], f"0={slopes}", raw(weights(slopes)))
    compare(g, image(), tmp_path)


@pytest.mark.parametrize(
    ("layer", "params"),
    [("ReLU", ""), ("ReLU", "0=1.000000e-01"), ("Sigmoid", ""),
     ("Clip", "0=-3.000000e-01 1=4.000000e-01")],
    ids=["relu", "leaky", "sigmoid", "clip"],
)  # fmt: skip
def test_standalone_activations(layer: str, params: str, tmp_path: Path) -> None:
    compare(Graph().add(layer, ["data"], ["out"], params), image(), tmp_path)


# ------------------------------------------------------------ split, concat, eltwise


def branches(n: int) -> Graph:
    """`data` split n ways into blobs b0…b(n-1) that differ from one another."""
    g = Graph().add("Split", ["data"], [f"s{i}" for i in range(n)])
    g.add("ReLU", ["s0"], ["b0"], "0=1.000000e+00")  # slope 1: the identity
    if n > 1:
        g.add("Sigmoid", ["s1"], ["b1"])
    if n > 2:
        g.add("Clip", ["s2"], ["b2"], "0=-2.000000e-01 1=5.000000e-01")
    return g


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_split_and_concat(axis: int, tmp_path: Path) -> None:
    g = branches(3).add("Concat", ["b0", "b1", "b2"], ["out"], f"0={axis}")
    compare(g, image(), tmp_path)


def test_split_fans_out_to_the_output(tmp_path: Path) -> None:
    g = Graph().add("Split", ["data"], ["a", "out"]).add("Sigmoid", ["a"], ["unused"])
    compare(g, image(), tmp_path)


@pytest.mark.parametrize(
    "params",
    ["0=0", "0=1", "0=1 -23301=3,2.000000e-01,1.000000e+00,-5.000000e-01", "0=2"],
    ids=["product", "sum", "sum-coeffs", "max"],
)
def test_eltwise(params: str, tmp_path: Path) -> None:
    g = branches(3).add("Eltwise", ["b0", "b1", "b2"], ["out"], params)
    compare(g, image(), tmp_path)


def test_eltwise_sum_with_real_esrgan_coefficients(tmp_path: Path) -> None:
    g = branches(2).add("Eltwise", ["b0", "b1"], ["out"], "0=1 -23301=2,2.000000e-01,1.0e+00")
    compare(g, image(), tmp_path)


@pytest.mark.parametrize(
    "op", range(10), ids=["add", "sub", "mul", "div", "max", "min", "pow", "rsub", "rdiv", "rpow"]
)
def test_binaryop_two_blobs(op: int, tmp_path: Path) -> None:
    g = branches(2).add("BinaryOp", ["b0", "b1"], ["out"], f"0={op}")
    compare(g, image(low=0.5, high=1.5), tmp_path)  # positive: pow and div stay finite


@pytest.mark.parametrize(
    "op", range(10), ids=["add", "sub", "mul", "div", "max", "min", "pow", "rsub", "rdiv", "rpow"]
)
def test_binaryop_scalar(op: int, tmp_path: Path) -> None:
    g = Graph().add("BinaryOp", ["data"], ["out"], f"0={op} 1=1 2=1.250000e+00")
    compare(g, image(low=0.5, high=1.5), tmp_path)


# ------------------------------------------------------------ interp, pixelshuffle


@pytest.mark.parametrize(
    "params",
    [
        "0=1 1=2.000000e+00 2=2.000000e+00",
        "0=1 1=4.000000e+00 2=4.000000e+00",
        "0=1 1=3.000000e+00 2=1.500000e+00",
        "0=1 1=5.000000e-01 2=5.000000e-01",
        "0=1 3=17 4=6",
        "0=2 1=2.000000e+00 2=2.000000e+00",
        "0=2 1=5.000000e-01 2=5.000000e-01",
        "0=2 1=1.700000e+00 2=7.500000e-01",
        "0=2 1=2.000000e+00 2=3.000000e+00 6=1",
        "0=2 3=9 4=25",
        "0=3 1=2.000000e+00 2=2.000000e+00",
        "0=3 1=5.000000e-01 2=5.000000e-01",
        "0=3 1=7.500000e-01 2=7.500000e-01",
        "0=3 1=3.000000e+00 2=1.300000e+00",
        "0=3 1=2.000000e+00 2=3.000000e+00 6=1",
        "0=3 3=7 4=30",
        "0=3 1=1.000000e+00 2=1.000000e+00",
    ],
    ids=["nearest-x2", "nearest-x4", "nearest-x3-x1.5", "nearest-half", "nearest-size",
         "bilinear-x2", "bilinear-half", "bilinear-x1.7-x0.75", "bilinear-align",
         "bilinear-size", "bicubic-x2", "bicubic-half", "bicubic-x0.75", "bicubic-x3-x1.3",
         "bicubic-align", "bicubic-size", "bicubic-x1"],
)  # fmt: skip
def test_interp(params: str, tmp_path: Path) -> None:
    g = Graph().add("Interp", ["data"], ["out"], params)
    compare(g, image(h=12, w=10), tmp_path)


@pytest.mark.parametrize(("factor", "mode"), [(2, 0), (2, 1), (3, 0), (3, 1)])
def test_pixelshuffle(factor: int, mode: int, tmp_path: Path) -> None:
    c = 2 * factor * factor
    g = Graph(channels=c).add("PixelShuffle", ["data"], ["out"], f"0={factor} 1={mode}")
    compare(g, image(c=c, h=5, w=7), tmp_path)


def test_compact_upscaler_like_animevideov3(tmp_path: Path) -> None:
    """The shape of Real-ESRGAN's SRVGGNetCompact graphs: body ×4, plus nearest ×4, bicubic."""
    w0, b0, w1, b1 = weights(8, 3, 3, 3), weights(8), weights(48, 8, 3, 3), weights(48)
    g = (Graph()
         .add("Split", ["data"], ["x0", "x1"])
         .add("Convolution", ["x1"], ["c0"], f"0=8 1=3 4=1 5=1 6={w0.size}", fp16(w0), raw(b0))
         .add("PReLU", ["c0"], ["p0"], "0=8", raw(weights(8)))
         .add("Convolution", ["p0"], ["c1"], f"0=48 1=3 4=1 5=1 6={w1.size}", fp16(w1), raw(b1))
         .add("PixelShuffle", ["c1"], ["ps"], "0=4")
         .add("Interp", ["x0"], ["up"], "0=1 1=4.000000e+00 2=4.000000e+00")
         .add("BinaryOp", ["ps", "up"], ["sum"])
         .add("Interp", ["sum"], ["out"], "0=3 1=7.500000e-01 2=7.500000e-01"))  # fmt: skip
    model = convert(g.param(), bytes(g.weights))
    assert model.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 3
    diff = compare(g, image(h=9, w=14, low=0.0), tmp_path)
    assert diff <= TOLERANCE


# ------------------------------------------------------------------------ contract


def test_model_contract() -> None:
    w = weights(4, 3, 3, 3)
    g = Graph().add("Convolution", ["data"], ["out"], f"0=4 1=3 4=1 6={w.size}", fp32(w))
    model = convert(g.param(), bytes(g.weights), metadata={"tessera.id": "x"})
    assert model.opset_import[0].version == 17
    (inp,) = model.graph.input
    (out,) = model.graph.output
    assert inp.name == "input" and out.name == "output"
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    dims = [d.dim_value or d.dim_param for d in inp.type.tensor_type.shape.dim]
    assert dims == [1, 3, "height", "width"]
    assert out.type.tensor_type.shape.dim[1].dim_value == 4
    assert {p.key: p.value for p in model.metadata_props} == {"tessera.id": "x"}
    # dynamic: the same model runs at two sizes
    assert run_onnx(model, image(h=8, w=6)).shape == (1, 4, 8, 6)
    assert run_onnx(model, image(h=5, w=9)).shape == (1, 4, 5, 9)


def test_parse_param_arrays_and_floats() -> None:
    text = "7767517\n2 2\nInput in 0 1 data\nEltwise e 1 1 data out 0=1 -23301=2,2.5e-01,1\n"
    layers = parse_param(text)
    assert layers[1].params == {0: 1, 1: [0.25, 1]}
    assert layers[1].get_array(1) == [0.25, 1.0]


# -------------------------------------------------------------------------- refusals


def expect_refusal(graph: Graph, weights_: bytes, *words: str) -> None:
    with pytest.raises(ModelError) as info:
        convert(graph.param(), weights_)
    for word in words:
        assert word in str(info.value)


def test_unknown_layer_is_refused_by_type() -> None:
    g = Graph().add("Softmax", ["data"], ["out"], "0=0")
    expect_refusal(g, b"", "'Softmax'")


def test_int8_weights_are_refused() -> None:
    blob = TAG_INT8.to_bytes(4, "little") + bytes(28)
    g = Graph().add("Convolution", ["data"], ["out"], "0=1 1=3 6=27", blob)
    expect_refusal(g, bytes(g.weights), "int8")


def test_short_and_long_weight_files_are_refused() -> None:
    w = weights(2, 3, 1, 1)
    g = Graph().add(
        "Convolution", ["data"], ["out"], "0=2 1=1 5=1 6=6", fp32(w), raw(w[:, 0, 0, 0])
    )
    expect_refusal(g, bytes(g.weights)[:-4], "too short")
    expect_refusal(g, bytes(g.weights) + b"\0" * 8, "do not belong together")


@pytest.mark.parametrize(
    ("text", "words"),
    [("7767516\n1 1\nInput in 0 1 data\n", ("7767517",)),
     ("7767517\n3 2\nInput in 0 1 data\nSigmoid s 1 1 data out\n", ("3 layers",)),
     ("7767517\n2 2\nInput in 0 1 data\nSigmoid s 1 1 nowhere out\n", ("'nowhere'",)),
     ("7767517\n2 2\nInput in 0 1 data\nSigmoid s 1 1 data\n", ("line 4",))],
    ids=["magic", "count", "blob", "line"],
)  # fmt: skip
def test_malformed_param_is_refused(text: str, words: tuple[str, ...]) -> None:
    with pytest.raises(ModelError) as info:
        convert(text, b"", output_blob="out")
    for word in words:
        assert word in str(info.value)


def test_refusal_keeps_the_cause() -> None:
    with pytest.raises(ModelError) as info:
        convert("7767517\nx y\n", b"")
    assert info.value.__cause__ is not None
