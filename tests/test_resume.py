"""`run --resume`: a batch killed with SIGKILL is finished by a resume that makes exactly the
missing products; a product that is not whole is never taken for done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.io.exr import write_data
from engine.io.tiff import TiffWriter
from engine.io.writing import write_image
from engine.models.inventory import resolve_model
from engine.options import parse_output_options
from engine.requests import Operation, OperationRequest
from engine.resume import expected_products, is_whole, pending_inputs
from engine.samples.upscaler_models import make_upscaler
from tests.engine_helpers import photo
from tests.test_cli import ROOT, engine_cli

BATCH = 200


@pytest.fixture(scope="module")
def up2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_upscaler(tmp_path_factory.mktemp("m") / "up2.onnx", scale=2)


def _batch(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [photo(folder / f"img{i:03d}.png", 40, 32, seed=i) for i in range(count)]


def _products(out: Path) -> set[str]:
    return {n for n in os.listdir(out) if not n.startswith(".")} if out.is_dir() else set()


def _wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)  # polling a folder another process writes: no event to wait on
    return False


def test_a_batch_killed_midway_is_finished_by_resume_with_exactly_the_missing_products(
    up2: Path, tmp_path: Path
) -> None:
    inputs = _batch(tmp_path / "in", BATCH)
    out = tmp_path / "out"
    args: list[str | Path] = [
        "run",
        "upscale",
        *inputs,
        "--model",
        up2,
        "--out",
        out,
        "--standalone",
        "--quiet",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "engine", *map(str, args)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait_for(lambda: len(_products(out)) >= 20, 120), "the batch never started"
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(30)
    before = _products(out)
    assert 20 <= len(before) < BATCH, f"killed after {len(before)} products: not in the middle"
    assert all(is_whole(out / n) for n in before)  # published atomically: all whole

    resumed = engine_cli(*args, "--resume", "--json", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    made = {Path(p["path"]).name for p in json.loads(resumed.stdout)["products"]}
    expected = {f"img{i:03d}-up2.png" for i in range(BATCH)}
    assert made == expected - before  # exactly the missing ones
    assert f"{len(before)} of {BATCH} inputs already done" in resumed.stderr
    assert set(os.listdir(out)) == expected  # no numbered copies, no temp file left
    again = engine_cli(*args, "--resume", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["products"] == []


def test_a_truncated_product_is_redone_and_a_killed_runs_temp_file_swept(
    up2: Path, tmp_path: Path
) -> None:
    inputs = _batch(tmp_path / "in", 3)
    out = tmp_path / "out"
    args: list[str | Path] = [
        "run",
        "upscale",
        *inputs,
        "--model",
        up2,
        "--out",
        out,
        "--standalone",
    ]
    assert engine_cli(*args).returncode == 0
    product = out / "img001-up2.png"
    with open(product, "r+b") as file:
        file.truncate(product.stat().st_size - 5)  # another program's copy, cut short
    (out / ".img002-up2.png.partial-999999999-0a0b0c0d").write_bytes(b"half")  # a dead pid's
    (out / ".0a1b2cimg002-up2.png").touch()  # a name probe (engine/io/publish.py) left by a kill
    (out / ".0a1b2cnotes.txt").touch()  # not a probe of this batch's products: kept
    first = engine_cli(*args, "--resume", "--json")
    assert first.returncode == 0, first.stderr
    assert [Path(p["path"]).name for p in json.loads(first.stdout)["products"]] == [
        "img001-up2-1.png"  # never overwrites: the truncated file keeps its name
    ]
    assert "2 unfinished files of a stopped run removed" in first.stderr
    assert [n for n in os.listdir(out) if n.startswith(".")] == [".0a1b2cnotes.txt"]
    second = engine_cli(*args, "--resume", "--json")  # the whole copy counts: not redone again
    assert json.loads(second.stdout)["products"] == []


def test_a_folder_resumes_as_a_batch_of_its_images_into_its_tessera_folder(
    up2: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "photos"
    _batch(folder, 3)
    args: list[str | Path] = [
        "run",
        "upscale",
        folder,
        "--model",
        up2,
        "--standalone",
        "--resume",
        "--format",
    ]
    first = engine_cli(*args, "tiff")
    assert first.returncode == 0, first.stderr
    assert _products(folder / "Tessera") == {f"img{i:03d}-up2.tif" for i in range(3)}
    (folder / "Tessera" / "img000-up2.tif").unlink()
    second = engine_cli(*args, "tiff", "--json")
    assert [Path(p["path"]).name for p in json.loads(second.stdout)["products"]] == [
        "img000-up2.tif"
    ]
    other = engine_cli(*args, "exr", "--json")  # another format: other products, all made
    assert len(json.loads(other.stdout)["products"]) == 3


def test_resume_of_a_folder_with_no_images_says_so(up2: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = engine_cli("run", "upscale", tmp_path / "empty", "--model", up2, "--resume")
    assert done.returncode == 2 and "has no image files" in done.stderr


def test_resume_refuses_a_sequence(up2: Path, tmp_path: Path) -> None:
    inputs = _batch(tmp_path / "in", 2)
    done = engine_cli(
        "run", "upscale", *inputs, "--model", up2, "--sequence", "--resume", "--standalone"
    )
    assert done.returncode == 2 and "not a --sequence" in done.stderr


def _cut(path: Path, keep: int) -> Path:
    data = path.read_bytes()
    cut = path.with_name("cut-" + path.name)
    cut.write_bytes(data[: len(data) - keep])
    return cut


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".webp", ".tif16", ".tif", ".exr"])
def test_a_product_cut_short_is_not_whole(suffix: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (64, 48, 3), dtype=np.uint8)
    if suffix == ".tif16":
        path = tmp_path / "wide.tif"
        with open(path, "wb") as file:
            TiffWriter(file).add_picture(pixels.astype(np.uint16) * 257)
    elif suffix == ".exr":
        path = tmp_path / "depth.exr"
        with open(path, "wb") as file:
            write_data(file, rng.random((64, 48), dtype=np.float32))
    else:
        path = write_image(tmp_path / f"image{suffix}", pixels)
    assert is_whole(path)
    for keep in (1, 7, path.stat().st_size // 2):
        assert not is_whole(_cut(path, keep)), (suffix, keep)
    empty = tmp_path / f"empty{suffix}"
    empty.touch()  # a placeholder left by a file system without atomic rename
    assert not is_whole(empty)
    assert not is_whole(tmp_path / "missing.png")


def test_expected_products_carry_model_format_size_and_exr_depth(tmp_path: Path) -> None:
    from engine.samples.depth_models import make_da3

    up = resolve_model(str(make_upscaler(tmp_path / "up4.onnx", scale=4)), tmp_path)
    request = OperationRequest(
        Operation.UPSCALE,
        "up4",
        (tmp_path / "a.png",),
        output_dir=tmp_path / "o",
        output=parse_output_options("jpeg", size="x2"),
    )
    assert [p.name for p, _ in expected_products(request, up, tmp_path / "a.png")] == [
        "a-up4-x2.jpg"
    ]
    depth = resolve_model(str(make_da3(tmp_path / "da3.onnx")), tmp_path)
    request = OperationRequest(
        Operation.DEPTH, "da3", (tmp_path / "r.png",), output=parse_output_options("exr")
    )
    names = {
        p.name: required for p, required in expected_products(request, depth, request.inputs[0])
    }
    assert names["r-depth.exr"] and names["r-depth.tif"] and not names["r-sky.png"]
    assert pending_inputs(request, depth) == [tmp_path / "r.png"]
