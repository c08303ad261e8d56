"""Float32 TIFF written page by page and strip by strip (depth and confidence products).

Pillow writes a multi-page TIFF only from pages it holds all at once; this writer takes one
page at a time, and a page a band of rows at a time, so a depth sequence's float product never
needs more than a band in memory. Classic little-endian TIFF, one grey float32 sample per
pixel, Adobe-deflate strips: what Pillow, libtiff, GDAL and image editors read.
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO

import numpy as np

from engine.io.png import FrameLike

_ROWS_PER_STRIP_BYTES = 1 << 16  # ~64 KiB of samples per strip, as libtiff's default aims at
_SHORT, _LONG = 3, 4


class TiffWriter:
    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        out.write(b"II*\x00")
        self._next_pointer = out.tell()  # where the offset of the next IFD goes
        out.write(struct.pack("<I", 0))

    def add_page(self, page: FrameLike) -> None:
        """One H×W (or H×W×1) float32 page; an array or a `Rows` source."""
        shape = tuple(page.shape)
        if (len(shape) == 3 and shape[2] != 1) or len(shape) not in (2, 3):
            raise ValueError(f"a grey float page, not {shape}")
        if np.dtype(page.dtype) != np.float32:
            raise ValueError(f"float32 pages only, not {page.dtype}")
        height, width = int(shape[0]), int(shape[1])
        rows_per_strip = max(1, _ROWS_PER_STRIP_BYTES // max(1, width * 4))
        offsets: list[int] = []
        counts: list[int] = []
        for start in range(0, height, rows_per_strip):
            band = np.asarray(page[start : min(height, start + rows_per_strip)], dtype="<f4")
            data = zlib.compress(np.ascontiguousarray(band).tobytes(), 4)
            offsets.append(self._out.tell())
            counts.append(len(data))
            self._out.write(data)
        self._align()
        offsets_at = self._array(offsets)
        counts_at = self._array(counts)
        entries: list[tuple[int, int, int, int]] = [
            (256, _LONG, 1, width),  # ImageWidth
            (257, _LONG, 1, height),  # ImageLength
            (258, _SHORT, 1, 32),  # BitsPerSample
            (259, _SHORT, 1, 8),  # Compression: Adobe deflate
            (262, _SHORT, 1, 1),  # PhotometricInterpretation: BlackIsZero
            (273, _LONG, len(offsets), offsets_at),  # StripOffsets
            (277, _SHORT, 1, 1),  # SamplesPerPixel
            (278, _LONG, 1, rows_per_strip),  # RowsPerStrip
            (279, _LONG, len(counts), counts_at),  # StripByteCounts
            (284, _SHORT, 1, 1),  # PlanarConfiguration: chunky
            (339, _SHORT, 1, 3),  # SampleFormat: IEEE float
        ]
        ifd_at = self._out.tell()
        self._out.write(struct.pack("<H", len(entries)))
        for tag, kind, count, value in entries:
            if kind == _SHORT and count == 1:
                self._out.write(struct.pack("<HHIHH", tag, kind, count, value, 0))
            else:
                self._out.write(struct.pack("<HHII", tag, kind, count, value))
        next_pointer = self._out.tell()
        self._out.write(struct.pack("<I", 0))
        self._patch(self._next_pointer, ifd_at)
        self._next_pointer = next_pointer

    def _array(self, values: list[int]) -> int:
        """Where a LONG array lives: inline in the IFD entry for one value, else written here."""
        if len(values) == 1:
            return values[0]
        at = self._out.tell()
        self._out.write(struct.pack(f"<{len(values)}I", *values))
        return at

    def _align(self) -> None:
        if self._out.tell() % 2:
            self._out.write(b"\x00")  # IFDs start on a word boundary

    def _patch(self, at: int, value: int) -> None:
        here = self._out.tell()
        self._out.seek(at)
        self._out.write(struct.pack("<I", value))
        self._out.seek(here)
