"""Remove background (BEN2, U²-Net-p) on real ORT sessions over the contract models.

The contract masks are sigmoid(10·(luma − 0.5)) of the raw model input, so the products can
be predicted from the input pixels, the normalisation and the min-max stretch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.errors import UsageError
from engine.io.writing import write_image
from engine.operations.background import RemoveBackground
from engine.operations.foreground import box_blur, estimate_foreground
from engine.operations.pixels import resize_bilinear
from engine.requests import Operation, ProductKind
from engine.samples.background_models import make_ben2, make_u2net
from engine.samples.onnx_graph import LUMA
from engine.settings import EngineSettings
from tests.engine_helpers import gif3, noise_png, photo
from tests.family_checks import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    check_cli,
    check_gif_gives_animated_products,
    check_m1_session_reused,
    check_m2_only_the_last_run_shrinks,
    check_m4_products_identical,
    product,
    read,
    request,
    run,
    varied_gif,
)

OP = Operation.REMOVE_BACKGROUND


@pytest.fixture(scope="module")
def u2net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_u2net(tmp_path_factory.mktemp("models") / "u2netp.onnx")


@pytest.fixture(scope="module")
def ben2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_ben2(tmp_path_factory.mktemp("models") / "BEN2_Base.onnx")


def contract_mask(model_input: np.ndarray) -> np.ndarray:
    luma = model_input @ np.array(LUMA, np.float32)
    return (1.0 / (1.0 + np.exp(-10.0 * (luma - 0.5)))).astype(np.float32)


def stretched_u8(mask: np.ndarray) -> np.ndarray:
    return ((mask - mask.min()) / (mask.max() - mask.min()) * 255).astype(np.uint8)


def assert_close_u8(actual: np.ndarray, expected: np.ndarray) -> None:
    diff = np.abs(actual.astype(int) - expected.astype(int))
    assert diff.max() <= 1 and diff.mean() < 0.01, (diff.max(), diff.mean())


def test_u2net_mask_is_the_stretched_contract_mask_of_imagenet_input(
    u2net: Path, tmp_path: Path
) -> None:
    # At the model's own size the resizes are identities: the mask is predictable exactly.
    path, rgb = noise_png(tmp_path / "a.png", 320, 320)
    result = run(OP, u2net, [path], tmp_path / "out")
    mask = read(product(result, ProductKind.MASK)).frames[0]
    assert mask.shape == (320, 320, 1) and mask.dtype == np.uint8
    expected = stretched_u8(
        contract_mask((rgb.astype(np.float32) / 255 - IMAGENET_MEAN) / IMAGENET_STD)
    )
    assert_close_u8(mask[..., 0], expected)
    cutout = read(product(result, ProductKind.IMAGE)).frames[0]
    assert cutout.shape == (320, 320, 4)
    assert np.array_equal(cutout[..., :3], rgb) and np.array_equal(cutout[..., 3], mask[..., 0])


@pytest.mark.parametrize("norm", ["imagenet", "zero_one"])
def test_ben2_float16_output_and_normalisation_option(
    ben2: Path, tmp_path: Path, norm: str
) -> None:
    path, rgb = noise_png(tmp_path / "b.png", 1024, 1024, seed=1)
    result = run(OP, ben2, [path], tmp_path / "out", options={"normalization": norm})
    mask = read(product(result, ProductKind.MASK)).frames[0][..., 0]
    x = rgb.astype(np.float32) / 255
    model_input = (x - IMAGENET_MEAN) / IMAGENET_STD if norm == "imagenet" else x
    # The export declares its mask float16: the values are float16-rounded before the stretch.
    expected = stretched_u8(contract_mask(model_input).astype(np.float16).astype(np.float32))
    assert_close_u8(mask, expected)
    other = (x - IMAGENET_MEAN) / IMAGENET_STD if norm == "zero_one" else x
    assert np.abs(mask.astype(int) - stretched_u8(contract_mask(other)).astype(int)).max() > 10


def test_unknown_normalisation_is_a_usage_error(u2net: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=u2net.parent))
    bogus = request(
        OP, u2net, [photo(tmp_path / "a.png")], tmp_path / "o", options={"normalization": "bogus"}
    )
    # Refused before any work: no session, no product.
    with pytest.raises(UsageError, match=r"normalization takes imagenet or zero_one, not 'bogus'"):
        engine.run(bogus)
    assert engine.sessions.created == 0 and not (tmp_path / "o").exists()


def test_resize_bilinear_is_torch_half_pixel_without_antialias() -> None:
    src = np.array([[0, 1], [2, 3]], np.float32)
    # torch.nn.functional.interpolate(src[None, None], (4, 4), mode="bilinear", align_corners=False)
    expected = np.array(
        [[0, 0.25, 0.75, 1], [0.5, 0.75, 1.25, 1.5], [1.5, 1.75, 2.25, 2.5], [2, 2.25, 2.75, 3]],
        np.float32,
    )
    assert np.allclose(resize_bilinear(src, 4, 4), expected)
    ramp = np.arange(8, dtype=np.float32)[None].repeat(3, axis=0)
    assert np.allclose(resize_bilinear(ramp, 3, 4), [[0.5, 2.5, 4.5, 6.5]] * 3)  # 2-px means


def test_mask_is_resized_back_to_the_input_and_stretched(u2net: Path, tmp_path: Path) -> None:
    rgb = np.zeros((100, 200, 3), np.uint8)
    rgb[:, 100:] = 255
    Image.fromarray(rgb).save(tmp_path / "half.png")
    result = run(OP, u2net, [tmp_path / "half.png"], tmp_path / "out")
    mask = read(product(result, ProductKind.MASK)).frames[0][..., 0]
    assert mask.shape == (100, 200)
    assert (mask[:, :95] == 0).all() and (mask[:, 105:] == 255).all()
    assert (np.diff(mask.astype(int), axis=1) >= 0).all()


def test_sixteen_bit_rgba_keeps_its_depth_and_its_alpha(u2net: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 65536, (30, 40, 4), dtype=np.uint16)
    rgba[:, :10, 3] = 0
    path = write_image(tmp_path / "deep.png", rgba)
    result = run(OP, u2net, [path], tmp_path / "out")
    cutout = read(product(result, ProductKind.IMAGE))
    mask = read(product(result, ProductKind.MASK)).frames[0][..., 0]
    frame = cutout.frames[0]
    assert cutout.meta.bit_depth == 16 and frame.shape == (30, 40, 4)
    assert np.array_equal(frame[..., :3], rgba[..., :3])
    alpha = frame[..., 3].astype(np.float64) / 65535
    predicted = (mask / 255.0) * (rgba[..., 3] / 65535.0)  # mask × the input's own alpha
    assert np.abs(alpha - predicted).max() <= 1.5 / 255
    assert (frame[:, :10, 3] == 0).all()


def _reflect101(i: int, n: int) -> int:
    while not 0 <= i < n:
        i = -i if i < 0 else 2 * (n - 1) - i
    return i


@pytest.mark.parametrize(("r", "shape"), [(6, (9, 13)), (5, (7, 4)), (90, (20, 31))])
def test_box_blur_is_cv2_blur_with_reflect101(r: int, shape: tuple[int, int]) -> None:
    values = np.random.default_rng(r).random(shape).astype(np.float32)
    h, w = shape
    expected = np.zeros(shape)
    for y in range(h):
        for x in range(w):
            rows = [_reflect101(y - r // 2 + k, h) for k in range(r)]
            cols = [_reflect101(x - r // 2 + k, w) for k in range(r)]
            expected[y, x] = values[np.ix_(rows, cols)].mean()
    assert np.allclose(box_blur(values, r), expected, atol=1e-6)


def test_foreground_estimate_removes_the_background_halo() -> None:
    h, w = 40, 400  # an 8-px soft edge: blur fusion assumes edges much narrower than r = 90
    alpha = np.clip((np.arange(w) - 200) / 8, 0, 1).astype(np.float32)[None].repeat(h, axis=0)
    red, blue = np.array([1, 0, 0], np.float32), np.array([0, 0, 1], np.float32)
    image = alpha[..., None] * red + (1 - alpha[..., None]) * blue  # a soft edge over blue
    fg = estimate_foreground(image, alpha)
    soft = (alpha > 0.1) & (alpha < 0.9)
    before = np.abs(image - red).sum(axis=2)[soft].mean()
    after = np.abs(fg - red).sum(axis=2)[soft].mean()
    assert after < 0.1 * before, (before, after)


def test_refine_foreground_changes_colours_not_alpha(u2net: Path, tmp_path: Path) -> None:
    img = photo(tmp_path / "p.png", 64, 48)
    plain = read(product(run(OP, u2net, [img], tmp_path / "a"), ProductKind.IMAGE)).frames[0]
    refined = read(
        product(
            run(OP, u2net, [img], tmp_path / "b", options={"refine_foreground": True}),
            ProductKind.IMAGE,
        )
    ).frames[0]
    assert np.array_equal(plain[..., 3], refined[..., 3])
    assert not np.array_equal(plain[..., :3], refined[..., :3])


def test_gif_gives_three_frame_products_with_its_durations(u2net: Path, tmp_path: Path) -> None:
    result = run(OP, u2net, [varied_gif(tmp_path / "anim.gif")], tmp_path / "out")
    assert result.runs == 3
    check_gif_gives_animated_products(result, {ProductKind.IMAGE, ProductKind.MASK})
    # GIF holds neither soft alpha nor 16 bits: the products are APNG.
    assert {p.path.suffix for p in result.products} == {".png"}
    masks = read(product(result, ProductKind.MASK)).frames
    assert not np.array_equal(masks[0], masks[2])  # each frame got its own mask


def test_sequence_gives_numbered_frames(u2net: Path, tmp_path: Path) -> None:
    frames = [photo(tmp_path / f"f{i}.png", 32, 24, seed=i) for i in range(2)]
    result = run(OP, u2net, frames, tmp_path / "out", sequence=True)
    names = sorted(p.path.name for p in result.products)
    assert names == [
        "f0-cutout-0001.png",
        "f0-cutout-0002.png",
        "f0-mask-0001.png",
        "f0-mask-0002.png",
    ]


def test_m1_session_reused(u2net: Path, tmp_path: Path) -> None:
    check_m1_session_reused(OP, u2net, photo(tmp_path / "a.png"), tmp_path)


def test_m2_only_the_last_run_shrinks(u2net: Path, tmp_path: Path) -> None:
    check_m2_only_the_last_run_shrinks(
        OP, u2net, photo(tmp_path / "a.png"), gif3(tmp_path / "g.gif"), tmp_path
    )


def test_m4_products_identical_with_and_without_cleanup(ben2: Path, tmp_path: Path) -> None:
    check_m4_products_identical(
        OP,
        ben2,
        [photo(tmp_path / "a.png", mode="RGBA")],
        tmp_path,
        options={"refine_foreground": True},
    )


def test_minimal_feeds_is_none_for_fixed_models(u2net: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=u2net.parent))
    assert engine.run(request(OP, u2net, [photo(tmp_path / "a.png")], tmp_path / "o")).ok
    spec, _ = engine.resolve(request(OP, u2net, [], tmp_path / "o"))
    assert RemoveBackground().minimal_feeds(spec) is None


def test_cli(u2net: Path, tmp_path: Path) -> None:
    check_cli(
        "remove-background", photo(tmp_path / "a.png"), u2net, tmp_path / "out", {"image", "mask"}
    )
