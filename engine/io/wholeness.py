"""Whether a file is whole: it ends where its own format says it ends.

Cheap (a few reads at most, never a decode): PNG's IEND chunk, JPEG's EOI marker, the RIFF
size of a WebP, every IFD, out-of-line value and strip of a TIFF inside the file, every chunk of
an EXR's offset table inside the file, a JSON document that parses. Used to tell a finished
product from one another program cut short (engine/resume.py) and a file still being copied
into a watched folder from one that arrived (engine/watch.py).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import BinaryIO

__all__ = ["is_whole"]

_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_TAIL_BYTES = 64


def is_whole(path: Path) -> bool:
    """Whether `path` is a regular, non-empty file that ends where its format says it ends.

    Formats Tessera writes are checked from their own structure (a few reads at most);
    others (a clip, a PLY) count as whole when present and not empty."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size == 0:
                return False
            head = file.read(16)
            file.seek(max(0, size - _TAIL_BYTES))
            tail = file.read()
            suffix = Path(path).suffix.lower()
            if head.startswith(b"\x89PNG\r\n\x1a\n"):
                return tail.endswith(_PNG_END)
            if head.startswith(b"\xff\xd8"):
                return tail.rstrip(b"\x00").endswith(b"\xff\xd9")
            if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
                return struct.unpack("<I", head[4:8])[0] + 8 == size
            if head[:4] in (b"II*\x00", b"MM\x00*"):
                return _tiff_whole(file, size, head[:2] == b"II")
            if head.startswith(b"\x76\x2f\x31\x01"):
                return _exr_whole(file, size)
            if suffix == ".json":
                file.seek(0)
                json.loads(file.read().decode("utf-8"))
                return True
            return True
    except (OSError, ValueError, struct.error):
        return False


def _tiff_whole(f: BinaryIO, size: int, little: bool) -> bool:
    """Every page's IFD, its values stored apart and its strips lie inside the file."""
    order = "<" if little else ">"
    f.seek(4)
    (ifd,) = struct.unpack(order + "I", f.read(4))
    pages = 0
    while ifd and pages < 100_000:
        if ifd + 2 > size:
            return False
        f.seek(ifd)
        (count,) = struct.unpack(order + "H", f.read(2))
        entries = f.read(12 * count)
        next_at = f.read(4)
        if len(entries) != 12 * count or len(next_at) != 4:
            return False
        strips: dict[int, list[int]] = {}
        for i in range(count):
            entry = entries[12 * i : 12 * i + 12]
            tag, kind, number = struct.unpack(order + "HHI", entry[:8])
            length = _TIFF_SIZES.get(kind, 1) * number
            raw = entry[8 : 8 + length]
            if length > 4:  # stored apart, at an offset
                (at,) = struct.unpack(order + "I", entry[8:12])
                if at + length > size:
                    return False
                if tag in (273, 279):
                    f.seek(at)
                    raw = f.read(length)
            if tag in (273, 279) and kind in (3, 4):
                strips[tag] = list(struct.unpack(order + ("H" if kind == 3 else "I") * number, raw))
        offsets, counts = strips.get(273, []), strips.get(279, [])
        if not offsets or len(offsets) != len(counts):
            return False
        if max(o + c for o, c in zip(offsets, counts, strict=True)) > size:
            return False
        (ifd,) = struct.unpack(order + "I", next_at)
        pages += 1
    return pages > 0


_TIFF_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 16: 8}


def _exr_whole(f: BinaryIO, size: int) -> bool:
    """A single-part scanline EXR: every chunk in the offset table is inside the file."""
    f.seek(8)
    height = 0
    compression = 0
    while True:  # the header: name, type, size, value … then an empty name
        name = _cstring(f)
        if not name:
            break
        _kind = _cstring(f)
        (length,) = struct.unpack("<i", f.read(4))
        value = f.read(length)
        if len(value) != length:
            return False
        if name == b"dataWindow":
            _x0, y0, _x1, y1 = struct.unpack("<iiii", value)
            height = y1 - y0 + 1
        elif name == b"compression":
            compression = value[0]
    rows = {0: 1, 1: 1, 2: 1, 3: 16, 4: 32, 5: 16, 6: 32, 7: 32}.get(compression, 1)
    chunks = -(-height // rows)
    table = f.read(8 * chunks)
    if height < 1 or len(table) != 8 * chunks:
        return False
    offsets = struct.unpack(f"<{chunks}Q", table)
    last = max(offsets)
    if min(offsets) == 0 or last + 8 > size:
        return False
    f.seek(last + 4)
    (length,) = struct.unpack("<i", f.read(4))
    return last + 8 + length <= size


def _cstring(f: BinaryIO) -> bytes:
    data = bytearray()
    while len(data) < 256:
        byte = f.read(1)
        if not byte:
            raise ValueError("the header ends early")
        if byte == b"\0":
            return bytes(data)
        data += byte
    raise ValueError("a header name is too long")
