"""16-bit colour and grey+alpha PNG, which Pillow would reduce to 8 bits (`engine.io.png`)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from PIL import Image

from engine.io.frames import apply_orientation, read_only, unify_frames
from engine.io.image import DecodedImage, ImageMeta
from engine.io.metadata import clean_exif, exif_orientation, parse_dpi
from engine.io.opening import damaged
from engine.io.png import MODES16, PngError, decode_png


def decode_png16(path: Path, data: bytes, max_pixels: int) -> DecodedImage:
    try:
        png, frames, delays = decode_png(data, max_pixels)
    except PngError as e:
        if e.truncated:
            raise damaged(path, EOFError(str(e))) from e
        raise damaged(path, e) from e
    except (zlib.error, ValueError, struct.error) as e:
        raise damaged(path, e) from e
    exif: Image.Exif | None = None
    if png.exif:
        exif = Image.Exif()
        try:
            exif.load(png.exif)
        except Exception:
            exif = None  # unreadable EXIF is dropped; the pixels are still fine
    orientation = exif_orientation(exif)
    upright = tuple(apply_orientation(f, orientation) for f in unify_frames(path, frames))
    animated = len(upright) > 1
    meta = ImageMeta(
        format="PNG",
        mode=MODES16[png.colour_type],
        bit_depth=16,
        has_alpha=upright[0].shape[2] in (2, 4),
        icc_profile=png.icc,
        exif=clean_exif(exif, tiff=False),
        durations=tuple(delays) if animated else (),
        loop=png.num_plays if animated else None,
        dpi=parse_dpi(png.dpi, swap=orientation >= 5),
    )
    return DecodedImage(source=path, frames=read_only(upright), meta=meta)
