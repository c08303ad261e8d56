"""Geometry (MoGe-2) on real ORT sessions over the contract model.

The contract scene is fronto-parallel: z = 1 + luma, points on pixel-centre rays of a pinhole
camera with focal F = half the image diagonal, normal (0, 0, −1), valid where luma < 0.95,
metric_scale 1.5. So the recovered focal must be F, the shift 0 and depth (1 + luma) · 1.5 m.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.errors import UsageError
from engine.operations.depth_codec import read_depth_text
from engine.operations.geometry import Geometry, depth_edge, infer, recover_focal_shift
from engine.requests import Operation, ProductKind
from engine.samples.geometry_models import make_moge
from engine.samples.onnx_graph import LUMA
from engine.settings import EngineSettings
from tests.engine_helpers import gif3, photo
from tests.family_checks import (
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

OP = Operation.GEOMETRY
H, W = 48, 64
F = math.hypot(W, H) / 2  # 40 px


@pytest.fixture(scope="module")
def moge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_moge(tmp_path_factory.mktemp("models") / "moge.onnx")


@pytest.fixture
def scene(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """Random colours (luma < 0.8) with a white block of "sky" (luma 1, invalid)."""
    rgb = np.random.default_rng(7).integers(0, 200, (H, W, 3), dtype=np.uint8)
    rgb[:10, 20:40] = 255
    Image.fromarray(rgb).save(tmp_path / "scene.png")
    return tmp_path / "scene.png", rgb


@pytest.fixture
def smooth(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A slow colour ramp (no depth edges) with the same white block, for the point cloud."""
    ramp = np.linspace(40, 160, W)[None, :, None] + np.linspace(0, 30, H)[:, None, None]
    rgb = np.broadcast_to(ramp * np.array([1.0, 0.8, 0.6]), (H, W, 3)).astype(np.uint8)
    rgb[:10, 20:40] = 255
    Image.fromarray(rgb).save(tmp_path / "smooth.png")
    return tmp_path / "smooth.png", rgb


def luma_of(rgb: np.ndarray) -> np.ndarray:
    return (rgb.astype(np.float32) / 255) @ np.array(LUMA, np.float32)


@pytest.mark.parametrize("rank", [0, 1])
def test_recovers_the_camera_and_metric_depth(
    tmp_path: Path, scene: tuple[Path, np.ndarray], rank: int
) -> None:
    model = make_moge(tmp_path / f"moge_rank{rank}.onnx", num_tokens_rank=rank)
    log = FeedLog()
    engine = Engine(EngineSettings(models_dir=model.parent), session_wrap=log)
    path, rgb = scene
    result = engine.run(request(OP, model, [path], tmp_path / "out"))
    assert result.ok, result.failures
    assert log.feeds[0]["num_tokens"] == (
        () if rank == 0 else (1,),
        "int64",
        1800 if rank == 0 else [1800],
    )
    assert log.feeds[0]["image"][:2] == ((1, 3, H, W), "float32")

    k = json.loads(product(result, ProductKind.INTRINSICS).read_text())
    assert (k["width"], k["height"], k["units"], k["metric_scale"]) == (W, H, "m", 1.5)
    assert abs(k["fx"] - F) / F < 1e-6 and abs(k["fy"] - F) / F < 1e-6
    assert (k["cx"], k["cy"]) == (W / 2, H / 2)
    assert math.isclose(k["normalized"]["fx"] * W, k["fx"]) and math.isclose(
        k["normalized"]["fy"] * H, k["fy"]
    )
    assert abs(k["shift"]) < 1e-6

    luma = luma_of(rgb)
    valid = luma < 0.95
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    assert np.isnan(depth[~valid]).all() and not np.isnan(depth[valid]).any()
    assert np.allclose(depth[valid], (1 + luma[valid]) * 1.5, rtol=1e-5)
    mask = read(product(result, ProductKind.MASK)).frames[0][..., 0]
    assert np.array_equal(mask, np.where(valid, 255, 0))
    normal = read(product(result, ProductKind.NORMAL)).frames[0]
    assert (normal[valid] == [128, 128, 0]).all() and (normal[~valid] == 0).all()  # n = (0, 0, −1)


@pytest.mark.parametrize(
    ("option", "sent"), [(None, 1800), (1200, 1200), (3600, 3600), ("2400", 2400)]
)
def test_num_tokens_option_is_sent(moge: Path, tmp_path: Path, option: object, sent: int) -> None:
    log = FeedLog()
    engine = Engine(EngineSettings(models_dir=moge.parent), session_wrap=log)
    options = {} if option is None else {"num_tokens": option}
    assert engine.run(
        request(OP, moge, [photo(tmp_path / "a.png")], tmp_path / "o", options=options)
    ).ok
    assert log.feeds[0]["num_tokens"][2] == sent


