"""Nothing crosses the C boundary that the kernel cannot hold: a kept chain is checked against
what it claims, the image against the chain, only standard activations are folded, and a run
that comes back NaN where ORT's would not is made again on ORT."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from engine.errors import ModelError
from engine.runtime import chain, optimize, winograd
from engine.runtime.handle import SessionHandle
from engine.runtime.providers import Device, Runtime
from engine.runtime.sessions import SessionCache, SessionKey
from tests.engine_helpers import photo
from tests.kernel_models import load_chain, srvgg

pytestmark = pytest.mark.skipif(
    not winograd.available(), reason="the kernel is not built (no C compiler at install)"
)

ROOT = Path(__file__).resolve().parent.parent
CPU = Device("cpu")


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input": x})[0])


def _kept(folder: Path) -> Path:
    (kept,) = (folder / optimize.FOLDER).glob("*.chain.npz")
    return kept


def _craft(kept: Path, layer: int, cin: int) -> None:
    """Rewrite the kept chain so that `layer` claims `cin` input channels (all else as it was)."""
    c = chain.Chain.read(kept)
    weights = list(c.weights)
    w, b, s = weights[layer]
    weights[layer] = (np.full((w.shape[0], cin, 3, 3), 0.01, np.float32), b, s)
    dataclasses.replace(c, weights=tuple(weights)).save(kept)


def _cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


@pytest.mark.parametrize("cin", [4096, 32, 8])
def test_a_kept_chain_claiming_other_channels_is_dropped_and_the_run_made(
    tmp_path: Path, cin: int
) -> None:
    """A kept chain whose middle layer claims channels the layer before does not make (4096:
    the kernel read far past its rows and the process died; 32 or 8: garbage or NaN, every
    run) is dropped, and the request gets ORT's product with exit 0."""
    model = srvgg(tmp_path / "m" / "m.onnx", features=16, scale=2)
    image = photo(tmp_path / "in.png", 24, 20)
    want = _cli("run", "upscale", image, "--model", model, "--out", tmp_path / "ort",
                "--standalone", env={"TESSERA_CPU_KERNELS": "ort"})  # fmt: skip
    assert want.returncode == 0, want.stderr
    assert load_chain(model) is not None
    kept = _kept(model.parent)
    _craft(kept, 2, cin)
    done = _cli("run", "upscale", image, "--model", model, "--out", tmp_path / "k", "--standalone")
    assert done.returncode == 0, (done.returncode, done.stderr)
    with (
        Image.open(tmp_path / "ort" / "in-m.png") as a,
        Image.open(tmp_path / "k" / "in-m.png") as b,
    ):
        assert np.abs(np.asarray(a).astype(int) - np.asarray(b).astype(int)).max() <= 1
    again = list((model.parent / optimize.FOLDER).glob("*.chain.npz"))
    assert all(chain.Chain.read(p).weights[2][0].shape[1] == 16 for p in again)  # not the crafted


def test_a_chain_whose_layers_do_not_follow_one_another_is_refused_before_the_kernel(
    tmp_path: Path,
) -> None:
    model = srvgg(tmp_path / "m.onnx", features=16, scale=2)
    assert load_chain(model) is not None
    kept = _kept(tmp_path)
    _craft(kept, 2, 4096)
    with pytest.raises(ValueError, match="channels"):
        chain.Chain.read(kept).check()
    session = load_chain(model)  # the crafted file is dropped and the graph analysed again
    assert session is not None and session.kept is None
    assert chain.Chain.read(_kept(tmp_path)).weights[2][0].shape[1] == 16


def test_a_kept_chain_of_another_model_is_not_used(tmp_path: Path) -> None:
    """A kept chain copied under another model's name claims that model's identity."""
    model = srvgg(tmp_path / "m.onnx", features=16, scale=2, seed=1)
    other = srvgg(tmp_path / "o.onnx", features=16, scale=2, seed=2)
    assert load_chain(model) is not None and load_chain(other) is not None
    mine = next((tmp_path / optimize.FOLDER).glob("m-*.chain.npz"))
    theirs = next((tmp_path / optimize.FOLDER).glob("o-*.chain.npz"))
    os.replace(theirs, mine)
    session = load_chain(model)
    assert session is not None and session.kept is None  # analysed again from the graph
    x = np.random.default_rng(0).random((1, 3, 12, 10), dtype=np.float32)
    np.testing.assert_allclose(session.run(None, {"input": x})[0], _ort(model, x), atol=1e-4)


def test_a_grey_chain_whose_sum_broadcasts_its_input_stays_exact(tmp_path: Path) -> None:
    """One input channel, three output channels: the input added to every one of them (ONNX
    broadcasts). The kernel's sum read three planes of a one-plane image (NaN, 1e38)."""
    model = srvgg(tmp_path / "grey.onnx", channels=1, image_channels=3, scale=2)
    session = load_chain(model)
    x = np.random.default_rng(0).random((1, 1, 20, 18), dtype=np.float32)
    ours = session.run(None, {"input": x})[0] if session is not None else _ort(model, x)
    theirs = _ort(model, x)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= 1e-4


def test_an_image_of_other_channels_is_refused_before_the_kernel(tmp_path: Path) -> None:
    model = srvgg(tmp_path / "m.onnx", features=16, scale=2)
    session = load_chain(model)
    assert isinstance(session, chain.ChainSession)
    grey = np.zeros((1, 1, 8, 8), np.float32)
    with pytest.raises(ValueError, match="channels"):
        session.run(None, {"input": grey})


@pytest.mark.parametrize("act", ["Relu", "PRelu", "LeakyRelu"])
@pytest.mark.parametrize("kernels", [True, False])
def test_an_activation_of_another_domain_is_never_taken_for_the_standard_one(
    tmp_path: Path, act: str, kernels: bool
) -> None:
    """`com.evil:Relu` is not Relu: ORT refuses the model, and so does every CPU path (the
    kernel ran it as a Relu; the PRelu rewrite replaced a custom PRelu with standard ops)."""
    model = srvgg(tmp_path / "evil.onnx", act=act, act_domain="com.evil")
    cache = SessionCache(threads=2, cpu_kernels=kernels)
    with pytest.raises(ModelError, match=r"com\.evil"):
        cache.get(SessionKey.make(model, CPU, Runtime.CPU))
    cache.release_all()


def test_a_chain_that_comes_back_nan_is_run_again_on_ort_and_dropped(tmp_path: Path) -> None:
    """A kept chain that holds what it claims but computes NaN (its weights damaged): the run
    is made again on ORT, whose product is finite, and the kept chain goes."""
    model = srvgg(tmp_path / "m.onnx", features=16, scale=2)
    assert load_chain(model) is not None
    kept = _kept(tmp_path)
    c = chain.Chain.read(kept)
    w, b, s = c.weights[1]
    damaged = w.copy()
    damaged[0, 0, 1, 1] = np.nan
    weights = (*c.weights[:1], (damaged, b, s), *c.weights[2:])
    dataclasses.replace(c, weights=weights).save(kept)
    cache = SessionCache(threads=2)
    handle = SessionHandle(cache, SessionKey.make(model, CPU, Runtime.CPU))
    x = np.random.default_rng(1).random((1, 3, 16, 12), dtype=np.float32)
    out = handle.run({"input": x}, last=True)[0]
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, _ort(model, x), atol=1e-4)
    assert not kept.exists()
    assert isinstance(handle.entry().session, ort.InferenceSession)
    cache.release_all()
