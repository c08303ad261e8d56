"""Issue 14, the engine's side of Preview: a request for the region the viewer shows.

Real ORT sessions on models built here: the synthetic ×4 network (SRVGGNetCompact-shaped, a
receptive field wider than the overlap's dead zone, so tile seams would show in any preview that
did not blend exactly as the full job does) and the contract upscaler and U²-Net-p.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.cancel import CancelToken
from engine.errors import Cancelled, UsageError
from engine.operations import tile_choice
from engine.options import UpscaleOptions
from engine.previews import PreviewPatch, PreviewRequest, Region
from engine.requests import Operation, OperationRequest, Progress, ProgressKind
from engine.runtime.providers import CUDA_EP
from engine.samples.background_models import make_u2net
from engine.samples.synthetic import synthetic_upscaler
from engine.samples.synthetic import test_image as smooth_image
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from engine.tiling.assembly import TileAssembler
from engine.tiling.cache import TileCache
from engine.tiling.plan import plan_tiles
from engine.tiling.region import Cell, RegionAssembler
from tests.engine_helpers import Recorder, cuda_shrink, photo


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_upscaler(tmp_path_factory.mktemp("net") / "net-x4.onnx", features=8, blocks=3)


def _job(model: Path, image: Path, out: Path, **kw: object) -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out, **kw)  # type: ignore[arg-type]


def _compose(patches: list[PreviewPatch]) -> tuple[np.ndarray, np.ndarray]:
    """The patches painted on a canvas of the product's size, and where they were painted."""
    w, h = patches[0].size
    canvas = np.zeros((h, w, patches[0].pixels.shape[2]), patches[0].pixels.dtype)
    painted = np.zeros((h, w), np.int32)
    for p in patches:
        r = p.region
        canvas[r.y0 : r.y1, r.x0 : r.x1] = p.pixels
        painted[r.y0 : r.y1, r.x0 : r.x1] += 1
    return canvas, painted


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im)


# -- the region's pixels are the product's ------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_region_assembler_equals_the_tile_assembler_bit_for_bit(dtype: type) -> None:
    rng = np.random.default_rng(1)
    # Overlap as large as half a tile: some rows are shared by three tile rows.
    for tile, overlap in ((40, 12), (32, 16)):
        plan = plan_tiles(100, 130, tile, overlap)
        scale = 2
        outs = [
            [
                rng.random((plan.tile_h * scale, plan.tile_w * scale, ch), np.float32)
                for ch in (3, 1)
            ]
            for _ in plan.tiles
        ]
        full = []
        for p, ch in enumerate((3, 1)):
            asm = TileAssembler(plan, scale, ch, dtype)
            for t in plan.tiles:
                asm.add(t, outs[t.index][p])
            full.append(asm.finish())
        product = np.concatenate(full, axis=2)
        for region in (Cell(0, 200, 0, 260), Cell(37, 151, 55, 203), Cell(199, 200, 0, 1)):
            ra = RegionAssembler(plan, scale, (3, 1), dtype, region)
            needed = ra.needed()
            for t in needed:
                ra.add(t, outs[t.index])
            cells = ra.ready()
            assert ra.complete
            painted = np.zeros((200, 260), np.int32)
            for cell in cells:
                got = ra.render(cell)
                want = product[cell.y0 : cell.y1, cell.x0 : cell.x1]
                assert got.dtype == want.dtype and np.array_equal(got, want), (tile, region, cell)
                painted[cell.y0 : cell.y1, cell.x0 : cell.x1] += 1
            inside = painted[region.y0 : region.y1, region.x0 : region.x1]
            assert inside.min() == 1 and inside.max() == 1  # the region exactly, once
            assert painted.sum() == inside.size


