"""Which tile an upscale runs with: the memory budget's largest, and on the CPU the fastest plan.

`auto_tile` is the tile `auto` starts from; `tile_overlap` is the plans' overlap (the engine
setting, a light model's measured one, or the default). A job and its preview call both alike.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from engine.models.contracts import Contract
from engine.operations import calibration
from engine.operations.base import RunContext
from engine.operations.tile_frames import plain_upscale
from engine.options import UpscaleConfig
from engine.runtime import memory
from engine.runtime.arena import cpu_arena_limit
from engine.runtime.identity import FileIdentity
from engine.tiling.plan import TilePlan, plan_tiles

# Below this many bytes of weights an upscaler is a light, memory-bound network (the compact
# SRVGG models: ~0.6 M MACs per pixel, against x4plus's 18 M): see `auto_tile`.
LIGHT_MODEL_BYTES = 8 << 20
# On a GPU `auto` starts from at most this tile: larger ones gain nothing there, and each new
# input shape grows the CUDA arena (DESIGN §3).
GPU_MAX_TILE = 512
# Tiles the CPU plan chooses among when one run of the whole image does not fit.
CPU_TILES = (128, 192, 256, 384, 512)
# A run's fixed cost on the CPU, as input pixels' worth of work (a few ms per run).
RUN_PIXELS = 2048
# A larger tile than the smallest one's is taken only while its activations stay below this
# share of the 8-bit output (DESIGN §7: the peak of a ×4 of 2048² stays under 1.5 × the output,
# which the assembled product itself mostly is).
PEAK_SHARE = 0.25


def tile_overlap(ctx: RunContext) -> int:
    """The tile overlap of this request's plans: the engine setting where one is set, else the
    model's own, measured once (engine/operations/calibration.py) for a light model that takes
    any size, else the default. The job and its preview call this alike."""
    if ctx.settings.overlap is not None:
        return ctx.settings.overlap
    c = ctx.spec.contract
    if c.fixed_size is not None or c.scale is None:
        return calibration.DEFAULT_OVERLAP
    try:
        identity = FileIdentity.read(ctx.spec.path)
    except OSError:
        return calibration.DEFAULT_OVERLAP
    key = (ctx.spec.path, identity)
    known = _MEASURED.get(key) or calibration.kept_overlap(ctx.spec.path, identity)
    if known is None:
        # Not where a memory cap is set: the probe's whole-image runs must not be what fails.
        # Nor on a GPU: the probe's sizes would each grow the CUDA arena (DESIGN §3); a CPU
        # request measures it, for every device.
        capped = cpu_arena_limit() or ctx.settings.cpu_mem_limit or ctx.settings.gpu_mem_limit
        if identity.size >= CALIBRATE_BELOW_BYTES or capped or ctx.session.key.device.is_gpu:
            return calibration.DEFAULT_OVERLAP
        session = ctx.session

        cancel = ctx.cancel

        def run(tensor: np.ndarray) -> np.ndarray:
            # The request's cancel stops the probe too (a slow light model probes for seconds);
            # a cancelled probe keeps nothing, the next request measures again.
            out = session.run(
                {c.image_input: tensor}, last=False, cancel=cancel, outputs=[c.image_output]
            )
            return np.asarray(out[0])

        def upscale(picture: np.ndarray, tile: int | None, overlap: int) -> np.ndarray:
            return plain_upscale(picture, c, tile, overlap, run)

        counted = session.runs
        began = time.perf_counter()
        # A failing probe fails the request as its first run would (the handle has released
        # a poisoned session; out of memory retries at half the tile as usual).
        try:
            known = calibration.calibrate(ctx.spec.path, identity, upscale, c.multiple_of)
        finally:
            session.probe_seconds += time.perf_counter() - began
            # The probe's runs are the engine's measurement, once per model: the request's
            # `runs` count those of its products (they still count as attempted, so the
            # arena is handed back after them as after any run).
            session.runs = counted
    _MEASURED[key] = known
    return known


# Measured at first use only below this many bytes of weights: the probe costs a light model
# about a second, x4plus (36 MFLOP per pixel) half a minute; the others keep the default.
CALIBRATE_BELOW_BYTES = LIGHT_MODEL_BYTES
_MEASURED: dict[tuple[Path, FileIdentity], int] = {}  # this process's, by file version


def auto_tile(
    ctx: RunContext,
    config: UpscaleConfig,
    size: tuple[int, int] | None = None,
    requested_max: int | None = None,
    *,
    whole: bool = True,
) -> int:
    """The tile `auto` starts from: the largest that fits the memory budget, and on the CPU,
    given the image's (width, height) `size`, the plan fastest for the whole request.

    Weights stand in for a network's width and depth (for a fully convolutional net, its MACs
    per input pixel ≈ its weight count), and so for its live activation bytes per pixel. On
    the CPU the cost of a run is about proportional to the pixels it computes, whatever the
    tile (measured: animevideov3 ×4 of 1024×768, one run of the whole image 1.3–1.4× faster
    than 128² or 256² tiles, which compute 1.3–1.8× its pixels with their overlaps): so one run
    of the whole image when its activations fit the budget, else the tile computing the
    fewest pixels (overlaps, and each run's fixed cost) among those whose activations also
    stay a small share of the output (`PEAK_SHARE`), never below the tile chosen without a
    size. Without a size (a preview's plan, which a job with tiles in the cache adopts): a
    light model's 128², a heavy one's largest that fits. The CPU plan is bounded by the
    request's own `max_tile` (`requested_max`), not by the catalog's preset, which is the
    GPU's. The `auto_start` option skips the estimate and starts from that tile (halving on
    out-of-memory as usual). With `whole` off, the CPU plan is the fastest tiled one (a
    preview's: the job after it adopts the plan and keeps the preview's tiles).
    """
    if config.auto_start:
        return max(config.auto_start, ctx.settings.min_tile)
    c = ctx.spec.contract
    scale = c.scale or 1
    weights = max(ctx.session.file_size, 1)
    output = scale * scale * 3 * 4 * 2  # the float output tile and its copy, per input pixel
    device = ctx.session.key.device
    budget: float
    tile = config.max_tile
    if device.is_gpu:
        # Live activation bytes per input pixel grow with the network's width and depth.
        per_pixel = min(max(weights // 16_000, 512), 8192) + output
        free = memory.free_gpu_memory(device.index)
        budget = 0.6 * free if free else 2 << 30
        if ctx.settings.gpu_mem_limit:
            budget = min(budget, 0.8 * ctx.settings.gpu_mem_limit)
        tile = min(tile, GPU_MAX_TILE)
    else:
        # Measured peak above the loaded model: x4plus (67 MB) at 256²: 877 MB ≈ weights / 5000
        # per pixel.
        per_pixel = max(weights // 5000, 1024) + output
        limit = cpu_arena_limit() or ctx.settings.cpu_mem_limit
        budget = 0.5 * limit if limit else min(memory.ram_snapshot().available / 4, 1.5 * 2**30)
        if weights < LIGHT_MODEL_BYTES:
            tile = min(tile, 128)
    while tile > ctx.settings.min_tile and tile * tile * per_pixel > budget:
        tile //= 2
    tile = max(tile, ctx.settings.min_tile)
    if device.is_gpu or size is None or c.fixed_size is not None:
        return tile
    return _cpu_plan(ctx, c, size, tile, per_pixel, budget, requested_max or 8192, whole)


def _cpu_plan(
    ctx: RunContext,
    c: Contract,
    size: tuple[int, int],
    floor: int,
    per_pixel: int,
    budget: float,
    cap: int,
    whole: bool = True,
) -> int:
    """The CPU's tile for a whole `size` (width, height) image: see `auto_tile`."""
    m = c.multiple_of
    w, h = (-(-n // m) * m for n in size)
    floor = min(floor, cap)
    if whole and h * w * per_pixel <= budget and max(h, w) <= cap:
        return max(h, w)  # one run of the whole image
    overlap = tile_overlap(ctx)
    allowance = PEAK_SHARE * size[0] * size[1] * (c.scale or 1) ** 2 * 3
    best, best_cost = floor, math.inf
    for tile in (floor, *CPU_TILES):
        if tile > cap or (tile > floor and tile * tile * per_pixel > min(budget, allowance)):
            continue
        cost = plan_cost(plan_tiles(h, w, tile, overlap, m))
        if cost < best_cost:
            best, best_cost = tile, cost
    return best


def plan_cost(plan: TilePlan, done: int = 0) -> int:
    """A plan's CPU cost in input pixels' worth of work, less `done` tiles already made."""
    return max(plan.count - done, 0) * (plan.tile_h * plan.tile_w + RUN_PIXELS)
