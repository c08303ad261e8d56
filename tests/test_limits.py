"""Nothing gets past the limits (issue #20): page bombs, output-size bombs, full disks,
read-only model folders, leftovers of killed processes, signals at start-up.

Full and read-only file systems are real mounts (a 2 MB tmpfs; a read-only bind mount); the
tests that need them skip, saying why, where this user cannot mount.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from engine.errors import BadInputError
from engine.io.reading import load_image

LIMIT = 100_000_000


def tiff_with_a_larger_page(path: Path, side: int) -> Path:
    """Page 1 a 4×4 grey image; page 2 claims side×side and its strip is cut after 64 bytes:
    a decoder that reaches page 2's pixels says "truncated", a header check says the size."""

    def ifd(width: int, height: int, offset: int, count: int, next_ifd: int) -> bytes:
        short = (256, width), (257, height), (258, 8), (259, 1), (262, 1), (277, 1), (278, height)
        longs = (273, offset), (279, count)
        entries = sorted(
            [struct.pack("<HHIHH", tag, 3, 1, value, 0) for tag, value in short]
            + [struct.pack("<HHII", tag, 4, 1, value) for tag, value in longs]
        )
        return struct.pack("<H", len(entries)) + b"".join(entries) + struct.pack("<I", next_ifd)

    size = 2 + 9 * 12 + 4
    first, second = 8 + 16, 8 + 16 + size
    data = b"II*\x00" + struct.pack("<I", first) + bytes(range(16))
    data += ifd(4, 4, 8, 16, second) + ifd(side, side, second + size, side * side, 0)
    path.write_bytes(data + bytes(64))
    return path


def gif_with_a_growing_frame(path: Path, side: int) -> Path:
    """A 4×4 GIF whose frame 2 is side×side: Pillow grows the canvas to fit it."""
    data = b"GIF89a" + struct.pack("<HHBBB", 4, 4, 0, 0, 0)
    pixels = b"\x02\x02\x44\x01\x00"  # LZW minimum code size 2, one tiny block, terminator
    for width in (4, side):
        data += b"," + struct.pack("<HHHHB", 0, 0, width, width, 0x80) + bytes(3) + b"\xff" * 3
        data += pixels
    path.write_bytes(data + b";")
    return path


# ------------------------------------------------------------- 1. a later page's size, from its header


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["tiff", "gif"])
def test_a_larger_later_page_is_refused_from_its_header(
    tmp_path: Path, kind: str, stream: bool
) -> None:
    if kind == "tiff":
        path = tiff_with_a_larger_page(tmp_path / "pages.tif", 6000)
    else:
        path = gif_with_a_growing_frame(tmp_path / "grow.gif", 6000)
    # Before the fix, page 2 was decoded first: the file "is truncated" (its pixels are cut).
    with pytest.raises(
        BadInputError, match=r"frame 2 is 6000×6000 pixels but frame 1 is 4×4"
    ) as info:
        load_image(path, LIMIT, stream=stream)
    assert "truncated" not in str(info.value)
