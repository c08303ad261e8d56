"""Decode and encode images: EXIF orientation, ICC, 8/16-bit, alpha, frames; atomic writes.

Every decoded frame is a numpy array H×W×C (C = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA) of
uint8 or uint16, upright, with every frame of an animation composited to the full canvas.
Pillow decodes 16-bit colour PNGs only to 8 bits, so those are decoded here (zlib + numpy
unfiltering, in `engine.png`), and every PNG is encoded there too. Every output goes through
`engine.publish.atomic_output` (never overwrite, never half written).
"""

from __future__ import annotations

import io
import os
import re
import stat
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageCms, PngImagePlugin, UnidentifiedImageError

from engine.errors import BadInputError, ResourceError
from engine.png import MODES16, PngError, decode_png, encode_png, key_alpha, png_header
from engine.publish import atomic_output

# Our own max_pixels check (before any decoding) replaces Pillow's bomb check, whose warning
# would otherwise be raised as an error under warnings-as-errors and whose limit is not ours.
Image.MAX_IMAGE_PIXELS = None

__all__ = [
    "DecodedImage",
    "ImageMeta",
    "from_float",
    "image_size",
    "list_sequence",
    "load_image",
    "load_sequence",
    "to_float",
    "write_image",
]

# Formats Tessera reads; Pillow knows more (EPS, PSD, ...) but those are refused by name.
_READ_FORMATS = (
    "PNG",
    "JPEG",  # also yields MPO (camera JPEGs with extra pictures)
    "GIF",
    "WEBP",
    "TIFF",
    "BMP",
    "AVIF",
    "JPEG2000",
    "TGA",
    "PPM",
    "ICO",
    "QOI",
)
_SUPPORTED_TEXT = "PNG, JPEG, GIF, WebP, TIFF, BMP, AVIF, JPEG 2000, TGA, PPM, ICO, QOI"
_IMAGE_SUFFIXES = frozenset(
    {
        ".png",
        ".apng",
        ".jpg",
        ".jpeg",
        ".jpe",
        ".jfif",
        ".gif",
        ".webp",
        ".tif",
        ".tiff",
        ".bmp",
        ".avif",
        ".jp2",
        ".j2k",
        ".tga",
        ".ppm",
        ".pgm",
        ".pbm",
        ".pnm",
        ".ico",
        ".qoi",
    }
)
_WRITE_FORMATS = {
    ".png": "PNG",
    ".apng": "PNG",
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".gif": "GIF",
    ".webp": "WEBP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".bmp": "BMP",
    ".avif": "AVIF",
}
_ANIMATED_FORMATS = frozenset({"PNG", "GIF", "WEBP", "AVIF"})
_MULTI_FRAME_WRITE = frozenset({"PNG", "GIF", "WEBP", "TIFF", "AVIF"})
_ORIENTATION = 0x0112
_DEFAULT_DURATION_MS = 100
# TIFF image-structure tags: Pillow reports them as "EXIF" of a TIFF, but copied into another
# file they would describe the wrong pixels.
_TIFF_STRUCTURE_TAGS = frozenset(
    {254, 255, 256, 257, 258, 259, 262, 266, 273, 277, 278, 279, 284}
    | {317, 320, 322, 323, 324, 325, 338, 339, 340, 341, 34675}
)


@dataclass(frozen=True)
class ImageMeta:
    format: str  # "PNG", "JPEG", "GIF", "WEBP", "TIFF", ...
    mode: str  # the PIL mode of the file, before any conversion
    bit_depth: int  # 8 or 16
    has_alpha: bool
    icc_profile: bytes | None  # None: sRGB (also after a CMYK file was converted to sRGB)
    exif: bytes | None  # "Exif\0\0" + TIFF data, Orientation reset to 1 (pixels are upright)
    durations: tuple[int, ...] = ()  # ms per frame of an animation; () for stills
    loop: int | None = None  # 0 = forever; None = not stated by the file
    dpi: tuple[float, float] | None = None


