"""Writing an operation's products: one rule for single frames, animations and sequences.

- one frame: one file per product, `<stem>-<suffix>.<ext>`;
- one animated or multi-page file: one multi-frame file per product with the input's frame
  durations and loop count, in the input's container when it holds the product losslessly
  (APNG, lossless WebP, multi-page TIFF). GIF has a 256-colour palette and on/off
  transparency, so a GIF's products are APNG. 16-bit products are always PNG (APNG), float
  products always (multi-page) TIFF;
- a sequence (a folder, or several files run with `sequence`): one file per frame and product,
  numbered from 1, `<stem>-<suffix>-0001.<ext>`, where stem is the first frame's;
- products with no multi-frame form (PLY, JSON) are numbered per frame whenever there are
  several frames.
Products are written only after every frame ran, so a cancelled or failed input leaves none.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
from PIL import Image

from engine.io.image import DecodedImage, ImageMeta
from engine.io.publish import atomic_output, write_bytes
from engine.io.resize import resize_frame
from engine.io.writing import write_image
from engine.operations.base import RunContext, output_name
from engine.options import OutputFormat, OutputOptions
from engine.requests import Product, ProductKind

P = ParamSpec("P")
R = TypeVar("R")


def from_several_files(ctx: RunContext) -> bool:
    """True when this input's frames come from several files (a folder or a `sequence`),
    rather than from one animated or multi-page file."""
    return ctx.sequence


def data_meta(image: DecodedImage) -> ImageMeta:
    """Meta for a data product (mask, depth, normals): the input's timing and dpi, but no colour
    profile or EXIF, which describe the photo's colours, not these values."""
    return replace(image.meta, icc_profile=None, exif=None)


def _animated_ext(image: DecodedImage) -> str:
    # GIF is left out on purpose: a 256-colour palette and on/off transparency lose data.
    return {"WEBP": ".webp", "TIFF": ".tif"}.get(image.meta.format, ".png")


def _timed_io(func: Callable[P, R]) -> Callable[P, R]:
    """Count a writer's time in `ctx.io_seconds` (its first argument is the RunContext)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        ctx = args[0]
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            if isinstance(ctx, RunContext):
                ctx.io_seconds += time.perf_counter() - start

    return wrapper


@_timed_io
def write_frames(
    ctx: RunContext,
    image: DecodedImage,
    suffix: str,
    frames: Sequence[np.ndarray],
    kind: ProductKind,
    meta: ImageMeta,
    text: Mapping[str, str] | None = None,
) -> list[Product]:
    """Write an image product (uint8/uint16 frames) by the module's multi-frame rule; `text`
    goes into PNG text chunks. The main image product takes the request's output step."""
    output = ctx.request.output if kind is ProductKind.IMAGE else OutputOptions()
    frames, suffix = _output_size(output, image, frames, suffix)
    still = output.format.suffix  # one frame per file
    quality = output.quality if output.format.lossy else None
    if len(frames) == 1:
        path = write_image(
            ctx.out_dir / output_name(image.source, suffix, still),
            frames[0],
            meta,
            text=text,
            quality=quality,
        )
        return [Product(path, kind, image.source)]
    if from_several_files(ctx):
        return [
            Product(
                write_image(
                    ctx.out_dir / output_name(image.source, f"{suffix}-{i + 1:04d}", still),
                    frame,
                    meta,
                    text=text,
                    quality=quality,
                ),
                kind,
                image.source,
            )
            for i, frame in enumerate(frames)
        ]
    sixteen = frames[0].dtype == np.uint16
    ext = ".png" if sixteen or text else _animated_ext(image)
    if output.format is OutputFormat.WEBP and not text:
        ext = ".webp"  # JPEG holds one frame: an animation asked as JPEG stays lossless
    path = write_image(
        ctx.out_dir / output_name(image.source, suffix, ext),
        list(frames),
        meta,
        text=text,
        quality=quality if ext == ".webp" else None,
    )
    return [Product(path, kind, image.source, frames=len(frames))]


def _output_size(
    output: OutputOptions, image: DecodedImage, frames: Sequence[np.ndarray], suffix: str
) -> tuple[Sequence[np.ndarray], str]:
    """The frames at the output step's target size (a factor of the input or a width), and
    the name's suffix saying so: `photo-realesrgan-x4plus-x2.jpg`."""
    target = output.target_size(*image.size)
    if target is None:
        return frames, suffix
    return [resize_frame(f, *target) for f in frames], f"{suffix}-{output.size_tag()}"


def _write_tiff(path: Path, frames: Sequence[np.ndarray]) -> Path:
    pages = [Image.fromarray(np.ascontiguousarray(f, dtype=np.float32)) for f in frames]
    options: dict[str, Any] = {"compression": "tiff_adobe_deflate"}
    if len(pages) > 1:
        options.update(save_all=True, append_images=pages[1:])
    with atomic_output(path) as (temp, publish):
        pages[0].save(temp, format="TIFF", **options)
        return publish()


@_timed_io
def write_float_tiff(
    ctx: RunContext,
    image: DecodedImage,
    suffix: str,
    frames: Sequence[np.ndarray],
    kind: ProductKind,
) -> list[Product]:
    """Float32 grey TIFF(s) with the raw values (multi-page for an animated input)."""
    if len(frames) == 1 or not from_several_files(ctx):
        path = _write_tiff(ctx.out_dir / output_name(image.source, suffix, ".tif"), frames)
        return [Product(path, kind, image.source, frames=len(frames))]
    return [
        Product(
            _write_tiff(
                ctx.out_dir / output_name(image.source, f"{suffix}-{i + 1:04d}", ".tif"), [f]
            ),
            kind,
            image.source,
        )
        for i, f in enumerate(frames)
    ]


@_timed_io
def write_per_frame(
    ctx: RunContext,
    image: DecodedImage,
    suffix: str,
    ext: str,
    payload: Callable[[int], bytes],
    kind: ProductKind,
) -> list[Product]:
    """Products with no multi-frame form (PLY, JSON), made one frame at a time by `payload`
    so only one is held in memory; numbered whenever there are several frames."""
    count = len(image.frames)
    products = []
    for i in range(count):
        name = suffix if count == 1 else f"{suffix}-{i + 1:04d}"
        path = write_bytes(ctx.out_dir / output_name(image.source, name, ext), payload(i))
        products.append(Product(path, kind, image.source))
    return products