@pytest.mark.parametrize("option", [500, 9000, "many", 1800.5])
def test_num_tokens_out_of_range_is_refused_before_any_run(
    moge: Path, tmp_path: Path, option: object
) -> None:
    log = FeedLog()
    engine = Engine(EngineSettings(models_dir=moge.parent), session_wrap=log)
    bad = request(
        OP, moge, [photo(tmp_path / "a.png")], tmp_path / "o", options={"num_tokens": option}
    )
    with pytest.raises(UsageError, match="num_tokens takes a whole number from 1200 to 3600"):
        engine.run(bad)
    assert log.feeds == []


def synthetic_points(
    focal: float, shift: float, h: int = 60, w: int = 80
) -> tuple[np.ndarray, np.ndarray]:
    """An affine point map as MoGe predicts it: true camera points (z in 2…4) with z lowered by
    `shift`, focal relative to half the diagonal. Returns (points, true depth). A shift over 2
    puts some predicted z behind the camera, which the solver must start from."""
    rng = np.random.default_rng(1)
    z = (2.0 + rng.random((h, w)) + np.linspace(0, 1, w)[None]).astype(np.float64)
    half = math.hypot(w, h) / 2
    u = (np.arange(w) + 0.5 - w / 2) / half
    v = (np.arange(h) + 0.5 - h / 2) / half
    x, y = u[None, :] * z / focal, v[:, None] * z / focal
    return np.stack([x, y, z - shift], axis=-1).astype(np.float32), z


@pytest.mark.parametrize(("focal", "shift"), [(1.3, 0.7), (0.6, -0.4), (2.5, 1.5), (1.0, 2.5)])
def test_focal_and_shift_recovered_from_a_known_point_map(focal: float, shift: float) -> None:
    points, _ = synthetic_points(focal, shift)
    valid = np.ones(points.shape[:2], bool)
    valid[:20, :30] = False  # the fit must use only valid points
    points[:20, :30] = [5.0, -7.0, 0.1]  # garbage there
    got_focal, got_shift = recover_focal_shift(points, valid)
    assert abs(got_focal - focal) / focal < 1e-4 and abs(got_shift - shift) < 1e-4


def test_infer_applies_shift_scale_and_intrinsics() -> None:
    points, z = synthetic_points(1.3, 0.7)
    h, w = z.shape
    normal = np.zeros((h, w, 3), np.float32)
    mask = np.ones((h, w), np.float32)
    mask[0, 0] = 0.2
    geo = infer(points, normal, mask, 2.0)
    assert np.isnan(geo.depth[0, 0])
    assert np.allclose(geo.depth.ravel()[1:], 2.0 * z.ravel()[1:], rtol=1e-4)
    k = geo.intrinsics
    half = math.hypot(w, h) / 2
    assert math.isclose(k.fx * w, 1.3 * half, rel_tol=1e-4) and math.isclose(
        k.fy * h, 1.3 * half, rel_tol=1e-4
    )


def test_depth_edge() -> None:
    depth = np.ones((5, 8), np.float32)
    depth[:, 4:] = 1.1  # a 10 % jump: an edge on both sides of it
    assert depth_edge(depth)[:, 3:5].all() and not depth_edge(depth)[:, [0, 1, 2, 5, 6, 7]].any()
    depth[:, 4:] = 1.02  # 2 %: no edge
    assert not depth_edge(depth).any()
    depth[2, 2] = np.nan  # next to a pixel without depth: an edge, as with the reference's inf
    edge = depth_edge(depth)
    assert edge[1:4, 1:4].all() and edge.sum() == 9


def parse_ply(path: Path) -> tuple[list[str], np.ndarray]:
    data = path.read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    count = int(next(line for line in header if line.startswith("element vertex")).split()[-1])
    dtype = np.dtype(
        [(n, "<f4") for n in ("x", "y", "z", "nx", "ny", "nz")]
        + [(n, "u1") for n in ("red", "green", "blue")]
    )
    assert len(data) - end == count * dtype.itemsize
    return header, np.frombuffer(data[end:], dtype)


