"""Reading input images: checks before decoding, EXIF orientation, ICC, 8/16-bit, alpha, frames.

Inputs are refused with a reason a person can act on (missing, unreadable, not an image, an
unsupported format, over the pixel limit) before anything is decoded. Pillow decodes 16-bit
colour PNGs only to 8 bits, so those are decoded by `engine.io.png`.
"""

from __future__ import annotations

import io
import logging
import stat
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from PIL import Image, ImageCms, UnidentifiedImageError

from engine.errors import BadInputError, EngineError, ResourceError
from engine.io.image import (
    ANIMATED_FORMATS,
    READ_FORMATS,
    SUPPORTED_TEXT,
    DecodedImage,
    ImageMeta,
    LazyFrames,
    reshape_channels,
    to_16bit,
)
from engine.io.png import MODES16, PngError, decode_png, key_alpha, png_header

log = logging.getLogger(__name__)

# Our own max_pixels check (before any decoding) replaces Pillow's bomb check, whose warning
# would otherwise be raised as an error under warnings-as-errors and whose limit is not ours.
Image.MAX_IMAGE_PIXELS = None

_ORIENTATION = 0x0112
# TIFF image-structure tags: Pillow reports them as "EXIF" of a TIFF, but copied into another
# file they would describe the wrong pixels.
_TIFF_STRUCTURE_TAGS = frozenset(
    {254, 255, 256, 257, 258, 259, 262, 266, 273, 277, 278, 279, 284}
    | {317, 320, 322, 323, 324, 325, 338, 339, 340, 341, 34675}
)


# ---------------------------------------------------------------------------------------------
# Opening and checking inputs


