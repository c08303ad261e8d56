"""TIFF written page by page and strip by strip: float32 grey (depth and confidence
products) and 8/16-bit pictures of 1–4 samples (the `--format tiff` image products; Pillow
writes no 16-bit colour TIFF).

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
_SHORT, _LONG, _UNDEFINED = 3, 4, 7


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
        self._page(page, 1, "<f4", sample_format=3, photometric=1)

    def add_picture(self, page: FrameLike, icc: bytes | None = None) -> None:
        """One H×W×C uint8 or uint16 page (C: grey, grey+alpha, RGB, RGBA; alpha last and
        unassociated, as the products hold it); `icc`: the colour profile to embed."""
        shape = tuple(page.shape)
        if len(shape) != 3 or shape[2] not in (1, 2, 3, 4):
            raise ValueError(f"an H×W×C page with 1 to 4 samples, not {shape}")
        dtype = np.dtype(page.dtype)
        if dtype not in (np.uint8, np.uint16):
            raise ValueError(f"8- or 16-bit pages only, not {dtype}")
        channels = int(shape[2])
        self._page(
            page,
            channels,
            "<u2" if dtype == np.uint16 else "u1",
            sample_format=1,
            photometric=2 if channels >= 3 else 1,
            alpha=channels in (2, 4),
            icc=icc,
        )

    def _page(
        self,
        page: FrameLike,
        channels: int,
        sample: str,
        *,
        sample_format: int,
        photometric: int,
        alpha: bool = False,
        icc: bytes | None = None,
    ) -> None:
        height, width = int(page.shape[0]), int(page.shape[1])
        size = np.dtype(sample).itemsize
        rows_per_strip = max(1, _ROWS_PER_STRIP_BYTES // max(1, width * size * channels))
        offsets: list[int] = []
        counts: list[int] = []
        for start in range(0, height, rows_per_strip):
            band = np.asarray(page[start : min(height, start + rows_per_strip)], dtype=sample)
            data = zlib.compress(np.ascontiguousarray(band).tobytes(), 4)
            offsets.append(self._out.tell())
            counts.append(len(data))
            self._out.write(data)
        self._align()
        offsets_at = self._array(offsets)
        counts_at = self._array(counts)
        bits_at = self._shorts([size * 8] * channels)
        formats_at = self._shorts([sample_format] * channels)
        entries: list[tuple[int, int, int, int]] = [
            (256, _LONG, 1, width),  # ImageWidth
            (257, _LONG, 1, height),  # ImageLength
            (258, _SHORT, channels, bits_at),  # BitsPerSample
            (259, _SHORT, 1, 8),  # Compression: Adobe deflate
            (262, _SHORT, 1, photometric),  # PhotometricInterpretation
            (273, _LONG, len(offsets), offsets_at),  # StripOffsets
            (277, _SHORT, 1, channels),  # SamplesPerPixel
            (278, _LONG, 1, rows_per_strip),  # RowsPerStrip
            (279, _LONG, len(counts), counts_at),  # StripByteCounts
            (284, _SHORT, 1, 1),  # PlanarConfiguration: chunky
        ]
        if alpha:
            entries.append((338, _SHORT, 1, 2))  # ExtraSamples: unassociated alpha
        entries.append((339, _SHORT, channels, formats_at))  # SampleFormat
        if icc:
            self._align()
            icc_at = self._out.tell()
            self._out.write(icc)
            self._align()
            entries.append((34675, _UNDEFINED, len(icc), icc_at))  # ICC profile
        ifd_at = self._out.tell()
        self._out.write(struct.pack("<H", len(entries)))
        for tag, kind, count, value in entries:
            if kind == _SHORT and count == 1:
                self._out.write(struct.pack("<HHIHH", tag, kind, count, value, 0))
            elif kind == _SHORT and count == 2:
                self._out.write(struct.pack("<HHI", tag, kind, count) + struct.pack("<I", value))
            else:
                self._out.write(struct.pack("<HHII", tag, kind, count, value))
        next_pointer = self._out.tell()
        self._out.write(struct.pack("<I", 0))
        self._patch(self._next_pointer, ifd_at)
        self._next_pointer = next_pointer

    def _shorts(self, values: list[int]) -> int:
        """Where a SHORT array lives: its value (one), its two values packed (two: inline in
        the entry), else its offset, written here."""
        if len(values) == 1:
            return values[0]
        if len(values) == 2:
            return int.from_bytes(struct.pack("<HH", *values), "little")
        at = self._out.tell()
        self._out.write(struct.pack(f"<{len(values)}H", *values))
        return at

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
