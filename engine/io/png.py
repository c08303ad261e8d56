"""Tessera's own PNG codec, for what Pillow does not do.

Pillow decodes 16-bit colour and grey+alpha PNGs only to 8 bits, so those (APNG included) are
decoded here: chunks parsed, zlib inflated, row filters undone with numpy. Every PNG product
is encoded here too: Pillow drops 16-bit colour, copies a frame into a 4-byte-per-pixel image
first (doubling the peak memory) and merges identical animation frames; this encoder streams
the rows block by block with libpng's per-row filter choice.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

__all__ = [
    "CHANNELS",
    "MODES16",
    "SIGNATURE",
    "FrameLike",
    "Png",
    "PngError",
    "PngWriter",
    "decode_png",
    "encode_png",
    "key_alpha",
    "png_header",
]

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}
_COLOUR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}
MODES16 = {0: "I;16", 2: "RGB;16", 4: "LA;16", 6: "RGBA;16"}  # Pillow has no such modes
_ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)


class PngError(Exception):
    """A structural problem of a PNG file; `truncated` when the file simply ends too early."""

    def __init__(self, message: str, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


@dataclass
class _ApngFrame:
    width: int
    height: int
    x: int
    y: int
    delay_ms: int
    dispose: int
    blend: int
    data: list[bytes] = field(default_factory=list)


@dataclass
class Png:
    width: int
    height: int
    depth: int
    colour_type: int
    interlace: int
    idat: list[bytes] = field(default_factory=list)
    trns: bytes | None = None
    icc: bytes | None = None
    exif: bytes | None = None
    dpi: tuple[float, float] | None = None
    num_plays: int | None = None
    num_frames: int = 0
    frames: list[_ApngFrame] = field(default_factory=list)
    idat_is_frame: bool = False


def png_header(head: bytes) -> tuple[int, int] | None:
    """(bit depth, colour type) from the IHDR of a PNG's first 26 bytes."""
    if len(head) < 26 or not head.startswith(SIGNATURE) or head[12:16] != b"IHDR":
        return None
    return head[24], head[25]


_MAX_ICC = 8 << 20  # a colour profile inflating beyond this is dropped (a zlib bomb)
_MAX_SIDE = (1 << 31) - 1  # the PNG specification's limit for a width or height


def _ihdr(body: bytes) -> Png:
    if len(body) != 13:
        raise PngError("the IHDR chunk has the wrong length")
    width, height, depth, ctype, compression, filtering, interlace = struct.unpack(">IIBBBBB", body)
    if not (0 < width <= _MAX_SIDE and 0 < height <= _MAX_SIDE):
        raise PngError(f"the image size {width}×{height} is invalid")
    if depth != 16 or ctype not in CHANNELS:
        raise PngError(f"bit depth {depth} with colour type {ctype} is not decoded here")
    if compression != 0 or filtering != 0 or interlace not in (0, 1):
        raise PngError("unknown compression, filter or interlace method")
    return Png(width, height, depth, ctype, interlace)


