"""engine.io.reading: decoding, encoding and atomic publishing. Every image is built here."""

from __future__ import annotations

import errno
import io
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageOps

from engine import files
from engine.errors import BadInputError, ResourceError
from engine.io import opening as imaging
from engine.io import writing
from engine.io.image import ImageMeta, from_float, to_float
from engine.io.publish import atomic_output, unique_path, write_bytes
from engine.io.reading import image_size, load_image
from engine.io.sequences import list_sequence, load_sequence
from engine.io.writing import write_image

LIMIT = 100_000_000
RNG = np.random.default_rng(20240601)


def _random(shape: tuple[int, ...], dtype: type[np.unsignedinteger]) -> np.ndarray:
    top = 65536 if dtype is np.uint16 else 256
    return RNG.integers(0, top, shape, dtype=dtype)


def _files(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def _exif_with(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "TestCam"  # Make, to check the other tags survive
    return exif.tobytes()


def _srgb_icc() -> bytes:
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
    return bytes(profile.tobytes())


# --- an independent, deliberately naive PNG encoder (pure Python filters, Adam7) ------------

ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)
COLOUR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _filter_row(kind: int, row: bytes, prev: bytes, bpp: int) -> bytes:
    out = bytearray()
    for i, x in enumerate(row):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[kind]
        out.append((x - pred) % 256)
    return bytes(out)


def _image_data(pixels: np.ndarray, filters: Sequence[int], interlace: bool) -> bytes:
    bpp = pixels.shape[2] * 2
    raw = bytearray()
    count = 0
    for x0, y0, dx, dy in ADAM7 if interlace else ((0, 0, 1, 1),):
        sub = pixels[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        prev = bytes(sub.shape[1] * bpp)
        for row_pixels in sub:
            row = row_pixels.astype(">u2").tobytes()
            kind = filters[count % len(filters)]
            count += 1
            raw += bytes([kind]) + _filter_row(kind, row, prev, bpp)
            prev = row
    return zlib.compress(bytes(raw))


def _png16(
    pixels: np.ndarray,
    filters: Sequence[int] = (0, 1, 2, 3, 4),
    interlace: bool = False,
    before_idat: Sequence[bytes] = (),
) -> bytes:
    h, w, c = pixels.shape
    header = struct.pack(">IIBBBBB", w, h, 16, COLOUR_TYPE[c], 0, 0, int(interlace))
    data = _image_data(pixels, filters, interlace)
    body = _chunk(b"IHDR", header) + b"".join(before_idat)
    # Split the data over several IDAT chunks, as encoders may.
    idat = b"".join(_chunk(b"IDAT", data[i : i + 50]) for i in range(0, len(data), 50))
    return b"\x89PNG\r\n\x1a\n" + body + idat + _chunk(b"IEND", b"")


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_png_round_trip_is_exact(
    tmp_path: Path, dtype: type[np.unsignedinteger], channels: int
) -> None:
    pixels = _random((23, 41, channels), dtype)
    written = write_image(tmp_path / "out.png", pixels)
    image = load_image(written, LIMIT)
    assert written == tmp_path / "out.png"
    assert len(image.frames) == 1 and not image.is_animated
    assert image.frames[0].dtype == dtype
    np.testing.assert_array_equal(image.frames[0], pixels)
    assert image.meta.bit_depth == (16 if dtype is np.uint16 else 8)
    assert image.meta.has_alpha == (channels in (2, 4))
    assert image.meta.format == "PNG"


def test_two_dimensional_grey_is_accepted(tmp_path: Path) -> None:
    pixels = _random((5, 7), np.uint16)
    image = load_image(write_image(tmp_path / "g.png", pixels), LIMIT)
    np.testing.assert_array_equal(image.frames[0][..., 0], pixels)


@pytest.mark.parametrize("channels", [2, 3, 4])
def test_our_16bit_png_is_read_correctly_by_pillow(tmp_path: Path, channels: int) -> None:
    # Pillow reduces 16-bit colour to the high byte: an independent check of our encoder.
    pixels = _random((17, 29, channels), np.uint16)
    with Image.open(write_image(tmp_path / "p.png", pixels)) as im:
        decoded = np.asarray(im.convert("RGBA" if channels in (2, 4) else "RGB"))
    high = (pixels >> 8).astype(np.uint8)
    if channels == 2:
        np.testing.assert_array_equal(decoded[..., 0], high[..., 0])
        np.testing.assert_array_equal(decoded[..., 3], high[..., 1])
    else:
        np.testing.assert_array_equal(decoded, high)


@pytest.mark.parametrize("interlace", [False, True])
@pytest.mark.parametrize("channels", [2, 3, 4])
@pytest.mark.parametrize("filters", [(0, 1, 2), (3,), (4,), (0, 1, 2, 3, 4)])
def test_16bit_png_decoder_against_naive_encoder(
    tmp_path: Path, interlace: bool, channels: int, filters: tuple[int, ...]
) -> None:
    pixels = _random((13, 11, channels), np.uint16)
    path = tmp_path / "n.png"
    path.write_bytes(_png16(pixels, filters, interlace))
    image = load_image(path, LIMIT)
    assert image.frames[0].dtype == np.uint16
    np.testing.assert_array_equal(image.frames[0], pixels)


def test_16bit_rgb_png_colour_key_becomes_alpha(tmp_path: Path) -> None:
    pixels = _random((6, 8, 3), np.uint16)
    key = (1000, 2000, 3000)
    pixels[2, 3] = key
    path = tmp_path / "k.png"
    path.write_bytes(_png16(pixels, before_idat=[_chunk(b"tRNS", struct.pack(">3H", *key))]))
    frame = load_image(path, LIMIT).frames[0]
    assert frame.shape == (6, 8, 4)
    assert frame[2, 3, 3] == 0
    assert int((frame[..., 3] == 65535).sum()) == 6 * 8 - 1


def test_16bit_png_single_row_and_column(tmp_path: Path) -> None:
    for shape in ((1, 9, 3), (9, 1, 3), (1, 1, 4)):
        pixels = _random(shape, np.uint16)
        path = tmp_path / f"s{shape[0]}x{shape[1]}.png"
        path.write_bytes(_png16(pixels, (4, 3, 1)))
        np.testing.assert_array_equal(load_image(path, LIMIT).frames[0], pixels)


def test_16bit_grey_with_colour_key(tmp_path: Path) -> None:
    pixels = _random((4, 5), np.uint16)
    pixels[0, 0] = 4242
    path = tmp_path / "gk.png"
    Image.fromarray(pixels).save(path, transparency=4242)
    frame = load_image(path, LIMIT).frames[0]
    assert frame.shape == (4, 5, 2) and frame.dtype == np.uint16
    assert frame[0, 0, 1] == 0 and frame[1, 1, 1] == 65535


@pytest.mark.parametrize(
    ("mode", "suffix", "channels", "dtype"),
    [
        ("1", ".png", 1, np.uint8),
        ("L", ".png", 1, np.uint8),
        ("LA", ".png", 2, np.uint8),
        ("I;16", ".tif", 1, np.uint16),
        ("RGB", ".bmp", 3, np.uint8),
        ("RGBA", ".tif", 4, np.uint8),
    ],
)
def test_pillow_modes(
    tmp_path: Path, mode: str, suffix: str, channels: int, dtype: type[np.unsignedinteger]
) -> None:
    source = Image.fromarray(_random((9, 10, 4), np.uint8)).convert(mode)
    if mode == "I;16":
        source = Image.fromarray(_random((9, 10), np.uint16))
    path = tmp_path / f"m{suffix}"
    source.save(path)
    frame = load_image(path, LIMIT).frames[0]
    assert frame.shape == (9, 10, channels) and frame.dtype == dtype
    expected = np.asarray(source.convert("L") if mode == "1" else source)
    np.testing.assert_array_equal(frame.reshape(expected.shape), expected)


# --- orientation, ICC, CMYK, palette ----------------------------------------------------------


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_exif_orientation_is_applied(
    tmp_path: Path, orientation: int, dtype: type[np.unsignedinteger]
) -> None:
    pixels = _random((5, 8, 3), dtype)
    meta = ImageMeta("PNG", "RGB", 16, False, None, _exif_with(orientation))
    path = write_image(tmp_path / "o.png", pixels, meta)
    with Image.open(path) as im:
        expected = np.asarray(ImageOps.exif_transpose(im.convert("RGB")))
    image = load_image(path, LIMIT)
    frame = image.frames[0]
    np.testing.assert_array_equal(frame if dtype is np.uint8 else (frame >> 8), expected)
    assert image_size(path)[:2] == (frame.shape[1], frame.shape[0])
    assert image.meta.exif is not None
    exif = Image.Exif()
    exif.load(image.meta.exif)
    assert exif[0x0112] == 1 and exif[0x010F] == "TestCam"


def test_orientation_6_jpeg_is_upright_and_written_as_1(tmp_path: Path) -> None:
    pixels = np.zeros((40, 64, 3), np.uint8)
    pixels[:, :32] = 255  # left half white: after a 90° clockwise turn the top half is white
    source = tmp_path / "camera.jpg"
    Image.fromarray(pixels).save(source, quality=95, exif=_exif_with(6))
    image = load_image(source, LIMIT)
    frame = image.frames[0]
    assert frame.shape == (64, 40, 3)
    assert frame[:28].mean() > 200 and frame[36:].mean() < 50
    assert image_size(source) == (40, 64, 1)
    out = write_image(tmp_path / "out.jpg", frame, image.meta)
    with Image.open(out) as im:
        assert im.size == (40, 64)
        assert im.getexif()[0x0112] == 1
        assert im.getexif()[0x010F] == "TestCam"
    again = load_image(out, LIMIT).frames[0]
    assert again.shape == (64, 40, 3)


@pytest.mark.parametrize(
    ("dtype", "suffix"), [(np.uint8, ".png"), (np.uint16, ".png"), (np.uint8, ".jpg")]
)
def test_icc_profile_is_kept(tmp_path: Path, dtype: type[np.unsignedinteger], suffix: str) -> None:
    icc = _srgb_icc()
    pixels = _random((8, 8, 3), dtype)
    meta = ImageMeta("PNG", "RGB", 8, False, icc, None, dpi=(300.0, 150.0))
    path = write_image(tmp_path / f"icc{suffix}", pixels, meta)
    with Image.open(path) as im:
        assert im.info.get("icc_profile") == icc
        assert tuple(round(v) for v in im.info["dpi"]) == (300, 150)
    image = load_image(path, LIMIT)
    assert image.meta.icc_profile == icc
    assert image.meta.dpi is not None and tuple(round(v) for v in image.meta.dpi) == (300, 150)


def test_rgb_profile_is_not_attached_to_grey_output(tmp_path: Path) -> None:
    meta = ImageMeta("PNG", "RGB", 8, False, _srgb_icc(), None)
    path = write_image(tmp_path / "g.png", _random((4, 4, 1), np.uint8), meta)
    with Image.open(path) as im:
        assert "icc_profile" not in im.info


def _cmyk_jpeg(path: Path, icc: bytes | None = None) -> None:
    cmyk = np.zeros((16, 16, 4), np.uint8)
    cmyk[:, :8, 0] = 255  # cyan
    cmyk[:, 8:, 1] = 255  # magenta
    image = Image.frombytes("CMYK", (16, 16), cmyk.tobytes())
    if icc:
        image.save(path, quality=100, icc_profile=icc)
    else:
        image.save(path, quality=100)


def test_cmyk_jpeg_becomes_rgb(tmp_path: Path) -> None:
    path = tmp_path / "print.jpg"
    _cmyk_jpeg(path)
    image = load_image(path, LIMIT)
    frame = image.frames[0].astype(int)
    assert frame.shape == (16, 16, 3) and image.meta.mode == "CMYK"
    assert image.meta.icc_profile is None
    cyan, magenta = frame[8, 2], frame[8, 12]
    assert cyan[0] < 40 and cyan[1] > 215 and cyan[2] > 215
    assert magenta[0] > 215 and magenta[1] < 40 and magenta[2] > 215


def test_cmyk_jpeg_uses_its_embedded_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = _srgb_icc()
    path = tmp_path / "profiled.jpg"
    _cmyk_jpeg(path, icc=marker)
    seen: list[bytes] = []

    def fake_transform(
        im: Image.Image, source: ImageCms.ImageCmsProfile, *args: object, **kwargs: object
    ) -> Image.Image:
        seen.append(bytes(source.tobytes()))
        return Image.new("RGB", im.size, (1, 2, 3))

    monkeypatch.setattr(ImageCms, "profileToProfile", fake_transform)
    frame = load_image(path, LIMIT).frames[0]
    assert seen and seen[0] == marker
    assert tuple(frame[0, 0]) == (1, 2, 3)


def test_cmyk_jpeg_with_unusable_profile_falls_back(tmp_path: Path) -> None:
    path = tmp_path / "odd.jpg"
    _cmyk_jpeg(path, icc=_srgb_icc())  # an RGB profile on CMYK data cannot build a transform
    frame = load_image(path, LIMIT).frames[0].astype(int)
    assert frame[8, 2, 0] < 40 and frame[8, 2, 1] > 215


def test_palette_with_and_without_transparency(tmp_path: Path) -> None:
    indices = np.arange(24, dtype=np.uint8).reshape(4, 6) % 3
    palette = [255, 0, 0, 0, 255, 0, 0, 0, 255]
    im = Image.frombytes("P", (6, 4), indices.tobytes())
    im.putpalette(palette)
    im.save(tmp_path / "t.png", transparency=1)
    im.save(tmp_path / "o.png")
    clear = load_image(tmp_path / "t.png", LIMIT).frames[0]
    assert clear.shape == (4, 6, 4)
    assert clear[0, 1, 3] == 0 and tuple(clear[0, 0]) == (255, 0, 0, 255)
    opaque = load_image(tmp_path / "o.png", LIMIT).frames[0]
    assert opaque.shape == (4, 6, 3) and tuple(opaque[0, 2]) == (0, 0, 255)


# --- animations and pages ---------------------------------------------------------------------


def _gif_frames() -> list[np.ndarray]:
    frames = []
    for i in range(3):
        f = np.zeros((12, 10, 3), np.uint8)
        f[:, :] = (40 * i, 100, 200 - 50 * i)
        f[i * 3 : i * 3 + 3, 2:5] = (255, 255, 0)
        frames.append(f)
    return frames


def test_gif_durations_and_frames_survive_a_write(tmp_path: Path) -> None:
    frames = _gif_frames()
    ims = [Image.fromarray(f) for f in frames]
    source = tmp_path / "anim.gif"
    ims[0].save(source, save_all=True, append_images=ims[1:], duration=[50, 120, 200], loop=0)
    image = load_image(source, LIMIT)
    assert image.is_animated and image.meta.durations == (50, 120, 200) and image.meta.loop == 0
    for got, want in zip(image.frames, frames, strict=True):
        np.testing.assert_array_equal(got[..., :3], want)
    out = write_image(tmp_path / "copy.gif", image.frames, image.meta)
    again = load_image(out, LIMIT)
    assert again.meta.durations == (50, 120, 200) and again.meta.loop == 0
    for got, want in zip(again.frames, frames, strict=True):
        np.testing.assert_array_equal(got[..., :3], want)


def test_gif_with_transparency_gives_full_rgba_frames(tmp_path: Path) -> None:
    frames = []
    for i in range(3):
        f = np.zeros((8, 8, 4), np.uint8)
        f[..., :3] = (200, 30 * i, 10)
        f[..., 3] = 255
        f[i : i + 2, :, 3] = 0
        f[i : i + 2, :, :3] = 0
        frames.append(f)
    out = write_image(tmp_path / "clear.gif", frames)
    image = load_image(out, LIMIT)
    assert len(image.frames) == 3 and image.frames[0].shape == (8, 8, 4)
    for got, want in zip(image.frames, frames, strict=True):
        np.testing.assert_array_equal(got[..., 3] == 0, want[..., 3] == 0)
    assert image.meta.durations == (100, 100, 100)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_animated_png_round_trip(tmp_path: Path, dtype: type[np.unsignedinteger]) -> None:
    frames = [_random((9, 7, 4), dtype) for _ in range(3)]
    meta = ImageMeta("PNG", "RGBA", 8, True, None, None, durations=(40, 80, 120), loop=2)
    image = load_image(write_image(tmp_path / "a.png", frames, meta), LIMIT)
    assert image.meta.durations == (40, 80, 120) and image.meta.loop == 2
    assert len(image.frames) == 3
    for got, want in zip(image.frames, frames, strict=True):
        np.testing.assert_array_equal(got, want)


def test_our_16bit_apng_is_read_by_pillow(tmp_path: Path) -> None:
    frames = [_random((5, 6, 3), np.uint16) for _ in range(2)]
    with Image.open(write_image(tmp_path / "a.png", frames)) as im:
        assert getattr(im, "n_frames", 1) == 2
        for index, want in enumerate(frames):
            im.seek(index)
            np.testing.assert_array_equal(np.asarray(im.convert("RGB")), want >> 8)


def _fctl(seq: int, w: int, h: int, x: int, y: int, delay: int, dispose: int, blend: int) -> bytes:
    return _chunk(b"fcTL", struct.pack(">IIIIIHHBB", seq, w, h, x, y, delay, 1000, dispose, blend))


def _fdat(seq: int, pixels: np.ndarray) -> bytes:
    return _chunk(b"fdAT", struct.pack(">I", seq) + _image_data(pixels, (4,), False))


def test_16bit_apng_compositing(tmp_path: Path) -> None:
    opaque, clear = 65535, 0
    base = np.zeros((4, 4, 4), np.uint16)
    base[...] = (100, 200, 300, opaque)
    patch = np.zeros((2, 2, 4), np.uint16)
    patch[...] = (9, 9, 9, opaque)
    patch[0, 0, 3] = clear  # with blend "over", this pixel leaves the canvas as it was
    corner = np.zeros((1, 1, 4), np.uint16)
    corner[...] = (7, 7, 7, opaque)
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 16, 6, 0, 0, 0))
    body = (
        _chunk(b"acTL", struct.pack(">II", 3, 0))
        + _fctl(0, 4, 4, 0, 0, 30, 0, 0)
        + _chunk(b"IDAT", _image_data(base, (1,), False))
        + _fctl(1, 2, 2, 1, 1, 60, 2, 1)  # dispose "previous": the patch vanishes afterwards
        + _fdat(2, patch)
        + _fctl(3, 1, 1, 3, 3, 90, 0, 0)
        + _fdat(4, corner)
    )
    path = tmp_path / "c.png"
    path.write_bytes(head + body + _chunk(b"IEND", b""))
    image = load_image(path, LIMIT)
    assert image.meta.durations == (30, 60, 90) and image.meta.loop == 0
    f0, f1, f2 = image.frames
    np.testing.assert_array_equal(f0, base)
    expected1 = base.copy()
    expected1[1:3, 1:3] = patch
    expected1[1, 1] = base[1, 1]
    np.testing.assert_array_equal(f1, expected1)
    expected2 = base.copy()
    expected2[3, 3] = corner[0, 0]
    np.testing.assert_array_equal(f2, expected2)


