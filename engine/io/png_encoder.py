"""Tessera's PNG encoder: every PNG product is encoded here. Pillow drops 16-bit colour,
copies a frame into a 4-byte-per-pixel image first (doubling the peak memory) and merges
identical animation frames; this encoder streams the rows block by block with libpng's
per-row filter choice, APNG frame by frame."""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Protocol

import numpy as np

from engine.io.png_format import SIGNATURE, paeth_predictor

_COLOUR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}


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
    np.subtract(x, paeth_predictor(a, b, c), out=filtered[4])
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


# Deflate by Intel's ISA-L (the `isal` package) where it is installed: at its level 3 it
# deflates a 4096×3072 upscaled photo's filtered rows 5.6× faster than zlib's level 4 (0.09 s
# against 0.51 s of CPU) into a file 0.04 % larger, and on a 2-core machine that CPU is taken
# from the model run beside it (docs/cpu-kernel.md). zlib where there is no wheel of it: level
# 4, not its default 6: 4–5× faster for files 4–6 % larger.
def _deflate_library() -> tuple[ModuleType, int]:
    try:
        from isal import isal_zlib
    except ImportError:  # a platform without isal's wheels (Windows on ARM)
        return zlib, 4
    return isal_zlib, 3  # ISA-L's densest level


_deflate, _LEVEL = _deflate_library()

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
        compressor = _deflate.compressobj(_LEVEL)
        for start in range(0, height, step):
            block = block_at(start)
            piece = compressor.compress(_filter_rows(block, bpp, previous))
            previous = block[-1]
            if piece:
                yield piece
        yield compressor.flush()
        return
    yield _deflate.compress(b"", _LEVEL)[:2]  # the zlib header; the blocks are raw deflate
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
                adler = _deflate.adler32(rows_done.result(), adler)
                yield block_done.result()
        while pending:
            rows_done, block_done = pending.popleft()
            adler = _deflate.adler32(rows_done.result(), adler)
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
        compressor = _deflate.compressobj(_LEVEL, _deflate.DEFLATED, -15)
    else:
        compressor = _deflate.compressobj(
            _LEVEL, _deflate.DEFLATED, -15, zdict=before.result()[-_WINDOW:]
        )
    # A sync flush ends a block on a byte boundary without ending the stream; the last block
    # ends it.
    return compressor.compress(data) + compressor.flush(
        _deflate.Z_FINISH if last else _deflate.Z_SYNC_FLUSH
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
