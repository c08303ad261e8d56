"""What a GIF's blocks say about its frames' sizes, read without decoding a pixel.

Pillow grows a GIF's canvas to fit a frame larger than the logical screen, and allocates the
frame (and its disposal area) while seeking to it: a 1 KB file can ask for gigabytes. The
sizes are read here first, so a frame larger than frame 1 is refused before Pillow sees it.
"""

from __future__ import annotations

import struct
from typing import BinaryIO


def _skip_sub_blocks(fp: BinaryIO) -> bool:
    while True:
        size = fp.read(1)
        if not size:
            return False
        if size[0] == 0:
            return True
        fp.seek(size[0], 1)


def gif_frame_sizes(fp: BinaryIO) -> list[tuple[int, int]]:
    """The canvas size Pillow gives each frame (the running maximum of the logical screen and
    every frame's extent so far). A damaged block structure ends the list early: the decoder
    reports the damage itself."""
    fp.seek(0)
    head = fp.read(13)
    if len(head) < 13 or not head.startswith((b"GIF87a", b"GIF89a")):
        return []
    width, height, flags = struct.unpack("<HHB", head[6:11])
    if flags & 0x80:
        fp.seek(3 << ((flags & 7) + 1), 1)
    sizes: list[tuple[int, int]] = []
    while True:
        block = fp.read(1)
        if block == b"!":  # an extension: its label, then sub-blocks
            if not fp.read(1) or not _skip_sub_blocks(fp):
                return sizes
        elif block == b",":
            descriptor = fp.read(9)
            if len(descriptor) < 9:
                return sizes
            x0, y0, w, h, local = struct.unpack("<HHHHB", descriptor)
            width, height = max(width, x0 + w), max(height, y0 + h)
            sizes.append((width, height))
            if local & 0x80:
                fp.seek(3 << ((local & 7) + 1), 1)
            if not fp.read(1) or not _skip_sub_blocks(fp):  # LZW code size, then the data
                return sizes
        else:  # the trailer, the end of the file, or damage
            return sizes