def test_16bit_apng_hidden_default_image(tmp_path: Path) -> None:
    hidden = np.full((3, 3, 3), 5, np.uint16)
    shown = [_random((3, 3, 3), np.uint16) for _ in range(2)]
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 3, 16, 2, 0, 0, 0))
    body = (
        _chunk(b"acTL", struct.pack(">II", 2, 1))
        + _chunk(b"IDAT", _image_data(hidden, (0,), False))
        + _fctl(0, 3, 3, 0, 0, 10, 0, 0)
        + _fdat(1, shown[0])
        + _fctl(2, 3, 3, 0, 0, 20, 0, 0)
        + _fdat(3, shown[1])
    )
    path = tmp_path / "h.png"
    path.write_bytes(head + body + _chunk(b"IEND", b""))
    image = load_image(path, LIMIT)
    assert len(image.frames) == 2 and image.meta.durations == (10, 20) and image.meta.loop == 1
    for got, want in zip(image.frames, shown, strict=True):
        np.testing.assert_array_equal(got, want)


def test_animated_webp_round_trip_is_lossless(tmp_path: Path) -> None:
    frames = [_random((10, 12, 4), np.uint8) for _ in range(3)]
    for f in frames:  # an animated WebP decodes fully transparent pixels as (0, 0, 0, 0)
        f[f[..., 3] == 0] = 0
    meta = ImageMeta("WEBP", "RGBA", 8, True, None, None, durations=(50, 60, 70), loop=0)
    image = load_image(write_image(tmp_path / "a.webp", frames, meta), LIMIT)
    assert image.meta.durations == (50, 60, 70)
    for got, want in zip(image.frames, frames, strict=True):
        np.testing.assert_array_equal(got, want)


