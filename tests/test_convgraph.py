"""A whole graph of 3×3 convolutions (RRDBNet: x4plus, x4plus-anime) by Tessera's kernel
(engine/runtime/convgraph.py), against ORT on the same model."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from engine.runtime import chain, convgraph, finished_rows, winograd
from engine.runtime.handle import SessionHandle
from engine.runtime.providers import Device, Runtime
from engine.runtime.sessions import SessionCache, SessionKey
from engine.samples.upscaler_models import make_rrdb_upscaler
from tests.engine_helpers import Terminating
from tests.kernel_models import load_chain
from tests.starter_fixtures import StarterEnv, starter_env  # noqa: F401 - a fixture

pytestmark = pytest.mark.skipif(
    not winograd.available(), reason="the kernel is not built (no C compiler at install)"
)


def _ort(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _image(h: int, w: int, n: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3, h, w), dtype=np.float32)


def _close(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The largest difference, relative to the product's scale."""
    assert ours.shape == theirs.shape
    return float(np.abs(ours - theirs).max() / max(1.0, float(np.abs(theirs).max())))


@pytest.mark.parametrize("size", [(13, 7), (32, 24), (5, 3)])
@pytest.mark.parametrize(("features", "growth"), [(16, 16), (32, 16), (13, 16)])
def test_an_rrdb_upscaler_matches_ort(
    tmp_path: Path, size: tuple[int, int], features: int, growth: int
) -> None:
    """Every convolution of the graph by the kernel, the Concats laid side by side, the
    residuals and upscales fused: ORT's product within float rounding, at any size (edges of
    4×4 Winograd tiles cut short) and with widths the kernel pads (13 features: the graph is
    not taken, its Concat members are not whole vectors, and ORT runs it)."""
    model = make_rrdb_upscaler(tmp_path / "r.onnx", features=features, growth=growth)
    session = load_chain(model)
    if features % winograd.LANES:
        assert session is None
        return
    assert isinstance(session, chain.GraphSession)
    x = _image(*size, n=2)  # a batch of two (the model's is one: ORT runs each)
    ours = session.run(None, {"input": x})[0]
    theirs = np.concatenate([_ort(model).run(None, {"input": x[i : i + 1]})[0] for i in (0, 1)])
    assert _close(ours, theirs) <= 2e-5


def test_the_plan_holds_a_few_tensors_however_deep_the_graph(tmp_path: Path) -> None:
    """A tensor goes back after the last step that reads it: five blocks hold no more at
    once than two, and every tensor of the run is let go."""

    def plan(blocks: int) -> tuple[int, int]:
        model = make_rrdb_upscaler(tmp_path / f"b{blocks}.onnx", blocks=blocks)
        graph = convgraph.analyse(onnx.load(model))
        assert graph is not None
        live, peak = {0}, 1
        for step, frees in zip(graph.steps, graph.frees, strict=True):
            if step.target is not None:
                live.add(step.target.tensor)
            peak = max(peak, len(live))
            live -= set(frees)
        assert live == set()
        return peak, len(graph.tensors)

    (two, tensors_two), (five, tensors_five) = plan(2), plan(5)
    assert tensors_five > tensors_two  # more blocks, more tensors in the plan
    assert five == two <= 5


def test_a_sum_with_a_later_convolution_is_that_ones_to_take(tmp_path: Path) -> None:
    """conv a and conv b both read c0, then a + b: the sum is fused into b, the later one (in
    a, b's output would be read before b ran)."""
    rng = np.random.default_rng(5)
    inits, nodes = [], []
    for name, cin, cout in (("w0", 3, 16), ("wa", 16, 16), ("wb", 16, 16), ("w3", 16, 16)):
        inits.append(
            numpy_helper.from_array(rng.normal(0, 0.2, (cout, cin, 3, 3)).astype("f4"), name)
        )
    inits.append(numpy_helper.from_array(rng.normal(0, 0.2, (3, 16, 3, 3)).astype("f4"), "w4"))
    nodes += [
        helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c0", "wa"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c0", "wb"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Conv", ["s", "w3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "w4"], ["output"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "later",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, 3, "h", "w"])],
        inits,
    )
    model = tmp_path / "later.onnx"
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model
    )
    analysed = convgraph.analyse(onnx.load(model))
    assert analysed is not None
    assert [len(s.residuals) for s in analysed.steps] == [0, 0, 1, 0, 0]
    session = load_chain(model)
    assert isinstance(session, chain.GraphSession)
    x = _image(11, 9)
    assert (
        _close(session.run(None, {"input": x})[0], _ort(model).run(None, {"input": x})[0]) <= 2e-5
    )


