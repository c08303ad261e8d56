"""What travels with the pixels: EXIF orientation and its clean copy, DPI, ICC, TIFF page kinds."""

from __future__ import annotations

from PIL import Image

from engine.io.image import ImageMeta

ORIENTATION = 0x0112
# TIFF image-structure tags: Pillow reports them as "EXIF" of a TIFF, but copied into another
# file they would describe the wrong pixels.
TIFF_STRUCTURE_TAGS = frozenset(
    {254, 255, 256, 257, 258, 259, 262, 266, 273, 277, 278, 279, 284}
    | {317, 320, 322, 323, 324, 325, 338, 339, 340, 341, 34675}
)


def exif_orientation(exif: Image.Exif | None) -> int:
    if exif is None:
        return 1
    value = exif.get(ORIENTATION, 1)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def cheap_exif(im: Image.Image) -> Image.Exif | None:
    """EXIF that is available without decoding pixels (a PNG's eXIf may follow the data)."""
    if im.format == "PNG" and "exif" not in im.info:
        return None
    try:
        return im.getexif()
    except Exception:
        return None


def clean_exif(exif: Image.Exif | None, tiff: bool) -> bytes | None:
    if exif is None or len(exif) == 0:
        return None
    if tiff:
        for tag in TIFF_STRUCTURE_TAGS:
            exif.pop(tag, None)
        if len(exif) == 0:
            return None
    if ORIENTATION in exif:
        exif[ORIENTATION] = 1
    try:
        return exif.tobytes()
    except Exception:
        return None  # EXIF Pillow cannot re-serialise is dropped rather than failing the image


def parse_dpi(value: object, swap: bool) -> tuple[float, float] | None:
    if not isinstance(value, tuple) or len(value) != 2:
        return None
    try:
        x, y = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        return None
    if not (x > 0 and y > 0):
        return None
    return (y, x) if swap else (x, y)


def is_reduced_page(im: Image.Image) -> bool:
    """A TIFF thumbnail / reduced-resolution page (NewSubfileType bit 0), not a real page."""
    tags = getattr(im, "tag_v2", None)
    if tags is None:
        return False
    value = tags.get(254, 0)
    return isinstance(value, int) and bool(value & 1)


def replace_icc(meta: ImageMeta, icc: bytes | None) -> ImageMeta:
    return ImageMeta(
        format=meta.format,
        mode=meta.mode,
        bit_depth=meta.bit_depth,
        has_alpha=meta.has_alpha,
        icc_profile=icc,
        exif=meta.exif,
        durations=meta.durations,
        loop=meta.loop,
        dpi=meta.dpi,
    )
