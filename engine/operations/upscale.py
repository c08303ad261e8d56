"""Upscale with any ONNX upscaler: scale, layout, dtype and multiple_of from the graph or a probe.

Tiles follow DESIGN §3: the image is padded once to the model's multiple_of, cut into equal
tiles spread evenly with overlap, and blended back in bands so the float copy never spans the
whole output. Alpha goes through the model as a grey image so its edges are as sharp as the
colour's. On out-of-memory the session is released (M5); with automatic tiles the frame is
retried at half the tile size on a fresh session, down to the floor.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from engine.errors import InferenceError, ModelError, ResourceError
from engine.io.image import DecodedImage, to_float
from engine.operations.base import OperationBase, RunContext
from engine.operations.products import write_frames
from engine.requests import Operation, Product, ProductKind, ProgressKind
from engine.runtime import memory
from engine.runtime.sessions import SessionEntry
from engine.tiling.assembly import TileAssembler
from engine.tiling.plan import pad_to_multiple, plan_tiles

log = logging.getLogger(__name__)

MAX_AUTO_TILE = 512  # larger tiles gain little speed and cost a new arena size per shape
PROBE_SIZES = (61, 62, 60, 56, 48, 64)  # odd first: a success there means no multiple_of


@dataclass(frozen=True)
class UpscalerInfo:
    input_name: str
    output_name: str
    layout: str  # "NCHW" or "NHWC"
    channels: int
    fp16: bool
    scale: int
    multiple_of: int
    fixed: tuple[int, int] | None  # (h, w) for exact-size models


def _dims(shape: list[Any]) -> list[int | None]:
    return [d if isinstance(d, int) and d > 0 else None for d in shape]


def describe(
    entry: SessionEntry, runner_probe: Callable[[np.ndarray], np.ndarray], hints: dict[str, Any]
) -> UpscalerInfo:
    """Read the model's I/O from the session; probe only what the graph leaves open."""
    cached = entry.facts.get("upscaler")
    if isinstance(cached, UpscalerInfo):
        return cached
    session = entry.session
    inp = session.get_inputs()[0]
    out = session.get_outputs()[0]
    shape = _dims(list(inp.shape))
    if len(shape) != 4:
        raise ModelError(
            f"{entry.key.model.name} is not an image upscaler: its input has rank {len(shape)}, not 4."
        )
    if shape[1] in (1, 3, 4):
        layout, channels, fixed_hw = "NCHW", int(shape[1] or 3), (shape[2], shape[3])
    elif shape[3] in (1, 3, 4):
        layout, channels, fixed_hw = "NHWC", int(shape[3] or 3), (shape[1], shape[2])
    else:
        layout, channels, fixed_hw = "NCHW", 3, (shape[2], shape[3])
    fp16 = "float16" in inp.type
    if "float" not in inp.type:
        raise ModelError(
            f"{entry.key.model.name} takes {inp.type}; an upscaler takes float or float16 pixels."
        )
    fixed = (fixed_hw[0], fixed_hw[1]) if fixed_hw[0] and fixed_hw[1] else None
    meta: dict[str, str] = {}
    try:
        meta = dict(session.get_modelmeta().custom_metadata_map)
    except Exception:  # metadata is optional; a wrapped session may not have it
        meta = {}
    scale = _int_or_none(meta.get("tessera.scale")) or _int_or_none(hints.get("scale"))
    multiple_of = _int_or_none(meta.get("tessera.multiple_of")) or _int_or_none(
        hints.get("multiple_of")
    )

    def make(h: int, w: int) -> np.ndarray:
        dims = (1, channels, h, w) if layout == "NCHW" else (1, h, w, channels)
        return np.zeros(dims, np.float16 if fp16 else np.float32)

    def out_hw(arr: np.ndarray) -> tuple[int, int]:
        return (arr.shape[2], arr.shape[3]) if layout == "NCHW" else (arr.shape[1], arr.shape[2])

    if fixed is not None:
        if scale is None:
            oh, _ = out_hw(runner_probe(make(*fixed)))
            scale = max(1, oh // fixed[0])
        multiple_of = 1
    else:
        if multiple_of is None:
            for size in PROBE_SIZES:
                try:
                    result = runner_probe(make(size, size))
                except InferenceError:  # the model refuses this size: try the next multiple
                    continue
                oh, _ = out_hw(result)
                multiple_of = 1 if size == 61 else {62: 2, 60: 4, 56: 8, 48: 16, 64: 32}[size]
                if scale is None and oh % size == 0:
                    scale = oh // size
                break
            else:
                raise ModelError(
                    f"{entry.key.model.name} did not run on any small test image; is it an upscaler?"
                )
        if scale is None:
            size = max(multiple_of, 16) * max(1, math.ceil(16 / max(multiple_of, 16)))
            oh, _ = out_hw(runner_probe(make(size, size)))
            scale = oh // size
    if not scale or scale < 1:
        raise ModelError(f"{entry.key.model.name}: could not work out the upscale factor.")
    info = UpscalerInfo(
        inp.name, out.name, layout, channels, fp16, int(scale), int(multiple_of or 1), fixed
    )
    entry.facts["upscaler"] = info
    return info


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value)) if value not in (None, "") else None
    except ValueError:
        return None