def fmt_pixels(count: int) -> str:
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
        f"{path.name}: the image is {size} ({fmt_pixels(total)}); the limit is "
        f"{fmt_pixels(max_pixels)}. Reduce the image or raise the pixel limit in the settings."
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
            f"Convert it to one of: {SUPPORTED_TEXT}."
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
            f"Convert it to one of: {SUPPORTED_TEXT}."
        )
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text and all(ch.isprintable() or ch in "\r\n\t" for ch in text[:512]):
        return BadInputError(f"{path.name}: this is not an image; the file contains text.")
    return BadInputError(
        f"{path.name}: this is not an image, or it is in a format Tessera does not know "
        f"(supported: {SUPPORTED_TEXT})."
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
    return [name for name in READ_FORMATS if name in Image.OPEN]


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


def _array(im: Image.Image) -> np.ndarray:
    """`np.asarray(im)`, a band of rows at a time for large images: numpy's conversion goes
    through `tobytes()`, which holds the pixels twice more (a list of chunks and their join)
    beside Pillow's own copy — 116 MB above the start for a 12 Mpx JPEG instead of 80."""
    width, height = im.size
    if width * height <= 1 << 22:
        return np.asarray(im)
    first = np.asarray(im.crop((0, 0, width, 1)))
    out = np.empty((height, *first.shape[1:]), first.dtype)
    step = max(1, (4 << 20) // max(1, first.nbytes))
    for start in range(0, height, step):
        stop = min(height, start + step)
        out[start:stop] = np.asarray(im.crop((0, start, width, stop)))
    return out


def _pixels(path: Path, im: Image.Image) -> np.ndarray:
    """The current frame of a loaded Pillow image as an H×W×C uint8/uint16 array."""
    mode = im.mode
    key = im.info.get("transparency")
    if mode == "1":
        return _array(im.convert("L"))[..., None]
    if mode in ("P", "PA"):
        has_alpha = mode == "PA" or key is not None
        converted = im.convert("RGBA" if has_alpha else "RGB")
        return _array(converted)
    if mode in ("La", "LA"):
        return _array(im.convert("LA"))
    if mode in ("RGBa", "RGBA"):
        return _array(im.convert("RGBA"))
    if mode == "RGBX":
        return _array(im.convert("RGB"))
    if mode == "CMYK":
        return _array(_cmyk_to_rgb(im))
    if mode in ("YCbCr", "HSV", "LAB"):
        try:
            return _array(im.convert("RGB"))
        except ValueError as e:
            raise BadInputError(
                f"{path.name}: images in the {mode} colour space are not supported."
            ) from e
    if mode in ("L", "RGB"):
        pixels = _array(im)
        pixels = pixels[..., None] if pixels.ndim == 2 else pixels
    elif mode.startswith("I;16"):
        pixels = _array(im).astype(np.uint16)[..., None]
    elif mode == "I":
        values = _array(im)
        if values.size and values.max() > 65535:  # a true 32-bit image: keep its top 16 bits
            values = values >> 16
        pixels = np.clip(values, 0, 65535).astype(np.uint16)[..., None]
    elif mode == "F":
        values = np.nan_to_num(_array(im).astype(np.float32))
        scale = 65535.0 if values.size and values.max() <= 1.0 else 1.0  # 0…1 data, or counts
        pixels = np.rint(np.clip(values * scale, 0, 65535)).astype(np.uint16)[..., None]
    else:
        raise BadInputError(f"{path.name}: images of pixel mode {mode} are not supported.")
    if key is not None:
        alpha = key_alpha(pixels, key, 65535 if pixels.dtype == np.uint16 else 255)
        if alpha is not None:
            pixels = np.concatenate([pixels, alpha], axis=2)
    return pixels


def unify_frames(path: Path, frames: list[np.ndarray]) -> tuple[np.ndarray, ...]:
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
        g = to_16bit(f) if wide else f
        out.append(reshape_channels(g, colour, alpha))
    return tuple(out)


def read_only(frames: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
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


def _decode_pillow(
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
    fmt = _format_name(im)
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
    for index in range(count):
        if check is not None:
            check()
        if count > 1:
            im.seek(index)
        im.load()
        if index == 0:
            exif = im.getexif()
        elif fmt == "TIFF" and _is_reduced_page(im):
            continue
        pixels = _pixels(path, im)
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
    orientation = _orientation(exif)
    if stream:
        size = (im.size[1], im.size[0]) if orientation < 5 else (im.size[0], im.size[1])
        first = unify_frames(path, layouts)[0]
        shape = (*size, first.shape[2])
        unified: Sequence[np.ndarray] = StreamedFrames(path, kept, shape, first.dtype, orientation)
    else:
        unified = read_only(
            tuple(_apply_orientation(f, orientation) for f in unify_frames(path, frames))
        )
    animated = len(unified) > 1 and fmt in ANIMATED_FORMATS
    first_shape, first_dtype = _shape_dtype(unified)
    meta = ImageMeta(
        format=fmt,
        mode=mode,
        bit_depth=16 if first_dtype == np.uint16 else 8,
        has_alpha=first_shape[2] in (2, 4),
        icc_profile=bytes(icc) if icc else None,
        exif=_clean_exif(exif, tiff=fmt == "TIFF"),
        durations=tuple(durations) if animated else (),
        loop=int(loop) if animated and isinstance(loop, int) else None,
        dpi=_dpi(dpi_info, swap=orientation >= 5),
    )
    if mode == "CMYK":  # the pixels are sRGB now; a CMYK profile would no longer describe them
        meta = _replace_icc(meta, None)
    return DecodedImage(source=path, frames=unified, meta=meta)


def _shape_dtype(frames: Sequence[np.ndarray]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if isinstance(frames, LazyFrames):
        return frames.shape, frames.dtype
    return frames[0].shape, frames[0].dtype


class StreamedFrames(LazyFrames):
    """The frames of a multi-frame file, decoded one at a time as they are used.

    In order they cost one decode each (the file stays open until the last frame was read, or
    `close()`); going back restarts the decoder at the file's first frame. Every frame comes
    upright, in the one channel layout and dtype of the whole file, read-only.
    """

    def __init__(
        self,
        path: Path,
        indices: list[int],
        shape: tuple[int, int, int],
        dtype: np.dtype[Any],
        orientation: int,
    ) -> None:
        self.path = path
        self._indices = indices
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self._orientation = orientation
        self._im: Image.Image | None = None
        self._cached: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._indices)

    def frame(self, index: int) -> np.ndarray:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1]
        try:
            if self._im is None:
                self._im = Image.open(self.path)
            self._im.seek(self._indices[index])
            self._im.load()
            pixels = _pixels(self.path, self._im)
        except BadInputError:
            raise
        except Exception as e:  # the file changed or broke since it was first read
            self.close()
            raise _damaged(self.path, e) from e
        wide = self.dtype == np.uint16
        frame = reshape_channels(
            to_16bit(pixels) if wide else pixels, self.shape[2] >= 3, self.shape[2] in (2, 4)
        )
        frame = _apply_orientation(frame, self._orientation)
        if frame.shape != self.shape:
            self.close()
            raise BadInputError(
                f"{self.path.name}: frame {index + 1} changed while it was being read."
            )
        frame.setflags(write=False)
        self._cached = (index, frame)
        if index == len(self) - 1:
            self.close()
        return frame

    def close(self) -> None:
        if self._im is not None:
            self._im.close()
            self._im = None


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


def _decode_png16(path: Path, data: bytes, max_pixels: int) -> DecodedImage:
    try:
        png, frames, delays = decode_png(data, max_pixels)
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
    upright = tuple(_apply_orientation(f, orientation) for f in unify_frames(path, frames))
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
    return DecodedImage(source=path, frames=read_only(upright), meta=meta)


# ---------------------------------------------------------------------------------------------
# Loading


def load_image(
    path: Path,
    max_pixels: int,
    check: Callable[[], None] | None = None,
    *,
    stream: bool = False,
) -> DecodedImage:
    """Decode every frame of `path`, upright; refuses images over `max_pixels` before decoding.

    `check` is called between frames and may raise to stop (a cancel). `stream`: a multi-frame
    file's frames are decoded as they are used (`StreamedFrames`) instead of all at once, so
    memory does not grow with their number."""
    path = Path(path)
    log.info("decoding %s", path.name)
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
                    return _decode_png16(path, fp.read(), max_pixels)
            return _decode_pillow(path, im, count, check, stream)
        except EngineError:  # refused, cancelled, or out of memory: already said
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