def _inflate_capped(body: bytes, limit: int) -> bytes | None:
    """zlib data inflated, or None when it is damaged or would exceed `limit` bytes."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error:
        return None
    return None if len(out) > limit else out


def _parse_png(data: bytes) -> Png:
    if not data.startswith(SIGNATURE):
        raise PngError("not a PNG signature")
    png: Png | None = None
    current: _ApngFrame | None = None
    pos = len(SIGNATURE)
    while True:
        if pos + 8 > len(data):
            raise PngError("the file ends before its IEND chunk", truncated=True)
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        end = pos + 12 + length
        if end > len(data):
            raise PngError("the file ends inside a chunk", truncated=True)
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[end - 4 : end])
        if zlib.crc32(kind + body) != crc:
            raise PngError(f"checksum error in the {kind.decode('latin-1')} chunk")
        pos = end
        if kind == b"IHDR":
            if png is not None:  # a second header could describe a far larger image
                raise PngError("the file has more than one IHDR chunk")
            png = _ihdr(body)
            continue
        if png is None:
            raise PngError("the IHDR chunk is missing")
        if kind == b"IEND":
            return png
        if kind == b"IDAT":
            png.idat.append(body)
        elif kind == b"fcTL" and png.num_plays is not None:
            _seq, w, h, x, y, num, den, dispose, blend = struct.unpack(">IIIIIHHBB", body)
            if w == 0 or h == 0:
                raise PngError("an animation frame has no pixels")
            delay = round(num * 1000 / (den or 100))
            current = _ApngFrame(w, h, x, y, delay, dispose, blend)
            if png.idat:  # a frame that starts after the default image: its data is fdAT
                png.frames.append(current)
            elif not png.frames and not png.idat_is_frame:
                png.idat_is_frame = True
                png.frames.append(current)
        elif kind == b"fdAT" and current is not None:
            current.data.append(body[4:])
        elif kind == b"tRNS":
            png.trns = body
        elif kind == b"iCCP":
            name_end = body.find(b"\0")
            # A broken or oversized profile is dropped; the pixels are still fine.
            png.icc = _inflate_capped(body[name_end + 2 :], _MAX_ICC) if name_end >= 0 else None
        elif kind == b"eXIf":
            png.exif = body
        elif kind == b"pHYs" and len(body) == 9:
            ppu_x, ppu_y, unit = struct.unpack(">IIB", body)
            if unit == 1 and ppu_x and ppu_y:
                png.dpi = (ppu_x * 0.0254, ppu_y * 0.0254)
        elif kind == b"acTL" and not png.idat:
            png.num_frames, png.num_plays = struct.unpack(">II", body)


def _inflate(parts: list[bytes], expected: int) -> bytes:
    inflater = zlib.decompressobj()
    out = bytearray()
    for part in parts:
        out += inflater.decompress(part, expected + 1 - len(out))
        if len(out) > expected:
            break
    if len(out) < expected:
        raise PngError("the image data ends early", truncated=True)
    return bytes(out[:expected])


def _paeth_predictor(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """PNG's Paeth predictor of uint8 neighbours (left, above, above-left), as uint8."""
    # In place where it can be: this is most of the filter's time.
    pa = b.astype(np.int16)
    pa -= c  # p − a, with p = a + b − c
    pb = a.astype(np.int16)
    pb -= c  # p − b
    pc = pa + pb  # p − c
    np.abs(pa, out=pa)
    np.abs(pb, out=pb)
    np.abs(pc, out=pc)
    out = np.where(pb <= pc, b, c)
    nearest_a = pa <= pb
    nearest_a &= pa <= pc
    np.copyto(out, a, where=nearest_a)
    return out


def unfilter(
    raw: bytes, width: int, height: int, bpp: int, above: np.ndarray | None = None
) -> np.ndarray:
    """Undo PNG row filters; returns (height, width * bpp) uint8. `above`: the unfiltered row
    over the first (a band in the middle of the image; zeros at its top).

    Sub/Average/Paeth make each pixel depend on its left neighbour, so a row cannot be
    computed in one numpy step. The pixels of one anti-diagonal (x + y = d) depend only on
    earlier diagonals, so the loop runs over the width + height diagonals, each one vectorised.
    Rows that use only None/Sub/Up take a faster row-by-row path.
    """
    stride = width * bpp
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, stride + 1)
    kinds = rows[:, 0]
    if kinds.size and int(kinds.max()) > 4:
        raise PngError("unknown row filter type")
    data = rows[:, 1:]
    if not np.any(kinds >= 3):
        out = np.empty((height, stride), dtype=np.uint8)
        previous = np.zeros(stride, dtype=np.uint8) if above is None else above
        for y in range(height):
            kind = kinds[y]
            if kind == 0:
                out[y] = data[y]
            elif kind == 1:
                np.cumsum(
                    data[y].reshape(width, bpp),
                    axis=0,
                    dtype=np.uint8,
                    out=out[y].reshape(width, bpp),
                )
            else:
                np.add(data[y], previous, out=out[y])
            previous = out[y]
        return out
    # Padded grid: a zero row above and a zero column left of the image; cell (y+1, x+1).
    cols = width + 1
    src = np.zeros(((height + 1) * cols, bpp), dtype=np.uint8)
    src.reshape(height + 1, cols, bpp)[1:, 1:] = data.reshape(height, width, bpp)
    out_cells = np.zeros_like(src)
    if above is not None:
        out_cells.reshape(height + 1, cols, bpp)[0, 1:] = above.reshape(width, bpp)
    kind_cells = kinds.astype(np.int16)[:, None]
    for d in range(width + height - 1):
        y0, y1 = max(0, d - width + 1), min(height - 1, d)
        start = y0 * width + width + d + 2  # flat index of (y0 + 1, d - y0 + 1)
        stop = start + (y1 - y0) * width + 1
        here = slice(start, stop, width)
        a = out_cells[start - 1 : stop - 1 : width].astype(np.int16)
        b = out_cells[start - cols : stop - cols : width].astype(np.int16)
        k = kind_cells[y0 : y1 + 1]
        pred = np.where(k == 1, a, np.where(k == 2, b, 0))
        if np.any(k == 3):
            pred = np.where(k == 3, (a + b) >> 1, pred)
        if np.any(k == 4):
            paeth = _paeth_predictor(
                out_cells[start - 1 : stop - 1 : width],
                out_cells[start - cols : stop - cols : width],
                out_cells[start - cols - 1 : stop - cols - 1 : width],
            )
            pred = np.where(k == 4, paeth, pred)
        out_cells[here] = src[here] + pred.astype(np.uint8)
    return out_cells.reshape(height + 1, cols * bpp)[1:, bpp:].copy()


