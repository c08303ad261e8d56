"""The preview's figures (issue 14): pan → first pixels, and preview against the product.

The view is 600×440 at 100 % of the product — how an upscale is judged — over a 12 Mpx JPEG
photo (4000×3000; 1600×1200 with `--quick`), with animevideov3 ×2 where it is installed. A
pan moves the view to a part no earlier preview touched, so every figure includes a model run:
- first preview: the photo decoded (then kept), the first tile run, its final cell sent;
- pan → first pixels: the median over the pans (decoded input kept, nothing cached);
- pan → the whole view: every tile reaching the view run and sent;
- preview vs final: a region previewed with the default (`auto`) tiles against the same
  region of the full product made by another engine: max |diff| over the region's pixels.
The app adds its 40 ms pan debounce and one drawing to the first figures. Nothing is asserted.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
from PIL import Image

from engine.api import Engine
from engine.bench.table import Row, Table
from engine.previews import PreviewPatch, PreviewRequest, Region
from engine.requests import Operation, OperationRequest
from engine.settings import EngineSettings

VIEW = (600, 440)  # the view in product pixels


def photo_jpeg(path: Path, width: int, height: int, seed: int = 7) -> Path:
    """A photo-like JPEG: smooth gradients, texture and noise (decoding costs what a camera
    JPEG of that size costs)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [
            0.5 + 0.4 * np.sin(x / 97 + y / 151),
            0.5 + 0.4 * np.cos(y / 73 - x / 211),
            0.5 + 0.3 * np.sin((x + y) / 37),
        ],
        axis=2,
    )
    pixels = np.clip(base * 255 + rng.normal(0, 9, base.shape), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, quality=90)
    return path


