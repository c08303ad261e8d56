"""`python -m engine` end to end in subprocesses: exit codes, messages, M5 with a real OOM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.samples.upscaler_models import make_upscaler
from tests.engine_helpers import photo
from tests.processes import engine_cli

ROOT = Path(__file__).resolve().parent.parent


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A decompression bomb: a valid PNG header claiming a huge size, with a tiny zlib stream."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )
    return path


@pytest.fixture(scope="module")
def up4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_upscaler(tmp_path_factory.mktemp("m") / "up4.onnx", scale=4)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return photo(tmp_path_factory.mktemp("img") / "big.png", 256, 256)


def test_m5_real_oom_exits_3_with_a_readable_message(up4: Path, big: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = engine_cli(
        "run",
        "upscale",
        big,
        "--model",
        up4,
        "--out",
        out,
        "--tile",
        "256",
        "--cpu-mem-limit",
        "8",
        "--json",
    )
    assert p.returncode == 3, p.stderr
    assert "Out of memory" in p.stderr and "big.png" in p.stderr and "Traceback" not in p.stderr
    data = json.loads(p.stdout)
    assert data["failures"][0]["kind"] == "resource" and not data["products"]
    assert not out.exists() or not list(out.iterdir())


def test_m5_failed_session_is_released_and_the_next_request_creates_one(
    up4: Path, big: Path, tmp_path: Path
) -> None:
    # The CPU arena limit is registered once per process, so this runs in its own process.
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from engine.api import Engine
        from engine.errors import ErrorKind
        from engine.requests import Operation, OperationRequest
        from engine.settings import EngineSettings
        e = Engine(EngineSettings(cpu_mem_limit=8 << 20))
        def req(tile):
            return OperationRequest(Operation.UPSCALE, {str(up4)!r}, (Path({str(big)!r}),),
                                    output_dir=Path({str(tmp_path)!r}), tile=tile)
        r1 = e.run(req(256))
        assert r1.failures[0].kind is ErrorKind.RESOURCE, r1
        assert len(e.sessions) == 0, "the failed session must be released"
        r2 = e.run(req(64))
        assert r2.ok and r2.sessions_created == 1, r2
        print("OK", e.sessions.created, e.sessions.released)
        """
    )
    p = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["OK", "2", "1"]


def test_m5_auto_tile_halves_and_matches_the_untiled_result(
    up4: Path, big: Path, tmp_path: Path
) -> None:
    whole = engine_cli(
        "run",
        "upscale",
        big,
        "--model",
        up4,
        "--out",
        tmp_path / "whole",
        "--tile",
        "4096",
        "--json",
    )
    assert whole.returncode == 0, whole.stderr
    auto = engine_cli(
        "run",
        "upscale",
        big,
        "--model",
        up4,
        "--out",
        tmp_path / "auto",
        "--tile",
        "auto",
        "--option",
        "auto_start=256",
        "--cpu-mem-limit",
        "16",
        "--json",
    )
    assert auto.returncode == 0, auto.stderr
    data = json.loads(auto.stdout)
    assert data["tile"] < 256 and data["sessions"]["created"] >= 2
    a = np.asarray(Image.open(json.loads(whole.stdout)["products"][0]["path"]), np.int16)
    b = np.asarray(Image.open(data["products"][0]["path"]), np.int16)
    assert a.shape == b.shape == (1024, 1024, 3)
    assert np.abs(a - b).max() <= 1


def test_m7_cuda_on_this_machine_exits_5_naming_the_cause(
    up4: Path, big: Path, tmp_path: Path
) -> None:
    from engine.runtime.providers import Runtime, missing_requirement

    if missing_requirement(Runtime.CUDA) is None:
        pytest.skip("this machine has a working CUDA provider")
    out = tmp_path / "out"
    p = engine_cli(
        "run",
        "upscale",
        big,
        "--model",
        up4,
        "--out",
        out,
        "--runtime",
        "cuda",
        "--device",
        "gpu:0",
    )
    assert p.returncode == 5
    assert "cuda" in p.stderr and (
        "driver" in p.stderr or "library" in p.stderr or "build" in p.stderr
    )
    assert not out.exists() or not list(out.iterdir())


