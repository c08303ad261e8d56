"""Preview: the model on the part of the image the viewer shows, with the product's pixels.

Upscale (`preview_upscale`): the frame is planned by the full job's own `prepare_frame`, with
the tile size the full job would choose (`auto_tile`, or the request's tile), so the plan, the
overlap and the blending are the product's. The tiles whose blended contribution reaches the
region run centre first — at most as many as the tile cache holds — through the request's
`RunContext` (the one session handle: cancel before every run, the last run shrinks, M2), and
each cell of the region is sent as soon as every tile reaching it is in (`RegionAssembler`:
the full job's weights and arithmetic, so the pixels are the product's, bit for bit).
Finished tiles stay in the engine's `TileCache` for the next pan and for the full job.

`PreviewState` is what the engine keeps between previews: the decoded input of the one image
being previewed (decoding a 12 Mpx JPEG takes a good part of a second; a pan must not pay it
again), the tile cache, and the folder where the non-tiled families' previews are written.
All of it is handed back when the input or model changes, when a full job starts (the input)
or has used the tiles, and on Unload.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import BadInputError
from engine.io.reading import load_image
from engine.operations.base import RunContext
from engine.operations.upscale import (
    Upscale,
    _tensor,
    auto_tile,
    prepare_frame,
    run_tile,
    tile_overlap,
)
from engine.previews import PreviewPatch, PreviewRequest, Region
from engine.requests import Product
from engine.tiling.cache import DEFAULT_LIMIT, TileCache, TileSource, file_version
from engine.tiling.region import Cell, RegionAssembler

log = logging.getLogger(__name__)

# The decoded input is kept only up to this size (a 12 Mpx photo is 36 MB at 8 bits); a bigger
# one is decoded again for each preview rather than held.
KEEP_INPUT_BYTES = 192 << 20


@dataclass
class _Kept:
    path: Path
    version: Hashable
    frame: np.ndarray


@dataclass(frozen=True)
class WholePreview:
    """A non-tiled family's preview: the products of one run, and what they were made from."""

    key: Hashable
    products: tuple[Product, ...]


class PreviewState:
    """What the engine keeps between previews, on its own thread."""

    def __init__(self, tile_limit: int = DEFAULT_LIMIT) -> None:
        self.tiles = TileCache(tile_limit)
        self._kept: _Kept | None = None
        self._folder: Path | None = None
        self.whole: WholePreview | None = None
        self.running: str | None = None  # the preview request in progress

    @property
    def held_bytes(self) -> int:
        kept = self._kept.frame.nbytes if self._kept is not None else 0
        return kept + self.tiles.nbytes

    def frame(
        self, path: Path, max_pixels: int, check: Callable[[], None] | None
    ) -> tuple[np.ndarray, float]:
        """The first frame of `path` as the full job decodes it, kept for the next preview.
        Returns it with the seconds spent decoding now (0 when it was kept)."""
        try:
            version = file_version(path)
        except OSError as e:
            raise BadInputError(f"{path.name}: the file cannot be read ({e.strerror}).") from e
        if self._kept is not None and self._kept.version == version:
            return self._kept.frame, 0.0
        self.release_input()
        start = time.perf_counter()
        image = load_image(path, max_pixels, check, stream=True)
        frame = np.asarray(image.frames[0])
        del image
        seconds = time.perf_counter() - start
        if frame.nbytes <= KEEP_INPUT_BYTES:
            self._kept = _Kept(Path(path).resolve(), version, frame)
        return frame, seconds

    def release_input(self) -> None:
        self._kept = None

    def job_started(self, request_id: str, inputs: tuple[Path, ...]) -> None:
        """A full job of the image being previewed: its kept pixels go (the job decodes its
        own, streaming). Jobs of other images (a batch, a speed measurement) leave them."""
        kept = self._kept
        if request_id == self.running or kept is None:
            return
        if any(Path(p).resolve() == kept.path for p in inputs):
            self.release_input()

    def folder(self) -> Path:
        if self._folder is None or not self._folder.is_dir():
            self._folder = Path(tempfile.mkdtemp(prefix="tessera-preview-"))
        return self._folder

    def drop_whole(self) -> None:
        if self.whole is not None:
            for product in self.whole.products:
                product.path.unlink(missing_ok=True)
        self.whole = None

    def clear(self) -> None:
        """Unload: everything a preview kept goes, the preview folder too."""
        self.release_input()
        self.tiles.clear()
        self.drop_whole()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


