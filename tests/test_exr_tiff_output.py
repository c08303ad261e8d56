"""EXR and 16-bit TIFF products, read back with independent readers: the official OpenEXR
bindings and tifffile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import OpenEXR
import pytest
import tifffile
from PIL import Image

from engine.api import Engine
from engine.io.exr import picture_to_linear
from engine.io.reading import load_image
from engine.options import OutputFormat, OutputOptions, parse_output_options
from engine.requests import Operation, OperationRequest, ProductKind
from tests.engine_helpers import photo
from tests.model_files import da3, moge, u2net, upscaler

MODELS = {
    "up2.onnx": upscaler(2),
    "u2netp.onnx": u2net,
    "da3.onnx": da3,
    "moge.onnx": moge,
}


def _run(
    module_engine: Engine, operation: Operation, model: str, image: Path, out: Path, fmt: str
) -> dict[ProductKind, list[Path]]:
    request = OperationRequest(
        operation, model, (image,), output_dir=out, output=parse_output_options(fmt)
    )
    result = module_engine.run(request)
    assert result.ok, result.failures
    found: dict[ProductKind, list[Path]] = {}
    for product in result.products:
        found.setdefault(product.kind, []).append(product.path)
    return found


def _png_twin(
    module_engine: Engine, operation: Operation, model: str, image: Path, out: Path
) -> Path:
    return _run(module_engine, operation, model, image, out, "png")[ProductKind.IMAGE][0]


def _exr_channels(path: Path) -> dict[str, np.ndarray]:
    with OpenEXR.File(str(path)) as file:
        return {name: np.array(c.pixels) for name, c in file.channels().items()}


def test_sixteen_bit_input_upscaled_to_tiff_keeps_sixteen_bits_and_alpha(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 65536, (12, 10, 4), dtype=np.uint16)
    image = tmp_path / "wide.png"
    from engine.io.writing import write_image

    write_image(image, pixels)
    model = str(module_models / "up2.onnx")
    (tif,) = _run(module_engine, Operation.UPSCALE, model, image, tmp_path / "t", "tiff")[
        ProductKind.IMAGE
    ]
    png = _png_twin(module_engine, Operation.UPSCALE, model, image, tmp_path / "p")
    assert tif.name == "wide-up2.tif"
    read = tifffile.imread(tif)
    assert read.dtype == np.uint16 and read.shape == (24, 20, 4)
    expected = load_image(png, 10**8).frames[0]
    assert expected.dtype == np.uint16
    np.testing.assert_array_equal(read, expected)


def test_eight_bit_input_to_tiff_is_eight_bits_like_its_png(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "photo.png", 14, 9)
    model = str(module_models / "up2.onnx")
    (tif,) = _run(module_engine, Operation.UPSCALE, model, image, tmp_path / "t", "tif")[
        ProductKind.IMAGE
    ]
    png = _png_twin(module_engine, Operation.UPSCALE, model, image, tmp_path / "p")
    read = tifffile.imread(tif)
    assert read.dtype == np.uint8
    np.testing.assert_array_equal(read, np.asarray(Image.open(png)))


def test_cutout_as_exr_is_linear_premultiplied_half_with_alpha(
    module_engine: Engine, tmp_path: Path
) -> None:
    image = photo(tmp_path / "photo.png", 20, 16)
    found = _run(module_engine, Operation.REMOVE_BACKGROUND, "u2netp", image, tmp_path / "e", "exr")
    (exr,) = found[ProductKind.IMAGE]
    assert exr.name == "photo-cutout.exr"
    assert found[ProductKind.MASK][0].suffix == ".png"  # the mask keeps its format
    png = _png_twin(module_engine, Operation.REMOVE_BACKGROUND, "u2netp", image, tmp_path / "p")
    channels = _exr_channels(exr)
    (name,) = channels
    assert name == "RGBA"
    rgba = channels["RGBA"]
    assert rgba.dtype == np.float16 and rgba.shape == (16, 20, 4)
    reference = np.asarray(Image.open(png).convert("RGBA"))
    # An independent sRGB decode and premultiplication of the PNG twin
    srgb = reference[..., :3] / 255.0
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    alpha = reference[..., 3:] / 255.0
    np.testing.assert_allclose(rgba[..., 3:], alpha, atol=1e-3)
    np.testing.assert_allclose(rgba[..., :3], linear * alpha, atol=2e-3)
    assert 0 < alpha.mean() < 1  # the test model leaves some of the picture out


def test_depth_asked_as_exr_writes_a_float_exr_beside_todays_files(
    module_engine: Engine, tmp_path: Path
) -> None:
    image = photo(tmp_path / "room.png", 30, 22)
    found = _run(module_engine, Operation.DEPTH, "da3", image, tmp_path / "d", "exr")
    names = sorted(p.name for paths in found.values() for p in paths)
    assert "room-depth.tif" in names and "room-depth.png" in names
    assert "room-depth.exr" in names
    (tif,) = [p for p in found[ProductKind.DEPTH_FLOAT] if p.suffix == ".tif"]
    (exr,) = [p for p in found[ProductKind.DEPTH_FLOAT] if p.suffix == ".exr"]
    z = _exr_channels(exr)["Z"]
    assert z.dtype == np.float32
    np.testing.assert_array_equal(z, tifffile.imread(tif))
    assert float(z.std()) > 0


def test_geometry_asked_as_exr_writes_float_depth_and_unit_normals_beside_its_files(
    module_engine: Engine, tmp_path: Path
) -> None:
    image = photo(tmp_path / "room.png", 32, 24)
    found = _run(module_engine, Operation.GEOMETRY, "moge", image, tmp_path / "g", "exr")
    names = sorted(p.name for paths in found.values() for p in paths)
    for name in ("room-geometry-depth.exr", "room-normal.exr", "room-normal.png"):
        assert name in names
    (tif,) = [p for p in found[ProductKind.DEPTH_FLOAT] if p.suffix == ".tif"]
    (exr,) = [p for p in found[ProductKind.DEPTH_FLOAT] if p.suffix == ".exr"]
    np.testing.assert_array_equal(_exr_channels(exr)["Z"], tifffile.imread(tif))
    (png,) = [p for p in found[ProductKind.NORMAL] if p.suffix == ".png"]
    (normal_exr,) = [p for p in found[ProductKind.NORMAL] if p.suffix == ".exr"]
    normals = _exr_channels(normal_exr)["RGB"]
    assert normals.dtype == np.float32 and normals.shape == (24, 32, 3)
    encoded = np.asarray(Image.open(png)).astype(np.float32)  # the PNG's 8-bit coding of them
    valid = encoded.any(axis=2)  # black in the PNG: no valid depth there
    assert 0 < valid.sum() < valid.size
    np.testing.assert_allclose(np.linalg.norm(normals[valid], axis=1), 1.0, atol=1e-4)
    assert not normals[~valid].any()
    np.testing.assert_allclose(normals[valid], encoded[valid] / 127.5 - 1, atol=1 / 127.5)


def test_geometry_as_png_writes_no_exr(module_engine: Engine, tmp_path: Path) -> None:
    image = photo(tmp_path / "room.png", 32, 24)
    found = _run(module_engine, Operation.GEOMETRY, "moge", image, tmp_path / "g", "png")
    assert not [p for paths in found.values() for p in paths if p.suffix == ".exr"]


def test_animation_as_exr_is_one_numbered_file_per_frame(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    from tests.engine_helpers import gif3

    gif = gif3(tmp_path / "anim.gif")
    found = _run(
        module_engine,
        Operation.UPSCALE,
        str(module_models / "up2.onnx"),
        gif,
        tmp_path / "a",
        "exr",
    )
    names = sorted(p.name for p in found[ProductKind.IMAGE])
    assert names == ["anim-up2-0001.exr", "anim-up2-0002.exr", "anim-up2-0003.exr"]
    first = load_image(gif, 10**8).frames[0]
    rgb = _exr_channels(tmp_path / "a" / names[0])
    assert next(iter(rgb.values())).shape[:2] == (first.shape[0] * 2, first.shape[1] * 2)


def test_exr_and_tiff_are_formats_of_the_output_step() -> None:
    assert parse_output_options("exr").format is OutputFormat.EXR
    assert parse_output_options("TIF").format is OutputFormat.TIFF
    assert not OutputFormat.EXR.lossy and not OutputFormat.TIFF.lossy
    assert OutputOptions(format=OutputFormat.EXR).describe() == "EXR"


def test_picture_to_linear_undoes_srgb_and_premultiplies() -> None:
    band = np.array([[[255, 0, 188, 128]]], dtype=np.uint8)
    out = picture_to_linear(band)
    a = 128 / 255
    assert out[0, 0, 0] == pytest.approx(1.0 * a, abs=1e-6)
    assert out[0, 0, 1] == 0
    assert out[0, 0, 2] == pytest.approx(((188 / 255 + 0.055) / 1.055) ** 2.4 * a, abs=1e-5)
    assert out[0, 0, 3] == pytest.approx(a)


def test_save_as_exr_or_tiff_writes_the_product_again_in_that_format(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    from engine.operations.products import export_product
    from tests.engine_helpers import gif3

    gif = gif3(tmp_path / "anim.gif")
    (product,) = _run(
        module_engine, Operation.UPSCALE, str(module_models / "up2.onnx"), gif, tmp_path, "png"
    )[ProductKind.IMAGE]
    exr = export_product(product, tmp_path / "saved.exr", parse_output_options("exr"), (0, 0))
    first = load_image(product, 10**8).frames[0]
    (pixels,) = _exr_channels(exr).values()
    assert pixels.shape[:2] == first.shape[:2]  # the first frame: one EXR holds one image
    tif = export_product(product, tmp_path / "saved.tif", parse_output_options("tiff"), (0, 0))
    pages = tifffile.imread(tif)
    assert pages.shape[0] == 3  # every frame, one page each
    np.testing.assert_array_equal(pages[0][..., : first.shape[2]], first)
