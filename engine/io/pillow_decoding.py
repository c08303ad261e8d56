"""Decoding with Pillow: every frame upright in one channel layout, or streamed frame by frame."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from engine.errors import BadInputError
from engine.io.frames import apply_orientation, frame_pixels, read_only, unify_frames
from engine.io.image import ANIMATED_FORMATS, DecodedImage, ImageMeta, LazyFrames
from engine.io.metadata import clean_exif, exif_orientation, is_reduced_page, parse_dpi, replace_icc
from engine.io.opening import check_same_size, format_name
from engine.io.streamed import StreamedFrames


def decode_pillow(
    path: Path,
    im: Image.Image,
    count: int,
    check: Callable[[], None] | None = None,
    stream: bool = False,
) -> DecodedImage:
    """Every frame, upright and in one channel layout. With `stream` and several frames, only
    what decides the layout is kept from this pass: the frames are decoded again one at a time
    as they are used (`StreamedFrames`), so memory does not grow with their number. `check` is
    called between frames and may raise to stop (a cancel)."""
    fmt = format_name(im)
    mode = im.mode
    icc = im.info.get("icc_profile") or None
    loop = im.info.get("loop")
    dpi_info = im.info.get("dpi")
    frames: list[np.ndarray] = []
    kept: list[int] = []
    layouts: list[np.ndarray] = []  # with `stream`: a 1×1 stand-in of each frame's layout
    first_size: tuple[int, ...] | None = None
    durations: list[int] = []
    exif: Image.Exif | None = None
    stream = stream and count > 1
    page_size = im.size
    for index in range(count):
        if check is not None:
            check()
        if count > 1:
            im.seek(index)
        if index > 0:
            if fmt == "TIFF" and is_reduced_page(im):
                continue
            # Only page 1 was checked against the pixel limit: a later page of another size
            # (a 17000² page 2 in a small TIFF) is refused from its header, before decoding.
            check_same_size(path, len(kept) + 1, im.size, page_size)
        im.load()
        if index == 0:
            exif = im.getexif()
        pixels = frame_pixels(path, im)
        kept.append(index)
        if stream:
            first_size = first_size or pixels.shape[:2]
            if pixels.shape[:2] != first_size:
                raise BadInputError(
                    f"{path.name}: frame {len(kept)} is {pixels.shape[1]}×{pixels.shape[0]} "
                    f"pixels but frame 1 is {first_size[1]}×{first_size[0]}; all frames must "
                    "have the same size."
                )
            layouts.append(np.zeros((1, 1, pixels.shape[2]), pixels.dtype))
            del pixels
        else:
            frames.append(pixels)
        duration = im.info.get("duration")
        durations.append(max(0, round(float(duration))) if duration is not None else 0)
    orientation = exif_orientation(exif)
    if stream:
        size = (im.size[1], im.size[0]) if orientation < 5 else (im.size[0], im.size[1])
        first = unify_frames(path, layouts)[0]
        shape = (*size, first.shape[2])
        unified: Sequence[np.ndarray] = StreamedFrames(path, kept, shape, first.dtype, orientation)
    else:
        unified = read_only(
            tuple(apply_orientation(f, orientation) for f in unify_frames(path, frames))
        )
    animated = len(unified) > 1 and fmt in ANIMATED_FORMATS
    first_shape, first_dtype = shape_dtype(unified)
    meta = ImageMeta(
        format=fmt,
        mode=mode,
        bit_depth=16 if first_dtype == np.uint16 else 8,
        has_alpha=first_shape[2] in (2, 4),
        icc_profile=bytes(icc) if icc else None,
        exif=clean_exif(exif, tiff=fmt == "TIFF"),
        durations=tuple(durations) if animated else (),
        loop=int(loop) if animated and isinstance(loop, int) else None,
        dpi=parse_dpi(dpi_info, swap=orientation >= 5),
    )
    if mode == "CMYK":  # the pixels are sRGB now; a CMYK profile would no longer describe them
        meta = replace_icc(meta, None)
    return DecodedImage(source=path, frames=unified, meta=meta)


def shape_dtype(frames: Sequence[np.ndarray]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if isinstance(frames, LazyFrames):
        return frames.shape, frames.dtype
    return frames[0].shape, frames[0].dtype