def auto_tile(ctx: RunContext, info: UpscalerInfo) -> int:
    """The largest tile whose estimated activation memory fits the budget.

    The `auto_start` option skips the estimate and starts from that tile (halving on
    out-of-memory as usual): for a user who knows the device better than the estimate does.
    """
    start = ctx.option("auto_start", None)
    if start:
        return max(int(start), ctx.settings.min_tile)
    weights = max(ctx.entry.file_size, 1)
    # Live activation bytes per input pixel grow with the network's width and depth (weights as
    # a proxy), plus the float output tile and its copy.
    per_pixel = min(max(weights // 16_000, 512), 8192) + info.scale * info.scale * 3 * 4 * 2
    device = ctx.entry.key.device
    budget: float
    if device.is_gpu:
        free = memory.free_gpu_memory(device.index)
        budget = 0.6 * free if free else 2 << 30
        if ctx.settings.gpu_mem_limit:
            budget = min(budget, 0.8 * ctx.settings.gpu_mem_limit)
    else:
        from engine.runtime.sessions import cpu_arena_limit

        limit = cpu_arena_limit() or ctx.settings.cpu_mem_limit
        # On the CPU a bigger tile barely runs faster, while its arena stays in RSS: keep it lean.
        budget = 0.5 * limit if limit else min(memory.ram_snapshot().available / 8, 96 << 20)
    cap = int(ctx.option("max_tile", MAX_AUTO_TILE))
    tile = cap
    while tile > ctx.settings.min_tile and tile * tile * per_pixel > budget:
        tile //= 2
    return max(tile, ctx.settings.min_tile)


class Upscale(OperationBase):
    operation: ClassVar[Operation] = Operation.UPSCALE

    def _info(self, ctx: RunContext) -> UpscalerInfo:
        def probe(arr: np.ndarray) -> np.ndarray:
            inp = ctx.entry.session.get_inputs()[0].name
            return np.asarray(ctx.run({inp: arr}, count=False)[0])

        return describe(ctx.entry, probe, dict(ctx.model_options))

    def minimal_feeds(self, entry: SessionEntry) -> dict[str, np.ndarray] | None:
        info = entry.facts.get("upscaler")
        if not isinstance(info, UpscalerInfo) or info.fixed is not None:
            return None
        m = max(info.multiple_of, 4)
        dims = (1, info.channels, m, m) if info.layout == "NCHW" else (1, m, m, info.channels)
        return {info.input_name: np.zeros(dims, np.float16 if info.fp16 else np.float32)}

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        info = self._info(ctx)
        auto = ctx.request.tile is None
        tile = auto_tile(ctx, info) if auto else int(ctx.request.tile or 0)
        frames_out: list[np.ndarray] = []
        n = len(image.frames)
        for index, frame in enumerate(image.frames):
            while True:
                try:
                    frames_out.append(self._frame(frame, info, tile, index, n, ctx))
                    break
                except ResourceError:
                    next_tile = tile // 2
                    # RunContext.run has already released the failed session (M5).
                    if not auto or next_tile < ctx.settings.min_tile or info.fixed is not None:
                        raise
                    log.warning(
                        "out of memory at tile %d; retrying at %d on a fresh session",
                        tile,
                        next_tile,
                    )
                    ctx.entry = ctx.renew_session()
                    tile = next_tile
                    info = self._info(ctx)
            ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
        ctx.used_tile = (
            None if info.fixed is None and tile >= max(image.frames[0].shape[:2]) else tile
        )
        return write_frames(ctx, image, f"x{info.scale}", frames_out, ProductKind.IMAGE, image.meta)

    def _frame(
        self,
        frame: np.ndarray,
        info: UpscalerInfo,
        tile: int,
        index: int,
        count: int,
        ctx: RunContext,
    ) -> np.ndarray:
        h, w, c = frame.shape
        colour = frame[..., :3] if c >= 3 else frame[..., :1]
        alpha = frame[..., c - 1 :] if c in (2, 4) else None
        padded_colour = pad_to_multiple(colour, info.multiple_of)
        padded_alpha = pad_to_multiple(alpha, info.multiple_of) if alpha is not None else None
        if info.fixed is not None:
            fh, fw = info.fixed
            padded_colour = _pad_at_least(padded_colour, fh, fw)
            padded_alpha = _pad_at_least(padded_alpha, fh, fw) if padded_alpha is not None else None
        ph, pw = padded_colour.shape[:2]
        if info.fixed is not None:
            plan = _fixed_plan(ph, pw, info.fixed, ctx.settings.overlap)
        else:
            plan = plan_tiles(ph, pw, tile, ctx.settings.overlap, info.multiple_of)
        passes = _passes(colour.shape[2], alpha is not None, info.channels)
        ctx.start_frame(index, count, plan.count * len(passes))
        dtype = frame.dtype
        assemblers = [
            TileAssembler(plan, info.scale, width, np.dtype(dtype)) for _, width in passes
        ]
        for t in plan.tiles:
            for (build, _), asm in zip(passes, assemblers, strict=True):
                region_c = padded_colour[t.y0 : t.y1, t.x0 : t.x1]
                region_a = (
                    padded_alpha[t.y0 : t.y1, t.x0 : t.x1] if padded_alpha is not None else None
                )
                model_in, reduce = build(region_c, region_a)
                tensor = _to_tensor(to_float(model_in), info)
                result = ctx.run({info.input_name: tensor}, outputs=[info.output_name])[0]
                out = _from_tensor(np.asarray(result), info)
                asm.add(t, reduce(out))
        parts = [asm.finish() for asm in assemblers]
        full = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)
        return np.ascontiguousarray(full[: h * info.scale, : w * info.scale])


Pass = tuple[
    Callable[
        [np.ndarray, np.ndarray | None], tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]
    ],
    int,
]


