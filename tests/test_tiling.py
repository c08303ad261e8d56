"""Tile plans, blending and memory-bounded assembly (engine/tiling.py, DESIGN §3)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest

from engine.tiling.assembly import TileAssembler, estimate_band_bytes
from engine.tiling.plan import (
    Span,
    TilePlan,
    axis_spans,
    effective_overlap,
    pad_to_multiple,
    plan_tiles,
)

# --- toy "models": numpy stand-ins with a known receptive field ---------------------------------


def box_filter(image: np.ndarray, radius: int) -> np.ndarray:
    """Mean over the (2r+1)² window clipped to the image: no padding, like a model that sees
    only real pixels, so a tile's border behaves like the image border."""
    h, w, c = image.shape
    csum = np.zeros((h + 1, w + 1, c), np.float64)
    csum[1:, 1:] = image.astype(np.float64).cumsum(0).cumsum(1)
    y0 = np.clip(np.arange(h) - radius, 0, h)
    y1 = np.clip(np.arange(h) + radius + 1, 0, h)
    x0 = np.clip(np.arange(w) - radius, 0, w)
    x1 = np.clip(np.arange(w) + radius + 1, 0, w)
    total = csum[y1][:, x1] - csum[y0][:, x1] - csum[y1][:, x0] + csum[y0][:, x0]  # window sums
    count = (y1 - y0)[:, None, None] * (x1 - x0)[None, :, None]
    return (total / count).astype(np.float32)


def nearest_up(image: np.ndarray, scale: int) -> np.ndarray:
    return np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)


def run_tiled(
    image: np.ndarray,
    plan: TilePlan,
    model: Callable[[np.ndarray], np.ndarray],
    scale: int,
    dtype: type[np.generic],
) -> np.ndarray:
    asm = TileAssembler(plan, scale, image.shape[2], np.dtype(dtype))
    for tile in plan.tiles:
        asm.add(tile, model(image[tile.slices]))
    return asm.finish()


