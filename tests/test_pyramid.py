"""engine.io.pyramid: a picture read at the size it is shown at, or one region at the scale the
view needs, without the full-size image (a PNG band by band, a JPEG in draft mode)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.errors import BadInputError
from engine.io.png import encode_png
from engine.io.pyramid import picture_info, read_reduced, read_region
from engine.io.reading import load_image
from engine.previews import Region

LIMIT = 10**9


def _picture(width: int, height: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Gradients with noise: smooth enough to compress, detailed enough to catch a shift."""
    rng = np.random.default_rng(seed)
    x = np.arange(width, dtype=np.uint32)[None, :]
    y = np.arange(height, dtype=np.uint32)[:, None]
    planes = [x * 255 // width + 0 * y, y * 255 // height + 0 * x, (x + 2 * y) % 256]
    planes.append(((x * y) // 7) % 256)
    out = np.stack(planes[:channels], axis=2).astype(np.uint8)
    out ^= rng.integers(0, 8, out.shape, dtype=np.uint8)
    return out


def _png(path: Path, pixels: np.ndarray) -> Path:
    encode_png(path, [pixels], durations=[0])  # Tessera's writer: adaptive row filters
    return path


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_a_region_of_a_png_is_the_crop_of_the_file_exactly(tmp_path: Path, channels: int) -> None:
    pixels = _picture(900, 700, channels)
    path = _png(tmp_path / "p.png", pixels)
    box = Region(123, 456, 789, 690)
    got = read_region(path, box, 1.0, LIMIT)
    want = load_image(path, LIMIT).frames[0][456:690, 123:789]
    assert got.pixels.dtype == want.dtype and np.array_equal(got.pixels, want)
    assert got.info.streams and got.box == box


def test_a_16_bit_png_region_keeps_its_16_bits(tmp_path: Path) -> None:
    pixels = _picture(500, 300, 3).astype(np.uint16) * 257
    pixels[..., 1] ^= 0x00A5  # low bytes that differ from the high ones
    path = _png(tmp_path / "deep.png", pixels)
    got = read_region(path, Region(40, 17, 480, 299), 1.0, LIMIT)
    assert got.pixels.dtype == np.uint16
    assert np.array_equal(got.pixels, pixels[17:299, 40:480])
    assert got.info.bit_depth == 16


def test_a_pillow_png_and_a_jpeg_region_equal_their_decoded_crop(tmp_path: Path) -> None:
    pixels = _picture(640, 480, 3, seed=2)
    pillow = tmp_path / "pillow.png"
    Image.fromarray(pixels).save(pillow, optimize=True)  # Pillow's filters (Paeth among them)
    assert np.array_equal(read_region(pillow, Region(0, 0, 640, 480), 1.0, LIMIT).pixels, pixels)
    jpeg = tmp_path / "photo.jpg"
    Image.fromarray(pixels).save(jpeg, quality=90)
    want = load_image(jpeg, LIMIT).frames[0][100:300, 50:600]
    assert np.array_equal(read_region(jpeg, Region(50, 100, 600, 300), 1.0, LIMIT).pixels, want)


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".webp"])
def test_a_reduced_read_equals_a_resize_of_the_whole_picture(tmp_path: Path, suffix: str) -> None:
    pixels = _picture(1800, 1200, 3, seed=1)
    path = tmp_path / f"big{suffix}"
    if suffix == ".png":
        _png(path, pixels)
    else:
        Image.fromarray(pixels).save(path, quality=95)
    got = read_reduced(path, 400, 400, LIMIT)
    assert got.pixels.shape == (267, 400, 3)
    full = load_image(path, LIMIT).frames[0]
    want = np.asarray(Image.fromarray(full).resize((400, 267), Image.Resampling.BOX))
    diff = np.abs(got.pixels.astype(np.int32) - want.astype(np.int32))
    assert diff.mean() < 3 and np.percentile(diff, 99) < 24


def test_a_region_read_at_a_scale_is_that_region_reduced(tmp_path: Path) -> None:
    pixels = _picture(1200, 900, 3, seed=4)
    path = _png(tmp_path / "r.png", pixels)
    got = read_region(path, Region(200, 100, 1000, 700), 0.25, LIMIT)
    assert got.pixels.shape == (150, 200, 3)
    want = pixels[100:700, 200:1000].reshape(150, 4, 200, 4, 3).mean(axis=(1, 3))
    assert np.abs(got.pixels - want).max() <= 1


def test_a_png_is_reduced_without_ever_holding_the_full_image(tmp_path: Path) -> None:
    pixels = _picture(4000, 3000, 3, seed=5)
    full_bytes = pixels.nbytes  # 36 MB
    path = _png(tmp_path / "large.png", pixels)
    del pixels
    tracemalloc.start()
    try:
        got = read_reduced(path, 800, 600, LIMIT)
        reduced_peak = tracemalloc.get_traced_memory()[1]
        del got
        tracemalloc.reset_peak()
        region = read_region(path, Region(1000, 2000, 3000, 2900), 1.0, LIMIT)
        region_peak = tracemalloc.get_traced_memory()[1] - region.nbytes
    finally:
        tracemalloc.stop()
    assert region.pixels.shape == (900, 2000, 3)
    # bands of a few MB beside the result; a full decode alone would be `full_bytes`
    for peak in (reduced_peak, region_peak):
        assert peak < full_bytes / 3, f"{peak / 1e6:.1f} MB for a {full_bytes / 1e6:.0f} MB picture"


def test_the_header_is_read_without_decoding_and_bad_regions_are_refused(tmp_path: Path) -> None:
    path = _png(tmp_path / "h.png", _picture(300, 200, 4))
    info = picture_info(path, LIMIT)
    assert (info.width, info.height, info.has_alpha, info.frames) == (300, 200, True, 1)
    with pytest.raises(BadInputError, match="limit"):
        picture_info(path, 300 * 200 - 1)
    with pytest.raises(BadInputError, match="outside"):
        read_region(path, Region(400, 0, 500, 10), 1.0, LIMIT)


def test_a_truncated_png_says_so(tmp_path: Path) -> None:
    path = _png(tmp_path / "t.png", _picture(600, 400, 3))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError):
        read_reduced(path, 100, 100, LIMIT)