def test_multi_page_tiff(tmp_path: Path) -> None:
    pages = [_random((6, 9, 3), np.uint8) for _ in range(3)]
    image = load_image(write_image(tmp_path / "pages.tif", pages), LIMIT)
    assert image.meta.format == "TIFF" and image.meta.durations == ()
    assert image_size(tmp_path / "pages.tif") == (9, 6, 3)
    for got, want in zip(image.frames, pages, strict=True):
        np.testing.assert_array_equal(got, want)


def test_tiff_pages_of_different_sizes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "mixed.tif"
    first, second = Image.new("RGB", (4, 4)), Image.new("RGB", (5, 4))
    first.save(path, save_all=True, append_images=[second])
    with pytest.raises(BadInputError, match=r"mixed\.tif: frame 2 is 5×4"):
        load_image(path, LIMIT)


# --- sequences --------------------------------------------------------------------------------


def test_list_sequence_natural_order(tmp_path: Path) -> None:
    for name in (
        "frame10.png",
        "frame2.png",
        "Frame3.png",
        "frame1.jpg",
        ".frame0.png",
        "notes.txt",
    ):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "dir.png").mkdir()
    names = [p.name for p in list_sequence(tmp_path)]
    assert names == ["frame1.jpg", "frame2.png", "Frame3.png", "frame10.png"]


