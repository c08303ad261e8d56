"""The operation table (engine/operation_specs.py): one row per operation, read by the engine
and the GUI; a fifth operation is a row and its implementation, nothing else."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from engine.api import Engine
from engine.errors import UsageError
from engine.models.catalog import Family, load_catalog
from engine.operation_specs import Operation, for_family, operation_named, operations, register
from engine.previews import PreviewRequest, Region
from engine.requests import OperationRequest
from engine.samples.background_models import make_u2net
from engine.settings import EngineSettings
from tests.toy_operation import TOY, ThresholdOptions


def test_a_fifth_operation_is_one_row_and_runs_end_to_end(toy: Operation, tmp_path: Path) -> None:
    model = make_u2net(tmp_path / "u2netp.onnx")
    # Left half black, right half white: the model's mask is sigmoid(10·(luma − 0.5)).
    pixels = np.zeros((60, 80, 3), np.uint8)
    pixels[:, 40:] = 255
    image = tmp_path / "in.png"
    Image.fromarray(pixels).save(image)
    engine = Engine(EngineSettings(models_dir=tmp_path))
    request = OperationRequest(
        operation_named("threshold"),
        str(model),
        (image,),
        output_dir=tmp_path / "out",
        options={"level": "100"},
    )
    result = engine.run(request)
    assert (
        result.ok and result.runs == 1 and [p.path.name for p in result.products] == ["in-bw.png"]
    )
    with Image.open(result.products[0].path) as im:
        bw = np.asarray(im)
    assert set(np.unique(bw)) == {0, 255}
    assert (bw[:, :30] == 0).all() and (bw[:, 50:] == 255).all()
    # Its options are checked like any operation's, with its label and its own ranges.
    bad = OperationRequest(toy, str(model), (image,), options={"level": 300})
    with pytest.raises(UsageError, match="from 0 to 255"):
        engine.run(bad)
    # (A real operation's options join OperationOptions in engine/options.py, beside the others.)
    own: Any = ThresholdOptions(level=7)
    typed = OperationRequest(toy, str(model), (image,), options=own)
    assert typed.typed_options() == ThresholdOptions(level=7)
    # A model of another family is refused with the operation's own label.
    up = tmp_path / "not-a-mask.onnx"
    from engine.samples.upscaler_models import make_upscaler

    make_upscaler(up, scale=2)
    with pytest.raises(Exception, match="Black and white mask needs a background model"):
        engine.run(OperationRequest(toy, str(up), (image,)))
    # Not tiled: its preview is its job, written to the preview folder, not run on a pan.
    preview = engine.preview(PreviewRequest(request, Region(0, 0, 30, 30)))
    again = engine.preview(PreviewRequest(request, Region(30, 0, 80, 60), generation=2))
    assert preview.runs == 1 and again.runs == 0 and again.products == preview.products
    assert preview.products[0].path.parent != tmp_path / "out"
    engine.unload_all()


def test_the_facts_the_gui_shows_come_from_the_table(toy: Operation) -> None:
    assert operations() == (
        Operation.UPSCALE,
        Operation.REMOVE_BACKGROUND,
        Operation.DEPTH,
        Operation.GEOMETRY,
        toy,
    )
    facts = {op.value: (op.label, op.tiled, op.has_scale, op.family) for op in operations()}
    assert facts == {
        "upscale": ("Upscale", True, True, Family.UPSCALE),
        "remove-background": ("Remove background", False, False, Family.BACKGROUND),
        "depth": ("Depth", False, False, Family.DEPTH),
        "geometry": ("Geometry", False, False, Family.GEOMETRY),
        "threshold": ("Black and white mask", False, False, Family.BACKGROUND),
    }
    assert all(op.writes for op in operations())
    # A second operation of a family leaves the family's catalog presets to the first.
    assert for_family(Family.BACKGROUND) is Operation.REMOVE_BACKGROUND
    assert load_catalog()  # the catalog still reads every family's presets
    # A row is one object, as an enum member is: a copy is the row itself.
    assert pickle.loads(pickle.dumps(Operation.DEPTH)) is Operation.DEPTH
    assert copy.deepcopy(toy) is toy
    with pytest.raises(ValueError, match="already registered"):
        register(TOY)
    with pytest.raises(UsageError, match="Choose one of: upscale, remove-background"):
        operation_named("sharpen")


def test_the_table_is_cheap_to_import() -> None:
    """The GUI and the command line read it at start-up: no implementation, numpy or onnx."""
    code = (
        "import sys, engine.requests, engine.operation_specs as s; "
        "s.Operation.UPSCALE.label; "
        "print(sorted(m for m in ('numpy', 'onnx', 'onnxruntime', 'PIL', "
        "'engine.operations.upscale', 'engine.models.contracts') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_table_cannot_import_its_implementations(tmp_path: Path) -> None:
    """The layers keep the table under the operations: an implementation named by text only."""
    from tests.test_layering import _add_import, _copy, _lint, _status

    root = _copy(tmp_path)
    _add_import(root / "engine" / "operation_specs.py", "import engine.operations.upscale")
    broken = _lint(root)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    status = _status(broken.stdout)
    assert status["engine layers: command line on top, errors at the bottom"] == "BROKEN"
    assert "engine.operation_specs -> engine.operations.upscale" in broken.stdout