def quantise(values: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
    maxval = np.iinfo(np.dtype(dtype)).max
    return np.rint(np.clip(values, 0.0, 1.0) * maxval).astype(dtype)


def random_image(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((h, w, c), dtype=np.float32)


# --- axis_spans --------------------------------------------------------------------------------


def check_spans(length: int, tile: int, overlap: int, m: int) -> tuple[Span, ...]:
    spans = axis_spans(length, tile, overlap, m)
    assert spans[0].start == 0
    assert spans[-1].end == length
    assert len({s.length for s in spans}) == 1, "every tile must have the same shape"
    if len(spans) == 1:
        assert spans[0].length == length
        return spans
    t = spans[0].length
    assert t == max(m, tile // m * m), "tile edge rounded down to multiple_of"
    ov = effective_overlap(tile, overlap, m)
    for a, b in itertools.pairwise(spans):
        assert a.start < b.start, "spans strictly increase"
        assert a.end - b.start >= ov, f"overlap {a.end - b.start} < {ov}"
    for s in spans:
        assert s.start % m == 0 and s.end % m == 0, "aligned to multiple_of"
    # Count is minimal: one tile fewer could not cover the axis with the required overlap.
    n = len(spans)
    assert (n - 1) * t - (n - 2) * ov < length
    # Evenly spread: gaps differ by at most one multiple.
    gaps = [b.start - a.start for a, b in itertools.pairwise(spans)]
    assert max(gaps) - min(gaps) <= m
    return spans


@pytest.mark.parametrize("m", [1, 2, 8])
def test_axis_spans_properties_over_a_grid(m: int) -> None:
    checked = 0
    for length in range(m, 200, m):
        for tile in (1, 3, 7, 16, 33, 64, 128):
            for overlap in (0, 1, 4, 8, 17, 40):
                check_spans(length, tile, overlap, m)
                checked += 1
    assert checked > 100


def test_axis_spans_known_layout() -> None:
    # 100 px, tile 40, overlap 10: ceil((100-10)/(40-10)) = 3 tiles, spread evenly.
    assert axis_spans(100, 40, 10) == (Span(0, 40), Span(30, 70), Span(60, 100))
    # The last tile is shifted inward instead of shrunk.
    spans = axis_spans(90, 64, 8)
    assert spans == (Span(0, 64), Span(26, 90))


def test_axis_spans_degenerate_cases() -> None:
    assert axis_spans(1, 64, 8) == (Span(0, 1),)
    assert axis_spans(1, 1, 0) == (Span(0, 1),)
    assert axis_spans(100, 512, 16) == (Span(0, 100),), "tile larger than the image"
    assert axis_spans(64, 64, 16) == (Span(0, 64),), "length exactly one tile"
    assert axis_spans(60, 64, 16, 4) == (Span(0, 60),)
    # An unaligned length is fine when a single tile covers it.
    assert axis_spans(61, 64, 16, 8) == (Span(0, 61),)


def test_axis_spans_huge_overlap_is_clamped_to_half_a_tile() -> None:
    spans = check_spans(64, 32, 1000, 1)
    assert spans == (Span(0, 32), Span(16, 48), Span(32, 64))
    assert effective_overlap(32, 1000) == 16
    # Tile of one pixel cannot overlap at all: one span per pixel, still terminates.
    assert len(axis_spans(5, 1, 3)) == 5


def test_axis_spans_tile_below_multiple_uses_one_multiple() -> None:
    spans = check_spans(64, 3, 0, 8)
    assert spans[0] == Span(0, 8)
    assert len(spans) == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 8, 0, 1), "length"),
        ((10, 0, 0, 1), "tile"),
        ((10, 4, -1, 1), "overlap"),
        ((10, 4, 0, 0), "multiple_of"),
        ((100, 32, 8, 8), "pad"),
    ],
)
def test_axis_spans_rejects_bad_arguments(args: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        axis_spans(*args)


# --- plan_tiles --------------------------------------------------------------------------------


def test_plan_tiles_row_major_equal_tiles() -> None:
    plan = plan_tiles(100, 150, 64, 16)
    assert plan.count == len(plan.rows) * len(plan.cols) == len(plan.tiles) == 2 * 3
    assert [(t.row, t.col) for t in plan.tiles] == [(r, c) for r in range(2) for c in range(3)]
    assert [t.index for t in plan.tiles] == list(range(plan.count))
    assert {(t.y1 - t.y0, t.x1 - t.x0) for t in plan.tiles} == {(plan.tile_h, plan.tile_w)}
    assert (plan.tile_h, plan.tile_w, plan.overlap) == (64, 64, 16)
    image = np.zeros((100, 150))
    assert image[plan.tiles[-1].slices].shape == (64, 64)


def test_plan_tiles_single_tile_when_none_or_large() -> None:
    for tile in (None, 150, 4096):
        plan = plan_tiles(100, 150, tile, 16)
        assert plan.count == 1
        (only,) = plan.tiles
        assert (only.y0, only.y1, only.x0, only.x1) == (0, 100, 0, 150)
        assert plan.overlap == 0
    # A tile that only covers one axis splits the other one.
    plan = plan_tiles(40, 300, 64, 8)
    assert (len(plan.rows), plan.tile_h, plan.tile_w) == (1, 40, 64)
    assert len(plan.cols) > 1


# --- assembly: tiled == whole image ------------------------------------------------------------


@pytest.mark.parametrize(
    ("h", "w", "tile", "overlap", "m"),
    [
        (70, 90, 32, 8, 1),  # receptive radius 1 <= 8/4
        (60, 88, 32, 4, 1),  # radius 1 == 4/4, every pair overlaps by exactly 4
        (72, 120, 40, 8, 8),  # multiple_of 8, tiles aligned
        (48, 200, 64, 8, 1),  # a single row of tiles
        (45, 45, 16, 8, 1),  # many tiles, evenly spread with large overlaps
    ],
)
def test_tiled_box_filter_equals_whole_image(
    h: int, w: int, tile: int, overlap: int, m: int
) -> None:
    def model(x: np.ndarray) -> np.ndarray:
        return nearest_up(box_filter(x, 1), 2)

    image = pad_to_multiple(random_image(h, w, seed=h * w), m)
    plan = plan_tiles(image.shape[0], image.shape[1], tile, overlap, m)
    assert plan.count > 1 and plan.overlap // 4 >= 1
    whole = model(image)
    tiled8 = run_tiled(image, plan, model, 2, np.uint8)
    diff = np.abs(tiled8.astype(int) - quantise(whole, np.uint8).astype(int))
    assert diff.max() <= 1
    tiled_f = run_tiled(image, plan, model, 2, np.float32)
    np.testing.assert_allclose(tiled_f, whole, atol=1e-5, rtol=0)


def test_receptive_field_wider_than_dead_zone_is_not_exact() -> None:
    # Control for the test above: radius 3 > overlap/4 = 1 must show seams, proving the
    # comparison can fail and that the dead zones are what makes the radius-1 case exact.
    def model(x: np.ndarray) -> np.ndarray:
        return box_filter(x, 3)

    image = random_image(60, 88, seed=1)
    plan = plan_tiles(60, 88, 32, 4)
    # Tight geometry: every neighbour pair overlaps by exactly 4, so the dead zone is 1 px.
    pairs = [*itertools.pairwise(plan.rows), *itertools.pairwise(plan.cols)]
    assert {a.end - b.start for a, b in pairs} == {4}
    tiled = run_tiled(image, plan, model, 1, np.float32)
    assert np.abs(tiled - model(image)).max() > 2 / 255


def test_agreeing_tiles_blend_exactly_for_many_plans() -> None:
    rng = np.random.default_rng(7)
    for _ in range(40):
        m = int(rng.choice([1, 2, 4, 8]))
        h = int(rng.integers(1, 90))
        w = int(rng.integers(1, 90))
        tile = int(rng.integers(1, 70))
        overlap = int(rng.integers(0, 24))
        scale = int(rng.choice([1, 2, 3]))
        pixels = rng.integers(0, 256, (h, w, 2), dtype=np.uint8)
        image = pad_to_multiple(pixels, m).astype(np.float32) / 255
        plan = plan_tiles(image.shape[0], image.shape[1], tile, overlap, m)

        def model(x: np.ndarray, scale: int = scale) -> np.ndarray:
            return nearest_up(x, scale)

        tiled = run_tiled(image, plan, model, scale, np.uint8)
        expected = nearest_up(pad_to_multiple(pixels, m), scale)
        np.testing.assert_array_equal(tiled, expected, err_msg=f"{plan}")


def test_random_plans_match_whole_image_within_receptive_field() -> None:
    rng = np.random.default_rng(11)
    for _ in range(40):
        m = int(rng.choice([1, 2, 4]))
        h, w = (int(v) for v in rng.integers(1, 100, 2))
        plan_args = int(rng.integers(4, 60)), int(rng.integers(0, 20))
        scale = int(rng.choice([1, 2]))
        image = pad_to_multiple(random_image(h, w, c=2, seed=h * 100 + w), m)
        plan = plan_tiles(image.shape[0], image.shape[1], *plan_args, m)
        radius = min(2, plan.overlap // 4)

        def model(x: np.ndarray, radius: int = radius, scale: int = scale) -> np.ndarray:
            return nearest_up(box_filter(x, radius), scale)

        tiled = run_tiled(image, plan, model, scale, np.float32)
        np.testing.assert_allclose(tiled, model(image), atol=2e-6, rtol=0, err_msg=f"{plan}")


def test_triple_overlaps_blend_exactly() -> None:
    # 16 px, tile 10: spans [0,10), [3,13), [6,16) -- the outer two overlap as well, and the
    # middle tile's two ramps overlap, so its weights only sum to 1 after normalisation.
    plan = plan_tiles(16, 16, 10, 5)
    assert plan.rows == (Span(0, 10), Span(3, 13), Span(6, 16))
    pixels = np.random.default_rng(5).integers(0, 256, (16, 16, 1), dtype=np.uint8)
    image = pixels.astype(np.float32) / 255

    def model(x: np.ndarray) -> np.ndarray:
        return nearest_up(x, 2)

    np.testing.assert_array_equal(run_tiled(image, plan, model, 2, np.uint8), model(pixels))
    out = run_tiled(image, plan, model, 2, np.float32)
    np.testing.assert_allclose(out, model(image), rtol=1e-6, atol=0)


def test_uint16_output() -> None:
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 65536, (50, 70, 3), dtype=np.uint16)
    image = pixels.astype(np.float32) / 65535
    plan = plan_tiles(50, 70, 24, 8)

    def identity(x: np.ndarray) -> np.ndarray:
        return nearest_up(x, 2)

    out = run_tiled(image, plan, identity, 2, np.uint16)
    assert out.dtype == np.uint16 and out.shape == (100, 140, 3)
    np.testing.assert_array_equal(out, nearest_up(pixels, 2))

    def blur(x: np.ndarray) -> np.ndarray:
        return box_filter(x, 1)

    # A float16 model output still quantises correctly (65535 is beyond float16 precision).
    asm = TileAssembler(plan_tiles(4, 4, None, 0), 1, 3, np.uint16)
    asm.add(asm.plan.tiles[0], np.full((4, 4, 3), 0.5, np.float16))
    assert np.all(asm.finish() == 32768)

    out = run_tiled(image, plan, blur, 1, np.uint16)
    diff = np.abs(out.astype(int) - quantise(blur(image), np.uint16).astype(int))
    assert diff.max() <= 1


def test_quantisation_clips_and_rounds() -> None:
    plan = plan_tiles(2, 3, None, 0)
    asm = TileAssembler(plan, 1, 1, np.uint8)
    values = np.array([[-0.5, np.nan, 1.4 / 255], [2.6 / 255, 1.0, np.inf]], np.float32)
    asm.add(plan.tiles[0], values)  # HW accepted for one channel
    np.testing.assert_array_equal(asm.finish()[:, :, 0], [[0, 0, 1], [3, 255, 255]])


# --- blending ----------------------------------------------------------------------------------


def test_disagreeing_tiles_meet_in_a_smooth_ramp() -> None:
    # Two tiles [0, 32) and [16, 48): overlap 16, dead zones of 4, ramp over [20, 28).
    plan = plan_tiles(8, 48, 32, 16)
    assert plan.cols == (Span(0, 32), Span(16, 48))
    low, high = 0.2, 0.6
    asm = TileAssembler(plan, 1, 1, np.float32)
    for tile, value in zip(plan.tiles, (low, high), strict=True):
        asm.add(tile, np.full((8, 32, 1), value, np.float32))
    row = asm.finish()[3, :, 0].astype(np.float64)
    # Left tile alone up to the right tile's dead zone, exactly; likewise on the right.
    np.testing.assert_array_equal(row[:20], np.float32(low))
    np.testing.assert_array_equal(row[28:], np.float32(high))
    ramp = row[19:29]
    assert np.all(np.diff(ramp) > 0), "strictly rising across the ramp"
    expected = low + (high - low) * np.sin(0.5 * np.pi * (np.arange(20, 28) + 0.5 - 20) / 8) ** 2
    np.testing.assert_allclose(row[20:28], expected, atol=1e-6)
    # A hard seam would jump by the full 0.4; the raised cosine over 8 px steps < 0.08.
    assert np.abs(np.diff(row)).max() < (high - low) * math.pi / 2 / 8 + 1e-6


def test_ramp_is_scaled_to_the_output_and_blends_in_uint8() -> None:
    plan = plan_tiles(48, 8, 32, 16)  # two tile rows this time
    asm = TileAssembler(plan, 3, 1, np.uint8)
    for tile, value in zip(plan.tiles, (0.0, 1.0), strict=True):
        asm.add(tile, np.full((96, 24, 1), value, np.float32))
    col = asm.finish()[:, 5, 0].astype(int)
    assert np.all(col[: 20 * 3] == 0) and np.all(col[28 * 3 :] == 255)
    ramp = col[20 * 3 : 28 * 3]
    assert len(np.unique(ramp)) >= 20, "24 output rows of ramp give many levels"
    assert np.all(np.diff(col) >= 0) and np.abs(np.diff(col)).max() <= 20


# --- memory bound ------------------------------------------------------------------------------


def test_assembler_holds_only_a_band_in_float32() -> None:
    h, w, scale, c = 256, 512, 4, 3
    plan = plan_tiles(h, w, 64, 16)
    assert len(plan.rows) >= 4 and len(plan.cols) >= 8
    full_float = h * scale * w * scale * c * 4
    bound = estimate_band_bytes(plan, scale, c)
    asm = TileAssembler(plan, scale, c, np.uint8)
    tile_out = np.full((plan.tile_h * scale, plan.tile_w * scale, c), 0.25, np.float32)
    for tile in plan.tiles:
        asm.add(tile, tile_out)
        assert asm.working_bytes <= bound
    out = asm.finish()
    assert np.all(out == 64)
    assert 0 < asm.peak_working_bytes <= bound
    assert bound < full_float / 4
    assert asm.working_bytes == 0


def test_single_row_plans_window_columns_too() -> None:
    # One row of tiles: a row band would be the whole image, the column window is not.
    h, w, scale, c = 64, 1024, 2, 3
    plan = plan_tiles(h, w, 64, 8)
    assert len(plan.rows) == 1
    asm = TileAssembler(plan, scale, c, np.uint16)
    for tile in plan.tiles:
        asm.add(tile, np.zeros((128, 128, c), np.float32))
    asm.finish()
    full_float = h * scale * w * scale * c * 4
    assert asm.peak_working_bytes <= estimate_band_bytes(plan, scale, c) < full_float / 4


def test_single_tile_needs_no_accumulator() -> None:
    plan = plan_tiles(30, 40, None, 8)
    asm = TileAssembler(plan, 2, 3, np.uint8)
    asm.add(plan.tiles[0], np.ones((60, 80, 3), np.float32))
    assert asm.peak_working_bytes == 0 == estimate_band_bytes(plan, 2, 3)
    assert np.all(asm.finish() == 255)


# --- misuse ------------------------------------------------------------------------------------


def test_assembler_rejects_misuse() -> None:
    plan = plan_tiles(40, 40, 24, 8)
    shape = (plan.tile_h, plan.tile_w, 1)
    with pytest.raises(ValueError, match="dtype"):
        TileAssembler(plan, 1, 1, np.int32)
    asm = TileAssembler(plan, 1, 1, np.uint8)
    with pytest.raises(ValueError, match="plan order"):
        asm.add(plan.tiles[1], np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match="shape"):
        asm.add(plan.tiles[0], np.zeros((plan.tile_h, plan.tile_w, 3), np.float32))
    asm.add(plan.tiles[0], np.zeros(shape, np.float32))
    with pytest.raises(RuntimeError, match="1 of 4"):
        asm.finish()
    for tile in plan.tiles[1:]:
        asm.add(tile, np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match="already"):
        asm.add(plan.tiles[0], np.zeros(shape, np.float32))
    assert asm.finish().shape == (40, 40, 1)


# --- pad_to_multiple ---------------------------------------------------------------------------


def test_pad_to_multiple_reflects_bottom_right() -> None:
    image = np.arange(5 * 7 * 2, dtype=np.uint16).reshape(5, 7, 2)
    padded = pad_to_multiple(image, 4)
    assert padded.shape == (8, 8, 2) and padded.dtype == np.uint16
    np.testing.assert_array_equal(padded[:5, :7], image)
    # Reflect without repeating the edge: row 5 mirrors row 3, row 7 mirrors row 1.
    np.testing.assert_array_equal(padded[5:, :7], image[[3, 2, 1]])
    np.testing.assert_array_equal(padded[:5, 7], image[:, 5])
    np.testing.assert_array_equal(padded[7, 7], image[1, 5])
    gray = image[:, :, 0]
    np.testing.assert_array_equal(pad_to_multiple(gray, 4), padded[:, :, 0])


def test_pad_to_multiple_no_op_returns_same_array() -> None:
    image = np.zeros((8, 16, 3), np.uint8)
    assert pad_to_multiple(image, 8) is image
    assert pad_to_multiple(image, 1) is image


def test_pad_to_multiple_edge_pads_when_too_small_to_reflect() -> None:
    one = np.array([[7]], np.uint8)
    np.testing.assert_array_equal(pad_to_multiple(one, 4), np.full((4, 4), 7, np.uint8))
    two = np.array([[1, 2]], np.uint8)  # width 2 needs 2 more: more than reflect can give
    np.testing.assert_array_equal(pad_to_multiple(two, 4), [[1, 2, 2, 2]] * 4)
    with pytest.raises(ValueError, match="multiple"):
        pad_to_multiple(one, 0)
