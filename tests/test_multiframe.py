"""Multi-frame rules shared by every family: animated files stay animated, sequences stay numbered."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from engine.api import Engine
from engine.io.reading import load_image
from engine.io.writing import write_image
from engine.requests import Operation, OperationRequest
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from tests.engine_helpers import photo


def test_identical_frames_are_kept_with_their_durations(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up.onnx", scale=2)
    # Pillow itself merges identical GIF frames, so the animated input is written by us.
    a = np.full((10, 12, 3), (200, 30, 30), np.uint8)
    b = np.full((10, 12, 3), (30, 30, 200), np.uint8)
    gif = tmp_path / "still-then-move.png"
    meta = replace(
        load_image(photo(tmp_path / "m.png", 4, 4), 100).meta, durations=(100, 150, 250), loop=0
    )
    gif = write_image(gif, [a, a.copy(), b], meta)
    assert load_image(gif, 10**6).meta.durations == (100, 150, 250)
    result = Engine(EngineSettings(models_dir=tmp_path)).run(
        OperationRequest(Operation.UPSCALE, str(model), (gif,), output_dir=tmp_path / "o")
    )
    out = load_image(result.products[0].path, 10**6)
    assert out.is_animated and len(out.frames) == 3
    assert out.meta.durations == (100, 150, 250)
    assert out.frames[0].shape == (20, 24, 3)
    assert np.array_equal(out.frames[0], out.frames[1]) and not np.array_equal(
        out.frames[1], out.frames[2]
    )


def test_a_folder_is_one_sequence_with_numbered_products(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up.onnx", scale=2)
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in (1, 2, 10):
        photo(frames / f"frame{i}.png", 16, 12, seed=i)
    engine = Engine(EngineSettings(models_dir=tmp_path))
    engine.run(OperationRequest(Operation.UPSCALE, str(model), (photo(tmp_path / "w.png", 8, 8),)))
    result = engine.run(
        OperationRequest(Operation.UPSCALE, str(model), (frames,), output_dir=tmp_path / "o")
    )
    assert result.ok and result.runs == 3
    names = [p.path.name for p in result.products]
    assert names == ["frame1-up-0001.png", "frame1-up-0002.png", "frame1-up-0003.png"]
    # natural order: frame10 comes last
    third = np.asarray(Image.open(result.products[2].path))
    assert third.shape == (24, 32, 3)
