"""OpenEXR written by Tessera itself: single-part scanline files, ZIP-compressed, band by band.

Why our own writer and not a library: a scanline EXR is a small, stable spec (a header of
typed attributes, a table of chunk offsets, then blocks of 16 rows, each channel's samples
byte-split, delta-coded and zlib-compressed), the official `OpenEXR` bindings would add a
native dependency to the installer for ~150 lines of code, and writing the blocks ourselves
lets a product be encoded a band at a time like our PNG and TIFF (memory does not grow with
the image). The tests read every file back with the official bindings (an independent reader).

What is written:
- pictures (`image_channels`): 8-bit frames as half floats, 16-bit frames as 32-bit floats
  (half has an 11-bit significand), in linear light (the sRGB curve undone), colour
  premultiplied by alpha, as compositing programs expect of EXR; channels R, G, B (A) or Y (A);
- data (`data_channels`): float32 maps as they are (depth: channel `Z`; normals: `R G B` =
  x y z, so any viewer shows them), never premultiplied.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import BinaryIO

import numpy as np

from engine.io.png import FrameLike

MAGIC = b"\x76\x2f\x31\x01"
_ROWS_PER_CHUNK = 16  # ZIP_COMPRESSION's block height (the spec's)
_ZIP = 3


class PixelType(IntEnum):
    UINT = 0
    HALF = 1
    FLOAT = 2

    @property
    def dtype(self) -> np.dtype[np.generic]:
        return np.dtype({0: "<u4", 1: "<f2", 2: "<f4"}[int(self)])


@dataclass(frozen=True)
class Channel:
    name: str
    type: PixelType


def image_channels(channels: int, dtype: np.dtype[np.generic]) -> list[Channel]:
    """The EXR channels of a picture with `channels` samples (grey, grey+alpha, RGB, RGBA)."""
    kind = PixelType.FLOAT if np.dtype(dtype) == np.uint16 else PixelType.HALF
    names = {1: "Y", 2: "YA", 3: "RGB", 4: "RGBA"}[channels]
    return [Channel(n, kind) for n in names]


def data_channels(
    names: Sequence[str] = ("Z",), kind: PixelType = PixelType.FLOAT
) -> list[Channel]:
    return [Channel(name, kind) for name in names]


def srgb_to_linear(values: np.ndarray) -> np.ndarray:
    """The sRGB transfer curve undone (IEC 61966-2-1), on 0…1 floats."""
    low = values / 12.92
    high = ((values + 0.055) / 1.055) ** 2.4
    return np.where(values <= 0.04045, low, high).astype(np.float32)


def picture_to_linear(band: np.ndarray) -> np.ndarray:
    """H×W×C uint8/uint16 sRGB samples (C: 1–4, alpha last for 2 and 4) as linear float32
    with colour premultiplied by alpha."""
    top = 65535.0 if band.dtype == np.uint16 else 255.0
    values = band.astype(np.float32) / np.float32(top)
    alpha = band.shape[2] in (2, 4)
    colour = values[..., :-1] if alpha else values
    colour = srgb_to_linear(colour)
    if alpha:
        colour = colour * values[..., -1:]
        return np.concatenate([colour, values[..., -1:]], axis=2)
    return colour


def _attribute(name: str, kind: str, value: bytes) -> bytes:
    return name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value)) + value


def _header(width: int, height: int, channels: list[Channel]) -> bytes:
    chlist = b"".join(
        c.name.encode() + b"\0" + struct.pack("<iB3xii", int(c.type), 0, 1, 1)
        for c in sorted(channels, key=lambda c: c.name)
    )
    box = struct.pack("<iiii", 0, 0, width - 1, height - 1)
    return b"".join(
        [
            MAGIC,
            struct.pack("<I", 2),  # version 2, single-part scanline, short names
            _attribute("channels", "chlist", chlist + b"\0"),
            _attribute("compression", "compression", bytes([_ZIP])),
            _attribute("dataWindow", "box2i", box),
            _attribute("displayWindow", "box2i", box),
            _attribute("lineOrder", "lineOrder", b"\0"),  # increasing y
            _attribute("pixelAspectRatio", "float", struct.pack("<f", 1.0)),
            _attribute("screenWindowCenter", "v2f", struct.pack("<ff", 0.0, 0.0)),
            _attribute("screenWindowWidth", "float", struct.pack("<f", 1.0)),
            b"\0",
        ]
    )


def _zip_block(raw: bytes) -> bytes:
    """ZIP_COMPRESSION's coding: bytes split into even and odd halves, delta-coded, deflated;
    stored raw when that is not smaller (the reader tells them apart by the size)."""
    data = np.frombuffer(raw, np.uint8)
    split = np.concatenate([data[0::2], data[1::2]])
    coded = split.copy()
    coded[1:] = (split[1:].astype(np.int16) - split[:-1].astype(np.int16) + 128).astype(np.uint8)
    packed = zlib.compress(coded.tobytes(), 4)
    return packed if len(packed) < len(raw) else raw


class ExrWriter:
    """One EXR image written to `out` (a seekable binary file) a block of rows at a time.

    `convert(band)` turns the frame's rows into float32 H×W×C samples in `channels`' order
    (as given, not sorted)."""

    def __init__(
        self,
        out: BinaryIO,
        width: int,
        height: int,
        channels: list[Channel],
        convert: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"an EXR image needs a size, not {width}×{height}")
        self._out, self._width, self._height = out, width, height
        self._channels = channels
        self._order = sorted(range(len(channels)), key=lambda i: channels[i].name)
        self._convert = convert
        out.write(_header(width, height, channels))
        self._table_at = out.tell()
        self._offsets: list[int] = []
        count = -(-height // _ROWS_PER_CHUNK)
        out.write(b"\0" * 8 * count)  # the offset table, filled in by `close`
        self._written = 0

    def write(self, frame: FrameLike, check: Callable[[], None] | None = None) -> None:
        """All rows of `frame` (H×W×C or H×W; an array or a `Rows` source)."""
        for start in range(0, self._height, _ROWS_PER_CHUNK):
            stop = min(self._height, start + _ROWS_PER_CHUNK)
            self.add_rows(np.asarray(frame[start:stop]))
            if check is not None:
                check()

    def add_rows(self, band: np.ndarray) -> None:
        """The next 16 rows (fewer only at the bottom)."""
        if band.ndim == 2:
            band = band[..., None]
        samples = self._convert(band) if self._convert is not None else band
        rows = int(samples.shape[0])
        parts: list[bytes] = []
        for y in range(rows):
            for index in self._order:
                kind = self._channels[index].type
                parts.append(samples[y, :, index].astype(kind.dtype).tobytes())
        data = _zip_block(b"".join(parts))
        self._offsets.append(self._out.tell())
        self._out.write(struct.pack("<ii", self._written, len(data)))
        self._out.write(data)
        self._written += rows

    def close(self) -> None:
        if self._written != self._height:
            raise ValueError(f"{self._written} of {self._height} rows were written")
        end = self._out.tell()
        self._out.seek(self._table_at)
        self._out.write(struct.pack(f"<{len(self._offsets)}Q", *self._offsets))
        self._out.seek(end)


def write_picture(out: BinaryIO, frame: FrameLike, check: Callable[[], None] | None = None) -> None:
    """An 8/16-bit picture (H×W×C) as a linear, premultiplied EXR."""
    height, width, channels = (int(n) for n in frame.shape)
    writer = ExrWriter(
        out, width, height, image_channels(channels, np.dtype(frame.dtype)), picture_to_linear
    )
    writer.write(frame, check)
    writer.close()


def write_data(out: BinaryIO, frame: FrameLike, names: Sequence[str] = ("Z",)) -> None:
    """A float map (H×W, or H×W×C with a channel name each) as float32 channels."""
    height, width = int(frame.shape[0]), int(frame.shape[1])
    writer = ExrWriter(out, width, height, data_channels(names))
    writer.write(frame)
    writer.close()