def test_list_sequence_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"frames: the folder does not exist"):
        list_sequence(tmp_path / "frames")


def test_load_sequence_joins_and_unifies_frames(tmp_path: Path) -> None:
    rgb = _random((5, 6, 3), np.uint8)
    rgba = _random((5, 6, 4), np.uint8)
    write_image(tmp_path / "f1.png", rgb)
    write_image(tmp_path / "f2.png", rgba)
    write_image(tmp_path / "f10.png", rgb)
    image = load_sequence(list_sequence(tmp_path), LIMIT)
    assert len(image.frames) == 3 and image.meta.has_alpha
    assert all(f.shape == (5, 6, 4) for f in image.frames)
    np.testing.assert_array_equal(image.frames[0][..., :3], rgb)
    assert (image.frames[0][..., 3] == 255).all()
    np.testing.assert_array_equal(image.frames[1], rgba)


def test_load_sequence_names_the_odd_frame(tmp_path: Path) -> None:
    write_image(tmp_path / "a1.png", _random((5, 6, 3), np.uint8))
    write_image(tmp_path / "a2.png", _random((5, 7, 3), np.uint8))
    with pytest.raises(
        BadInputError, match=r"a2\.png: this frame is 7×5 pixels but a1\.png is 6×5"
    ):
        load_sequence(list_sequence(tmp_path), LIMIT)


