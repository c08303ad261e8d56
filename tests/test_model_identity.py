"""Everything kept for a model (its contract, optimised copy, analysed chain, measured
overlap) is bound to the model's version (engine/runtime/identity.py), not to its size,
inode and mtime: a model rewritten in place with its times set back gets none of the old."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from engine.models.catalog import Family
from engine.runtime.identity import FileIdentity
from engine.samples.upscaler_models import make_compact_upscaler, make_upscaler
from tests.engine_helpers import photo

ROOT = Path(__file__).resolve().parent.parent


def _run(model: Path, image: Path, out: Path, kernels: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model", str(model),
         "--out", str(out), "--standalone"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TESSERA_CPU_KERNELS": kernels},
    )  # fmt: skip


def _rewrite_keeping_times(model: Path, content: bytes) -> None:
    """`cat other > model; touch -r`: the same inode, size and mtime, other content."""
    before = model.stat()
    assert len(content) == before.st_size
    with open(model, "r+b") as f:
        f.write(content)
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = model.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


@pytest.mark.parametrize("kernels", ["auto", "ort"])
def test_a_model_of_another_scale_written_over_one_with_its_times_runs_at_its_scale(
    tmp_path: Path, kernels: str
) -> None:
    """x3 written over x2 (`cat x3.onnx > x2.onnx; touch -r`): the kept contract, copy and
    chain of x2 said ×2 and every later run failed (exit 4); now the ×3 model runs as ×3."""
    # As animevideov3 ×2 and ×3: the same ×4 network, then a cubic ½ or ¾; the same size.
    x2 = make_compact_upscaler(tmp_path / "models" / "x2.onnx", 2, features=16, downscale=0.5)
    x3 = make_compact_upscaler(tmp_path / "x3.onnx", 3, features=16, downscale=0.75)
    three = x3.read_bytes()
    image = photo(tmp_path / "in.png", 20, 16)
    first = _run(x2, image, tmp_path / "a", kernels)
    assert first.returncode == 0, first.stderr
    _rewrite_keeping_times(x2, three)
    for attempt in ("b", "c"):  # and again: nothing stale is kept from the first failure
        done = _run(x2, image, tmp_path / attempt, kernels)
        assert done.returncode == 0, (done.returncode, done.stderr)
        (product,) = (tmp_path / attempt).iterdir()
        with Image.open(product) as im:
            assert im.size == (60, 48)


def test_the_identity_of_a_rewritten_file_changes_with_its_times_kept(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"a" * 64)
    before = FileIdentity.read(model)
    _rewrite_keeping_times(model, b"b" * 64)
    after = FileIdentity.read(model)
    assert after != before and after.digest() != before.digest()
    assert FileIdentity.read(model) == after  # stable while the file is not written


def test_a_model_replaced_while_its_graph_is_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept contract belongs to the file version read before its graph was parsed: a
    model replaced meanwhile (a download finishing, `cat … >`) is not given the old one's."""
    from engine.models import contracts

    model = make_upscaler(tmp_path / "m.onnx", scale=2)
    read_graph = contracts.inspect_model

    def read_then_replaced(path: Path, family: Family | None = None) -> contracts.Contract:
        contract = read_graph(path, family)
        make_upscaler(model, scale=4)
        return contract

    monkeypatch.setattr(contracts, "inspect_model", read_then_replaced)
    assert contracts.validate_model(model).scale == 2  # what was read
    monkeypatch.setattr(contracts, "inspect_model", read_graph)
    monkeypatch.setattr(contracts, "_contract_cache", {})  # as a new process finds it
    assert contracts.validate_model(model).scale == 4