def test_bad_inputs_exit_4_and_the_rest_of_the_batch_is_produced(up4: Path, tmp_path: Path) -> None:
    good1 = photo(tmp_path / "good one.png", 20, 16)
    good2 = photo(tmp_path / "gööd-2.png", 18, 12, seed=2)
    missing = tmp_path / "missing.png"
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    text = tmp_path / "notes.png"
    text.write_text("this is not an image\n")
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(good1.read_bytes()[:60])
    bomb = png_header_only(tmp_path / "bomb.png", 30000, 30000)
    out = tmp_path / "out"
    p = engine_cli(
        "run",
        "upscale",
        good1,
        missing,
        empty,
        text,
        truncated,
        bomb,
        good2,
        "--model",
        up4,
        "--out",
        out,
        "--json",
    )
    assert p.returncode == 4, p.stderr
    data = json.loads(p.stdout)
    failed = {Path(f["source"]).name: f["message"] for f in data["failures"]}
    assert set(failed) == {"missing.png", "empty.png", "notes.png", "truncated.png", "bomb.png"}
    for name, message in failed.items():
        assert name in message
    produced = sorted(p.name for p in out.iterdir())
    assert produced == ["good one-up4.png", "gööd-2-up4.png"]
    assert "Traceback" not in p.stderr


def test_bomb_limit_is_a_setting(up4: Path, tmp_path: Path) -> None:
    from engine.api import Engine
    from engine.requests import Operation, OperationRequest
    from engine.settings import EngineSettings

    img = photo(tmp_path / "a.png", 40, 30)
    engine = Engine(EngineSettings(models_dir=tmp_path, max_pixels=1000))
    r = engine.run(OperationRequest(Operation.UPSCALE, str(up4), (img,), output_dir=tmp_path / "o"))
    assert not r.products and "limit" in r.failures[0].message


def test_outputs_never_overwrite(up4: Path, tmp_path: Path) -> None:
    img = photo(tmp_path / "a.png", 12, 10)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a-up4.png").write_bytes(b"precious")
    p = engine_cli("run", "upscale", img, "--model", up4, "--out", out)
    assert p.returncode == 0, p.stderr
    assert (out / "a-up4.png").read_bytes() == b"precious"
    assert Path(p.stdout.strip()).name == "a-up4-1.png"


def test_usage_errors_exit_2(up4: Path, tmp_path: Path) -> None:
    assert engine_cli("run", "upscale", "--model", up4).returncode == 2
    p = engine_cli("run", "upscale", tmp_path / "x.png", "--model", up4, "--device", "tpu")
    assert p.returncode == 2 and "Unknown device" in p.stderr