def test_load_sequence_pixel_limit_counts_all_files(tmp_path: Path) -> None:
    for i in range(3):
        write_image(tmp_path / f"s{i}.png", _random((10, 10, 3), np.uint8))
    with pytest.raises(BadInputError, match="the limit is 250 pixels"):
        load_sequence(list_sequence(tmp_path), 250)


# --- bad inputs -----------------------------------------------------------------------------


def _truncated_png(path: Path) -> None:
    buffer = io.BytesIO()
    Image.fromarray(_random((64, 64, 3), np.uint8)).save(buffer, "PNG")
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])


def _truncated_jpeg(path: Path) -> None:
    buffer = io.BytesIO()
    Image.fromarray(_random((64, 64, 3), np.uint8)).save(buffer, "JPEG")
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])


def _truncated_png16(path: Path) -> None:
    data = _png16(_random((20, 20, 3), np.uint16))
    path.write_bytes(data[: len(data) - 40])


def _damaged_png(path: Path) -> None:
    buffer = io.BytesIO()
    Image.fromarray(_random((16, 16, 3), np.uint8)).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    data[60] ^= 0xFF  # inside the IDAT chunk: its checksum no longer matches
    path.write_bytes(bytes(data))


def _text(path: Path) -> None:
    path.write_text("this is a shopping list, not a picture\n")