def test_cells_are_final_only_once_every_tile_reaching_them_is_in() -> None:
    plan = plan_tiles(96, 96, 40, 16)
    ra = RegionAssembler(plan, 1, (3,), np.uint8, Cell(0, 96, 0, 96))
    order = ra.needed()
    assert len(order) == plan.count
    # Centre first: the first tile's support holds the region's centre.
    first = order[0]
    assert first.y0 <= 48 < first.y1 and first.x0 <= 48 < first.x1
    added: set[int] = set()
    for t in order:
        ra.add(t, [np.zeros((plan.tile_h, plan.tile_w, 3), np.float32)])
        added.add(t.index)
        for cell in ra.ready():
            reaching = [
                u.index
                for u in plan.tiles
                if u.y0 < cell.y1 and cell.y0 < u.y1 and u.x0 < cell.x1 and cell.x0 < u.x1
            ]
            # Every tile whose input covers the cell has a weight there or none at all; all
            # of those with a weight are in (the ones without cannot change it).
            assert set(reaching) & added, cell
            ra.render(cell)  # raises if a contributing tile were missing
    assert ra.complete


@pytest.mark.parametrize(
    ("mode", "region"),
    [
        ("RGB", Region(70, 40, 150, 110)),  # the middle: tiles blended on every side
        ("RGBA", Region(0, 0, 230, 170)),  # the whole image, alpha through its own pass
        ("RGB", Region(150, 100, 400, 400)),  # the corner, clipped to the image
    ],
)
def test_preview_region_equals_the_same_region_of_the_full_product(
    net: Path, tmp_path: Path, mode: str, region: Region
) -> None:
    image = photo(tmp_path / f"in-{mode}.png", 230, 170, mode=mode, seed=4)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    patches: list[PreviewPatch] = []
    result = engine.preview(
        PreviewRequest(_job(net, image, tmp_path / "p", tile=64), region), patch=patches.append
    )
    assert result.size == (920, 680) and result.scale == 4 and not result.truncated
    assert result.tiles_run == result.tiles_needed > 1
    canvas, painted = _compose(patches)
    wanted = region.scaled(4).clipped(920, 680)
    inside = painted[wanted.y0 : wanted.y1, wanted.x0 : wanted.x1]
    assert inside.min() == 1 and inside.max() == 1 and painted.sum() == inside.size

    # The full job on a fresh engine: nothing shared with the preview but the model file.
    full = Engine(EngineSettings(models_dir=tmp_path, overlap=32)).run(
        _job(net, image, tmp_path / "f", tile=64)
    )
    product = _pixels(full.products[0].path)
    assert product.shape[2] == (4 if mode == "RGBA" else 3)
    got = canvas[wanted.y0 : wanted.y1, wanted.x0 : wanted.x1].astype(np.int32)
    want = product[wanted.y0 : wanted.y1, wanted.x0 : wanted.x1].astype(np.int32)
    assert int(np.abs(got - want).max()) == 0


def test_a_job_after_a_preview_runs_the_whole_image_when_that_is_fastest(
    net: Path, tmp_path: Path
) -> None:
    image = smooth_image(tmp_path / "big.png", 600, 420, seed=2)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    patches: list[PreviewPatch] = []
    result = engine.preview(
        PreviewRequest(_job(net, image, tmp_path / "p"), Region(260, 180, 340, 240)),
        patch=patches.append,
    )
    assert result.tiles_needed < 35  # only tiles reaching the view ran
    # One run of the whole image costs less than the rest of the preview's tiled plan: the
    # job takes it, as a job with no preview before it does (a preview never slows the job).
    full = engine.run(_job(net, image, tmp_path / "f"))
    alone = Engine(EngineSettings(models_dir=tmp_path, overlap=32)).run(
        _job(net, image, tmp_path / "a")
    )
    assert full.tile is None and full.runs == 1
    assert alone.tile is None and alone.runs == 1
    # The preview showed the product within the tiling rule's 1/255.
    canvas, _ = _compose(patches)
    product = _pixels(full.products[0].path).astype(np.int16)
    r = Region(260, 180, 340, 240).scaled(4)
    shown = canvas[r.y0 : r.y1, r.x0 : r.x1].astype(np.int16)
    assert int(np.abs(shown - product[r.y0 : r.y1, r.x0 : r.x1]).max()) <= 1