def _edited(src: Path, dst: Path, edit: str) -> Path:
    model = onnx.load(src)
    nodes = model.graph.node
    if edit == "sigmoid":  # an op the kernel does not take, at the end
        nodes[-1].output[0] = "pre"
        nodes.append(helper.make_node("Sigmoid", ["pre"], ["output"]))
    elif edit == "reordered":  # a dense block's Concat with its members the other way round
        cat = next(n for n in nodes if n.op_type == "Concat" and len(n.input) == 3)
        cat.input[1], cat.input[2] = cat.input[2], cat.input[1]
    elif edit == "bilinear":
        resize = next(n for n in nodes if n.op_type == "Resize")
        for a in resize.attribute:
            if a.name == "mode":
                a.s = b"linear"
    elif edit == "pointwise":  # the trunk convolution 1×1
        conv = [n for n in nodes if n.op_type == "Conv"][-5]
        init = next(t for t in model.graph.initializer if t.name == conv.input[1])
        w = numpy_helper.to_array(init)[:, :, 1:2, 1:2].copy()
        init.CopyFrom(numpy_helper.from_array(w, init.name))
        for a in conv.attribute:
            if a.name == "pads":
                a.ints[:] = [0, 0, 0, 0]
    onnx.save(model, dst)
    return dst


@pytest.mark.parametrize("edit", ["sigmoid", "reordered", "bilinear", "pointwise"])
def test_a_graph_the_kernel_cannot_take_stays_with_ort(tmp_path: Path, edit: str) -> None:
    """One node the kernel does not take anywhere: no kernel session, a marker so the graph is
    not analysed again, and the engine's session (ORT) gives ORT's product."""
    model = _edited(make_rrdb_upscaler(tmp_path / "r.onnx"), tmp_path / "e.onnx", edit)
    assert load_chain(model) is None
    assert len(list((tmp_path / ".tessera-optimized").glob("e-*.nochain"))) == 1
    cache = SessionCache(threads=2)
    handle = SessionHandle(cache, SessionKey.make(model, Device("cpu"), Runtime.CPU))
    assert isinstance(handle.entry().session, ort.InferenceSession)
    x = _image(9, 11)
    np.testing.assert_allclose(
        handle.run({"input": x}, last=True)[0], _ort(model).run(None, {"input": x})[0], atol=1e-5
    )
    cache.release_all()