def _heic(path: Path) -> None:
    path.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64))


def _eps(path: Path) -> None:
    Image.new("RGB", (4, 4)).save(path, "EPS")


def _pdf(path: Path) -> None:
    Image.new("RGB", (4, 4)).save(path, "PDF")


def _binary_noise(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 4)


@pytest.mark.parametrize(
    ("name", "make", "expected"),
    [
        ("missing.png", None, r"missing\.png: the file does not exist"),
        ("folder.png", "dir", r"folder\.png: this is a folder"),
        ("empty.png", "empty", r"empty\.png: the file is empty"),
        ("cut.png", _truncated_png, r"cut\.png: the file is truncated"),
        ("cut.jpg", _truncated_jpeg, r"cut\.jpg: the file is truncated"),
        ("cut16.png", _truncated_png16, r"cut16\.png: the file is truncated"),
        ("broken.png", _damaged_png, r"broken\.png: the image data is damaged"),
        ("list.png", _text, r"list\.png: this is not an image; the file contains text"),
        ("noise.png", _binary_noise, r"noise\.png: this is not an image"),
        ("phone.heic", _heic, r"phone\.heic: HEIC/HEIF images are not supported"),
        ("figure.eps", _eps, r"figure\.eps: EPS images are not supported"),
        ("scan.pdf", _pdf, r"scan\.pdf: PDF images are not supported"),
    ],
)
def test_bad_inputs_have_clear_messages(
    tmp_path: Path, name: str, make: object, expected: str
) -> None:
    path = tmp_path / name
    if make == "dir":
        path.mkdir()
    elif make == "empty":
        path.write_bytes(b"")
    elif callable(make):
        make(path)
    with pytest.raises(BadInputError, match=expected) as info:
        load_image(path, LIMIT)
    assert info.value.exit_code == 4
    if make not in (None, "dir", "empty"):
        assert info.value.__cause__ is not None


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.png"
    write_image(path, _random((4, 4, 3), np.uint8))
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("permissions are not enforced for this user (root)")
        with pytest.raises(BadInputError, match=r"secret\.png: permission denied"):
            load_image(path, LIMIT)
    finally:
        path.chmod(0o644)