def test_point_cloud(moge: Path, tmp_path: Path, smooth: tuple[Path, np.ndarray]) -> None:
    path, rgb = smooth
    result = run(OP, moge, [path], tmp_path / "out")
    header, v = parse_ply(product(result, ProductKind.POINT_CLOUD))
    assert header[:2] == ["ply", "format binary_little_endian 1.0"]
    assert any(
        "OpenCV" in line and "metres" in line for line in header if line.startswith("comment")
    )
    assert [line.split()[-1] for line in header if line.startswith("property")] == [
        "x",
        "y",
        "z",
        "nx",
        "ny",
        "nz",
        "red",
        "green",
        "blue",
    ]
    # Expected points, computed here: valid pixels whose 3×3 neighbourhood (invalid = infinitely
    # far) spans at most 4 % of their depth.
    luma = luma_of(rgb)
    depth = np.where(luma < 0.95, (1 + luma) * 1.5, np.inf)
    padded = np.pad(depth, 1, mode="edge")
    windows = np.stack([padded[dy : dy + H, dx : dx + W] for dy in range(3) for dx in range(3)])
    with np.errstate(invalid="ignore"):  # inf − inf inside the sky: not kept either way
        keep = np.isfinite(depth) & ~(windows.max(axis=0) - windows.min(axis=0) > 0.04 * depth)
    assert len(v) == keep.sum() > 0.8 * (H * W - 200)  # all but the sky and its rim
    rows, cols = np.nonzero(keep)
    d = depth[keep]
    assert np.allclose(v["z"], d, rtol=1e-5)
    assert np.allclose(v["x"], (cols + 0.5 - W / 2) / F * d, rtol=1e-4, atol=1e-6)
    assert np.allclose(v["y"], (rows + 0.5 - H / 2) / F * d, rtol=1e-4, atol=1e-6)
    assert (v["nx"] == 0).all() and (v["ny"] == 0).all() and (v["nz"] == -1).all()
    colours = np.stack([v["red"], v["green"], v["blue"]], axis=1)
    assert np.array_equal(colours, rgb[keep])


def test_sixteen_bit_depth_round_trips_through_its_range(
    moge: Path, tmp_path: Path, scene: tuple[Path, np.ndarray]
) -> None:
    path, _ = scene
    result = run(OP, moge, [path], tmp_path / "out")
    depth = read_tiff(product(result, ProductKind.DEPTH_FLOAT))[0]
    png = product(result, ProductKind.DEPTH16)
    meta = read_depth_text(png)
    assert meta["units"] == "m" and (meta["min"], meta["max"]) == (
        float(np.nanmin(depth)),
        float(np.nanmax(depth)),
    )
    v = read(png).frames[0][..., 0].astype(np.float64)
    valid = ~np.isnan(depth)
    assert (v[~valid] == 0).all() and (v[valid] >= 1).all()
    lo, hi = meta["min"], meta["max"]
    back = hi - (v[valid] - 1) / 65534 * (hi - lo)
    assert np.abs(back - depth[valid]).max() <= 0.5 * (hi - lo) / 65534 * 1.001


def test_gif_gives_animated_maps_and_numbered_clouds(moge: Path, tmp_path: Path) -> None:
    result = run(OP, moge, [varied_gif(tmp_path / "anim.gif")], tmp_path / "out")
    assert result.runs == 3
    check_gif_gives_animated_products(
        result, {ProductKind.DEPTH_FLOAT, ProductKind.DEPTH16, ProductKind.NORMAL, ProductKind.MASK}
    )
    per_frame = sorted(
        p.path.name
        for p in result.products
        if p.kind in (ProductKind.POINT_CLOUD, ProductKind.INTRINSICS)
    )
    assert per_frame == [f"anim-intrinsics-000{i}.json" for i in (1, 2, 3)] + [
        f"anim-points-000{i}.ply" for i in (1, 2, 3)
    ]
    pages = read_tiff(product(result, ProductKind.DEPTH_FLOAT))
    meta = read_depth_text(product(result, ProductKind.DEPTH16))
    assert meta["min"] == min(float(np.nanmin(p)) for p in pages)
    assert meta["max"] == max(float(np.nanmax(p)) for p in pages)


def test_minimal_feeds_run_on_the_session(moge: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=moge.parent))
    assert engine.run(request(OP, moge, [photo(tmp_path / "a.png")], tmp_path / "o")).ok
    entry = engine.sessions.entries()[0]
    feeds = Geometry().minimal_feeds(engine.resolve(request(OP, moge, [], tmp_path / "o"))[0])
    assert (
        feeds is not None
        and feeds["image"].shape == (1, 3, 56, 56)
        and feeds["num_tokens"].shape == ()
    )
    assert entry.session.run(None, feeds)[0].shape == (1, 56, 56, 3)


def test_m1_session_reused(moge: Path, tmp_path: Path) -> None:
    check_m1_session_reused(OP, moge, photo(tmp_path / "a.png"), tmp_path)


def test_m2_only_the_last_run_shrinks(moge: Path, tmp_path: Path) -> None:
    check_m2_only_the_last_run_shrinks(
        OP, moge, photo(tmp_path / "a.png"), gif3(tmp_path / "g.gif"), tmp_path
    )


def test_m4_products_identical_with_and_without_cleanup(
    moge: Path, tmp_path: Path, scene: tuple[Path, np.ndarray]
) -> None:
    check_m4_products_identical(OP, moge, [scene[0]], tmp_path)


def test_cli(moge: Path, tmp_path: Path) -> None:
    check_cli(
        "geometry",
        photo(tmp_path / "a.png"),
        moge,
        tmp_path / "out",
        {"depth_float", "depth16", "normal", "mask", "intrinsics", "point_cloud"},
    )