def test_a_job_after_a_preview_keeps_its_tiles_on_the_fastest_tiled_plan(
    net: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # max_tile 256 forbids one run of the whole 600×420 image, as memory does a 6000×4000 one;
    # the activations' share of the output a 6000×4000 ×2 allows lets tiles above 128 in here.
    monkeypatch.setattr(tile_choice, "PEAK_SHARE", 8.0)
    image = smooth_image(tmp_path / "big.png", 600, 420, seed=2)
    capped = UpscaleOptions(max_tile=256)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    preview = engine.preview(
        PreviewRequest(_job(net, image, tmp_path / "p", options=capped), Region(260, 180, 340, 240))
    )
    assert preview.tiles_run > 0
    full = engine.run(_job(net, image, tmp_path / "f", options=capped))
    alone = Engine(EngineSettings(models_dir=tmp_path, overlap=32)).run(
        _job(net, image, tmp_path / "a", options=capped)
    )
    assert alone.tile is not None and full.tile == alone.tile  # the plan fastest for the job
    assert full.runs == alone.runs - preview.tiles_run  # and the preview's tiles kept
    assert np.array_equal(_pixels(full.products[0].path), _pixels(alone.products[0].path))


# -- the full job reuses the preview's tiles ----------------------------------------------------


def test_full_job_skips_the_tiles_the_preview_made_and_empties_the_cache(
    net: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "in.png", 230, 170, seed=5)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    preview = engine.preview(
        PreviewRequest(_job(net, image, tmp_path / "p", tile=64), Region(80, 50, 150, 120))
    )
    assert len(engine.previews.tiles) == preview.tiles_run > 0
    events: list[Progress] = []
    reused = engine.run(_job(net, image, tmp_path / "a", tile=64), events.append)
    fresh = Engine(EngineSettings(models_dir=tmp_path, overlap=32)).run(
        _job(net, image, tmp_path / "b", tile=64)
    )
    assert reused.runs == fresh.runs - preview.tiles_run
    assert np.array_equal(_pixels(reused.products[0].path), _pixels(fresh.products[0].path))
    assert len(engine.previews.tiles) == 0 and engine.previews.tiles.nbytes == 0
    # One session for preview and job (M1); the job's progress counts the runs it made.
    assert engine.sessions.created == 1 and reused.sessions_reused == 1
    runs = [e for e in events if e.kind is ProgressKind.RUN_FINISHED]
    assert runs[-1].run == runs[-1].run_count == reused.runs


def test_tiles_of_another_input_or_model_are_not_reused(net: Path, tmp_path: Path) -> None:
    image = photo(tmp_path / "in.png", 230, 170, seed=5)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    engine.preview(
        PreviewRequest(_job(net, image, tmp_path / "p", tile=64), Region(80, 50, 150, 120))
    )
    held = len(engine.previews.tiles)
    assert held
    other = make_upscaler(tmp_path / "up4.onnx", scale=4)
    result = engine.run(_job(other, image, tmp_path / "o", tile=64))
    assert result.runs == 35  # 230×170 at 64 px with overlap 32: 7 × 5 tiles, none skipped
    # The same file rewritten in place is another version: its old tiles are dropped.
    photo(image, 230, 170, seed=6)
    os.utime(image, ns=(1, 1))
    result = engine.run(_job(net, image, tmp_path / "o", tile=64))
    assert result.runs == 35
    # A preview of the new version drops the old version's tiles.
    engine.preview(PreviewRequest(_job(net, image, tmp_path / "p", tile=64), Region(0, 0, 30, 30)))
    assert len(engine.previews.tiles) <= 4


def test_tile_cache_is_bounded_and_the_preview_shows_the_centre(net: Path, tmp_path: Path) -> None:
    image = photo(tmp_path / "in.png", 230, 170, seed=5)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    tile_bytes = 64 * 4 * 64 * 4 * 3 * 4
    engine.previews.tiles = TileCache(limit=3 * tile_bytes)
    patches: list[PreviewPatch] = []
    result = engine.preview(
        PreviewRequest(_job(net, image, tmp_path / "p", tile=64)), patch=patches.append
    )
    assert result.truncated and result.tiles_run == 3 and result.tiles_needed == 35
    assert engine.previews.tiles.nbytes <= 3 * tile_bytes
    # What is drawn is final, around the centre of the image.
    canvas, painted = _compose(patches)
    ys, xs = np.nonzero(painted)
    assert ys.min() < 340 < ys.max() and xs.min() < 460 < xs.max()
    full = Engine(EngineSettings(models_dir=tmp_path, overlap=32)).run(
        _job(net, image, tmp_path / "f", tile=64)
    )
    product = _pixels(full.products[0].path)
    assert np.array_equal(canvas[painted > 0], product[painted > 0])


def test_unload_hands_back_what_previews_keep(net: Path, tmp_path: Path) -> None:
    image = photo(tmp_path / "in.png", 230, 170, seed=5)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    job = _job(net, image, tmp_path / "p", tile=64)
    first = engine.preview(PreviewRequest(job, Region(0, 0, 60, 60)))
    assert first.timings["decode_s"] > 0 and first.held_bytes >= 230 * 170 * 3
    # A pan: the decoded input is kept, and the tiles already made are not run again.
    second = engine.preview(PreviewRequest(job, Region(20, 20, 80, 80)))
    assert second.timings["decode_s"] == 0.0 and second.tiles_cached > 0
    assert second.tiles_run + second.tiles_cached == second.tiles_needed
    assert engine.previews.held_bytes == second.held_bytes > 0
    engine.unload_all()
    assert engine.previews.held_bytes == 0 and len(engine.previews.tiles) == 0
    # A job of another image (a batch, a speed measurement) leaves the previewed image's
    # pixels; the job of the previewed image lets them go (it decodes its own, streaming).
    engine.preview(PreviewRequest(job, Region(0, 0, 60, 60)))
    kept = engine.previews.held_bytes - engine.previews.tiles.nbytes
    assert kept == 230 * 170 * 3
    engine.run(_job(net, photo(tmp_path / "other.png"), tmp_path / "o"))
    assert engine.previews.held_bytes - engine.previews.tiles.nbytes == kept
    engine.run(_job(net, image, tmp_path / "o", tile=64))
    assert engine.previews.held_bytes == 0  # the pixels, and the tiles the job used


# -- the memory contract and cancel --------------------------------------------------------------


def test_preview_last_run_shrinks_and_a_cancelled_preview_hands_back(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32), session_wrap=recorder)
    image = photo(tmp_path / "in.png", 200, 150)
    job = _job(model, image, tmp_path / "p", tile=64, device="gpu:0", runtime="cuda")
    result = engine.preview(PreviewRequest(job, Region(0, 0, 40, 30)))  # the top-left corner
    assert 1 < result.tiles_run < 24 and result.shrinks == 1
    # M2: the last tile's own run shrinks — no run of any other kind was needed after it.
    assert result.runs == result.tiles_run
    assert recorder.log == [None] * (result.runs - 1) + [cuda_shrink()]

    recorder.log.clear()
    token = CancelToken()

    def cancel_after_first(event: Progress) -> None:
        if event.kind is ProgressKind.RUN_FINISHED:
            token.cancel()

    with pytest.raises(Cancelled):
        engine.preview(
            PreviewRequest(job, Region(0, 0, 200, 150), generation=2), cancel_after_first, token
        )
    # M10: one run made, then the smallest run that asks for the shrink.
    assert recorder.log == [None, cuda_shrink()]
    assert engine.sessions.created == 1  # the same session throughout (M1)
    # The tile finished before the cancel is kept: the next preview does not run it again.
    again = engine.preview(PreviewRequest(job, Region(0, 0, 200, 150), generation=3))
    assert again.tiles_cached == result.tiles_run + 1


