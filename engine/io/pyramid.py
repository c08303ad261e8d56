"""A picture read at the resolution it is shown at: the whole of it reduced to about a screen,
or one region of it at the scale the view needs (1:1 gives the file's own pixels).

A viewer that decodes a 12000×8000 product in full holds 288 MB for a picture it shows on
1 Mpx of screen. Here a plain PNG (8 or 16 bits, not interlaced; the kind Tessera writes) is
streamed: its zlib data is inflated and its row filters undone a band of rows at a time, and each
band is reduced or cropped before the next is read, so the full-size image never exists. 8-bit
bands are unfiltered by Pillow (C) from a small PNG made of the band with the row above it
unfiltered in front; 16-bit colour bands by numpy. A JPEG is decoded in Pillow's draft mode
(the decoder's own 1/2, 1/4, 1/8 scaling). Anything else is decoded whole (within the pixel
limit) and reduced at once.

A PNG has no index of its rows: a region is read from the top down to its last row. On the way
the reader keeps a few row checkpoints of the last two files it read (the inflater's state and
the row above, ~100 KB each, at most 32 a file), so a region read again — a pan at 1:1 near the
bottom of a 12000×8000 product — starts from the nearest one above it: 0.15 s instead of 2 s.

Pixels come as `load_image` gives them (H×W×C uint8/uint16, C = 1…4, upright, read-only), so a
viewer shows them as it shows a decoded frame.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from PIL import Image

from engine.errors import BadInputError
from engine.io.frames import apply_orientation
from engine.io.opening import check_limit, damaged, opened
from engine.io.png import SIGNATURE, PngError, unfilter
from engine.io.reading import load_image
from engine.io.resize import resize_frame
from engine.previews import Region

__all__ = [
    "PictureInfo",
    "ReadPicture",
    "forget_checkpoints",
    "picture_info",
    "read_reduced",
    "read_region",
]

BAND_BYTES = 1 << 20  # raw rows unfiltered at once: the reader's working memory is a few of these
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}
_PIECE = 64 << 10  # compressed bytes read at once


@dataclass(frozen=True)
class PictureInfo:
    """A still picture's header: its upright size, depth and alpha, and whether it streams."""

    path: Path
    width: int
    height: int
    bit_depth: int
    has_alpha: bool
    frames: int
    streams: bool  # a plain PNG: read band by band, never whole


@dataclass(frozen=True)
class ReadPicture:
    """Pixels of `box` of the picture at `path`, reduced to `pixels`' size (the same as the
    box's at 1:1). Crosses from the reading thread to the window."""

    info: PictureInfo
    box: Region
    pixels: np.ndarray  # H×W×C uint8/uint16, read-only

    @property
    def nbytes(self) -> int:
        return int(self.pixels.nbytes)


@dataclass(frozen=True)
class _PngHeader:
    width: int
    height: int
    depth: int
    colour_type: int
    interlace: int
    plain: bool  # no palette, transparency key, orientation or animation: streamable


def picture_info(path: Path, max_pixels: int) -> PictureInfo:
    """The header of the still at `path`; refuses one over `max_pixels` before any decoding."""
    path = Path(path)
    png = _png_header(path)
    if png is not None and png.plain and png.interlace == 0 and png.depth in (8, 16):
        check_limit(path, png.width, png.height, 1, max_pixels)
        channels = _CHANNELS[png.colour_type]
        return PictureInfo(
            path, png.width, png.height, png.depth, channels in (2, 4), 1, streams=True
        )
    with opened(path) as (im, _fp):
        width, height = im.size
        check_limit(path, width, height, 1, max_pixels)
        orientation = _orientation(im)
        if orientation >= 5:
            width, height = height, width
        depth = 16 if im.mode.startswith("I;16") or (png is not None and png.depth == 16) else 8
        alpha = im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info
        frames = int(getattr(im, "n_frames", 1) or 1)
    return PictureInfo(path, width, height, depth, alpha, frames, streams=False)


def read_reduced(path: Path, max_width: int, max_height: int, max_pixels: int) -> ReadPicture:
    """The whole picture fitted inside max_width × max_height (never enlarged)."""
    info = picture_info(path, max_pixels)
    box = Region(0, 0, info.width, info.height)
    return _read(info, box, _fit(info.width, info.height, max_width, max_height), max_pixels)


def read_region(path: Path, box: Region, scale: float, max_pixels: int) -> ReadPicture:
    """`box` of the picture (clipped to it) at `scale` of its pixels (≤ 1; 1 is the file's own
    pixels, exactly)."""
    info = picture_info(path, max_pixels)
    box = box.clipped(info.width, info.height)
    if box.width <= 0 or box.height <= 0:
        raise BadInputError(f"{Path(path).name}: the region {box} lies outside the picture.")
    scale = min(1.0, max(scale, 1e-6))
    size = (max(1, round(box.width * scale)), max(1, round(box.height * scale)))
    return _read(info, box, size, max_pixels)