def test_unreadable_file_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.png"
    write_image(path, _random((4, 4, 3), np.uint8))

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(imaging, "open", denied, raising=False)
    with pytest.raises(BadInputError, match=r"secret\.png: permission denied") as info:
        load_image(path, LIMIT)
    assert isinstance(info.value.__cause__, PermissionError)


def _header_only_png(path: Path, width: int, height: int) -> None:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IEND", b""))


def test_decompression_bomb_is_refused_before_decoding(tmp_path: Path) -> None:
    # The file has no pixel data at all: decoding it would fail differently.
    path = tmp_path / "bomb.png"
    _header_only_png(path, 40000, 40000)
    assert image_size(path) == (40000, 40000, 1)
    with pytest.raises(
        BadInputError,
        match=r"bomb\.png: the image is 40000×40000 pixels \(1\.6 gigapixels\); the limit is 500 megapixels",
    ):
        load_image(path, 500_000_000)


def test_large_header_within_our_limit_raises_no_pillow_warning(tmp_path: Path) -> None:
    path = tmp_path / "large.png"
    _header_only_png(path, 20000, 20000)  # above Pillow's own bomb threshold
    with pytest.raises(BadInputError, match=r"truncated|damaged"):
        load_image(path, 1_000_000_000)


def test_frame_count_counts_towards_the_limit(tmp_path: Path) -> None:
    ims = [Image.fromarray(f) for f in _gif_frames()]
    path = tmp_path / "many.gif"
    ims[0].save(path, save_all=True, append_images=ims[1:])
    with pytest.raises(BadInputError, match=r"many\.gif: the image is 10×12 pixels × 3 frames"):
        load_image(path, 300)
    assert len(load_image(path, 360).frames) == 3


# --- publishing -----------------------------------------------------------------------------


def test_unique_path_numbering(tmp_path: Path) -> None:
    target = tmp_path / "photo.png"
    assert unique_path(target) == target
    target.write_bytes(b"1")
    assert unique_path(target) == tmp_path / "photo-1.png"
    (tmp_path / "photo-1.png").write_bytes(b"2")
    assert unique_path(target) == tmp_path / "photo-2.png"
    plain = tmp_path / "README"
    plain.write_bytes(b"")
    assert unique_path(plain) == tmp_path / "README-1"


def test_write_never_overwrites_and_leaves_no_temp(tmp_path: Path) -> None:
    existing = tmp_path / "out.png"
    existing.write_bytes(b"precious")
    first = write_image(existing, _random((4, 4, 3), np.uint8))
    second = write_image(existing, _random((4, 4, 3), np.uint16))
    assert existing.read_bytes() == b"precious"
    assert (first, second) == (tmp_path / "out-1.png", tmp_path / "out-2.png")
    assert _files(tmp_path) == ["out-1.png", "out-2.png", "out.png"]


def test_write_bytes_is_numbered_and_exact(tmp_path: Path) -> None:
    a = write_bytes(tmp_path / "data.json", b'{"a": 1}')
    b = write_bytes(tmp_path / "data.json", b'{"b": 2}')
    assert a.read_bytes() == b'{"a": 1}' and b.read_bytes() == b'{"b": 2}'
    assert b == tmp_path / "data-1.json"
    assert _files(tmp_path) == ["data-1.json", "data.json"]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_encoder_failure_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: type[np.unsignedinteger]
) -> None:
    def half_written(out: BinaryIO, *args: object, **kwargs: object) -> None:
        out.write(b"\x89PNG half")
        raise RuntimeError("encoder crashed")

    monkeypatch.setattr(writing, "_encode_png", half_written)
    monkeypatch.setattr(writing, "_encode_pillow", half_written)
    with pytest.raises(RuntimeError, match="encoder crashed"):
        write_image(tmp_path / "x.png", _random((4, 4, 3), dtype))
    assert _files(tmp_path) == []


def test_full_disk_is_a_resource_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(self: Image.Image, fp: BinaryIO, *args: object, **kwargs: object) -> None:
        fp.write(b"GIF89a")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Image.Image, "save", no_space)
    with pytest.raises(ResourceError, match=r"x\.gif: the disk holding .* is full"):
        write_image(tmp_path / "x.gif", _random((4, 4, 3), np.uint8))
    assert _files(tmp_path) == []


def test_atomic_output_without_publish_leaves_nothing(tmp_path: Path) -> None:
    with atomic_output(tmp_path / "model.ply") as (temp, _publish):
        temp.write_bytes(b"ply")
        assert temp.parent == tmp_path
        assert temp.name.startswith(".model.ply.partial-")
    assert _files(tmp_path) == []