def test_the_session_cache_runs_the_graph_into_the_callers_buffer(tmp_path: Path) -> None:
    model = make_rrdb_upscaler(tmp_path / "r.onnx")
    cache = SessionCache(threads=2)
    handle = SessionHandle(cache, SessionKey.make(model, Device("cpu"), Runtime.CPU))
    session = handle.entry().session
    assert isinstance(session, chain.GraphSession)
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert [i.name for i in session.get_inputs()] == ["input"]
    assert [o.name for o in session.get_outputs()] == ["output"]
    # What the process says it holds is the kernel's weights (4× the file's), not the file.
    assert session.weight_bytes > 3 * model.stat().st_size
    (info,) = cache.snapshot()
    assert info.weight_bytes == session.weight_bytes
    x = _image(10, 12)
    buffer = np.full((1, 3, 40, 48), np.nan, np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("input", x)
    binding.bind_output("output", "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
    session.run_with_iobinding(binding)
    assert _close(buffer, _ort(model).run(None, {"input": x})[0]) <= 2e-5
    with pytest.raises(ValueError, match="channels"):
        session.run(None, {"input": np.zeros((1, 4, 8, 8), np.float32)})
    cache.release_all()
    cache = SessionCache(threads=2, cpu_kernels=False)
    entry, _ = cache.get(SessionKey.make(model, Device("cpu"), Runtime.CPU))
    assert isinstance(entry.session, ort.InferenceSession)
    cache.release_all()


def test_the_streamed_tail_reports_the_products_rows_as_they_become_final(
    tmp_path: Path,
) -> None:
    """The graph's last convolutions write the product top to bottom: the run's listener
    hears how many rows are final while it goes on (an upscale's writer takes them during the
    run), and those rows hold the product's values already."""
    model = make_rrdb_upscaler(tmp_path / "r.onnx", blocks=1)
    session = load_chain(model)
    assert isinstance(session, chain.GraphSession)
    x = _image(4 * winograd.GROUP * convgraph.STREAM_STEPS, 6)
    expected = session.run(None, {"input": x})[0]
    buffer = np.full(expected.shape, np.nan, np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("input", x)
    binding.bind_output("output", "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
    seen: list[tuple[int, np.ndarray]] = []
    with finished_rows.reported_to(lambda rows: seen.append((rows, buffer[:, :, :rows].copy()))):
        session.run_with_iobinding(binding)
    np.testing.assert_array_equal(buffer, expected)
    counts = [rows for rows, _ in seen]
    assert len(set(counts)) >= 3
    assert counts == sorted(set(counts)) and counts[-1] == expected.shape[2]
    for rows, band in seen:
        np.testing.assert_array_equal(band, expected[:, :, :rows])


def test_a_cancelled_run_stops_between_two_convolutions(tmp_path: Path) -> None:
    model = make_rrdb_upscaler(tmp_path / "r.onnx", blocks=2)
    session = load_chain(model)
    assert isinstance(session, chain.GraphSession)

    options = Terminating(at=5)
    with pytest.raises(RuntimeError, match="terminate flag"):
        session.run(None, {"input": _image(16, 16)}, options)
    assert options.reads == 5  # looked at before each convolution, stopped at once


def test_the_last_convolutions_run_streamed_without_their_big_tensors(tmp_path: Path) -> None:
    """conv_up2 (reading its input upscaled), conv_hr and conv_last run as one streamed chain
    at 4× the size: ORT's product, and the run never holds the 4×-size activations the three
    steps would make one by one (it held three such tensors' worth at its peak before)."""
    model = make_rrdb_upscaler(tmp_path / "r.onnx")
    graph = convgraph.analyse(onnx.load(model))
    assert graph is not None
    program = convgraph.Program(graph)
    assert program.tail == len(graph.steps) - 3
    h, w = 48, 40
    x = _image(h, w)
    out = np.empty((3, 4 * h, 4 * w), np.float32)
    tracemalloc.start()
    try:
        assert program.run(x[0], out, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    big = (4 * h) * (4 * w) * 16 * 4  # one 16-channel activation at 4× the size
    assert peak < 1.5 * big
    assert _close(out[None], _ort(model).run(None, {"input": x})[0]) <= 2e-5


def test_a_cancel_is_seen_within_the_streamed_tail(tmp_path: Path) -> None:
    model = make_rrdb_upscaler(tmp_path / "r.onnx")
    session = load_chain(model)
    assert isinstance(session, chain.GraphSession)
    tail = session._program.tail
    options = Terminating(at=tail + 2)  # every step before the tail looked once, then the tail
    with pytest.raises(RuntimeError, match="terminate flag"):
        session.run(None, {"input": _image(24, 24)}, options)
    assert options.reads == tail + 2


@pytest.mark.starter
def test_the_starter_rrdb_models_are_taken_whole(
    starter_env: StarterEnv,  # noqa: F811
) -> None:
    """x4plus and x4plus-anime: every node of the real graphs is one the kernel takes, and a
    small image gives ORT's product."""
    for name, convs in (("realesrgan-x4plus-anime", 96), ("realesrgan-x4plus", 351)):
        path = starter_env.models_dir / f"{name}.onnx"
        graph = convgraph.analyse(onnx.load(path))
        assert graph is not None and len(graph.steps) == convs
        assert graph.scale == 4 and graph.channels_out == 3
    path = starter_env.models_dir / "realesrgan-x4plus-anime.onnx"
    session = load_chain(path)
    assert isinstance(session, chain.GraphSession)
    x = _image(20, 24)
    assert _close(session.run(None, {"input": x})[0], _ort(path).run(None, {"input": x})[0]) <= 2e-5


@pytest.mark.parametrize(
    ("slope_shape", "taken"), [((16,), False), ((16, 1, 1), True), ((1,), True)]
)
def test_both_analysers_read_prelu_slopes_as_onnx_broadcasts_them(
    tmp_path: Path, slope_shape: tuple[int, ...], taken: bool
) -> None:
    """A PRelu slope of shape (C,) runs along the width in ONNX, not the channels: the whole
    graph analyser took it per channel (the chain analyser did not); now neither does, and
    the product is ORT's either way."""
    model = onnx.load(make_rrdb_upscaler(tmp_path / "r.onnx"))
    leaky = next(n for n in model.graph.node if n.op_type == "LeakyRelu")
    slope = np.random.default_rng(0).uniform(-0.5, 2.0, slope_shape).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(slope, "prelu_slope"))
    prelu = helper.make_node("PRelu", [leaky.input[0], "prelu_slope"], list(leaky.output))
    nodes = [prelu if n is leaky else n for n in model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    path = tmp_path / "prelu.onnx"
    onnx.save(model, str(path))
    session = load_chain(path)
    assert (session is not None) == taken
    x = _image(12, 16)  # the width is the slope's length: ORT broadcasts (C,) along it
    theirs = _ort(path).run(None, {"input": x})[0]
    if session is not None:
        assert _close(session.run(None, {"input": x})[0], theirs) <= 2e-5