def _passes(colour_channels: int, has_alpha: bool, model_channels: int) -> list[Pass]:
    """How an image's channels go through the model: (build input, reduce output) per pass."""

    def keep(out: np.ndarray) -> np.ndarray:
        return out

    def mean(out: np.ndarray) -> np.ndarray:
        return out.mean(axis=2, keepdims=True)

    def first(out: np.ndarray) -> np.ndarray:
        return out[..., :1]

    def take3(out: np.ndarray) -> np.ndarray:
        return out[..., :3]

    def as_model(x: np.ndarray) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        if model_channels == 3:
            return (np.repeat(x, 3, axis=2), mean) if x.shape[2] == 1 else (x, keep)
        if model_channels == 1:
            return x, first
        # four-channel model: feed opaque alpha
        ones = np.full((*x.shape[:2], 1), 255 if x.dtype == np.uint8 else 65535, x.dtype)
        rgb = np.repeat(x, 3, axis=2) if x.shape[2] == 1 else x
        return np.concatenate([rgb, ones], axis=2), (take3 if x.shape[2] == 3 else mean_of3)

    def mean_of3(out: np.ndarray) -> np.ndarray:
        return out[..., :3].mean(axis=2, keepdims=True)

    passes: list[Pass] = []
    if model_channels == 1 and colour_channels == 3:
        for ch in range(3):
            passes.append((_channel_pass(ch, first), 1))
    else:
        passes.append((lambda c, a: as_model(c), colour_channels))
    if has_alpha:
        passes.append((lambda c, a: as_model(a if a is not None else c[..., :1]), 1))
    return passes


def _channel_pass(
    ch: int, reduce: Callable[[np.ndarray], np.ndarray]
) -> Callable[
    [np.ndarray, np.ndarray | None], tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]
]:
    def build(
        c: np.ndarray, _a: np.ndarray | None
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        return c[..., ch : ch + 1], reduce

    return build


def _to_tensor(x: np.ndarray, info: UpscalerInfo) -> np.ndarray:
    arr = x.transpose(2, 0, 1)[None] if info.layout == "NCHW" else x[None]
    return np.ascontiguousarray(arr, dtype=np.float16 if info.fp16 else np.float32)


def _from_tensor(y: np.ndarray, info: UpscalerInfo) -> np.ndarray:
    # A view in HWC order; the assembler clips and quantises, so no copy is made here.
    arr = y[0].transpose(1, 2, 0) if info.layout == "NCHW" else y[0]
    return arr.astype(np.float32, copy=False)


def _pad_at_least(img: np.ndarray, h: int, w: int) -> np.ndarray:
    ph, pw = max(0, h - img.shape[0]), max(0, w - img.shape[1])
    if not ph and not pw:
        return img
    return np.pad(img, ((0, ph), (0, pw), (0, 0)), mode="edge")


def _fixed_plan(h: int, w: int, fixed: tuple[int, int], overlap: int) -> Any:
    from engine.tiling.plan import TilePlan, axis_spans

    fh, fw = fixed
    return TilePlan(h, w, fh, fw, overlap, axis_spans(h, fh, overlap), axis_spans(w, fw, overlap))