def test_publish_without_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    (tmp_path / "f.bin").write_bytes(b"old")
    path = write_bytes(tmp_path / "f.bin", b"new")
    assert path == tmp_path / "f-1.bin" and path.read_bytes() == b"new"
    assert (tmp_path / "f.bin").read_bytes() == b"old"
    assert _files(tmp_path) == ["f-1.bin", "f.bin"]


def test_publish_takes_the_next_name_when_one_appears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another writer takes the name between our check and our link: link refuses, we move on.
    # (Without renameat2, so the hard-link way of claiming a name is the one tried.)
    monkeypatch.setattr(files, "_renameat2", None)
    real_link = os.link

    def racing_link(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name == "r.bin" and not Path(dst).exists():
            Path(dst).write_bytes(b"theirs")
        real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    path = write_bytes(tmp_path / "r.bin", b"ours")
    assert path == tmp_path / "r-1.bin" and path.read_bytes() == b"ours"
    assert (tmp_path / "r.bin").read_bytes() == b"theirs"


def test_unicode_and_spaces_in_paths(tmp_path: Path) -> None:
    folder = tmp_path / "my folder ü 写真"
    folder.mkdir()
    pixels = _random((6, 5, 4), np.uint16)
    path = write_image(folder / "фото с пробелом ✓.png", pixels)
    assert path.name == "фото с пробелом ✓.png"
    assert image_size(path) == (5, 6, 1)
    np.testing.assert_array_equal(load_image(path, LIMIT).frames[0], pixels)
    assert list_sequence(folder) == [path]
    again = write_image(folder / "фото с пробелом ✓.png", pixels)
    assert again.name == "фото с пробелом ✓-1.png"


def test_read_only_output_folder(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("permissions are not enforced for this user (root)")
        with pytest.raises(BadInputError, match=r"out\.png: permission denied; .* may not write"):
            write_image(folder / "out.png", _random((4, 4, 3), np.uint8))
    finally:
        folder.chmod(0o755)
    assert _files(folder) == []


def test_read_only_output_folder_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*args: object, **kwargs: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(
        BadInputError, match=r"out\.png: permission denied; Tessera may not write into the folder"
    ) as info:
        write_image(tmp_path / "out.png", _random((4, 4, 3), np.uint8))
    assert isinstance(info.value.__cause__, PermissionError)


def test_missing_output_folder(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"out\.png: the output folder .* does not exist"):
        write_bytes(tmp_path / "nowhere" / "out.png", b"")


# --- float conversion -----------------------------------------------------------------------


def test_float_conversions_round_trip() -> None:
    eight = np.arange(256, dtype=np.uint8)
    sixteen = np.arange(65536, dtype=np.uint16)
    assert to_float(eight).dtype == np.float32
    np.testing.assert_array_equal(from_float(to_float(eight), 8), eight)
    np.testing.assert_array_equal(from_float(to_float(sixteen), 16), sixteen)
    odd = np.array([-0.5, 0.5, 1.5, np.nan, np.inf], dtype=np.float32)
    np.testing.assert_array_equal(from_float(odd, 8), [0, 128, 255, 0, 255])
    with pytest.raises(ValueError, match="bit_depth"):
        from_float(odd, 12)


def test_16bit_to_8bit_output_rounds(tmp_path: Path) -> None:
    pixels = np.array([[[0, 128, 257], [65535, 32896, 383]]], dtype=np.uint16)
    frame = load_image(write_image(tmp_path / "r.webp", pixels), LIMIT).frames[0]
    np.testing.assert_array_equal(frame, [[[0, 0, 1], [255, 128, 1]]])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_png_text_entries(tmp_path: Path, dtype: type[np.unsignedinteger]) -> None:
    text = {"tessera": "depth=relative; near=65535", "Comment": "Tiefe ✓"}
    path = write_image(tmp_path / "t.png", _random((3, 4, 1), dtype), text=text)
    with Image.open(path) as im:
        im.load()
        assert dict(im.info.items()) | text == dict(im.info.items())


def test_decoded_frames_are_read_only(tmp_path: Path) -> None:
    for name, pixels in (
        ("a.png", _random((3, 3, 3), np.uint8)),
        ("b.png", _random((3, 3, 4), np.uint16)),
    ):
        frame = load_image(write_image(tmp_path / name, pixels), LIMIT).frames[0]
        with pytest.raises(ValueError, match="read-only"):
            frame[0, 0, 0] = 1