def test_preview_progress_counts_the_tiles_it_runs(net: Path, tmp_path: Path) -> None:
    image = photo(tmp_path / "in.png", 230, 170, seed=5)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    events: list[Progress] = []
    request = PreviewRequest(_job(net, image, tmp_path / "p", tile=64), Region(60, 40, 170, 130))
    result = engine.preview(request, events.append)
    runs = [(e.run, e.run_count) for e in events if e.kind is ProgressKind.RUN_FINISHED]
    n = result.tiles_run
    assert runs == [(i, n) for i in range(1, n + 1)] and n > 2
    assert all(e.request_id == request.id for e in events)


def test_preview_refuses_a_sequence_with_a_reason(net: Path, tmp_path: Path) -> None:
    frames = [photo(tmp_path / f"f{i}.png", seed=i) for i in range(2)]
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    job = OperationRequest(Operation.UPSCALE, str(net), tuple(frames), sequence=True)
    with pytest.raises(UsageError, match="one image"):
        engine.preview(PreviewRequest(job))


# -- the non-tiled families: one run of the whole image -----------------------------------------


def test_background_preview_is_the_job_itself_and_is_not_run_again_on_a_pan(
    tmp_path: Path,
) -> None:
    model = make_u2net(tmp_path / "u2netp.onnx")
    image = photo(tmp_path / "in.png", 90, 60, seed=1)
    engine = Engine(EngineSettings(models_dir=tmp_path, overlap=32))
    job = OperationRequest(Operation.REMOVE_BACKGROUND, str(model), (image,), output_dir=tmp_path)
    first = engine.preview(PreviewRequest(job, Region(0, 0, 40, 40)))
    assert first.runs == 1 and first.products
    cutout = next(p for p in first.products if p.path.name.endswith("cutout.png"))
    assert cutout.path.parent != tmp_path  # the preview folder, not the job's output folder
    full = Engine(EngineSettings(models_dir=tmp_path, overlap=32)).run(job)
    product = next(p for p in full.products if p.path.name.endswith("cutout.png"))
    assert np.array_equal(_pixels(cutout.path), _pixels(product.path))
    second = engine.preview(PreviewRequest(job, Region(30, 10, 90, 60), generation=2))
    assert second.runs == 0 and second.products == first.products
    folder = cutout.path.parent
    engine.unload_all()
    assert not folder.exists()