def _decode_png_pixels(parts: list[bytes], png: Png, width: int, height: int) -> np.ndarray:
    channels = CHANNELS[png.colour_type]
    bpp = channels * 2
    passes = _ADAM7 if png.interlace else ((0, 0, 1, 1),)
    sizes = []
    for x0, y0, dx, dy in passes:
        pw, ph = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        sizes.append((pw, ph) if pw > 0 and ph > 0 else (0, 0))
    raw = _inflate(parts, sum(ph * (pw * bpp + 1) for pw, ph in sizes))
    out = np.empty((height, width, channels), dtype=np.uint16)
    offset = 0
    for (x0, y0, dx, dy), (pw, ph) in zip(passes, sizes, strict=True):
        if pw == 0:
            continue
        length = ph * (pw * bpp + 1)
        rows = unfilter(raw[offset : offset + length], pw, ph, bpp)
        offset += length
        out[y0::dy, x0::dx] = rows.view(">u2").reshape(ph, pw, channels)
    return out


def _with_trns(pixels: np.ndarray, png: Png) -> np.ndarray:
    if png.trns is None or png.colour_type not in (0, 2):
        return pixels
    count = 1 if png.colour_type == 0 else 3
    if len(png.trns) != 2 * count:
        return pixels
    key = struct.unpack(f">{count}H", png.trns)
    alpha = key_alpha(pixels, key[0] if count == 1 else key, 65535)
    return pixels if alpha is None else np.concatenate([pixels, alpha], axis=2)


def _composite_apng(png: Png, channels: int) -> tuple[list[np.ndarray], list[int]]:
    canvas = np.zeros((png.height, png.width, channels), dtype=np.uint16)
    frames: list[np.ndarray] = []
    delays: list[int] = []
    has_alpha = channels in (2, 4)
    # Only the declared frames: the pixel limit was checked against that count.
    for index, frame in enumerate(png.frames[: png.num_frames]):
        if frame.x + frame.width > png.width or frame.y + frame.height > png.height:
            raise PngError(f"animation frame {index + 1} lies outside the image")
        parts = png.idat if index == 0 and png.idat_is_frame else frame.data
        sub = _with_trns(_decode_png_pixels(parts, png, frame.width, frame.height), png)
        region = (slice(frame.y, frame.y + frame.height), slice(frame.x, frame.x + frame.width))
        dispose = 1 if index == 0 and frame.dispose == 2 else frame.dispose
        previous = canvas[region].copy() if dispose == 2 else None
        if frame.blend == 1 and has_alpha:
            canvas[region] = _over(sub, canvas[region])
        else:
            canvas[region] = sub
        frames.append(canvas.copy())
        delays.append(frame.delay_ms)
        if dispose == 1:
            canvas[region] = 0
        elif previous is not None:
            canvas[region] = previous
    return frames, delays


