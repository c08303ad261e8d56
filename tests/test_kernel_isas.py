"""Every instruction-set path of Tessera's CPU kernel (engine/runtime/winograd.c): each one,
chosen with TESSERA_CPU_ISA, against float64 arithmetic and ORT on the contract models; the
choice exported (available_isas, active_isa); a set the CPU lacks refused with exit 2."""

from __future__ import annotations

import importlib.machinery
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from engine.bench.kernel_contention import measure_kernel_contention
from engine.bench.kernel_isas import measure_kernel_isas
from engine.bench.table import Table
from engine.errors import CpuIsaError
from engine.runtime import chain, winograd
from engine.samples.upscaler_models import make_compact_upscaler, make_rrdb_upscaler
from engine.settings import EngineSettings
from tests.kernel_models import conv_case, load_chain

pytestmark = pytest.mark.skipif(
    not winograd.available(), reason="the kernel is not built (no C compiler at install)"
)

ROOT = Path(__file__).resolve().parent.parent
ISAS = [
    pytest.param(
        isa,
        marks=pytest.mark.skipif(
            isa not in winograd.available_isas(), reason=f"this CPU has no {isa}"
        ),
    )
    for isa in winograd.ISAS
]


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"input": x[i : i + 1]})[0] for i in range(len(x))])


def _image(h: int, w: int, n: int = 1) -> np.ndarray:
    return np.random.default_rng(7).random((n, 3, h, w), dtype=np.float32)


def test_the_cpus_sets_are_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(winograd.ISA_ENV, raising=False)  # the CPU as it is, whatever the shell caps
    isas = winograd.available_isas()
    assert "baseline" in isas
    assert winograd.build_problem() is None
    # With no cap the widest set runs: AVX-512 over AVX2 over the baseline (NEON on ARM).
    best = next(i for i in ("avx512", "avx2", "neon", "baseline") if i in isas)
    assert winograd.active_isa() == best


