"""A job after a preview keeps the preview's finished tiles and runs the rest on the plan a job
without a preview would run (issue #35: a 6000×4000 ×2 ran 2,626 tiles instead of 950).

Real ORT sessions on the contract ×2 upscaler (tests/model_files.py); each job
after a preview is set against the same job on a fresh engine.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.bench.after_preview import measure_job_after_preview
from engine.bench.table import Table
from engine.options import UpscaleOptions
from engine.previews import PreviewRequest, PreviewResult, Region
from engine.requests import Operation, OperationRequest, Result
from engine.settings import EngineSettings
from tests.engine_helpers import photo
from tests.model_files import upscaler

# A cap below the image's side forbids one run of the whole image, as memory does at 6000×4000.
CAPPED = UpscaleOptions(max_tile=256)


@pytest.fixture(scope="module")
def up2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("up") / "up2.onnx"
    upscaler(2)(path)
    return path


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im).astype(np.int16)


def _both(
    model: Path,
    image: Path,
    out: Path,
    regions: list[Region | None],
    options: UpscaleOptions | None = None,
) -> tuple[list[PreviewResult], Result, Result]:
    """The previews of `regions` then the job, on one engine; and the job alone on another."""

    def job(name: str) -> OperationRequest:
        return OperationRequest(
            Operation.UPSCALE, str(model), (image,), output_dir=out / name, options=options
        )

    settings = EngineSettings(models_dir=model.parent)
    engine = Engine(settings)
    previews = [engine.preview(PreviewRequest(job("p"), region)) for region in regions]
    after = engine.run(job("after"))
    alone = Engine(settings).run(job("alone"))
    return previews, after, alone


@pytest.mark.parametrize(
    ("mode", "regions"),
    [
        ("RGB", [Region(400, 250, 500, 350)]),  # the centre
        ("RGB", [Region(0, 0, 90, 70), Region(700, 420, 900, 600)]),  # two pans, two corners
        ("RGBA", [Region(400, 250, 500, 350)]),  # alpha: two passes a tile
    ],
)
def test_a_tiled_job_after_a_preview_runs_its_own_plan_and_keeps_the_previews_tiles(
    up2: Path, tmp_path: Path, mode: str, regions: list[Region | None]
) -> None:
    image = photo(tmp_path / "photo.png", 900, 600, mode=mode, seed=4)
    previews, after, alone = _both(up2, image, tmp_path, regions, CAPPED)
    made = sum(p.tiles_run for p in previews)
    passes = 2 if mode == "RGBA" else 1
    assert alone.tile is not None and made > 0
    assert after.tile == alone.tile  # the plan a job without a preview runs
    assert after.runs_reused == made * passes  # every tile the previews made is kept
    assert after.runs + after.runs_reused == alone.runs  # and only the rest run
    assert alone.runs_reused == 0
    # The same plan: the product is the one without a preview, bit for bit.
    assert np.array_equal(_pixels(after.products[0].path), _pixels(alone.products[0].path))


def test_a_job_whose_fastest_plan_is_one_run_takes_it_after_a_preview(
    up2: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "photo.png", 900, 600, seed=5)
    (preview,), after, alone = _both(up2, image, tmp_path, [Region(400, 250, 500, 350)])
    assert preview.tiles_run > 0
    assert alone.tile is None and alone.runs == 1  # one run of the whole image is fastest
    assert after.tile is None and after.runs == 1 and after.runs_reused == 0
    assert np.array_equal(_pixels(after.products[0].path), _pixels(alone.products[0].path))


def test_a_job_after_a_preview_of_the_whole_image_runs_no_more_than_the_rest(
    up2: Path, tmp_path: Path
) -> None:
    # The view showed all of it (zoomed out): every tile is made; the job runs none again,
    # fewer runs than one of the whole image, and its product is the job's within 1/255.
    image = photo(tmp_path / "photo.png", 700, 500, seed=6)
    (preview,), after, alone = _both(up2, image, tmp_path, [None])
    assert not preview.truncated and preview.tiles_run == preview.tiles_needed
    assert alone.runs == 1
    assert after.runs == 0 and after.runs_reused == preview.tiles_run
    diff = np.abs(_pixels(after.products[0].path) - _pixels(alone.products[0].path))
    assert int(diff.max()) <= 1


def test_the_bench_row_sets_the_arms_in_turn_against_each_other(up2: Path, tmp_path: Path) -> None:
    table = Table(io.StringIO())
    settings = EngineSettings(models_dir=up2.parent)
    ratio = measure_job_after_preview(table, settings, up2, "up2", tmp_path, True, (300, 200))
    (row,) = table.rows
    assert row.value == ratio and math.isfinite(ratio) and ratio > 0
    assert row.name.startswith("job after a preview of its centre ÷ without one, 300×200")
    assert "best of alone, after, after, alone" in row.note and "CPU" in row.note
    assert list(tmp_path.glob("after-preview-*.jpg"))  # the photo is the bench's own
    assert not list(tmp_path.glob("*/after-preview-*"))  # its 4 products are not kept