@dataclass(frozen=True)
class DecodedImage:
    source: Path
    frames: tuple[np.ndarray, ...]  # each H×W×C, uint8/uint16, same shape and dtype; read-only
    meta: ImageMeta

    @property
    def is_animated(self) -> bool:
        return len(self.frames) > 1

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of every frame."""
        height, width = self.frames[0].shape[:2]
        return width, height


# ---------------------------------------------------------------------------------------------
# Conversions


def to_float(frame: np.ndarray) -> np.ndarray:
    """uint8 / uint16 → float32 in 0…1."""
    if frame.dtype == np.uint8:
        return frame.astype(np.float32) / np.float32(255.0)
    if frame.dtype == np.uint16:
        return frame.astype(np.float32) / np.float32(65535.0)
    raise ValueError(f"to_float expects uint8 or uint16, got {frame.dtype}")


def from_float(frame: np.ndarray, bit_depth: int) -> np.ndarray:
    """Float 0…1 → uint8 (bit_depth 8) or uint16 (16): clipped and rounded; NaN becomes 0."""
    dtype: type[np.unsignedinteger]
    if bit_depth == 8:
        top, dtype = 255.0, np.uint8
    elif bit_depth == 16:
        top, dtype = 65535.0, np.uint16
    else:
        raise ValueError(f"bit_depth must be 8 or 16, got {bit_depth}")
    values = np.nan_to_num(np.asarray(frame, dtype=np.float32), nan=0.0, posinf=1.0, neginf=0.0)
    return np.rint(np.clip(values, 0.0, 1.0) * np.float32(top)).astype(dtype)


def _to_8bit(frame: np.ndarray) -> np.ndarray:
    if frame.dtype == np.uint8:
        return frame
    # Exact rounding of v * 255 / 65535 in integers.
    return ((frame.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


def _to_16bit(frame: np.ndarray) -> np.ndarray:
    if frame.dtype == np.uint16:
        return frame
    return frame.astype(np.uint16) * np.uint16(257)


# ---------------------------------------------------------------------------------------------
# Opening and checking inputs


def _fmt_pixels(count: int) -> str:
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f} gigapixels"
    if count >= 1_000_000:
        value = count / 1e6
        return f"{value:.1f} megapixels" if value < 10 else f"{value:.0f} megapixels"
    return f"{count} pixels"


def _check_limit(path: Path, width: int, height: int, frames: int, max_pixels: int) -> None:
    total = width * height * frames
    if total <= max_pixels:
        return
    size = f"{width}×{height} pixels" + (f" × {frames} frames" if frames > 1 else "")
    raise BadInputError(
        f"{path.name}: the image is {size} ({_fmt_pixels(total)}); the limit is "
        f"{_fmt_pixels(max_pixels)}. Reduce the image or raise the pixel limit in the settings."
    )


def _read_error(path: Path, exc: OSError) -> BadInputError:
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return BadInputError(f"{path.name}: the file does not exist (looked in {path.parent}).")
    if isinstance(exc, PermissionError):
        return BadInputError(
            f"{path.name}: permission denied; Tessera may not read this file. Check its permissions."
        )
    if isinstance(exc, IsADirectoryError):
        return BadInputError(f"{path.name}: this is a folder, not an image file.")
    reason = exc.strerror or str(exc)
    return BadInputError(f"{path.name}: the file cannot be read ({reason}).")


def _check_input_file(path: Path) -> None:
    try:
        info = path.stat()
    except OSError as e:
        raise _read_error(path, e) from e
    if stat.S_ISDIR(info.st_mode):
        raise BadInputError(f"{path.name}: this is a folder, not an image file.")
    if not stat.S_ISREG(info.st_mode):
        raise BadInputError(f"{path.name}: this is not a regular file.")
    if info.st_size == 0:
        raise BadInputError(f"{path.name}: the file is empty (0 bytes).")


def _sniff_unsupported(head: bytes) -> str | None:
    """Name of a known image format Pillow cannot read, from the first bytes of a file."""
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"):
            return "HEIC/HEIF"
        if brand in (b"crx ",):
            return "Canon CR3 raw"
    if head.startswith((b"\xff\x0a", b"\x00\x00\x00\x0cJXL ")):
        return "JPEG XL"
    if head.startswith(b"%PDF"):
        return "PDF"
    if head.startswith(b"v/1\x01"):
        return "OpenEXR"
    if head.startswith((b"#?RADIANCE", b"#?RGBE")):
        return "Radiance HDR"
    if head.startswith(b"8BPS"):
        return "Photoshop (PSD)"
    text = head.lstrip().lower()
    if text.startswith(b"<svg") or (text.startswith(b"<?xml") and b"<svg" in text):
        return "SVG"
    return None


_KNOWN_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


def _unidentified(path: Path, fp: BinaryIO) -> BadInputError:
    """The best message for a file that none of the readable formats recognised."""
    fp.seek(0)
    head = fp.read(1024)
    unsupported = _sniff_unsupported(head)
    if unsupported is not None:
        return BadInputError(
            f"{path.name}: {unsupported} images are not supported. "
            f"Convert it to one of: {_SUPPORTED_TEXT}."
        )
    for signature, name in _KNOWN_SIGNATURES:
        if head.startswith(signature):
            return BadInputError(
                f"{path.name}: this {name} file is damaged (its header is invalid)."
            )
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return BadInputError(f"{path.name}: this WebP file is damaged (its header is invalid).")
    fp.seek(0)
    try:
        with Image.open(fp) as other:
            other_format = other.format
    except Exception:
        other_format = None
    if other_format:
        return BadInputError(
            f"{path.name}: {other_format} images are not supported. "
            f"Convert it to one of: {_SUPPORTED_TEXT}."
        )
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text and all(ch.isprintable() or ch in "\r\n\t" for ch in text[:512]):
        return BadInputError(f"{path.name}: this is not an image; the file contains text.")
    return BadInputError(
        f"{path.name}: this is not an image, or it is in a format Tessera does not know "
        f"(supported: {_SUPPORTED_TEXT})."
    )


def _damaged(path: Path, exc: BaseException) -> BadInputError:
    detail = str(exc).strip()
    if "truncated" in detail.lower() or isinstance(exc, EOFError):
        return BadInputError(
            f"{path.name}: the file is truncated (it ends before the image data does); "
            "it may not have been copied or downloaded completely."
        )
    suffix = f" ({detail})" if detail else ""
    return BadInputError(f"{path.name}: the image data is damaged and cannot be decoded{suffix}.")


@contextmanager
def _opened(path: Path) -> Iterator[tuple[Image.Image, BinaryIO]]:
    """Open `path` with Pillow (header only), mapping every failure to a readable message."""
    _check_input_file(path)
    try:
        fp = open(path, "rb")
    except OSError as e:
        raise _read_error(path, e) from e
    with fp:
        try:
            im = Image.open(fp, formats=_open_formats())
        except UnidentifiedImageError as e:
            raise _unidentified(path, fp) from e
        except MemoryError as e:
            raise ResourceError(f"{path.name}: not enough memory to open the image.") from e
        except OSError as e:
            if e.errno is not None:  # a read error of the file itself, not of its contents
                raise _read_error(path, e) from e
            raise _damaged(path, e) from e
        except Exception as e:  # any decoder complaint is a damaged file
            raise _damaged(path, e) from e
        with im:
            yield im, fp


def _open_formats() -> list[str]:
    Image.init()  # plugins register lazily; a build may lack one (AVIF, JPEG 2000)
    return [name for name in _READ_FORMATS if name in Image.OPEN]


def _format_name(im: Image.Image) -> str:
    fmt = im.format or "UNKNOWN"
    return "JPEG" if fmt == "MPO" else fmt


def _frame_count(path: Path, im: Image.Image) -> int:
    if im.format == "MPO":  # the extra pictures of a camera JPEG are previews, not frames
        return 1
    try:
        return max(1, int(getattr(im, "n_frames", 1)))
    except Exception as e:
        raise _damaged(path, e) from e


def _orientation(exif: Image.Exif | None) -> int:
    if exif is None:
        return 1
    value = exif.get(_ORIENTATION, 1)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _cheap_exif(im: Image.Image) -> Image.Exif | None:
    """EXIF that is available without decoding pixels (a PNG's eXIf may follow the data)."""
    if im.format == "PNG" and "exif" not in im.info:
        return None
    try:
        return im.getexif()
    except Exception:
        return None


def image_size(path: Path) -> tuple[int, int, int]:
    """(width, height, frame_count) of the upright image, read from the header only."""
    path = Path(path)
    with _opened(path) as (im, _fp):
        width, height = im.size
        frames = _frame_count(path, im)
        if _orientation(_cheap_exif(im)) >= 5:
            width, height = height, width
        return width, height, frames


# ---------------------------------------------------------------------------------------------
# Pillow decoding


def _apply_orientation(frame: np.ndarray, orientation: int) -> np.ndarray:
    """What ImageOps.exif_transpose does, on an H×W×C array."""
    if orientation == 2:
        out = frame[:, ::-1]
    elif orientation == 3:
        out = frame[::-1, ::-1]
    elif orientation == 4:
        out = frame[::-1]
    elif orientation == 5:
        out = frame.transpose(1, 0, 2)
    elif orientation == 6:
        out = np.rot90(frame, -1)
    elif orientation == 7:
        out = frame[::-1, ::-1].transpose(1, 0, 2)
    elif orientation == 8:
        out = np.rot90(frame, 1)
    else:
        return frame
    return np.ascontiguousarray(out)


def _cmyk_to_rgb(im: Image.Image) -> Image.Image:
    icc = im.info.get("icc_profile")
    if icc:
        try:
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            converted = ImageCms.profileToProfile(
                im, source, ImageCms.createProfile("sRGB"), outputMode="RGB"
            )
            if converted is not None:
                return converted
        except (ImageCms.PyCMSError, OSError, ValueError):
            pass  # an unusable profile: the plain conversion below is the best left
    return im.convert("RGB")


def _pixels(path: Path, im: Image.Image) -> np.ndarray:
    """The current frame of a loaded Pillow image as an H×W×C uint8/uint16 array."""
    mode = im.mode
    key = im.info.get("transparency")
    if mode == "1":
        return np.asarray(im.convert("L"))[..., None]
    if mode in ("P", "PA"):
        has_alpha = mode == "PA" or key is not None
        converted = im.convert("RGBA" if has_alpha else "RGB")
        return np.asarray(converted)
    if mode in ("La", "LA"):
        return np.asarray(im.convert("LA"))
    if mode in ("RGBa", "RGBA"):
        return np.asarray(im.convert("RGBA"))
    if mode == "RGBX":
        return np.asarray(im.convert("RGB"))
    if mode == "CMYK":
        return np.asarray(_cmyk_to_rgb(im))
    if mode in ("YCbCr", "HSV", "LAB"):
        try:
            return np.asarray(im.convert("RGB"))
        except ValueError as e:
            raise BadInputError(
                f"{path.name}: images in the {mode} colour space are not supported."
            ) from e
    if mode in ("L", "RGB"):
        pixels = np.asarray(im)
        pixels = pixels[..., None] if pixels.ndim == 2 else pixels
    elif mode.startswith("I;16"):
        pixels = np.asarray(im).astype(np.uint16)[..., None]
    elif mode == "I":
        values = np.asarray(im)
        if values.size and values.max() > 65535:  # a true 32-bit image: keep its top 16 bits
            values = values >> 16
        pixels = np.clip(values, 0, 65535).astype(np.uint16)[..., None]
    elif mode == "F":
        values = np.nan_to_num(np.asarray(im, dtype=np.float32))
        scale = 65535.0 if values.size and values.max() <= 1.0 else 1.0  # 0…1 data, or counts
        pixels = np.rint(np.clip(values * scale, 0, 65535)).astype(np.uint16)[..., None]
    else:
        raise BadInputError(f"{path.name}: images of pixel mode {mode} are not supported.")
    if key is not None:
        alpha = key_alpha(pixels, key, 65535 if pixels.dtype == np.uint16 else 255)
        if alpha is not None:
            pixels = np.concatenate([pixels, alpha], axis=2)
    return pixels


def _unify(path: Path, frames: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Give every frame the same channel layout and dtype (GIF frames change mode, etc.)."""
    shapes = {f.shape[:2] for f in frames}
    if len(shapes) > 1:
        first = frames[0].shape
        for index, f in enumerate(frames):
            if f.shape[:2] != first[:2]:
                raise BadInputError(
                    f"{path.name}: frame {index + 1} is {f.shape[1]}×{f.shape[0]} pixels but "
                    f"frame 1 is {first[1]}×{first[0]}; all frames must have the same size."
                )
    wide = any(f.dtype == np.uint16 for f in frames)
    colour = any(f.shape[2] >= 3 for f in frames)
    alpha = any(f.shape[2] in (2, 4) for f in frames)
    out: list[np.ndarray] = []
    for f in frames:
        g = _to_16bit(f) if wide else f
        out.append(_reshape_channels(g, colour, alpha))
    return tuple(out)


def _reshape_channels(frame: np.ndarray, colour: bool, alpha: bool) -> np.ndarray:
    channels = frame.shape[2]
    has_alpha = channels in (2, 4)
    base = frame[..., :-1] if has_alpha else frame
    if colour and base.shape[2] == 1:
        base = np.repeat(base, 3, axis=2)
    if not alpha:
        return np.ascontiguousarray(base)
    a = frame[..., -1:] if has_alpha else np.full((*base.shape[:2], 1), _top(frame), frame.dtype)
    return np.concatenate([base, a], axis=2)


def _top(frame: np.ndarray) -> int:
    return 65535 if frame.dtype == np.uint16 else 255


def _read_only(frames: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    # The GUI shows the decoded image as "before" while operations read it: nobody may
    # change it in place (some frames are views of Pillow's buffer and read-only anyway).
    for frame in frames:
        frame.setflags(write=False)
    return frames


def _clean_exif(exif: Image.Exif | None, tiff: bool) -> bytes | None:
    if exif is None or len(exif) == 0:
        return None
    if tiff:
        for tag in _TIFF_STRUCTURE_TAGS:
            exif.pop(tag, None)
        if len(exif) == 0:
            return None
    if _ORIENTATION in exif:
        exif[_ORIENTATION] = 1
    try:
        return exif.tobytes()
    except Exception:
        return None  # EXIF Pillow cannot re-serialise is dropped rather than failing the image


def _dpi(value: object, swap: bool) -> tuple[float, float] | None:
    if not isinstance(value, tuple) or len(value) != 2:
        return None
    try:
        x, y = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        return None
    if not (x > 0 and y > 0):
        return None
    return (y, x) if swap else (x, y)


def _is_reduced_page(im: Image.Image) -> bool:
    """A TIFF thumbnail / reduced-resolution page (NewSubfileType bit 0), not a real page."""
    tags = getattr(im, "tag_v2", None)
    if tags is None:
        return False
    value = tags.get(254, 0)
    return isinstance(value, int) and bool(value & 1)


def _decode_pillow(path: Path, im: Image.Image, count: int) -> DecodedImage:
    fmt = _format_name(im)
    mode = im.mode
    icc = im.info.get("icc_profile") or None
    loop = im.info.get("loop")
    dpi_info = im.info.get("dpi")
    frames: list[np.ndarray] = []
    durations: list[int] = []
    exif: Image.Exif | None = None
    for index in range(count):
        if count > 1:
            im.seek(index)
        im.load()
        if index == 0:
            exif = im.getexif()
        elif fmt == "TIFF" and _is_reduced_page(im):
            continue
        frames.append(_pixels(path, im))
        duration = im.info.get("duration")
        durations.append(max(0, round(float(duration))) if duration is not None else 0)
    orientation = _orientation(exif)
    unified = tuple(_apply_orientation(f, orientation) for f in _unify(path, frames))
    animated = len(unified) > 1 and fmt in _ANIMATED_FORMATS
    meta = ImageMeta(
        format=fmt,
        mode=mode,
        bit_depth=16 if unified[0].dtype == np.uint16 else 8,
        has_alpha=unified[0].shape[2] in (2, 4),
        icc_profile=bytes(icc) if icc else None,
        exif=_clean_exif(exif, tiff=fmt == "TIFF"),
        durations=tuple(durations) if animated else (),
        loop=int(loop) if animated and isinstance(loop, int) else None,
        dpi=_dpi(dpi_info, swap=orientation >= 5),
    )
    if mode == "CMYK":  # the pixels are sRGB now; a CMYK profile would no longer describe them
        meta = _replace_icc(meta, None)
    return DecodedImage(source=path, frames=_read_only(unified), meta=meta)


def _replace_icc(meta: ImageMeta, icc: bytes | None) -> ImageMeta:
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


# ---------------------------------------------------------------------------------------------
# 16-bit PNG (Pillow would reduce colour and grey+alpha to 8 bits)


def _decode_png16(path: Path, data: bytes) -> DecodedImage:
    try:
        png, frames, delays = decode_png(data)
    except PngError as e:
        if e.truncated:
            raise _damaged(path, EOFError(str(e))) from e
        raise _damaged(path, e) from e
    except (zlib.error, ValueError, struct.error) as e:
        raise _damaged(path, e) from e
    exif: Image.Exif | None = None
    if png.exif:
        exif = Image.Exif()
        try:
            exif.load(png.exif)
        except Exception:
            exif = None  # unreadable EXIF is dropped; the pixels are still fine
    orientation = _orientation(exif)
    upright = tuple(_apply_orientation(f, orientation) for f in _unify(path, frames))
    animated = len(upright) > 1
    meta = ImageMeta(
        format="PNG",
        mode=MODES16[png.colour_type],
        bit_depth=16,
        has_alpha=upright[0].shape[2] in (2, 4),
        icc_profile=png.icc,
        exif=_clean_exif(exif, tiff=False),
        durations=tuple(delays) if animated else (),
        loop=png.num_plays if animated else None,
        dpi=_dpi(png.dpi, swap=orientation >= 5),
    )
    return DecodedImage(source=path, frames=_read_only(upright), meta=meta)


# ---------------------------------------------------------------------------------------------
# Loading


def load_image(path: Path, max_pixels: int) -> DecodedImage:
    """Decode every frame of `path`, upright; refuses images over `max_pixels` before decoding."""
    path = Path(path)
    with _opened(path) as (im, fp):
        width, height = im.size
        _check_limit(path, width, height, 1, max_pixels)
        count = _frame_count(path, im)
        _check_limit(path, width, height, count, max_pixels)
        try:
            if im.format == "PNG":
                fp.seek(0)
                header = png_header(fp.read(26))
                if header is not None and header[0] == 16 and header[1] in (2, 4, 6):
                    fp.seek(0)
                    return _decode_png16(path, fp.read())
            return _decode_pillow(path, im, count)
        except BadInputError:
            raise
        except MemoryError as e:
            raise ResourceError(
                f"{path.name}: not enough memory to decode the image ({width}×{height} pixels)."
            ) from e
        except OSError as e:
            if e.errno is not None:
                raise _read_error(path, e) from e
            raise _damaged(path, e) from e
        except Exception as e:  # any decoder complaint is a damaged file
            raise _damaged(path, e) from e


def load_sequence(paths: Sequence[Path], max_pixels: int) -> DecodedImage:
    """The frames of several files as one sequence; all must have the same size."""
    files = [Path(p) for p in paths]
    if not files:
        raise BadInputError("The sequence has no frames: no image files were given.")
    sizes = [image_size(p) for p in files]
    first_w, first_h, _ = sizes[0]
    for p, (w, h, _) in zip(files, sizes, strict=True):
        if (w, h) != (first_w, first_h):
            raise BadInputError(
                f"{p.name}: this frame is {w}×{h} pixels but {files[0].name} is "
                f"{first_w}×{first_h}; all frames of a sequence must have the same size."
            )
    total = sum(w * h * n for w, h, n in sizes)
    if total > max_pixels:
        raise BadInputError(
            f"{files[0].parent.name or files[0].name}: the sequence of {len(files)} files has "
            f"{_fmt_pixels(total)}; the limit is {_fmt_pixels(max_pixels)}. Use fewer frames "
            "or raise the pixel limit in the settings."
        )
    images = [load_image(p, max_pixels) for p in files]
    frames: list[np.ndarray] = []
    for image in images:
        if image.size != images[0].size:
            raise BadInputError(
                f"{image.source.name}: this frame is {image.size[0]}×{image.size[1]} pixels but "
                f"{files[0].name} is {images[0].size[0]}×{images[0].size[1]}; all frames of a "
                "sequence must have the same size."
            )
        frames.extend(image.frames)
    unified = _unify(files[0], frames)
    first = images[0].meta
    all_timed = all(len(i.meta.durations) == len(i.frames) for i in images)
    meta = ImageMeta(
        format=first.format,
        mode=first.mode,
        bit_depth=16 if unified[0].dtype == np.uint16 else 8,
        has_alpha=unified[0].shape[2] in (2, 4),
        icc_profile=first.icc_profile,
        exif=first.exif,
        durations=tuple(d for i in images for d in i.meta.durations) if all_timed else (),
        loop=first.loop,
        dpi=first.dpi,
    )
    return DecodedImage(source=files[0], frames=_read_only(unified), meta=meta)


def _natural_key(name: str) -> tuple[list[int | str], str]:
    parts: list[int | str] = [
        int(part) if index % 2 else part.casefold()
        for index, part in enumerate(re.split(r"(\d+)", name))
    ]
    return parts, name


def list_sequence(folder: Path) -> list[Path]:
    """The image files of `folder` in natural order (frame2 before frame10); hidden files skipped."""
    folder = Path(folder)
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError as e:
        raise BadInputError(
            f"{folder.name}: the folder does not exist (looked in {folder.parent})."
        ) from e
    except NotADirectoryError as e:
        raise BadInputError(f"{folder.name}: this is a file, not a folder of frames.") from e
    except PermissionError as e:
        raise BadInputError(
            f"{folder.name}: permission denied; Tessera may not list this folder."
        ) from e
    except OSError as e:
        raise BadInputError(f"{folder.name}: the folder cannot be read ({e.strerror or e}).") from e
    names = [
        entry.name
        for entry in entries
        if not entry.name.startswith(".")
        and Path(entry.name).suffix.lower() in _IMAGE_SUFFIXES
        and entry.is_file()
    ]
    return [folder / name for name in sorted(names, key=_natural_key)]


# ---------------------------------------------------------------------------------------------
# Encoding


def _prepare_frames(frames: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    items = [frames] if isinstance(frames, np.ndarray) else list(frames)
    if not items:
        raise ValueError("write_image needs at least one frame")
    out: list[np.ndarray] = []
    for f in items:
        arr = np.asarray(f)
        if arr.ndim == 2:
            arr = arr[..., None]
        if arr.ndim != 3 or arr.shape[2] not in (1, 2, 3, 4):
            raise ValueError(f"a frame must be H×W×C with C in 1…4, got shape {arr.shape}")
        if arr.dtype not in (np.uint8, np.uint16):
            raise ValueError(f"frames must be uint8 or uint16, got {arr.dtype}")
        out.append(np.ascontiguousarray(arr))
    first = out[0]
    if any(f.shape != first.shape or f.dtype != first.dtype for f in out):
        raise ValueError("all frames must have the same shape and dtype")
    return out


def _icc_fits(icc: bytes | None, channels: int) -> bytes | None:
    """The profile if its colour space matches the pixels written (ICC header bytes 16-20)."""
    if not icc or len(icc) < 20:
        return None
    space = icc[16:20]
    grey = channels in (1, 2)
    if (grey and space == b"GRAY") or (not grey and space == b"RGB "):
        return icc
    return None


def _durations(meta: ImageMeta | None, count: int) -> list[int]:
    if meta is not None and len(meta.durations) == count:
        return [int(d) for d in meta.durations]
    return [_DEFAULT_DURATION_MS] * count


def _pil_image(frame: np.ndarray) -> Image.Image:
    frame = _to_8bit(frame) if frame.shape[2] > 1 else frame
    return Image.fromarray(frame[..., 0] if frame.shape[2] == 1 else frame)


def _flatten_alpha(frame: np.ndarray) -> np.ndarray:
    """Composite on white for formats without alpha (JPEG)."""
    if frame.shape[2] not in (2, 4):
        return frame
    top = _top(frame)
    alpha = frame[..., -1:].astype(np.float32) / top
    colour = frame[..., :-1].astype(np.float32) * alpha + top * (1.0 - alpha)
    return np.rint(colour).astype(frame.dtype)


def _encode_pillow(
    temp: Path,
    fmt: str,
    frames: list[np.ndarray],
    meta: ImageMeta | None,
    text: Mapping[str, str] | None = None,
) -> None:
    channels = frames[0].shape[2]
    options: dict[str, object] = {}
    if fmt != "TIFF" or channels > 1:  # only TIFF holds 16-bit grey through Pillow
        frames = [_to_8bit(f) for f in frames]
    if fmt == "JPEG":
        frames = [_flatten_alpha(f) for f in frames]
        options.update(quality=95, subsampling=0)
    elif fmt in ("WEBP", "AVIF") and channels in (1, 2):
        frames = [_reshape_channels(f, colour=True, alpha=channels == 2) for f in frames]
    elif fmt in ("BMP", "GIF") and channels == 2:
        frames = [_reshape_channels(f, colour=True, alpha=True) for f in frames]
    if fmt == "WEBP":
        options.update(lossless=True, quality=100, exact=True)  # exact: keep colour under alpha 0
    elif fmt == "AVIF":
        options.update(quality=90)
    elif fmt == "TIFF":
        options.update(compression="tiff_adobe_deflate")
    images = [_pil_image(f) for f in frames]
    if meta is not None and fmt != "GIF":
        icc = _icc_fits(meta.icc_profile, frames[0].shape[2])
        if icc:
            options["icc_profile"] = icc
        if meta.exif and fmt in ("PNG", "JPEG", "WEBP", "TIFF", "AVIF"):
            options["exif"] = meta.exif
        if meta.dpi and fmt in ("PNG", "JPEG", "TIFF", "BMP"):
            options["dpi"] = meta.dpi
    if len(images) > 1:
        options.update(save_all=True, append_images=images[1:])
        if fmt in _ANIMATED_FORMATS:
            options["duration"] = _durations(meta, len(images))
            loop = meta.loop if meta is not None else 0
            if loop is not None:
                options["loop"] = loop
            elif fmt != "GIF":  # GIF without a loop count plays once; the others need a number
                options["loop"] = 0
        if fmt == "GIF" and frames[0].shape[2] in (2, 4):
            options["disposal"] = 2  # full frames with holes: clear before drawing the next
    if text and fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        for key, value in text.items():
            info.add_text(key, value)
        options["pnginfo"] = info
    images[0].save(temp, format=fmt, **options)


def _encode_png(
    temp: Path,
    frames: list[np.ndarray],
    meta: ImageMeta | None,
    text: Mapping[str, str] | None = None,
) -> None:
    encode_png(
        temp,
        frames,
        durations=_durations(meta, len(frames)),
        loop=meta.loop if meta is not None and meta.loop is not None else 0,
        icc=_icc_fits(meta.icc_profile, frames[0].shape[2]) if meta is not None else None,
        dpi=meta.dpi if meta is not None else None,
        exif=meta.exif if meta is not None else None,
        text=text,
    )


def write_image(
    path: Path,
    frames: np.ndarray | Sequence[np.ndarray],
    meta: ImageMeta | None = None,
    *,
    format: str | None = None,
    text: Mapping[str, str] | None = None,
) -> Path:
    """Encode `frames` atomically to `path` or a numbered variant; returns the final path.

    PNG keeps 8 or 16 bits, ICC, EXIF and dpi from `meta`; several frames become an animated
    PNG/GIF/WebP (meta.durations, meta.loop) or a multi-page TIFF. Formats without 16-bit
    colour get 8 bits; JPEG gets alpha flattened on white. `text`: PNG tEXt/iTXt entries.
    """
    path = Path(path)
    fmt = (format or _WRITE_FORMATS.get(path.suffix.lower(), "")).upper()
    if fmt == "JPG":
        fmt = "JPEG"
    if fmt not in _WRITE_FORMATS.values():
        raise ValueError(f"cannot tell which image format to write for {path.name!r}")
    prepared = _prepare_frames(frames)
    if len(prepared) > 1 and fmt not in _MULTI_FRAME_WRITE:
        raise ValueError(f"{fmt} holds one frame; got {len(prepared)}")
    with atomic_output(path) as (temp, publish):
        try:
            # Our own streaming PNG encoder: Pillow drops 16-bit colour to 8 bits, first copies
            # a frame into its own 4-byte-per-pixel image (doubling the peak), and merges
            # identical animation frames (a 3-frame input must give a 3-frame product).
            if fmt == "PNG":
                _encode_png(temp, prepared, meta, text)
            else:
                _encode_pillow(temp, fmt, prepared, meta, text)
        except MemoryError as e:
            raise ResourceError(f"{path.name}: not enough memory to encode the image.") from e
        return publish()
