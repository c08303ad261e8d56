"""Depth (Depth Anything 3 exports) on real ORT sessions over the contract models.

The contract depth is exp(0.5·luma + 0.5·(luma's 14×14 patch mean)) of the ImageNet-normalised
input and depth_conf = 1 + exp(luma), so where no resize happens the products are predictable.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from engine.api import Engine
from engine.io.tiff import TiffWriter
from engine.models.contracts import ModelSpec
from engine.operations.depth import Depth, upper_bound_size
from engine.operations.depth_codec import read_depth_text
from engine.requests import Operation, ProductKind
from engine.samples.depth_models import make_da3
from engine.samples.onnx_graph import LUMA
from engine.settings import EngineSettings
from tests.engine_helpers import gif3, noise_png, photo
from tests.family_checks import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    FeedLog,
    check_cli,
    check_gif_gives_animated_products,
    check_m1_session_reused,
    check_m2_only_the_last_run_shrinks,
    check_m4_products_identical,
    product,
    read,
    read_tiff,
    request,
    run,
    varied_gif,
)

OP = Operation.DEPTH


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_da3(tmp_path_factory.mktemp("models") / "da3_504.onnx")


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_da3(tmp_path_factory.mktemp("models") / "da3_dynamic.onnx", fixed=False)


def luma_of(rgb: np.ndarray) -> np.ndarray:
    return ((rgb.astype(np.float32) / 255 - IMAGENET_MEAN) / IMAGENET_STD) @ np.array(
        LUMA, np.float32
    )


def contract_depth(luma: np.ndarray) -> np.ndarray:
    h, w = luma.shape
    patch = luma.reshape(h // 14, 14, w // 14, 14).mean(axis=(1, 3))
    return np.exp(0.5 * luma + 0.5 * np.repeat(np.repeat(patch, 14, axis=0), 14, axis=1))


def test_fixed_504_depth_and_confidence_match_the_contract(fixed: Path, tmp_path: Path) -> None:
    path, rgb = noise_png(tmp_path / "a.png", 504, 504)
    result = run(OP, fixed, [path], tmp_path / "out")
    luma = luma_of(rgb)
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    assert depth.shape == (504, 504)
    assert np.allclose(depth, contract_depth(luma), rtol=1e-5)
    conf = read_tiff(product(result, ProductKind.CONFIDENCE))[0]
    assert np.allclose(conf, 1 + np.exp(luma), rtol=1e-5)


@pytest.mark.parametrize("height", [252, 250])
def test_fixed_input_is_padded_centred_and_cropped_back(
    fixed: Path, tmp_path: Path, height: int
) -> None:
    # height×504 fits at scale 1, centred, on a zero (mean-colour) canvas. 250 rows start at row
    # 127, off the patch grid, so the edge patches mix image and padding: the valid crop must
    # equal the contract depth of exactly that canvas.
    log = FeedLog()
    engine = Engine(EngineSettings(models_dir=fixed.parent), session_wrap=log)
    path, rgb = noise_png(tmp_path / "wide.png", height, 504, seed=2)
    result = engine.run(request(OP, fixed, [path], tmp_path / "out"))
    assert result.ok
    assert log.feeds[0]["image"][:2] == ((1, 3, 504, 504), "float32")
    top = (504 - height) // 2
    canvas = np.zeros((504, 504), np.float32)
    canvas[top : top + height] = luma_of(rgb)
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    assert depth.shape == (height, 504)
    assert np.allclose(depth, contract_depth(canvas)[top : top + height], rtol=1e-5)


def test_dynamic_model_runs_at_the_image_size_when_it_fits(dynamic: Path, tmp_path: Path) -> None:
    path, rgb = noise_png(tmp_path / "s.png", 28, 56, seed=4)
    result = run(OP, dynamic, [path], tmp_path / "out", options={"process_res": 56})
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    assert np.allclose(depth, contract_depth(luma_of(rgb)), rtol=1e-5)


@pytest.mark.parametrize(
    ("hw", "res", "expected"),
    [
        ((300, 400), 504, (378, 504)),
        ((1080, 1920), 504, (280, 504)),
        ((100, 60), 504, (504, 308)),
        ((28, 56), 56, (28, 56)),
        ((5, 3), 14, (14, 14)),
    ],
)
def test_upper_bound_size(hw: tuple[int, int], res: int, expected: tuple[int, int]) -> None:
    assert upper_bound_size(*hw, res) == expected


def test_dynamic_model_gets_the_upper_bound_size_and_depth_comes_back_full_size(
    dynamic: Path, tmp_path: Path
) -> None:
    log = FeedLog()
    engine = Engine(EngineSettings(models_dir=dynamic.parent), session_wrap=log)
    colour = np.array([90, 160, 200], np.uint8)
    Image.fromarray(np.broadcast_to(colour, (100, 60, 3)).copy()).save(tmp_path / "flat.png")
    result = engine.run(request(OP, dynamic, [tmp_path / "flat.png"], tmp_path / "out"))
    assert result.ok
    assert log.feeds[0]["image"][0] == (1, 3, 504, 308)
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    assert depth.shape == (100, 60)
    # A flat colour has a flat luma, so depth = exp(luma) whatever the resize did.
    assert np.allclose(depth, np.exp(luma_of(colour[None, None]))[0, 0], rtol=1e-5)


@pytest.mark.parametrize("views", [1, 2])
def test_five_d_input_gives_the_same_depth_as_four_d(
    fixed: Path, tmp_path: Path, views: int
) -> None:
    model = make_da3(tmp_path / f"da3_v{views}.onnx", views=views)
    path, _ = noise_png(tmp_path / "a.png", 120, 90, seed=5)
    four = read_tiff(product(run(OP, fixed, [path], tmp_path / "four"), ProductKind.DEPTH_FLOAT))[0]
    five = read_tiff(product(run(OP, model, [path], tmp_path / "five"), ProductKind.DEPTH_FLOAT))[0]
    assert np.array_equal(four, five)


def test_sixteen_bit_png_is_near_bright_and_decodes_to_the_tiff(
    fixed: Path, tmp_path: Path
) -> None:
    result = run(OP, fixed, [photo(tmp_path / "p.png", 80, 60)], tmp_path / "out")
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    png = product(result, ProductKind.DEPTH16)
    decoded = read(png)
    assert decoded.meta.bit_depth == 16 and decoded.frames[0].shape == (60, 80, 1)
    v = decoded.frames[0][..., 0].astype(np.float64)
    meta = read_depth_text(png)
    lo, hi = meta["min"], meta["max"]
    assert (lo, hi) == (float(depth.min()), float(depth.max()))
    assert (
        v[depth == depth.min()].min() == 65535 and v[depth == depth.max()].max() == 1
    )  # near bright
    back = hi - (v - 1) / 65534 * (hi - lo)
    assert np.abs(back - depth).max() <= 0.5 * (hi - lo) / 65534 * 1.001


def test_float_tiff_round_trips_exactly(tmp_path: Path) -> None:
    values = np.random.default_rng(0).standard_normal((3, 17, 23)).astype(np.float32) * 1e3
    values[0, 0, 0], values[1, 1, 1], values[2, 2, 2] = np.nan, np.float32(1e-42), np.inf
    path = tmp_path / "x.tif"
    with open(path, "wb") as out:
        writer = TiffWriter(out)
        for page in values:
            writer.add_page(page)
    pages = read_tiff(path)
    assert len(pages) == 3
    for page, expected in zip(pages, values, strict=True):
        assert page.tobytes() == expected.tobytes()


def test_preview_is_turbo_near_red_far_blue(fixed: Path, tmp_path: Path) -> None:
    result = run(OP, fixed, [photo(tmp_path / "p.png", 80, 60)], tmp_path / "out")
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    preview = read(product(result, ProductKind.DEPTH_PREVIEW)).frames[0].astype(int)
    assert preview.shape == (60, 80, 3)
    # Turbo's ends: dark red for the nearest depth, dark blue-violet for the farthest.
    assert preview[depth == depth.min()][0].tolist() == [122, 4, 3]
    assert preview[depth == depth.max()][0].tolist() == [48, 18, 59]
    middle = np.abs(depth - (depth.min() + depth.max()) / 2).argmin()
    assert preview.reshape(-1, 3)[middle][1] > 200  # greens and yellows in between


def test_frames_share_one_depth_range(dynamic: Path, tmp_path: Path) -> None:
    result = run(OP, dynamic, [varied_gif(tmp_path / "anim.gif")], tmp_path / "out")
    assert result.runs == 3
    check_gif_gives_animated_products(
        result,
        {
            ProductKind.DEPTH_FLOAT,
            ProductKind.DEPTH16,
            ProductKind.DEPTH_PREVIEW,
            ProductKind.CONFIDENCE,
        },
    )
    pages = read_tiff(product(result, ProductKind.DEPTH_FLOAT))
    png = product(result, ProductKind.DEPTH16)
    meta = read_depth_text(png)
    lo, hi = min(float(p.min()) for p in pages), max(float(p.max()) for p in pages)
    assert (meta["min"], meta["max"]) == (lo, hi)
    frames = read(png).frames
    assert [int(f.max()) == 65535 for f in frames] == [float(p.min()) == lo for p in pages]
    for f, page in zip(frames, pages, strict=True):
        back = hi - (f[..., 0].astype(np.float64) - 1) / 65534 * (hi - lo)
        assert np.abs(back - page).max() <= 0.5 * (hi - lo) / 65534 * 1.001


def test_sky_output_gives_a_sky_mask(tmp_path: Path) -> None:
    # The contract plus `sky` = luma, so sky ≥ 0.5 exactly where luma ≥ 0.5.
    model = onnx.load(str(make_da3(tmp_path / "da3_sky.onnx")))
    model.graph.node.append(helper.make_node("Squeeze", ["luma", "axis1"], ["sky"]))
    model.graph.output.append(
        helper.make_tensor_value_info("sky", TensorProto.FLOAT, [1, 504, 504])
    )
    onnx.save(model, str(tmp_path / "da3_sky.onnx"))
    path, rgb = noise_png(tmp_path / "a.png", 504, 504, seed=6)
    result = run(OP, tmp_path / "da3_sky.onnx", [path], tmp_path / "out")
    sky = read(product(result, ProductKind.SKY)).frames[0][..., 0]
    expected = np.where(luma_of(rgb) >= 0.5, 255, 0)
    assert (sky != expected).mean() < 1e-3 and set(np.unique(sky)) == {0, 255}


def test_sequence_gives_numbered_frames_with_one_range(dynamic: Path, tmp_path: Path) -> None:
    # The nearest pixel is in the first frame, the farthest in the second: one range for both.
    frames = []
    for i, (lo, hi) in enumerate([(0, 120), (100, 255)]):
        ramp = np.linspace(lo, hi, 28, dtype=np.float32)[None, :, None]
        Image.fromarray(np.broadcast_to(ramp, (28, 28, 3)).astype(np.uint8)).save(
            tmp_path / f"f{i}.png"
        )
        frames.append(tmp_path / f"f{i}.png")
    result = run(OP, dynamic, frames, tmp_path / "out", sequence=True)
    pngs = sorted(
        (p.path for p in result.products if p.kind is ProductKind.DEPTH16), key=lambda p: p.name
    )
    assert [p.name for p in pngs] == ["f0-depth-0001.png", "f0-depth-0002.png"]
    assert len(result.products) == 8 and all(p.frames == 1 for p in result.products)
    tiffs = sorted(
        (p.path for p in result.products if p.kind is ProductKind.DEPTH_FLOAT), key=lambda p: p.name
    )
    pages = [read_tiff(t)[0] for t in tiffs]
    expected = (float(pages[0].min()), float(pages[1].max()))
    assert [(m["min"], m["max"]) for m in map(read_depth_text, pngs)] == [expected, expected]


def test_minimal_feeds(fixed: Path, dynamic: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=fixed.parent))
    for model in (fixed, dynamic):
        assert engine.run(request(OP, model, [photo(tmp_path / "a.png")], tmp_path / "o")).ok
    by_name = {e.key.model.name: e for e in engine.sessions.entries()}

    def spec(model: Path) -> ModelSpec:
        return engine.resolve(request(OP, model, [], tmp_path / "o"))[0]

    assert Depth().minimal_feeds(spec(fixed)) is None
    entry = by_name[dynamic.name]
    feeds = Depth().minimal_feeds(spec(dynamic))
    assert feeds is not None and feeds["image"].shape == (1, 3, 14, 14)
    assert entry.session.run(None, feeds)[0].shape == (1, 14, 14)


def test_m1_session_reused(fixed: Path, tmp_path: Path) -> None:
    check_m1_session_reused(OP, fixed, photo(tmp_path / "a.png"), tmp_path)


def test_m2_only_the_last_run_shrinks(fixed: Path, tmp_path: Path) -> None:
    check_m2_only_the_last_run_shrinks(
        OP, fixed, photo(tmp_path / "a.png"), gif3(tmp_path / "g.gif"), tmp_path
    )


def test_m4_products_identical_with_and_without_cleanup(dynamic: Path, tmp_path: Path) -> None:
    check_m4_products_identical(OP, dynamic, [photo(tmp_path / "a.png", 50, 40)], tmp_path)


def test_cli(fixed: Path, tmp_path: Path) -> None:
    check_cli(
        "depth",
        photo(tmp_path / "a.png"),
        fixed,
        tmp_path / "out",
        {"depth_float", "depth16", "depth_preview", "confidence"},
    )
