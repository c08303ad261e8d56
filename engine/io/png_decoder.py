"""Tessera's PNG decoder, for what Pillow does not do: Pillow decodes 16-bit colour and
grey+alpha PNGs only to 8 bits, so those (APNG included) are decoded here: chunks parsed, zlib
inflated, row filters undone with numpy."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

from engine.io.png_format import CHANNELS, SIGNATURE, PngError, paeth_predictor

_ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)


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
            paeth = paeth_predictor(
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
