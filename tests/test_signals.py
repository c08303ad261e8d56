"""SIGTERM and SIGINT end `python -m engine run` at any stage, leaving only finished products.

The scripted check (scripts/signal_check.py) stops a large job while it decodes, runs the
model, encodes and publishes. The other tests pin what the script cannot time: a stop while
the engine thread sits in a call Python cannot interrupt (a big Pillow or zlib call, here a
sleeping encoder), and a cancelled `--json` batch that lists the products it already wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.samples.upscaler_models import make_upscaler
from tests.engine_helpers import photo

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")


def test_scripted_signal_check_finds_only_finished_products() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "signal_check.py"),
            "--json",
            "--size",
            "1600x1100",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=ENV,
        cwd=ROOT,
    )
    cases = json.loads(done.stdout)
    for c in cases:
        print(
            f"{c['signal']:<7} during {c['stage']:<9} exit {c['exit_code']} after "
            f"{c['seconds_to_exit']} s, products {c['products']}"
        )
    assert len(cases) == 8
    assert [c for c in cases if not c["ok"]] == []
    assert done.returncode == 0, done.stderr[-2000:]
    stopped = [c for c in cases if c["exit_code"] in (130, 143)]
    assert len(stopped) >= 4, "most moments must be caught before the job ends"


# A child that runs the CLI with the PNG encoder stuck in a call Python cannot interrupt for
# the second input: it writes a little, then sleeps (a C call) far longer than the test runs.
STUCK_ENCODER = textwrap.dedent(
    """
    import sys, time
    from engine.io.png import PngWriter
    from engine.cli import main

    add = PngWriter.add
    calls = []

    def stuck(self, *args, **kwargs):  # the second product's frame never finishes encoding
        calls.append(1)
        if len(calls) == 1:
            return add(self, *args, **kwargs)
        self._out.write(b"half of a product")
        self._out.flush()
        time.sleep(60)

    PngWriter.add = stuck
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_while_the_engine_is_stuck_in_a_c_call_ends_within_a_second(
    tmp_path: Path, signum: signal.Signals
) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    first = photo(tmp_path / "first.png", 40, 30)
    second = photo(tmp_path / "second.png", 40, 30, seed=2)
    out = tmp_path / "out"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            STUCK_ENCODER,
            "run",
            "upscale",
            str(first),
            str(second),
            "--model",
            str(model),
            "--out",
            str(out),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while not list(out.glob(".second-up2.png.partial-*")):  # the stuck write has begun
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the second product was never started"
        time.sleep(0.02)
    sent = time.monotonic()
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=30)
    took = time.monotonic() - sent
    assert process.returncode == (143 if signum == signal.SIGTERM else 130), stderr
    assert took < 3.0, f"{took:.1f} s from the signal to the exit"  # grace 0.8 s, loaded VM
    assert sorted(p.name for p in out.iterdir()) == ["first-up2.png"]  # the temp file is gone
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Stopped by {signum.name}"), stderr
    assert "1 product written" in lines[0] and "1 unfinished file(s) removed" in lines[0]
    data = json.loads(stdout)
    assert [Path(p["path"]).name for p in data["products"]] == ["first-up2.png"]
    assert data["exit_code"] == process.returncode and data["signal"] == signum.name


def test_a_cancelled_json_batch_lists_the_products_already_written(tmp_path: Path) -> None:
    """The engine thread notices the cancel itself (between model runs) and ends normally."""
    from engine.samples.synthetic import slow_model

    model = slow_model(tmp_path / "slow.onnx", layers=300)
    # The later inputs 9× the first's pixels: the stop lands while the second runs, not after
    # it was written, even on a loaded machine where this test reads the log late.
    inputs = [
        photo(tmp_path / f"in{n}.png", *((96, 96) if n == 0 else (288, 288)), seed=n)
        for n in range(3)
    ]
    out = tmp_path / "out"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine",
            "-v",
            "run",
            "upscale",
            *map(str, inputs),
            "--model",
            str(model),
            "--out",
            str(out),
            "--tile",
            "32",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    assert process.stderr is not None
    for line in process.stderr:  # the first input is written, the second one runs
        if "decoding in1.png" in line:
            break
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    data = json.loads(stdout)
    assert [Path(p["path"]).name for p in data["products"]] == ["in0-slow.png"]
    assert sorted(p.name for p in out.iterdir()) == ["in0-slow.png"]
    assert data["error"]["kind"] == "cancelled" and data["signal"] == "SIGINT"
    assert [ln for ln in stderr.splitlines() if ln.startswith("Stopped by")] == [
        "Stopped by SIGINT: 1 product written."
    ]
