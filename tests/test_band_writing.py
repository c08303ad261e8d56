"""Issue #24: an upscale's PNG is written band by band behind its runs — the rows the
finished tiles made are encoded while the later tiles run — with the product's bytes, the
memory contract and "never half written" unchanged."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.api import Engine
from engine.cancel import CancelToken
from engine.errors import Cancelled
from engine.requests import Operation, OperationRequest
from engine.runtime.sessions import SessionKey
from engine.samples.upscaler_models import make_compact_upscaler, make_upscaler
from engine.settings import EngineSettings
from engine.tiling.assembly import TileAssembler
from engine.tiling.plan import Tile, plan_tiles
from tests.engine_helpers import SessionProxy, photo

# A wide output (×4 of 512 px: 6 KB a row) so the encoder's blocks of rows (256 KB) are a
# small part of a tile row, and several tile rows.
WIDTH, HEIGHT, TILE = 512, 160, 64


def _written(folder: Path) -> int:
    """Bytes in the output folder's files (the hidden temp file while a product is written)."""
    return sum(p.stat().st_size for p in folder.iterdir()) if folder.is_dir() else 0


class Watch(SessionProxy):
    """Runs a hook before every run: `at(run_number)` (from 1)."""

    def __init__(self, inner: Any, at: Any) -> None:
        super().__init__(inner)
        self.at = at
        self.count = 0

    def before_run(self, feeds: dict[str, np.ndarray], run_options: Any) -> Any:
        self.count += 1
        self.at(self.count)
        return run_options


def _engine(tmp: Path, at: Any = None, **settings: Any) -> Engine:
    def wrap(session: Any, _key: SessionKey) -> Any:
        return Watch(session, at) if at is not None else session

    return Engine(EngineSettings(models_dir=tmp, overlap=8, **settings), session_wrap=wrap)


def _request(model: Path, image: Path, out: Path) -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out, tile=TILE)


def _wait_for_bytes(folder: Path, seconds: float = 20.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        size = _written(folder)
        if size > 0:
            return size
        time.sleep(0.02)
    return 0


def test_the_rows_of_the_finished_tiles_are_in_the_file_before_the_last_run(
    tmp_path: Path,
) -> None:
    model = make_upscaler(tmp_path / "up4.onnx", scale=4)
    image = photo(tmp_path / "in.png", WIDTH, HEIGHT, seed=3)
    runs = _engine(tmp_path).run(_request(model, image, tmp_path / "first")).runs
    assert runs > 4
    out = tmp_path / "o"
    seen: dict[str, int] = {}

    def at(run: int) -> None:
        if run == runs:  # the last run: the earlier tile rows' rows are written already
            seen["bytes"] = _wait_for_bytes(out)

    result = _engine(tmp_path, at).run(_request(model, image, out))
    assert result.ok
    # The hidden temp file holds encoded rows (the file buffers the first 8 KB) before the
    # last run; on main nothing was written before the whole frame was assembled.
    assert seen["bytes"] > 0
    (product,) = result.products
    assert [p.name for p in out.iterdir()] == [product.path.name]


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_band_written_bytes_are_those_written_after_the_frame(tmp_path: Path, mode: str) -> None:
    model = make_upscaler(tmp_path / "up4.onnx", scale=4)
    image = photo(tmp_path / "in.png", WIDTH, HEIGHT, mode=mode, seed=5)
    banded = _engine(tmp_path).run(_request(model, image, tmp_path / "a"))
    # `overlap_tiles` off: all the engine's own work on its thread, the product encoded after
    # its frame is assembled, as before band writing.
    after = _engine(tmp_path, overlap_tiles=False).run(_request(model, image, tmp_path / "b"))
    assert banded.ok and after.ok and banded.runs == after.runs
    (a,), (b,) = banded.products, after.products
    assert a.path.read_bytes() == b.path.read_bytes()


def test_a_cancel_while_rows_are_written_leaves_nothing(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up4.onnx", scale=4)
    image = photo(tmp_path / "in.png", WIDTH, HEIGHT, seed=7)
    runs = _engine(tmp_path).run(_request(model, image, tmp_path / "first")).runs
    out = tmp_path / "o"
    token = CancelToken()
    seen: dict[str, int] = {}

    def at(run: int) -> None:
        if run == runs - 1:  # half-written: rows are in the temp file, the last tiles not run
            seen["bytes"] = _wait_for_bytes(out)
            token.cancel()

    with pytest.raises(Cancelled):
        _engine(tmp_path, at).run(_request(model, image, out), cancel=token)
    assert seen["bytes"] > 0
    assert list(out.iterdir()) == []  # the temp file went with the cancel: nothing published
    assert not [t for t in threading.enumerate() if t.name.startswith("tessera-writer")]


def test_the_assembler_says_which_rows_are_final_and_never_touches_them_again() -> None:
    plan = plan_tiles(96, 160, 32, 8, 1)
    scale = 2
    told: list[int] = []
    snapshots: list[tuple[int, np.ndarray]] = []
    asm = TileAssembler(plan, scale, 3, np.uint8, told.append)
    rng = np.random.default_rng(0)
    for t in plan.tiles:
        asm.add(t, rng.uniform(0, 1, (plan.tile_h * scale, plan.tile_w * scale, 3)))
        if told and (not snapshots or snapshots[-1][0] != told[-1]):
            snapshots.append((told[-1], asm.rows(0, told[-1]).copy()))
    out = asm.finish()
    assert told == sorted(told) and told[-1] == out.shape[0] == 96 * scale
    assert len(set(told)) == len(plan.rows)  # one advance per tile row
    for rows, before in snapshots:
        assert np.array_equal(out[:rows], before)


def test_a_cancel_during_a_single_kernel_run_whose_rows_are_being_written_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole image in one run of Tessera's kernel: its rows go to the writer during the
    # run (engine/runtime/finished_rows.py). A cancel once the first band is stored stops the
    # run between its calls, and the temp file goes with it.
    model = make_compact_upscaler(tmp_path / "m.onnx", 4, features=16, convs=4)
    image = photo(tmp_path / "in.png", 48, 400, seed=9)
    token = CancelToken()
    bands: list[int] = []
    add_rows = TileAssembler.add_rows

    def cancelling(self: TileAssembler, tile: Tile, rows: np.ndarray, start: int) -> None:
        add_rows(self, tile, rows, start)
        bands.append(start)
        token.cancel()

    monkeypatch.setattr(TileAssembler, "add_rows", cancelling)
    out = tmp_path / "o"
    engine = Engine(EngineSettings(models_dir=tmp_path))
    request = OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out)
    with pytest.raises(Cancelled):
        engine.run(request, cancel=token)
    assert bands and bands[0] == 0
    assert not out.exists() or list(out.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("tessera-writer")]