def _fit(width: int, height: int, max_width: int, max_height: int) -> tuple[int, int]:
    scale = min(1.0, max(1, max_width) / width, max(1, max_height) / height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _read(info: PictureInfo, box: Region, size: tuple[int, int], max_pixels: int) -> ReadPicture:
    try:
        if info.streams:
            pixels = _read_png(info, box, size)
        else:
            pixels = _read_decoded(info, box, size, max_pixels)
    except (BadInputError, MemoryError):
        raise
    except (OSError, ValueError, zlib.error, struct.error) as e:
        raise damaged(info.path, e) from e
    pixels.setflags(write=False)
    return ReadPicture(info, box, pixels)


# -- any format: decoded whole, then reduced ---------------------------------------------------
def _read_decoded(
    info: PictureInfo, box: Region, size: tuple[int, int], max_pixels: int
) -> np.ndarray:
    full = box.width == info.width and box.height == info.height
    if full and size != (info.width, info.height):
        drafted = _read_jpeg_draft(info.path, size)
        if drafted is not None:
            return drafted
    frame = load_image(info.path, max_pixels).frames[0]
    part = frame[box.y0 : box.y1, box.x0 : box.x1]
    return _shrunk(np.ascontiguousarray(part), size)


def _read_jpeg_draft(path: Path, size: tuple[int, int]) -> np.ndarray | None:
    """A JPEG decoded at the largest of 1/1…1/8 of its size that is still at least `size`."""
    with opened(path) as (im, _fp):
        if im.format != "JPEG" or im.mode not in ("RGB", "L"):
            return None
        orientation = _orientation(im)
        want = size if orientation < 5 else (size[1], size[0])
        im.draft(im.mode, want)
        im.load()
        pixels = np.asarray(im)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    pixels = apply_orientation(pixels, orientation)
    return _shrunk(pixels, size)


def _orientation(im: Image.Image) -> int:
    try:
        value = im.getexif().get(0x0112, 1)
    except Exception:  # a broken EXIF block: the picture as stored
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _shrunk(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`pixels` resized to `size`: box-averaged by a whole factor first (cheap, and what a
    shrink needs), then Pillow's filter for the rest."""
    height, width = pixels.shape[:2]
    factor = max(1, min(width // size[0], height // size[1]))
    if factor > 1:
        pixels = _box_reduce(pixels, factor)
    if (pixels.shape[1], pixels.shape[0]) != size:
        pixels = resize_frame(np.ascontiguousarray(pixels), *size)
    return np.ascontiguousarray(pixels)


def _box_reduce(rows: np.ndarray, factor: int) -> np.ndarray:
    """Each factor×factor block's mean; the last row and column of blocks average what they
    hold (a picture need not divide by the factor)."""
    height, width, channels = rows.shape
    out_h, out_w = -(-height // factor), -(-width // factor)
    padded_w = out_w * factor
    sums = np.zeros((out_h, out_w, channels), np.float32)
    for i in range(out_h):
        block = rows[i * factor : (i + 1) * factor].astype(np.float32).sum(axis=0)
        if padded_w != width:
            block = np.concatenate([block, np.zeros((padded_w - width, channels), np.float32)])
        sums[i] = block.reshape(out_w, factor, channels).sum(axis=1)
    counts_y = np.minimum(factor, height - np.arange(out_h) * factor).astype(np.float32)
    counts_x = np.minimum(factor, width - np.arange(out_w) * factor).astype(np.float32)
    sums /= counts_y[:, None, None] * counts_x[None, :, None]
    top = 65535 if rows.dtype == np.uint16 else 255
    return np.clip(np.rint(sums), 0, top).astype(rows.dtype)


# -- plain PNG: streamed band by band ----------------------------------------------------------
def _png_header(path: Path) -> _PngHeader | None:
    """IHDR and what decides whether the rows can be streamed, from the chunks before IDAT."""
    try:
        with open(path, "rb") as fp:
            if fp.read(8) != SIGNATURE:
                return None
            header: _PngHeader | None = None
            plain = True
            while True:
                head = fp.read(8)
                if len(head) < 8:
                    return None
                length, kind = struct.unpack(">I4s", head)
                if kind == b"IHDR":
                    w, h, depth, ctype, _c, _f, interlace = struct.unpack(">IIBBBBB", fp.read(13))
                    fp.seek(4, 1)
                    if ctype not in _CHANNELS:
                        plain = False
                    header = _PngHeader(w, h, depth, ctype, interlace, True)
                    continue
                if kind == b"IDAT":
                    break
                if kind in (b"tRNS", b"acTL", b"PLTE", b"eXIf"):
                    plain = False  # keyed alpha, frames, palette or orientation: decoded whole
                fp.seek(length + 4, 1)
    except OSError:
        return None
    if header is None:
        return None
    return _PngHeader(
        header.width, header.height, header.depth, header.colour_type, header.interlace, plain
    )


class _Idat:
    """The IDAT chunks' data, in order, a piece of at most `_PIECE` bytes at a time (a writer
    may put the whole image in one chunk); `where` and `resume` let a read start again inside
    a chunk (whose checksum was checked when it was first read whole)."""

    def __init__(self, fp: BinaryIO) -> None:
        self.fp = fp
        self.name = Path(fp.name).name
        self.left = 0  # bytes of the current chunk still to read
        self.crc: int | None = None  # of the current chunk so far; None: not checked
        self.seen = False
        self.done = False
        fp.seek(8)

    def where(self) -> tuple[int, int]:
        return self.fp.tell(), self.left

    def resume(self, offset: int, left: int) -> None:
        self.fp.seek(offset)
        self.left, self.crc, self.seen = left, None, True

    def read(self) -> bytes | None:
        while not self.left:
            if self.done or not self._next_chunk():
                self.done = True
                return None
        piece = self.fp.read(min(self.left, _PIECE))
        if not piece:
            raise BadInputError(f"{self.name}: the file ends inside its image data.")
        self.left -= len(piece)
        if self.crc is not None:
            self.crc = zlib.crc32(piece, self.crc)
        if not self.left:
            stored = self.fp.read(4)
            if len(stored) < 4:
                raise BadInputError(f"{self.name}: the file ends inside its image data.")
            if self.crc is not None and struct.unpack(">I", stored)[0] != self.crc:
                raise BadInputError(f"{self.name}: checksum error in the image data.")
        return piece

    def _next_chunk(self) -> bool:
        while True:
            head = self.fp.read(8)
            if len(head) < 8:
                raise BadInputError(f"{self.name}: the file ends before its image data does.")
            length, kind = struct.unpack(">I4s", head)
            if kind == b"IDAT":
                self.seen, self.left, self.crc = True, length, zlib.crc32(kind)
                if length:
                    return True
                self.fp.seek(4, 1)
                continue
            if self.seen or kind == b"IEND":
                return False
            self.fp.seek(length + 4, 1)


@dataclass(frozen=True)
class _Checkpoint:
    """Where the rows from `row` on start: the file position, the inflater, the row above."""

    row: int
    where: tuple[int, int]
    inflater: Any  # zlib's Decompress, copied (it is copied again to be used)
    previous: bytes


class _Checkpoints:
    """A few files' checkpoints, so a region near the bottom of a large PNG is read from the
    nearest one above it instead of from the top (a pan at 1:1). Each costs the inflater's
    state, a piece of compressed data and one row: ~100 KB, at most `_CHECKPOINTS` a file."""

    def __init__(self, files: int) -> None:
        self._files = files
        self._held: OrderedDict[tuple[str, int, int, int], dict[int, _Checkpoint]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, path: Path) -> dict[int, _Checkpoint]:
        stat = path.stat()
        with open(path, "rb") as fp:  # a file rewritten within the clock's tick: its last bytes
            fp.seek(max(0, stat.st_size - 4096))  # (the last chunks' checksums) tell it apart
            tail = zlib.crc32(fp.read())
        key = (str(path), stat.st_mtime_ns, stat.st_size, tail)
        with self._lock:
            held = self._held.pop(key, None)
            if held is None:
                held = {}
            self._held[key] = held
            while len(self._held) > self._files:
                self._held.popitem(last=False)
            return held

    def forget(self) -> None:
        with self._lock:
            self._held.clear()

    def nbytes(self) -> int:
        with self._lock:
            return sum(
                len(c.previous) + 40_000 + _PIECE
                for points in self._held.values()
                for c in points.values()
            )


_CHECKPOINTS = 32  # per file
_KEPT = _Checkpoints(files=2)


def forget_checkpoints() -> None:
    """Let go of the row checkpoints kept for region reads (Unload all)."""
    _KEPT.forget()


def _bands(
    info: PictureInfo, png: _PngHeader, first_row: int, last_row: int
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) of the picture from the checkpoint at or above `first_row` down to
    `last_row`, unfiltered a band at a time; checkpoints are kept on the way."""
    channels = _CHANNELS[png.colour_type]
    bpp = channels * png.depth // 8
    stride = png.width * bpp
    band_rows = max(1, BAND_BYTES // (stride + 1))
    every = band_rows * max(1, -(-png.height // (band_rows * _CHECKPOINTS)))
    unfilter = _pillow_unfilter(png) if png.depth == 8 else _numpy_unfilter(png.width, bpp)
    points = _KEPT.of(info.path)
    inflater = zlib.decompressobj()
    previous = bytes(stride)
    pending = bytearray()
    row = 0
    with open(info.path, "rb") as fp:
        chunks = _Idat(fp)
        above = [r for r in points if r <= first_row]
        if above:
            start = points[max(above)]
            chunks.resume(*start.where)
            inflater, previous, row = start.inflater.copy(), start.previous, start.row
        while row < last_row:
            if row and row % every == 0 and row not in points and not pending:
                points[row] = _Checkpoint(row, chunks.where(), inflater.copy(), previous)
            need = min(band_rows, last_row - row) * (stride + 1)
            while len(pending) < need:
                # Inflated no further than the band: a flat picture's chunk inflates 1000-fold.
                data = inflater.unconsumed_tail or chunks.read()
                if data is None:
                    pending += inflater.flush()
                    if len(pending) < need:
                        raise BadInputError(f"{info.path.name}: the image data ends early.")
                    break
                pending += inflater.decompress(data, need - len(pending))
            rows = need // (stride + 1)
            with memoryview(pending) as view:
                raw = bytes(view[:need])
            del pending[:need]
            band = unfilter(raw, rows, previous)
            previous = band[-1].tobytes()
            if png.depth == 16:
                pixels = band.view(">u2").reshape(rows, png.width, channels).astype(np.uint16)
            else:
                pixels = band.reshape(rows, png.width, channels)
            yield row, pixels
            row += rows


def _pillow_unfilter(png: _PngHeader) -> Callable[[bytes, int, bytes], np.ndarray]:
    """Pillow undoes the filters of a band given as a small PNG: the row above it, unfiltered
    (filter None), then the band's rows as they are in the file."""
    channels = _CHANNELS[png.colour_type]

    def unfilter(raw: bytes, rows: int, previous: bytes) -> np.ndarray:
        ihdr = struct.pack(">IIBBBBB", png.width, rows + 1, 8, png.colour_type, 0, 0, 0)
        data = zlib.compress(b"".join((b"\0", previous, raw)), 0)
        small = b"".join((SIGNATURE, _chunk(b"IHDR", ihdr), _chunk(b"IDAT", data), _END))
        del data
        with Image.open(BytesIO(small)) as im:
            im.load()
            band = np.asarray(im)
        return band.reshape(rows + 1, png.width * channels)[1:]

    return unfilter


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(body, zlib.crc32(kind))
    return b"".join((struct.pack(">I", len(body)), kind, body, struct.pack(">I", crc)))


_END = _chunk(b"IEND", b"")


def _numpy_unfilter(width: int, bpp: int) -> Callable[[bytes, int, bytes], np.ndarray]:
    def unfilter(raw: bytes, rows: int, previous: bytes) -> np.ndarray:
        return _unfilter_band(raw, width, rows, bpp, previous)

    return unfilter


def _unfilter_band(raw: bytes, width: int, height: int, bpp: int, previous: bytes) -> np.ndarray:
    """PNG row filters undone for `height` rows under the unfiltered row `previous`; returns
    (height, width * bpp) uint8 (engine.io.png's decoder, from the band's row above)."""
    try:
        return unfilter(raw, width, height, bpp, np.frombuffer(previous, dtype=np.uint8))
    except PngError as exc:
        raise BadInputError(f"PNG: {exc}") from exc


def _read_png(info: PictureInfo, box: Region, size: tuple[int, int]) -> np.ndarray:
    """`box` of a plain PNG at `size`: each band's part of the box is reduced by a whole factor
    as it is read into the result (a block of rows split by a band waits for the next one),
    and the rest filtered at the end."""
    png = _png_header(info.path)
    if png is None:
        raise BadInputError(f"{info.path.name}: the PNG header cannot be read.")
    factor = max(1, min(box.width // size[0], box.height // size[1]))
    out_h, out_w = -(-box.height // factor), -(-box.width // factor)
    out: np.ndarray | None = None
    filled = 0
    carry: np.ndarray | None = None
    for top, rows in _bands(info, png, box.y0, box.y1):
        lo, hi = max(box.y0, top), min(box.y1, top + len(rows))
        if lo >= hi:
            continue
        part = rows[lo - top : hi - top, box.x0 : box.x1]
        if carry is not None:
            part, carry = np.concatenate([carry, part]), None
        whole = (len(part) // factor) * factor
        if hi < box.y1 and whole < len(part):
            carry, part = part[whole:].copy(), part[:whole]
        if not len(part):
            continue
        reduced = _box_reduce(part, factor) if factor > 1 else part
        if out is None:
            out = np.empty((out_h, out_w, reduced.shape[2]), reduced.dtype)
        out[filled : filled + len(reduced)] = reduced
        filled += len(reduced)
    if out is None or filled != out_h:
        raise BadInputError(f"{info.path.name}: the image data ends early.")
    if (out_w, out_h) != size:
        out = resize_frame(out, *size)
    return out
