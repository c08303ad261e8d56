"""Opening an input: the checks before anything is decoded, and what the header alone says.

Inputs are refused with a reason a person can act on (missing, unreadable, not an image, an
unsupported format, over the pixel limit) before anything is decoded.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from PIL import Image, PngImagePlugin, UnidentifiedImageError

from engine.errors import PIXEL_LIMIT_LEVER, BadInputError, PixelLimitError, ResourceError
from engine.io.image import READ_FORMATS, SUPPORTED_TEXT, fmt_pixels
from engine.io.metadata import cheap_exif, exif_orientation

# Our own max_pixels check (before any decoding) replaces Pillow's bomb check, whose warning
# would otherwise be raised as an error under warnings-as-errors and whose limit is not ours.
Image.MAX_IMAGE_PIXELS = None
# Pillow refuses a PNG text or iCCP chunk that inflates past 1 MB as if the file were damaged;
# camera and print profiles reach several MB. 12 MB stays a small bound on a zlib bomb (Pillow
# inflates that much before it refuses; the PNG fuzz test holds the peak under 32 MB).
PngImagePlugin.MAX_TEXT_CHUNK = 12 << 20


def check_limit(path: Path, width: int, height: int, frames: int, max_pixels: int) -> None:
    total = width * height * frames
    if total <= max_pixels:
        return
    size = f"{width}×{height} pixels" + (f" × {frames} frames" if frames > 1 else "")
    raise PixelLimitError(
        f"{path.name}: the image is {size} ({fmt_pixels(total)}); the limit is "
        f"{fmt_pixels(max_pixels)}. Reduce the image or {PIXEL_LIMIT_LEVER}.",
        total,
        max_pixels,
    )


def check_same_size(path: Path, number: int, size: tuple[int, int], first: tuple[int, int]) -> None:
    """Refuse frame `number` (1-based) whose header size differs from frame 1's."""
    if size != first:
        raise BadInputError(
            f"{path.name}: frame {number} is {size[0]}×{size[1]} pixels but frame 1 is "
            f"{first[0]}×{first[1]}; all frames must have the same size."
        )


def read_error(path: Path, exc: OSError) -> BadInputError:
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


def check_input_file(path: Path) -> None:
    try:
        info = path.stat()
    except OSError as e:
        raise read_error(path, e) from e
    if stat.S_ISDIR(info.st_mode):
        raise BadInputError(f"{path.name}: this is a folder, not an image file.")
    if not stat.S_ISREG(info.st_mode):
        raise BadInputError(f"{path.name}: this is not a regular file.")
    if info.st_size == 0:
        raise BadInputError(f"{path.name}: the file is empty (0 bytes).")


def sniff_unsupported(head: bytes) -> str | None:
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


KNOWN_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


def unidentified(path: Path, fp: BinaryIO) -> BadInputError:
    """The best message for a file that none of the readable formats recognised."""
    fp.seek(0)
    head = fp.read(1024)
    unsupported = sniff_unsupported(head)
    if unsupported is not None:
        return BadInputError(
            f"{path.name}: {unsupported} images are not supported. "
            f"Convert it to one of: {SUPPORTED_TEXT}."
        )
    for signature, name in KNOWN_SIGNATURES:
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


def damaged(path: Path, exc: BaseException) -> BadInputError:
    detail = str(exc).strip()
    if "truncated" in detail.lower() or isinstance(exc, EOFError):
        return BadInputError(
            f"{path.name}: the file is truncated (it ends before the image data does); "
            "it may not have been copied or downloaded completely."
        )
    suffix = f" ({detail})" if detail else ""
    return BadInputError(f"{path.name}: the image data is damaged and cannot be decoded{suffix}.")


@contextmanager
def opened(path: Path) -> Iterator[tuple[Image.Image, BinaryIO]]:
    """Open `path` with Pillow (header only), mapping every failure to a readable message."""
    check_input_file(path)
    try:
        fp = open(path, "rb")
    except OSError as e:
        raise read_error(path, e) from e
    with fp:
        try:
            im = Image.open(fp, formats=open_formats())
        except UnidentifiedImageError as e:
            raise unidentified(path, fp) from e
        except MemoryError as e:
            raise ResourceError(f"{path.name}: not enough memory to open the image.") from e
        except OSError as e:
            if e.errno is not None:  # a read error of the file itself, not of its contents
                raise read_error(path, e) from e
            raise damaged(path, e) from e
        except Exception as e:  # any decoder complaint is a damaged file
            raise damaged(path, e) from e
        with im:
            yield im, fp


def open_formats() -> list[str]:
    Image.init()  # plugins register lazily; a build may lack one (AVIF, JPEG 2000)
    return [name for name in READ_FORMATS if name in Image.OPEN]


def format_name(im: Image.Image) -> str:
    fmt = im.format or "UNKNOWN"
    return "JPEG" if fmt == "MPO" else fmt


def frame_count(path: Path, im: Image.Image) -> int:
    if im.format == "MPO":  # the extra pictures of a camera JPEG are previews, not frames
        return 1
    try:
        return max(1, int(getattr(im, "n_frames", 1)))
    except Exception as e:
        raise damaged(path, e) from e


def image_size(path: Path) -> tuple[int, int, int]:
    """(width, height, frame_count) of the upright image, read from the header only."""
    path = Path(path)
    with opened(path) as (im, _fp):
        width, height = im.size
        frames = frame_count(path, im)
        if exif_orientation(cheap_exif(im)) >= 5:
            width, height = height, width
        return width, height, frames