def _over(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """Porter-Duff 'over' of 16-bit straight-alpha pixels."""
    ta = top[..., -1:].astype(np.float64) / 65535.0
    ba = bottom[..., -1:].astype(np.float64) / 65535.0
    out_a = ta + ba * (1.0 - ta)
    colour = top[..., :-1] * ta + bottom[..., :-1] * ba * (1.0 - ta)
    safe = np.where(out_a > 0, out_a, 1.0)
    result = np.concatenate([colour / safe, out_a * 65535.0], axis=2)
    return np.rint(np.clip(result, 0, 65535)).astype(np.uint16)


def decode_png(
    data: bytes, max_pixels: int | None = None
) -> tuple[Png, list[np.ndarray], list[int]]:
    """The parsed chunks, the frames (uint16 H×W×C, an APNG composited to full canvases) and
    the animation delays in ms (empty for a still image), of a 16-bit PNG.

    Raises PngError on a damaged file, and before inflating anything when the image (all its
    frames) has more than `max_pixels` pixels. MemoryError is left to the caller.
    """
    try:
        png = _parse_png(data)
        animated = png.num_plays is not None and bool(png.frames)
        count = min(png.num_frames, len(png.frames)) if animated else 1
        if max_pixels is not None and png.width * png.height * max(count, 1) > max_pixels:
            raise PngError(
                f"the image is {png.width}×{png.height} pixels × {count} frame(s), over the "
                f"limit of {max_pixels} pixels"
            )
        channels = CHANNELS[png.colour_type]
        if animated:
            frames, delays = _composite_apng(png, channels)
            if not frames:
                raise PngError("the animation declares no frames")
            return png, frames, delays
        pixels = _decode_png_pixels(png.idat, png, png.width, png.height)
        return png, [_with_trns(pixels, png)], []
    except (struct.error, zlib.error, ValueError, KeyError, IndexError) as e:
        raise PngError(str(e) or type(e).__name__) from e


def key_alpha(pixels: np.ndarray, key: object, top: int) -> np.ndarray | None:
    """Alpha channel for a transparent colour key (tRNS of grey/RGB images), or None."""
    if isinstance(key, int) and pixels.shape[2] == 1:
        match = pixels[..., 0] == key
    elif isinstance(key, tuple) and len(key) == pixels.shape[2]:
        match = np.all(pixels == np.asarray(key, dtype=pixels.dtype), axis=2)
    else:
        return None
    return np.where(match, 0, top).astype(pixels.dtype)[..., None]


# ---------------------------------------------------------------------------------------------
# Encoding


# The filter works on this many bytes of rows at a time: its temporaries (the shifted rows,
# the five candidates, Paeth's int16 distances) stay about 16× this, about 1 MB, not 50× a 256 KB block of rows. Band
# writing runs it beside the tiles' runs, where every MB is on top of their peak (DESIGN §7).
_FILTER_CHUNK = 1 << 16


def _filter_rows(image: np.ndarray, bpp: int, previous: np.ndarray) -> bytes:
    """PNG-filter rows (uint8, rows × stride), choosing per row the filter with the smallest
    sum of absolute differences (libpng's heuristic). `previous` is the row above the first."""
    rows = max(1, _FILTER_CHUNK // max(1, image.shape[1]))
    parts = []
    for r in range(0, image.shape[0], rows):
        above = previous if r == 0 else image[r - 1]
        parts.append(_filter_chunk(image[r : r + rows], bpp, above))
    return b"".join(parts)


def _filter_chunk(image: np.ndarray, bpp: int, previous: np.ndarray) -> bytes:
    # Sub, Up and Average in uint8 (arithmetic modulo 256 is what PNG's filters are); only
    # Paeth's distances need int16. Half the memory traffic of doing all five in int16.
    x = image
    b = np.empty_like(x)
    b[0] = previous
    b[1:] = x[:-1]
    a = np.zeros_like(x)
    a[:, bpp:] = x[:, :-bpp]
    c = np.zeros_like(b)
    c[:, bpp:] = b[:, :-bpp]
    n, stride = x.shape
    filtered = np.empty((5, n, stride), np.uint8)
    filtered[0] = x
    np.subtract(x, a, out=filtered[1])
    np.subtract(x, b, out=filtered[2])
    np.subtract(x, (a & b) + ((a ^ b) >> 1), out=filtered[3])  # ⌊(a + b) / 2⌋ without overflow
    np.subtract(x, _paeth_predictor(a, b, c), out=filtered[4])
    # |v| of each byte read as int8 (abs of −128 wraps to −128, whose uint8 view is 128).
    scores = np.abs(filtered.view(np.int8)).view(np.uint8).sum(axis=2, dtype=np.int32)
    choice = np.argmin(scores, axis=0)
    out = np.empty((n, stride + 1), np.uint8)
    out[:, 0] = choice
    out[:, 1:] = filtered[choice, np.arange(n)]
    return out.tobytes()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


class FrameLike(Protocol):
    """A frame to encode: an H×W×C array, or a source that makes a band of rows on demand."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    def __getitem__(self, rows: slice, /) -> np.ndarray: ...


# zlib level 4, not its default 6: on filtered photo rows it is 4–5× faster for files 4–6 %
# larger (measured on upscaled photos), and writing is most of the I/O time of a fast model.
_LEVEL = 4
# A large frame's blocks are filtered and deflated on two threads at once (numpy and zlib
# release the GIL), each block a raw deflate stream primed with the 32 KB before it, as pigz
# does: the streams join into one, the file as small as one stream's (measured: 0.002 % apart).
# Two, not one per core: at most two blocks are in flight (see below).
_WRITERS = 2 if (os.cpu_count() or 1) > 1 else 1
_WINDOW = 1 << 15  # deflate's window: what a block can refer back to


def _compressed_rows(frame: FrameLike, check: Callable[[], None] | None = None) -> Iterator[bytes]:
    """The zlib stream of a frame's filtered rows, piece by piece. Rows are read here, on the
    caller's thread (a `Rows` source computes them), one block of rows at a time."""
    height, width, channels = frame.shape
    depth = frame.dtype.itemsize
    bpp = channels * depth
    stride = width * bpp
    step = max(1, (1 << 18) // max(1, stride))  # bound the filter temporaries to a few MB

    def block_at(start: int) -> np.ndarray:
        if check is not None:
            check()  # a cancel stops a large write within one block of rows
        # Big-endian bytes block by block: never a second copy of the whole frame.
        part = frame[start : start + step]
        if depth == 2:
            part = part.astype(">u2")
        return np.ascontiguousarray(part).view(np.uint8).reshape(-1, stride)

    previous = np.zeros(stride, dtype=np.uint8)
    if _WRITERS < 2 or height <= 2 * step:
        compressor = zlib.compressobj(_LEVEL)
        for start in range(0, height, step):
            block = block_at(start)
            piece = compressor.compress(_filter_rows(block, bpp, previous))
            previous = block[-1]
            if piece:
                yield piece
        yield compressor.flush()
        return
    yield zlib.compress(b"", _LEVEL)[:2]  # the zlib header; the blocks are raw deflate
    pool = ThreadPoolExecutor(_WRITERS, thread_name_prefix="tessera-png")
    pending: deque[tuple[Future[bytes], Future[bytes]]] = deque()
    before: Future[bytes] | None = None  # the filtered bytes of the block before
    adler = 1
    try:
        for start in range(0, height, step):
            block = block_at(start)
            filtered: Future[bytes] = Future()
            last = start + step >= height
            deflated = pool.submit(_deflate_block, block, bpp, previous, filtered, before, last)
            pending.append((filtered, deflated))
            before, previous = filtered, block[-1]
            # At most two blocks in flight: the rows a band-written product reads ahead pin
            # the finished tiles they come from (a third block: +20 MiB of peak at 1536² ×4).
            while len(pending) > 1:
                rows_done, block_done = pending.popleft()
                adler = zlib.adler32(rows_done.result(), adler)
                yield block_done.result()
        while pending:
            rows_done, block_done = pending.popleft()
            adler = zlib.adler32(rows_done.result(), adler)
            yield block_done.result()
    finally:
        # A block waits only for the one before it, which started first: no wait is left.
        pool.shutdown(wait=True, cancel_futures=True)
    yield struct.pack(">I", adler)


def _deflate_block(
    block: np.ndarray,
    bpp: int,
    previous: np.ndarray,
    filtered: Future[bytes],
    before: Future[bytes] | None,
    last: bool,
) -> bytes:
    """Filter one block of rows (its bytes go to `filtered`, for the next block and the
    checksum) and deflate them as a raw stream primed with the end of the block before."""
    try:
        data = _filter_rows(block, bpp, previous)
    except BaseException as e:
        filtered.set_exception(e)
        raise
    filtered.set_result(data)
    if before is None:
        compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)
    else:
        compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15, zdict=before.result()[-_WINDOW:])
    # A sync flush ends a block on a byte boundary without ending the stream; the last block
    # ends it.
    return compressor.compress(data) + compressor.flush(
        zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH
    )


def _text_chunk(key: str, value: str) -> bytes:
    try:
        return _png_chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1"))
    except UnicodeEncodeError:  # iTXt: uncompressed UTF-8, no language tag
        body = key.encode("latin-1") + b"\0\0\0\0\0" + value.encode("utf-8")
        return _png_chunk(b"iTXt", body)


class PngWriter:
    """Writes a PNG — or an APNG when `frames` > 1 — frame by frame, rows block by block, so
    neither the frames nor a whole frame's filtered bytes are ever all in memory. A frame is
    an H×W×C uint8/uint16 array or a `Rows` source that makes its rows on demand."""

    def __init__(
        self,
        out: BinaryIO,
        *,
        shape: tuple[int, int, int],
        dtype: np.dtype[Any],
        frames: int = 1,
        loop: int = 0,
        icc: bytes | None = None,
        dpi: tuple[float, float] | None = None,
        exif: bytes | None = None,
        text: Mapping[str, str] | None = None,
        check: Callable[[], None] | None = None,
    ) -> None:
        self._out = out
        self._check = check  # called between blocks of rows; may raise to stop (a cancel)
        self._shape = shape
        self._count = frames
        self._added = 0
        self._sequence = 0
        height, width, channels = shape
        bits = 8 * np.dtype(dtype).itemsize
        out.write(SIGNATURE)
        header = struct.pack(">IIBBBBB", width, height, bits, _COLOUR_TYPE[channels], 0, 0, 0)
        out.write(_png_chunk(b"IHDR", header))
        for key, value in (text or {}).items():
            out.write(_text_chunk(key, value))
        if icc:
            out.write(_png_chunk(b"iCCP", b"ICC Profile\0\0" + zlib.compress(icc)))
        if dpi:
            ppm = [round(v / 0.0254) for v in dpi]
            out.write(_png_chunk(b"pHYs", struct.pack(">IIB", ppm[0], ppm[1], 1)))
        if exif:
            out.write(_png_chunk(b"eXIf", exif[6:] if exif.startswith(b"Exif\0\0") else exif))
        if frames > 1:
            out.write(_png_chunk(b"acTL", struct.pack(">II", frames, loop)))

    def add(self, frame: FrameLike, duration: int = 100) -> None:
        """The next frame (`duration` in ms, for an APNG)."""
        if tuple(frame.shape) != self._shape:
            raise ValueError(f"frame of shape {tuple(frame.shape)} in a {self._shape} PNG")
        if self._added >= self._count:
            raise ValueError(f"more than the {self._count} frame(s) announced")
        height, width, _ = self._shape
        if self._count > 1:
            control = struct.pack(
                ">IIIIIHHBB", self._sequence, width, height, 0, 0, min(duration, 65535), 1000, 0, 0
            )
            self._out.write(_png_chunk(b"fcTL", control))
            self._sequence += 1
        for piece in _compressed_rows(frame, self._check):
            if not piece:
                continue
            if self._added == 0:
                self._out.write(_png_chunk(b"IDAT", piece))
            else:
                self._out.write(_png_chunk(b"fdAT", struct.pack(">I", self._sequence) + piece))
                self._sequence += 1
        self._added += 1

    def close(self) -> None:
        if self._added != self._count:
            raise ValueError(f"{self._added} frame(s) written of the {self._count} announced")
        self._out.write(_png_chunk(b"IEND", b""))


def encode_png(
    path: Path | BinaryIO,
    frames: Sequence[FrameLike],
    *,
    durations: Sequence[int],
    loop: int = 0,
    icc: bytes | None = None,
    dpi: tuple[float, float] | None = None,
    exif: bytes | None = None,
    text: Mapping[str, str] | None = None,
    check: Callable[[], None] | None = None,
) -> None:
    """Write `frames` (H×W×C uint8 or uint16, all one shape) to `path` (a path, or a binary
    file left open) as a PNG, or an APNG when there are several (`durations`: one per frame,
    in ms; `loop` 0 = forever), streaming the rows. `check` is called between blocks of rows
    and may raise to stop."""
    first = frames[0]
    target = open(path, "wb") if isinstance(path, (str, Path)) else contextlib.nullcontext(path)
    with target as out:
        writer = PngWriter(
            out,
            shape=tuple(first.shape),  # type: ignore[arg-type]
            dtype=first.dtype,
            frames=len(frames),
            loop=loop,
            icc=icc,
            dpi=dpi,
            exif=exif,
            text=text,
            check=check,
        )
        for frame, delay in zip(frames, durations, strict=True):
            writer.add(frame, delay)
        writer.close()
