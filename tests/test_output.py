"""The output step: the main image's format, quality and size, written by the engine itself, and
product names that carry the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.errors import UsageError
from engine.io.resize import resize_frame
from engine.operations.products import export_product
from engine.options import OutputFormat, OutputOptions, parse_output_options
from engine.requests import Operation, OperationRequest, ProductKind
from tests.engine_helpers import gif3, photo
from tests.model_files import da3, u2net, upscaler
from tests.processes import engine_cli

MODELS = {
    "up4.onnx": upscaler(4),
    # the file names of catalog models: resolved by id, so their products carry the id
    "realesrgan-x4plus.onnx": upscaler(4),
    "realesrgan-x4plus-anime.onnx": upscaler(4),
    "realesrgan-animevideov3-x4.onnx": upscaler(4),
    "u2netp.onnx": u2net,
    "da3.onnx": da3,
}


def run(
    module_engine: Engine,
    operation: Operation,
    model: str,
    inputs: tuple[Path, ...],
    out: Path,
    output: OutputOptions | None = None,
) -> list[Path]:
    request = OperationRequest(
        operation, model, inputs, output_dir=out, output=output or OutputOptions()
    )
    result = module_engine.run(request)
    assert result.ok, result.failures
    return [p.path for p in result.products]


def test_three_x4_models_write_three_names_that_carry_the_model(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "photo.jpg", 24, 16)
    names = []
    for model in ("realesrgan-x4plus", "realesrgan-x4plus-anime", "realesrgan-animevideov3-x4"):
        (path,) = run(module_engine, Operation.UPSCALE, model, (image,), tmp_path / "out")
        names.append(path.name)
    (own,) = run(
        module_engine,
        Operation.UPSCALE,
        str(module_models / "up4.onnx"),
        (image,),
        tmp_path / "out",
    )
    assert names == [
        "photo-realesrgan-x4plus.png",
        "photo-realesrgan-x4plus-anime.png",
        "photo-realesrgan-animevideov3-x4.png",
    ]
    assert own.name == "photo-up4.png"  # not a catalog model: the file's stem


def test_jpeg_at_x2_of_a_x4_model_is_written_directly(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "photo.jpg", 60, 40)
    model = str(module_models / "up4.onnx")
    (png,) = run(module_engine, Operation.UPSCALE, model, (image,), tmp_path / "png")
    (jpeg,) = run(
        module_engine,
        Operation.UPSCALE,
        model,
        (image,),
        tmp_path / "jpeg",
        OutputOptions(OutputFormat.JPEG, quality=92, factor=2),
    )
    assert jpeg.name == "photo-up4-x2.jpg"
    assert list((tmp_path / "jpeg").iterdir()) == [jpeg]  # no full-size PNG on the way
    with Image.open(jpeg) as written:
        assert written.format == "JPEG" and written.size == (120, 80)
        pixels = np.asarray(written.convert("RGB"), np.float32)
    with Image.open(png) as full:
        assert full.size == (240, 160)
        expected = np.asarray(full.resize((120, 80), Image.Resampling.LANCZOS), np.float32)
    assert np.abs(pixels - expected).mean() < 3  # JPEG's loss only

    small = run(
        module_engine,
        Operation.UPSCALE,
        model,
        (image,),
        tmp_path / "low",
        OutputOptions(OutputFormat.JPEG, quality=20, factor=2),
    )[0]
    assert small.stat().st_size < jpeg.stat().st_size  # the quality is honoured


def test_a_width_keeps_the_aspect_and_webp_100_is_lossless(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "wide.png", 50, 20)
    model = str(module_models / "up4.onnx")
    (sized,) = run(
        module_engine,
        Operation.UPSCALE,
        model,
        (image,),
        tmp_path / "a",
        OutputOptions(OutputFormat.WEBP, quality=100, width=100),
    )
    assert sized.name == "wide-up4-100w.webp"
    (png,) = run(module_engine, Operation.UPSCALE, model, (image,), tmp_path / "b")
    with Image.open(sized) as webp, Image.open(png) as full:
        assert webp.format == "WEBP" and webp.size == (100, 40)
        expected = np.asarray(resize_frame(np.asarray(full), 100, 40))
        assert np.array_equal(np.asarray(webp.convert("RGB")), expected)


def test_a_jpeg_cut_out_is_flattened_and_the_mask_stays_png(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "subject.png", 40, 30)
    products = run(
        module_engine,
        Operation.REMOVE_BACKGROUND,
        str(module_models / "u2netp.onnx"),
        (image,),
        tmp_path / "out",
        OutputOptions(OutputFormat.JPEG),
    )
    names = sorted(p.name for p in products)
    assert names == ["subject-cutout.jpg", "subject-mask.png"]
    with Image.open(tmp_path / "out" / "subject-cutout.jpg") as cutout:
        assert cutout.mode == "RGB"  # no alpha in a JPEG: flattened on white


def test_data_products_keep_their_formats(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "scene.png", 56, 42)
    result = module_engine.run(
        OperationRequest(
            Operation.DEPTH,
            str(module_models / "da3.onnx"),
            (image,),
            output_dir=tmp_path / "out",
            output=OutputOptions(OutputFormat.JPEG, factor=0.5),
        )
    )
    assert result.ok
    suffixes = {p.kind: p.path.suffix for p in result.products}
    assert ProductKind.IMAGE not in suffixes
    assert suffixes[ProductKind.DEPTH16] == ".png"
    assert suffixes[ProductKind.DEPTH_FLOAT] == ".tif"
    with Image.open(result.products[0].path) as depth:
        assert depth.size[0] >= 42  # not halved: the size applies to the main image only


def test_an_animation_asked_as_webp_stays_animated(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    anim = gif3(tmp_path / "anim.gif")
    (webp,) = run(
        module_engine,
        Operation.UPSCALE,
        str(module_models / "up4.onnx"),
        (anim,),
        tmp_path / "w",
        OutputOptions(OutputFormat.WEBP, quality=80, factor=2),
    )
    with Image.open(webp) as image:
        assert image.format == "WEBP" and getattr(image, "n_frames", 1) == 3
        assert image.size == (48, 32)
    # JPEG holds one frame: the animation keeps a lossless animated container
    (kept,) = run(
        module_engine,
        Operation.UPSCALE,
        str(module_models / "up4.onnx"),
        (anim,),
        tmp_path / "j",
        OutputOptions(OutputFormat.JPEG),
    )
    assert kept.suffix == ".png"
    with Image.open(kept) as image:
        assert getattr(image, "n_frames", 1) == 3


# ------------------------------------------------------------------------------------- resize


def test_resizing_in_bands_equals_resizing_the_whole_image() -> None:
    rng = np.random.default_rng(3)
    frame = rng.integers(0, 256, (900, 700, 3), dtype=np.uint8)
    banded = resize_frame(frame, 350, 450)  # two bands of output rows
    whole = np.asarray(Image.fromarray(frame).resize((350, 450), Image.Resampling.LANCZOS))
    assert banded.shape == whole.shape
    assert np.abs(banded.astype(int) - whole.astype(int)).max() <= 1


def test_transparent_colour_does_not_bleed_and_16_bit_stays_16_bit() -> None:
    frame = np.zeros((64, 64, 4), np.uint16)
    frame[:, :32] = (65535, 0, 0, 0)  # invisible red
    frame[:, 32:] = (0, 65535, 0, 65535)  # opaque green
    small = resize_frame(frame, 16, 16)
    assert small.dtype == np.uint16
    edge = small[:, 8:]
    visible = edge[..., 3] > 0
    assert edge[..., 0][visible].max() == 0  # no red halo
    grey = np.full((10, 10, 1), 200, np.uint8)
    assert resize_frame(grey, 5, 5).shape == (5, 5, 1)


# ------------------------------------------------------------------------------ bad options


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--format", "gif"), "--format takes png, jpeg, webp"),
        (("--quality", "0"), "from 1 to 100"),
        (("--quality", "high"), "--quality takes"),
        (("--size", "huge"), "--size takes a factor"),
        (("--size", "x0"), "above 0"),
        (("--size", "70000"), "from 1 to 65535"),
    ],
)
def test_bad_output_options_exit_2(
    args: tuple[str, ...], needle: str, module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "p.png", 12, 10)
    done = engine_cli(
        "run", "upscale", image, "--model", module_models / "up4.onnx", "--out", tmp_path, *args
    )
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.png"]


def test_the_command_line_writes_the_chosen_format(module_models: Path, tmp_path: Path) -> None:
    image = photo(tmp_path / "p.png", 30, 20)
    done = engine_cli(
        "run",
        "upscale",
        image,
        "--model",
        module_models / "up4.onnx",
        "--out",
        tmp_path / "o",
        "--format",
        "jpg",
        "--quality",
        "85",
        "--size",
        "×2",
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.name == "p-up4-x2.jpg"
    with Image.open(path) as written:
        assert written.size == (60, 40)


def test_output_options_are_checked() -> None:
    assert parse_output_options("JPG", "70", "1.5x") == OutputOptions(
        OutputFormat.JPEG, quality=70, factor=1.5
    )
    assert parse_output_options(size="1920px").width == 1920
    with pytest.raises(UsageError, match="not both"):
        OutputOptions(factor=2, width=100).check()
    with pytest.raises(UsageError, match="quality"):
        OperationRequest(
            Operation.UPSCALE, "m", (Path("a.png"),), output=OutputOptions(quality=101)
        ).typed_options()
    assert OutputOptions(factor=0.5).target_size(101, 50) == (50, 25)
    assert OutputOptions(width=300).target_size(100, 50) == (300, 150)
    assert OutputOptions().target_size(100, 50) is None


def test_save_as_is_the_jobs_own_output_step(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    """Save as… (`export_product`) of the lossless product at JPEG ×2 writes the bytes a job
    asked for JPEG ×2 writes; a WebP at a width has the job's size; a replaced file is whole."""
    image = photo(tmp_path / "photo.png", 60, 40)
    model = str(module_models / "up4.onnx")
    (png,) = run(module_engine, Operation.UPSCALE, model, (image,), tmp_path / "png")
    options = OutputOptions(OutputFormat.JPEG, 85, factor=2.0)
    (jpeg,) = run(module_engine, Operation.UPSCALE, model, (image,), tmp_path / "jpeg", options)
    saved = export_product(png, tmp_path / "saved.jpg", options, (60, 40))
    assert saved == tmp_path / "saved.jpg"
    assert saved.read_bytes() == jpeg.read_bytes()
    webp = OutputOptions(OutputFormat.WEBP, 80, width=100)
    target = tmp_path / "small.webp"
    target.write_bytes(b"an older file, replaced as a whole")
    assert export_product(png, target, webp, (60, 40)) == target
    with Image.open(target) as written:
        assert written.format == "WEBP" and written.size == (100, 67)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "photo.png",
        "saved.jpg",
        "small.webp",
    ]  # nothing half-written or numbered beside them