class _Clock:
    """When the first patch of a preview arrived, and how many pixels came."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None
        self.patches: list[PreviewPatch] = []

    def __call__(self, patch: PreviewPatch) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        self.patches.append(patch)

    @property
    def first_ms(self) -> float:
        return ((self.first or float("nan")) - self.start) * 1000


def measure_preview(
    table: Table, settings: EngineSettings, model: Path, label: str, work: Path, quick: bool
) -> None:
    width, height = (1600, 1200) if quick else (4000, 3000)
    image = photo_jpeg(work / "photo-12mpx.jpg", width, height)
    engine = Engine(settings)
    job = OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=work / "pv")
    # Load the session and run the tile shape once on another photo: in the app the model is
    # loaded and warm when a photo is opened and panned (M1); loading is the cold-load row's
    # figure, and ORT's first run of a new input shape costs about one more run.
    warm = photo_jpeg(work / "warm.jpg", 320, 320)
    scale = engine.preview(
        PreviewRequest(OperationRequest(Operation.UPSCALE, str(model), (warm,)), Region(0, 0, 8, 8))
    ).scale
    vw, vh = max(1, VIEW[0] // scale), max(1, VIEW[1] // scale)  # the view in photo pixels

    def view_at(cx: int, cy: int) -> Region:
        x0 = min(max(0, cx - vw // 2), width - vw)
        y0 = min(max(0, cy - vh // 2), height - vh)
        return Region(x0, y0, x0 + vw, y0 + vh)

    clock = _Clock()
    first = engine.preview(PreviewRequest(job, view_at(width // 2, height // 2)), patch=clock)
    table.add(
        Row(
            f"preview: first pixels, {VIEW[0]}×{VIEW[1]} view of a "
            f"{width * height / 1e6:.0f} Mpx JPEG, {label}",
            clock.first_ms,
            "ms",
            "",
            None,
            f"photo decoded in {first.timings.get('decode_s', 0) * 1000:.0f} ms (then kept); "
            f"{first.tiles_needed} tiles reach the view",
        )
    )
    # Pans: each to a part of the photo no preview has touched yet (a fresh model run).
    spots = [
        (width // 4, height // 4),
        (3 * width // 4, height // 4),
        (width // 4, 3 * height // 4),
    ]
    spots += [(3 * width // 4, 3 * height // 4), (width // 2, height // 6)]
    firsts: list[float] = []
    wholes: list[float] = []
    tiles = 0
    decoded_again = 0
    for cx, cy in spots[: 2 if quick else 5]:
        clock = _Clock()
        result = engine.preview(PreviewRequest(job, view_at(cx, cy)), patch=clock)
        firsts.append(clock.first_ms)
        wholes.append(result.timings["total_s"] * 1000)
        tiles = max(tiles, result.tiles_run)
        decoded_again += result.timings.get("decode_s", 0.0) > 0
    pan_ms = statistics.median(firsts)
    table.add(
        Row(
            "preview: pan → first pixels (decoded photo kept)",
            pan_ms,
            "ms",
            "~1000 ms",
            pan_ms <= 1000,
            f"median of {len(firsts)} pans ({min(firsts):.0f}…{max(firsts):.0f} ms); "
            f"the first of up to {tiles} tiles, centre first, {label}; "
            f"photo decoded again {decoded_again} times",
        )
    )
    table.add(
        Row(
            "preview: pan → the whole view refined",
            statistics.median(wholes),
            "ms",
            "",
            None,
            f"median of {len(wholes)}; held for the next pan and the job: "
            f"{engine.previews.held_bytes >> 20} MiB (photo + tile cache, cap "
            f"{engine.previews.tiles.limit >> 20} MiB)",
        )
    )
    if not quick:
        # The same pans at 128-px tiles: the figure follows the tile size `auto` chooses.
        small = OperationRequest(
            Operation.UPSCALE, str(model), (image,), output_dir=work / "pv", tile=128
        )
        engine.preview(PreviewRequest(small, view_at(width // 2, height // 2)))
        small_firsts = []
        for cx, cy in spots[:3]:
            clock = _Clock()
            engine.preview(PreviewRequest(small, view_at(cx + vw, cy + vh)), patch=clock)
            small_firsts.append(clock.first_ms)
        table.add(
            Row(
                "preview: pan → first pixels with 128-px tiles",
                statistics.median(small_firsts),
                "ms",
                "",
                None,
                f"median of {len(small_firsts)}; the tile comes from `auto` (shared with the job)",
            )
        )
    engine.unload_all()
    measure_identity(table, settings, model, label, work, quick)


def measure_identity(
    table: Table, settings: EngineSettings, model: Path, label: str, work: Path, quick: bool
) -> None:
    """Preview vs final product with the default tiles: the full job after the preview, by the
    same engine as in the app (it keeps the preview's plan; one with no preview before it may
    run the whole image at once on the CPU, within the tiling rule's 1/255)."""
    width, height = (320, 240) if quick else (640, 480)
    image = photo_jpeg(work / "identity.jpg", width, height, seed=3)
    job = OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=work / "id")
    clock = _Clock()
    engine = Engine(settings)
    region = Region(width // 5, height // 4, width - width // 6, height - height // 5)
    preview = engine.preview(PreviewRequest(job, region), patch=clock)
    full = engine.run(job)
    engine.unload_all()
    with Image.open(full.products[0].path) as im:
        product = np.asarray(im).astype(np.int32)
    worst = 0
    count = 0
    for patch in clock.patches:
        r = patch.region
        got = np.asarray(patch.pixels).astype(np.int32)
        worst = max(worst, int(np.abs(got - product[r.y0 : r.y1, r.x0 : r.x1]).max()))
        count += r.width * r.height
    wanted = region.scaled(preview.scale)
    table.add(
        Row(
            "preview vs final product: max |diff|, upscale, default tiles",
            worst,
            "/255",
            "= 0",
            worst == 0 and count == wanted.width * wanted.height,
            f"{count} pixels of {width}×{height} ×{preview.scale}, {label}, tile {full.tile}, "
            f"{preview.tiles_run} of {full.runs} tiles previewed",
        )
    )
    for p in full.products:
        p.path.unlink(missing_ok=True)
