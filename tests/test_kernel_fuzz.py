"""Random SRVGG chains and RRDB-shaped graphs through Tessera's CPU kernel against ORT: the
kernel's product within 1/255 of ORT's, or the model left to ORT; never a crash. Seeded and
bounded (a few seconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from engine.runtime import chain, winograd
from engine.runtime.identity import FileIdentity
from engine.runtime.providers import Device, Runtime, provider_plan
from engine.runtime.sessions import create_session
from tests.kernel_models import random_rrdb, random_srvgg

pytestmark = pytest.mark.skipif(
    not winograd.available(), reason="the kernel is not built (no C compiler at install)"
)

PLAN = provider_plan(Device("cpu"), Runtime.CPU)
SIZES = ((1, 23), (19, 1), (2, 2), (7, 5), (33, 17), (64, 48))
LARGE = (160, 120)  # one case in each seed's batch: many rows of tiles and threads
TOLERANCE = 1 / 255


def _compare(model: Path, x: np.ndarray) -> str:
    """'kernel' (within TOLERANCE of ORT) or 'ort' (the kernel left it to ORT)."""
    session = chain.load(
        model, FileIdentity.of(model), 2, lambda g: create_session(g, PLAN, threads=2)
    )
    reference = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    want = reference.run(None, {"input": x})[0]
    if session is None:
        return "ort"
    got = session.run(None, {"input": x})[0]
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= TOLERANCE * scale
    return "kernel"


@pytest.mark.parametrize("seed", range(4))
def test_random_chains_match_ort_or_are_left_to_it(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    paths: dict[str, int] = {"kernel": 0, "ort": 0}
    for case in range(10):
        model, width = random_srvgg(tmp_path / f"c{case}.onnx", rng)
        h, w = LARGE if case == 0 else SIZES[int(rng.integers(0, len(SIZES)))]
        if width:
            w = width  # a (C,) slope broadcasts along the width: ORT needs W = C
        channels = int(ort.InferenceSession(str(model)).get_inputs()[0].shape[1])
        x = rng.random((1, channels, h, w), dtype=np.float32)
        paths[_compare(model, x)] += 1
    assert paths["kernel"] > 0  # the fuzz reaches the kernel, not only the fallbacks


@pytest.mark.parametrize("seed", range(4))
def test_random_rrdb_graphs_match_ort_or_are_left_to_it(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(2000 + seed)
    for case in range(6):
        model = random_rrdb(tmp_path / f"r{case}.onnx", rng)
        h, w = (48, 40) if case == 0 else SIZES[int(rng.integers(0, len(SIZES)))]
        _compare(model, rng.random((1, 3, h, w), dtype=np.float32))
