"""Tessera's CPU convolution kernel (engine/runtime/winograd.c) and the chain sessions that
use it (engine/runtime/chain.py), against ORT's own kernels on the same graphs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.errors import Cancelled, map_error
from engine.runtime import chain, finished_rows, winograd
from engine.runtime.handle import SessionHandle
from engine.runtime.providers import Device, Runtime
from engine.runtime.sessions import SessionCache, SessionKey
from engine.samples.upscaler_models import make_compact_upscaler
from tests.engine_helpers import Terminating
from tests.kernel_models import conv_case, direct_conv3x3, load_chain

pytestmark = pytest.mark.skipif(
    not winograd.available(), reason="the kernel is not built (no C compiler at install)"
)


def _ort(path: Path | bytes) -> ort.InferenceSession:
    source = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"])


def _chain_model(
    path: Path,
    *,
    convs: int = 5,
    features: int = 24,
    act: str = "PRelu",
    bias: bool = True,
    stride: int = 1,
    dilation: int = 1,
    seed: int = 1,
) -> Path:
    """conv 3×3 → activation, `convs` times, ending in a conv to 3 channels: a plain chain
    (no tail) of the widths the kernel pads (3 → 24 → 3)."""
    rng = np.random.default_rng(seed)
    nodes, inits, x, c = [], [], "input", 3
    for i in range(convs):
        out = 3 if i == convs - 1 else features
        inits.append(
            numpy_helper.from_array(rng.normal(0, 0.25, (out, c, 3, 3)).astype(np.float32), f"w{i}")
        )
        ins = [x, f"w{i}"]
        if bias:
            inits.append(
                numpy_helper.from_array(rng.normal(0, 0.1, out).astype(np.float32), f"b{i}")
            )
            ins.append(f"b{i}")
        s = stride if i == 1 else 1
        d = dilation if i == 1 else 1
        nodes.append(
            helper.make_node("Conv", ins, [f"c{i}"], pads=[d] * 4, strides=[s, s], dilations=[d, d])
        )
        x, c = f"c{i}", out
        if i < convs - 1:
            if act == "PRelu":
                slope = rng.uniform(-0.5, 2.0, (out, 1, 1)).astype(np.float32)
                inits.append(numpy_helper.from_array(slope, f"s{i}"))
                nodes.append(helper.make_node("PRelu", [x, f"s{i}"], [f"a{i}"]))
            elif act == "LeakyRelu":
                nodes.append(helper.make_node("LeakyRelu", [x], [f"a{i}"], alpha=0.2))
            else:
                nodes.append(helper.make_node(act, [x], [f"a{i}"]))
            x = f"a{i}"
    nodes.append(helper.make_node("Identity", [x], ["output"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 3, None, None])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _image(h: int, w: int, n: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3, h, w), dtype=np.float32)


@pytest.mark.parametrize(("scale", "downscale"), [(4, None), (2, None), (2, 0.5), (3, 0.75)])
@pytest.mark.parametrize("size", [(32, 48), (17, 23), (5, 3)])
def test_a_compact_upscaler_matches_ort(
    tmp_path: Path, scale: int, downscale: float | None, size: tuple[int, int]
) -> None:
    """Every shape of the SRVGG family, any size (the tiles' edges are 4×4 Winograd tiles cut
    short): the kernel's product is ORT's within float rounding."""
    model = make_compact_upscaler(
        tmp_path / "m.onnx", scale, features=16, convs=4, downscale=downscale
    )
    session = load_chain(model)
    assert isinstance(session, chain.ChainSession)
    x = _image(*size)
    ours = session.run(None, {"input": x})[0]
    theirs = _ort(model).run(None, {"input": x})[0]
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= 2e-5 * max(1.0, float(np.abs(theirs).max()))


@pytest.mark.parametrize("act", ["PRelu", "Relu", "LeakyRelu"])
@pytest.mark.parametrize("bias", [True, False])
def test_activations_and_biases_match_ort(tmp_path: Path, act: str, bias: bool) -> None:
    model = _chain_model(tmp_path / "c.onnx", act=act, bias=bias)
    session = load_chain(model)
    assert isinstance(session, chain.ChainSession)
    x = _image(21, 34, n=2)  # a batch of two, a width of 8½ tiles
    ours = session.run(["output"], {"input": x})[0]
    theirs = _ort(model).run(["output"], {"input": x})[0]
    assert np.abs(ours - theirs).max() <= 2e-5 * max(1.0, float(np.abs(theirs).max()))


@pytest.mark.parametrize(
    "change", [{"convs": 3}, {"stride": 2}, {"dilation": 2}], ids=["short", "stride", "dilated"]
)
def test_a_graph_the_kernel_cannot_take_stays_with_ort(
    tmp_path: Path, change: dict[str, int]
) -> None:
    """Too short a chain, a strided or dilated conv in it: no chain session, and a marker so
    the graph is not analysed at every load."""
    convs, stride, dilation = (
        change.get("convs", 5),
        change.get("stride", 1),
        change.get("dilation", 1),
    )
    model = _chain_model(tmp_path / "c.onnx", convs=convs, stride=stride, dilation=dilation)
    assert load_chain(model) is None
    markers = list((tmp_path / ".tessera-optimized").glob("c-*.nochain"))
    assert len(markers) == 1
    assert load_chain(model) is None


def test_the_analysed_chain_is_kept_and_loaded_without_onnx(tmp_path: Path) -> None:
    model = make_compact_upscaler(tmp_path / "m.onnx", 2, features=16, convs=4, downscale=0.5)
    first = load_chain(model)
    assert first is not None and first.kept is None  # analysed from the graph
    (kept,) = (tmp_path / ".tessera-optimized").glob("m-*.chain.npz")
    x = _image(19, 26)
    expected = first.run(None, {"input": x})[0]
    onnx_module = sys.modules.pop("onnx")
    sys.modules["onnx"] = None  # type: ignore[assignment]  # any `import onnx` now fails
    try:
        again = load_chain(model)
    finally:
        sys.modules["onnx"] = onnx_module
    assert again is not None and again.kept == kept
    np.testing.assert_array_equal(again.run(None, {"input": x})[0], expected)


def test_a_changed_model_is_analysed_again(tmp_path: Path) -> None:
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4, seed=1)
    assert load_chain(model) is not None
    make_compact_upscaler(model, 4, features=16, convs=4, seed=2)  # new weights, same name
    session = load_chain(model)
    assert session is not None and session.kept is None
    x = _image(12, 12)
    theirs = _ort(model).run(None, {"input": x})[0]
    assert np.abs(session.run(None, {"input": x})[0] - theirs).max() <= 2e-5 * np.abs(theirs).max()
    assert len(list((tmp_path / ".tessera-optimized").glob("m-*.chain.npz"))) == 1  # old one gone


def test_a_damaged_kept_chain_is_analysed_again(tmp_path: Path) -> None:
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4)
    assert load_chain(model) is not None
    (kept,) = (tmp_path / ".tessera-optimized").glob("m-*.chain.npz")
    kept.write_bytes(b"not a zip")
    session = load_chain(model)
    assert session is not None and session.kept is None
    x = _image(9, 14)
    theirs = _ort(model).run(None, {"input": x})[0]
    assert np.abs(session.run(None, {"input": x})[0] - theirs).max() <= 2e-5 * np.abs(theirs).max()


@pytest.mark.parametrize("downscale", [None, 0.5])
def test_outputs_are_written_into_the_callers_buffer(
    tmp_path: Path, downscale: float | None
) -> None:
    """The tiled operations' path (io_binding): with a tail (ORT writes into the buffer) and
    without one (the kernel's pass does)."""
    model = make_compact_upscaler(tmp_path / "m.onnx", 2, features=16, convs=4, downscale=downscale)
    session = load_chain(model)
    assert session is not None
    x = _image(16, 20)
    expected = session.run(None, {"input": x})[0]
    buffer = np.full(expected.shape, np.nan, np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("input", x)
    binding.bind_output("output", "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(buffer, expected)


@pytest.mark.parametrize("downscale", [None, 0.5])
def test_a_run_into_the_callers_buffer_reports_its_rows_as_they_become_final(
    tmp_path: Path, downscale: float | None
) -> None:
    """The kernel writes the chain's whole product (shuffle and the image's sum) top to
    bottom: the run's listener hears how many rows are final while it goes on, and those rows
    already hold the product's values (a writer takes them during the run). A chain with an
    ORT tail makes its product only at the end: nothing is reported early."""
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4, downscale=downscale)
    session = load_chain(model)
    assert isinstance(session, chain.ChainSession)
    x = _image(4 * winograd.GROUP * chain.STEPS * 3, 12)
    expected = session.run(None, {"input": x})[0]
    buffer = np.full(expected.shape, np.nan, np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("input", x)
    binding.bind_output("output", "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
    seen: list[tuple[int, np.ndarray]] = []
    with finished_rows.reported_to(lambda rows: seen.append((rows, buffer[:, :, :rows].copy()))):
        session.run_with_iobinding(binding)
    np.testing.assert_array_equal(buffer, expected)
    if downscale is not None:
        assert seen == []
        return
    counts = [rows for rows, _ in seen]
    assert len(counts) >= 3
    assert counts == sorted(set(counts)) and counts[-1] == expected.shape[2]
    for rows, band in seen:
        np.testing.assert_array_equal(band, expected[:, :, :rows])


def test_a_cancelled_run_stops_between_rows_of_tiles(tmp_path: Path) -> None:
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4)
    cache = SessionCache(threads=2)
    handle = SessionHandle(cache, SessionKey.make(model, Device("cpu"), Runtime.CPU))
    assert isinstance(handle.entry().session, chain.ChainSession)
    options = Terminating(at=2)
    with pytest.raises(RuntimeError, match="terminate flag"):
        handle.entry().session.run(None, {"input": _image(16 * chain.STEPS, 8)}, options)
    # 4·STEPS rows of tiles and the layers' lag: three calls or more, stopped at the second.
    assert options.reads == 2
    # The engine reads it as ORT's own terminate: a cancel, not a failure.
    assert isinstance(map_error(RuntimeError(chain.TERMINATED), "m", "cpu"), Cancelled)
    cache.release_all()


def test_the_session_cache_runs_the_chain_and_can_be_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4)
    key = SessionKey.make(model, Device("cpu"), Runtime.CPU)
    for cache, kind in (
        (SessionCache(threads=2), chain.ChainSession),
        (SessionCache(threads=2, cpu_kernels=False), ort.InferenceSession),
    ):
        entry, _ = cache.get(key)
        assert isinstance(entry.session, kind)
        assert entry.providers[0] == "CPUExecutionProvider"
        cache.release_all()
    monkeypatch.setenv(winograd.DISABLE_ENV, "ort")
    cache = SessionCache(threads=2)
    entry, _ = cache.get(key)
    assert isinstance(entry.session, ort.InferenceSession)
    cache.release_all()


def test_a_kept_chain_of_another_model_is_dropped_and_the_graph_analysed_again(
    tmp_path: Path,
) -> None:
    """A kept chain under a wrong name (another model's, taking two channels) is never handed
    to the kernel: it is dropped at load and this model's graph analysed again."""
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4)
    assert load_chain(model) is not None
    (kept,) = (tmp_path / ".tessera-optimized").glob("m-*.chain.npz")
    other = make_compact_upscaler(tmp_path / "o.onnx", 4, features=8, convs=4)
    assert load_chain(other) is not None
    (wrong,) = (tmp_path / ".tessera-optimized").glob("o-*.chain.npz")
    data = np.load(wrong)
    arrays = {k: data[k] for k in data.files}
    arrays["w0"] = arrays["w0"][:, :2]  # takes two channels
    np.savez(kept, **arrays)
    cache = SessionCache(threads=2)
    handle = SessionHandle(cache, SessionKey.make(model, Device("cpu"), Runtime.CPU))
    x = _image(8, 8)
    out = handle.run({"input": x}, last=True)[0]
    want = _ort(model).run(None, {"input": x})[0]
    assert np.abs(out - want).max() <= 2e-5 * max(1.0, float(np.abs(want).max()))
    assert isinstance(handle.entry().session, chain.ChainSession)
    assert chain.Chain.read(kept).weights[0][0].shape[1] == 3  # this model's, kept again
    cache.release_all()


def test_the_kernel_alone_matches_a_direct_convolution() -> None:
    """One layer, 40 → 27 channels (both padded), against float64 arithmetic."""
    case = conv_case(winograd.padded(40))
    layer = winograd.Conv3x3.make(case.w, case.b, case.s)
    h, wd = case.x.shape[:2]
    out = np.empty((h, wd, winograd.padded(27)), np.float32)
    with winograd.StreamedChain((layer,), h, wd, 0) as one:
        one.run(case.x, np.zeros((3, h, wd), np.float32), out, 0, one.steps, 2)
    ref = case.expected
    assert out.shape == (h, wd, winograd.padded(27))
    # Relative, as tests/test_kernel_isas.py bounds every set: outputs reach ~9, and SSE2 (the
    # baseline, TESSERA_CPU_ISA=baseline) has no FMA: 1.05e-4 off, 1.2e-5 of the largest.
    assert np.abs(out[:, :, :27] - ref).max() <= 2e-5 * float(np.abs(ref).max())
    np.testing.assert_array_equal(out[:, :, 27:], 0)  # the padding stays zero for the next layer


def test_one_convolution_reads_and_writes_slices_upscaled_with_residuals() -> None:
    """`winograd.conv` as convgraph.py uses it: the source a prefix of a wider tensor's
    channels read 2× upscaled (nearest), the product written into a slice of another tensor
    beside channels it must not touch, after `o × 0.2 + r1` then `o × 0.5 + r2`; and the same
    written NCHW (the graph's output), only its real channels."""
    rng = np.random.default_rng(4)
    w = rng.normal(0, 0.2, (32, 48, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, 32).astype(np.float32)
    s = np.full(32, 0.2, np.float32)
    layer = winograd.Conv3x3.make(w, b, s)
    h, wd = 7, 9  # the source's size; the output is 14 × 18
    wide = rng.normal(0, 1, (h, wd, 80)).astype(np.float32)  # reads channels 16..64
    up = wide[:, :, 16:64].repeat(2, 0).repeat(2, 1)
    ref = direct_conv3x3(up, w, b, s)
    r1 = rng.normal(0, 1, (2 * h, 2 * wd, 64)).astype(np.float32)  # residual at channels 32..64
    r2 = rng.normal(0, 1, (2 * h, 2 * wd, 32)).astype(np.float32)
    ref = (ref * 0.2 + r1[:, :, 32:]) * 0.5 + r2
    target = np.full((2 * h, 2 * wd, 96), 7.0, np.float32)  # the product goes to channels 48..80
    winograd.conv(
        layer,
        winograd.Slice(wide, 16),
        winograd.Slice(target, 48),
        2,
        up=2,
        residuals=((winograd.Slice(r1, 32), 0.2), (winograd.Slice(r2, 0), 0.5)),
    )
    assert np.abs(target[:, :, 48:80] - ref).max() < 1e-4
    np.testing.assert_array_equal(target[:, :, :48], 7.0)  # the other members are untouched
    np.testing.assert_array_equal(target[:, :, 80:], 7.0)
    # Written NCHW: the first `cout` channels only, each a plane.
    small = winograd.Conv3x3.make(w[:5], b[:5], None)
    planar = np.empty((5, 2 * h, 2 * wd), np.float32)
    winograd.conv(small, winograd.Slice(wide, 16), planar, 1, up=2)
    plain = direct_conv3x3(up, w[:5], b[:5], np.ones(5, np.float32))
    assert np.abs(planar - plain.transpose(2, 0, 1)).max() < 1e-4
    with pytest.raises(ValueError, match="output"):
        winograd.conv(small, winograd.Slice(wide, 16), np.empty((5, h, wd), np.float32), 1, up=2)
    with pytest.raises(ValueError, match="channels"):  # a slice past its tensor's channels
        winograd.conv(layer, winograd.Slice(wide, 48), winograd.Slice(target, 48), 1, up=2)
    with pytest.raises(ValueError, match="channels"):
        winograd.conv(layer, winograd.Slice(wide, 16), winograd.Slice(target, 80), 1, up=2)