# -- a pan re-checks nothing that did not change ------------------------------------------------


def test_a_pan_neither_resolves_nor_validates_an_unchanged_model_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.api
    import engine.models.inventory

    calls = {"resolve": 0, "validate": 0}
    real_resolve = engine.api.resolve_model
    real_validate = engine.models.inventory.validate_model

    def resolve(*args: Any, **kwargs: Any) -> Any:
        calls["resolve"] += 1
        return real_resolve(*args, **kwargs)

    def validate(*args: Any, **kwargs: Any) -> Any:
        calls["validate"] += 1
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(engine.api, "resolve_model", resolve)
    monkeypatch.setattr(engine.models.inventory, "validate_model", validate)
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    image = photo(tmp_path / "in.png", 200, 150)
    eng = Engine(EngineSettings(models_dir=tmp_path))
    job = _job(model, image, tmp_path / "p", tile=64)
    eng.preview(PreviewRequest(job, Region(0, 0, 60, 60)))
    assert calls == {"resolve": 1, "validate": 1}
    pan = eng.preview(PreviewRequest(job, Region(20, 20, 80, 80), generation=2))
    assert calls == {"resolve": 1, "validate": 1} and pan.tiles_cached > 0
    # The model file rewritten in place is looked at again.
    make_upscaler(model, scale=2)
    os.utime(model, ns=(1, 1))
    eng.preview(PreviewRequest(job, Region(20, 20, 80, 80), generation=3))
    assert calls == {"resolve": 2, "validate": 2}
    # A job resolves its model itself (a model installed meanwhile is found).
    eng.run(job)
    assert calls["resolve"] == 3
    # A non-tiled family's preview is its job: one lookup for both, none on a pan.
    u2net = make_u2net(tmp_path / "u2netp.onnx")
    cut = OperationRequest(Operation.REMOVE_BACKGROUND, str(u2net), (image,), output_dir=tmp_path)
    eng.preview(PreviewRequest(cut, Region(0, 0, 40, 40)))
    eng.preview(PreviewRequest(cut, Region(30, 10, 90, 60), generation=2))
    assert calls["resolve"] == 4
    eng.unload_all()  # Unload forgets what was resolved
    eng.preview(PreviewRequest(cut, Region(30, 10, 90, 60), generation=3))
    assert calls["resolve"] == 5