@pytest.mark.parametrize("isa", ISAS)
def test_each_set_matches_a_float64_convolution(isa: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One layer, 40 → 27 channels (both padded, neither a whole number of any set's
    vectors), an odd size: the set's own transforms and micro-kernels, against float64."""
    monkeypatch.setenv(winograd.ISA_ENV, isa)
    case = conv_case(winograd.padded(40))
    layer = winograd.Conv3x3.make(case.w, case.b, case.s)
    h, wd = case.x.shape[:2]
    out = np.empty((h, wd, winograd.padded(27)), np.float32)
    winograd.conv(layer, winograd.Slice(case.x), winograd.Slice(out), 2)
    assert winograd.active_isa() == isa
    ref = case.expected
    # Relative: the baseline has no FMA, so each product is rounded before its sum.
    assert np.abs(out[:, :, :27] - ref).max() <= 2e-5 * float(np.abs(ref).max())
    np.testing.assert_array_equal(out[:, :, 27:], 0)  # the padding stays zero for the next layer


@pytest.mark.parametrize("isa", ISAS)
def test_each_set_runs_the_contract_models_as_ort_does(
    tmp_path: Path, isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compact (SRVGG) chain and the RRDB graph, streamed and planned, under each set."""
    monkeypatch.setenv(winograd.ISA_ENV, isa)
    compact = make_compact_upscaler(tmp_path / "c.onnx", 4, features=48, convs=4)
    rrdb = make_rrdb_upscaler(tmp_path / "r.onnx", features=32, growth=16)
    for model, kind in ((compact, chain.ChainSession), (rrdb, chain.GraphSession)):
        session = load_chain(model)
        assert isinstance(session, kind)
        x = _image(19, 26)
        ours = session.run(None, {"input": x})[0]
        theirs = _ort(model, x)
        assert winograd.active_isa() == isa
        assert np.abs(ours - theirs).max() <= 2e-5 * max(1.0, float(np.abs(theirs).max()))


def test_a_set_the_cpu_lacks_raises_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(winograd.ISA_ENV, raising=False)  # the CPU as it is, whatever the shell caps
    lacking = next((i for i in winograd.ISAS if i not in winograd.available_isas()), None)
    if lacking is None:
        pytest.skip("this CPU has every set")
    before = winograd.active_isa()
    monkeypatch.setenv(winograd.ISA_ENV, lacking)
    with pytest.raises(CpuIsaError, match=lacking):
        winograd.active_isa()
    monkeypatch.delenv(winograd.ISA_ENV)
    assert winograd.active_isa() == before


@pytest.mark.parametrize("word", ["avx9", "neon"])
def test_a_bad_cpu_isa_is_a_usage_error_of_engine_run(tmp_path: Path, word: str) -> None:
    """exit 2 and one line naming the setting, before anything loads; no traceback."""
    if word in winograd.available_isas():
        pytest.skip(f"this CPU has {word}")
    model = make_compact_upscaler(tmp_path / "m.onnx", 2, features=16, convs=4)
    image = tmp_path / "in.png"
    Image.new("RGB", (8, 8)).save(image)
    env = {**os.environ, winograd.ISA_ENV: word, "PYTHONPATH": str(ROOT)}
    command = ["run", "upscale", "--standalone", "--model", str(model)]
    done = subprocess.run(
        [sys.executable, "-m", "engine", *command, "--out", str(tmp_path / "out"), str(image)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"TESSERA_CPU_ISA={word}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("qemu-x86_64") is None,
    reason="needs gcc and qemu-user (scripts/check_kernel_builds.sh installs them)",
)
def test_an_avx2_only_cpu_takes_the_avx2_path(tmp_path: Path) -> None:
    """Built at -march=x86-64-v3 and run on an emulated Haswell (AVX2, no AVX-512): the kernel
    picks AVX2 by itself, and every set it has matches float64 (tests/kernel/winograd_check.c)."""
    if os.uname().machine != "x86_64":
        pytest.skip("an x86-64 check")
    runtime = ROOT / "engine" / "runtime"
    binary = tmp_path / "check"
    sources = [str(ROOT / "tests" / "kernel" / "winograd_check.c"), str(runtime / "winograd.c")]
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-march=x86-64-v3",
            "-pthread",
            f"-I{runtime}",
            *sources,
            "-lm",
            "-o",
            str(binary),
        ],
        check=True,
        timeout=120,
    )
    done = subprocess.run(
        ["qemu-x86_64", "-cpu", "Haswell", str(binary), "--expect", "avx2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "picked by itself: avx2" in done.stdout
    assert "avx512" not in done.stdout


def test_the_bench_has_a_kernel_row_per_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench --quick`'s rows: one "kernel ÷ ORT" per set this CPU has, each a ratio of two
    real requests; without ncnn's originals one row says why."""
    monkeypatch.delenv(winograd.ISA_ENV, raising=False)  # the CPU as it is, whatever the shell caps
    models = tmp_path / "models"
    make_compact_upscaler(models / "realesrgan-animevideov3-x4.onnx", 4, features=16, convs=4)
    work = tmp_path / "work"
    work.mkdir()
    table = Table(out=io.StringIO())
    settings = EngineSettings(models_dir=models)
    measure_kernel_isas(table, settings, models, tmp_path / "no-packages", work, quick=True)
    rows = {r.name: r for r in table.rows}
    for isa in winograd.available_isas():
        row = rows[f"realesrgan-animevideov3-x4: kernel ÷ ORT, {isa}, 256×192"]
        assert isinstance(row.value, float) and row.value > 0
    assert rows["Tessera ÷ ncnn per instruction set"].value == "skipped"
    assert os.environ.get(winograd.ISA_ENV) is None  # the bench put the settings back


def test_the_contention_row_times_the_chain_beside_a_spinner_it_then_stops(
    tmp_path: Path,
) -> None:
    """`bench`'s row "kernel beside one busy process ÷ alone": a ratio of two real runs of
    the kernel's chain, and the spinning process it started is gone afterwards."""
    import psutil

    models = tmp_path / "models"
    make_compact_upscaler(models / "realesrgan-animevideov3-x4.onnx", 4, features=16, convs=4)
    table = Table(out=io.StringIO())
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    measure_kernel_contention(table, EngineSettings(models_dir=models, threads=2), models, True)
    (row,) = table.rows
    assert row.name == "kernel beside one busy process ÷ alone, 256×192"
    assert isinstance(row.value, float) and row.value > 0, row
    assert row.target == "ideal 1.50"
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before


def test_a_kernel_that_cannot_be_used_says_why(tmp_path: Path) -> None:
    """Not built (the optional build failed), or a file that is no library: a sentence for
    the person, not a silent fallback."""
    lib, problem = winograd.load_from(tmp_path)
    assert lib is None and problem is not None and "not built" in problem
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / f"_winograd{suffix}").write_bytes(b"not a library")
    lib, problem = winograd.load_from(tmp_path)
    assert lib is None and problem is not None and "did not load" in problem