def test_a_png_of_one_large_image_chunk_is_read_in_pieces(tmp_path: Path) -> None:
    import struct
    import zlib

    pixels = _picture(1500, 1000, 3, seed=6)
    raw = b"".join(b"\x00" + row.tobytes() for row in pixels)  # filter None, one IDAT chunk

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", 1500, 1000, 8, 2, 0, 0, 0)
    path = tmp_path / "one-chunk.png"
    body = zlib.compress(raw, 1)
    assert len(body) > 1 << 20  # more than the reader takes at once
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )
    got = read_region(path, Region(700, 600, 1400, 990), 1.0, LIMIT)
    assert np.array_equal(got.pixels, pixels[600:990, 700:1400])
    broken = bytearray(path.read_bytes())
    broken[len(broken) // 2] ^= 0xFF
    path.write_bytes(bytes(broken))
    with pytest.raises(BadInputError):
        read_reduced(path, 100, 100, LIMIT)


@pytest.mark.parametrize("deep", [False, True])
def test_regions_read_again_start_from_the_nearest_row_checkpoint(
    tmp_path: Path, deep: bool
) -> None:
    from engine.io import pyramid

    pixels = _picture(700, 1600, 3, seed=7)
    if deep:
        pixels = pixels.astype(np.uint16) * 257 + 3
    path = _png(tmp_path / "tall.png", pixels)
    pyramid.forget_checkpoints()
    read_reduced(path, 100, 200, LIMIT)  # top to bottom: checkpoints on the way
    assert pyramid._KEPT.nbytes() > 0
    for box in (Region(0, 1500, 700, 1600), Region(10, 333, 690, 901), Region(0, 0, 5, 5)):
        got = read_region(path, box, 1.0, LIMIT).pixels
        assert np.array_equal(got, pixels[box.y0 : box.y1, box.x0 : box.x1]), box
    _png(path, pixels[::-1].copy())  # the file changed: its old checkpoints are not used
    got = read_region(path, Region(0, 1400, 700, 1600), 1.0, LIMIT).pixels
    assert np.array_equal(got, pixels[::-1][1400:1600])
    pyramid.forget_checkpoints()
    assert pyramid._KEPT.nbytes() == 0
