"""What crosses threads for a preview: the request for a region, its pixels, and its outcome.

A preview is the job the person would run (`job`: operation, model, device, runtime, tile,
options; its first input is the image shown) asked for one region of the image: the part the
viewer shows. It runs on the engine thread like any job — one session per model, its last run
shrinks (M2), a cancelled one hands back (M10) — and its pixels are those of the full
product. How it previews is the operation's (`OperationBase.preview`): upscale runs the full
job's own tile plan on the tiles in view and blends exactly as the job does; the others run
their whole job once. Frozen dataclasses and enums, like engine/requests.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.requests import OperationRequest, Product


@dataclass(frozen=True)
class Region:
    """A half-open rectangle [x0, x1) × [y0, y1) in pixels."""

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return max(0, self.x1 - self.x0)

    @property
    def height(self) -> int:
        return max(0, self.y1 - self.y0)

    @property
    def empty(self) -> bool:
        return self.width == 0 or self.height == 0

    def scaled(self, factor: int) -> Region:
        return Region(self.x0 * factor, self.y0 * factor, self.x1 * factor, self.y1 * factor)

    def clipped(self, width: int, height: int) -> Region:
        return Region(
            min(max(self.x0, 0), width),
            min(max(self.y0, 0), height),
            min(max(self.x1, 0), width),
            min(max(self.y1, 0), height),
        )

    def intersects(self, other: Region) -> bool:
        return (
            self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1
        )


@dataclass(frozen=True)
class PreviewRequest:
    """Preview `job` on the part `region` of its first input (in the input's pixels; None:
    the whole image). `generation` is the asker's counter: only the newest is drawn.
    `max_tiles` caps the tiles one preview runs (the engine also caps them at what its tile
    cache holds); the centre of the region comes first. `frame`: which frame of a clip is
    previewed (the one the viewer shows); images have one."""

    job: OperationRequest
    region: Region | None = None
    generation: int = 0
    max_tiles: int | None = None
    frame: int = 0

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def source(self) -> Path:
        return self.job.inputs[0]


@dataclass(frozen=True)
class PreviewPatch:
    """Final pixels of the product: `pixels` (H×W×C, uint8 or uint16, the product's own
    channels) go at `region` of the product, whose whole size is `size` (width, height)."""

    request_id: str
    generation: int
    region: Region
    pixels: Any  # numpy.ndarray; never written after it is sent
    size: tuple[int, int]
    scale: int


@dataclass(frozen=True)
class PreviewResult:
    """How a preview ended. Upscale: tiles run now, taken from the cache, and how many the
    region needed (`truncated`: more than one preview may run — the centre was shown).
    The non-tiled families: `products`, the whole job's files in the engine's preview folder.
    `held_bytes`: what the preview keeps for the next one and the full job (decoded input and
    tile cache), handed back when the input or model changes, after the full job, on Unload."""

    request_id: str
    generation: int
    size: tuple[int, int] = (0, 0)
    scale: int = 1
    tiles_run: int = 0
    tiles_cached: int = 0
    tiles_needed: int = 0
    truncated: bool = False
    products: tuple[Product, ...] = ()
    runs: int = 0
    shrinks: int = 0
    sessions_created: int = 0
    sessions_reused: int = 0
    held_bytes: int = 0
    timings: dict[str, float] = field(default_factory=dict)