def test_devices_lists_every_runtime() -> None:
    p = engine_cli("devices", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert {r["runtime"] for r in rows} == {
        "cpu",
        "cuda",
        "tensorrt",
        "directml",
        "coreml",
        "openvino",
        "migraphx",
    }
    cpu = next(r for r in rows if r["runtime"] == "cpu")
    assert cpu["ok"] and cpu["provider"] == "CPUExecutionProvider"
    assert all(r["ok"] or r["detail"] for r in rows)


# ------------------------------------------------------------- options checked before work

BAD_OPTIONS = {
    # what is given -> a phrase the one line must contain
    ("--option", "auto_start=abc"): "auto_start takes a whole number from 16 to 8192",
    ("--option", "max_tile=big"): "max_tile takes a whole number from 16 to 8192",
    ("--option", "foo=bar"): "upscale has no option 'foo'; its options are: max_tile",
    ("--option", "no-equals-sign"): "write KEY=VALUE",
    ("--max-tile", "0"): "max_tile takes a whole number from 16 to 8192, not 0",
    ("--max-tile", "big"): "max_tile takes a whole number from 16 to 8192, not 'big'",
    ("--cpu-mem-limit", "inf"): "megabytes from 1 to 16777216",
    ("--cpu-mem-limit", "nan"): "megabytes from 1 to 16777216",
    ("--cpu-mem-limit", "1e30"): "megabytes from 1 to 16777216",
    ("--cpu-mem-limit", "0"): "megabytes from 1 to 16777216",
    ("--cpu-mem-limit", "-5"): "megabytes from 1 to 16777216",
    ("--gpu-mem-limit", "inf"): "megabytes from 1 to 16777216",
    ("--gpu-mem-limit", "lots"): "megabytes from 1 to 16777216",
    ("--tile", "0"): "--tile takes a whole number of pixels from 16 to 65536, or auto",
    ("--tile", "15"): "--tile takes a whole number of pixels from 16 to 65536, or auto",
    ("--tile", "99999999999"): "--tile takes a whole number of pixels from 16 to 65536",
    ("--tile", "1e3"): "--tile takes a whole number of pixels from 16 to 65536",
    ("--tile", "-64"): "--tile takes a whole number of pixels from 16 to 65536",
    ("--tile", ""): "--tile takes a whole number of pixels from 16 to 65536",
    ("--out", ""): "--out needs a folder",
    ("--out", "  "): "--out needs a folder",
}


@pytest.mark.parametrize("given", list(BAD_OPTIONS), ids=lambda g: " ".join(g) or "empty")
def test_bad_options_exit_2_with_one_line_naming_what_is_accepted(
    given: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    # In-process: every one of these is refused before anything is loaded or written.
    args = ["run", "upscale", str(tmp_path / "in.png"), "--model", str(tmp_path / "m.onnx")]
    code = main([*args, *given])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert BAD_OPTIONS[given] in lines[0], lines[0]
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_bad_options_from_the_command_line_too(tmp_path: Path) -> None:
    """The same refusals through a real `python -m engine` (one of each kind)."""
    img = photo(tmp_path / "a.png", 12, 10)
    for given, phrase in (
        (("--cpu-mem-limit", "inf"), "megabytes from 1 to"),
        (("--option", "normalization=zzz"), "normalization takes imagenet or zero_one"),
    ):
        p = engine_cli("run", "remove-background", img, "--model", "u2netp", *given)
        assert p.returncode == 2 and phrase in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert sorted(q.name for q in tmp_path.iterdir()) == ["a.png"]


@pytest.mark.parametrize("tile", ["auto", "AUTO", " 64 ", "16", "65536"])
def test_good_tiles_are_taken(tile: str) -> None:
    from engine.cli import build_parser

    args = build_parser().parse_args(["run", "upscale", "a.png", "--model", "m", "--tile", tile])
    assert args.tile == (None if tile.strip().lower() == "auto" else int(tile))


def test_a_usage_error_found_at_an_input_exits_2(up4: Path, tmp_path: Path) -> None:
    """An output "folder" that is a file is found before the model loads (issue #20); it is
    the command that needs changing, so the exit code is 2, not 4."""
    img = photo(tmp_path / "a.png", 12, 10)
    target = tmp_path / "out.png"
    target.write_bytes(b"a file, not a folder")
    p = engine_cli("run", "upscale", img, "--model", up4, "--out", target, "--json")
    assert p.returncode == 2, p.stderr
    data = json.loads(p.stdout)
    assert data["error"]["kind"] == "usage" and "is a file" in data["error"]["message"]
    assert target.read_bytes() == b"a file, not a folder"


def test_exit_code_for_maps_every_failure_kind() -> None:
    from engine.cli import exit_code_for
    from engine.errors import EXIT_CODES, ErrorKind
    from engine.requests import InputFailure, Result

    for kind in ErrorKind:
        if kind is ErrorKind.CANCELLED:
            continue  # a cancel ends the request; it is never one input's failure
        failure = InputFailure(Path("a.png"), kind, "m")
        result = Result("job", (), (failure,), 0, 0, 0, 0, {})
        assert exit_code_for(result) == EXIT_CODES[kind], kind
