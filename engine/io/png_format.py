"""What the PNG format's reader and writer share: the signature, the channels of each colour
type, the Paeth predictor, the header of a file and the error of a damaged one."""

from __future__ import annotations

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}
MODES16 = {0: "I;16", 2: "RGB;16", 4: "LA;16", 6: "RGBA;16"}  # Pillow has no such modes


class PngError(Exception):
    """A structural problem of a PNG file; `truncated` when the file simply ends too early."""

    def __init__(self, message: str, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


def png_header(head: bytes) -> tuple[int, int] | None:
    """(bit depth, colour type) from the IHDR of a PNG's first 26 bytes."""
    if len(head) < 26 or not head.startswith(SIGNATURE) or head[12:16] != b"IHDR":
        return None
    return head[24], head[25]


def paeth_predictor(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
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