@dataclass(frozen=True)
class UpscaleOutcome:
    size: tuple[int, int]
    scale: int
    tiles_run: int
    tiles_cached: int
    tiles_needed: int
    truncated: bool
    first_pixels_at: float | None  # perf_counter when the first cell was sent


def preview_upscale(
    op: Upscale,
    frame: np.ndarray,
    ctx: RunContext,
    request: PreviewRequest,
    send: Callable[[PreviewPatch], None],
) -> UpscaleOutcome:
    """Run the tiles reaching `request.region` and send the region's final pixels, cell by
    cell as they become final. `ctx.tiles` is the engine's tile cache for this input."""
    tiles = ctx.tiles
    if tiles is None:
        raise RuntimeError("a preview needs the engine's tile cache")
    c = ctx.spec.contract
    scale = c.scale or 1
    h, w = frame.shape[:2]
    tile = auto_tile(ctx, op.config) if request.job.tile is None else int(request.job.tile)
    prep = prepare_frame(frame, c, tile, tile_overlap(ctx))
    plan = prep.plan
    size = (w * scale, h * scale)
    wanted = (request.region or Region(0, 0, w, h)).scaled(scale).clipped(*size)
    if wanted.empty:
        return UpscaleOutcome(size, scale, 0, 0, 0, False, None)
    region = Cell(wanted.y0, wanted.y1, wanted.x0, wanted.x1)
    asm = RegionAssembler(plan, scale, prep.widths, frame.dtype, region)
    cache = tiles.cache
    key = tiles.key(0, plan, prep.widths)
    cache.keep_only(key)  # another input, model or plan: its tiles are of no use now
    needed = asm.needed()
    cap = cache.capacity(plan, scale, prep.widths)
    if request.max_tiles is not None:
        cap = min(cap, request.max_tiles)
    chosen = needed[: max(cap, 1)]
    cache.pin(key, (t.index for t in chosen))
    first: list[float] = []

    def flush() -> None:
        for cell in asm.ready():
            pixels = asm.render(cell)
            if not first:
                first.append(time.perf_counter())
            send(
                PreviewPatch(
                    request.id,
                    request.generation,
                    Region(cell.x0, cell.y0, cell.x1, cell.y1),
                    pixels,
                    size,
                    scale,
                )
            )

    try:
        to_run = []
        cached = 0
        for t in chosen:
            found = cache.get(key, t.index)
            if found is None:
                to_run.append(t)
            else:
                asm.add(t, found)
                cached += 1
        flush()  # what earlier previews made is drawn at once
        passes = len(prep.passes)
        ctx.start_frame(0, 1, len(to_run) * passes)
        buffer = _tensor(c, plan.tile_h * scale, plan.tile_w * scale, output=True)
        for t in to_run:
            # Each pass's output is copied out of the one result buffer before the next run.
            outputs = tuple(
                np.array(run_tile(prep, t, p, c, ctx, buffer), dtype=np.float32)
                for p in range(passes)
            )
            if not cache.put(key, t.index, outputs):
                log.warning("preview tile %d did not fit in the tile cache", t.index)
            asm.add(t, outputs)
            flush()
    finally:
        cache.unpin()
    return UpscaleOutcome(
        size,
        scale,
        len(to_run),
        cached,
        len(needed),
        len(chosen) < len(needed),
        first[0] if first else None,
    )


def tile_source(state: PreviewState, source: Path, model: Hashable) -> TileSource | None:
    """The tile cache as a full job's input sees it; None where the file cannot be stat'ed
    (the job's own reading says why)."""
    try:
        return TileSource(state.tiles, file_version(source), model)
    except OSError:
        return None
