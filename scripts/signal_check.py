#!/usr/bin/env python3
"""Send SIGTERM and SIGINT to `python -m engine run` at several moments of a large job.

For each signal and each moment — while the input is decoded, while the model runs, while the
product is encoded, while it is published — one run of a ×2 upscale of a large picture is
started, the signal is sent when the engine's log (`-v`) says that stage began, and the run's
end is checked:

- the exit code is 130 (SIGINT) or 143 (SIGTERM), or 0 when the job had already finished;
- the output folder holds nothing but finished products: no hidden or temp file, every file
  listed by `--json` and decodable at the expected size;
- the run said so in one line ("Stopped by …") and ended within a few seconds of the signal.

    python scripts/signal_check.py [--size 2400x1600] [--json]

Exit status 0 when every case passes. The model and the picture are made on the spot
(engine/samples/synthetic.py): no download.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = {  # moment -> the log line (engine -v) that starts it, and the extra wait after it
    "decode": ("decoding ", 0.0),
    "inference": ("model run tile 2 of", 0.0),
    "encode": ("encoding ", 0.3),
    "publish": ("publishing ", 0.0),
}
SIGNALS = {"SIGTERM": (signal.SIGTERM, 143), "SIGINT": (signal.SIGINT, 130)}


@dataclass
class Case:
    signal: str
    stage: str
    exit_code: int | None = None
    seconds_to_exit: float | None = None
    products: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _engine(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine", *args]


def prepare(work: Path, width: int, height: int) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT))
    from engine.samples.synthetic import synthetic_upscaler, test_image

    model = synthetic_upscaler(work / "up2.onnx", scale=2, features=8, blocks=1)
    picture = test_image(work / "large.png", width, height)
    return model, picture


def run_case(work: Path, model: Path, picture: Path, name: str, stage: str) -> Case:
    from PIL import Image

    case = Case(name, stage)
    signum, stopped_code = SIGNALS[name]
    marker, delay = STAGES[stage]
    out = work / f"out-{name}-{stage}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    command = _engine(
        "-v", "run", "upscale", str(picture), "--model", str(model), "--out", str(out)
    )
    process = subprocess.Popen(
        [*command, "--tile", "512", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert process.stderr is not None
    log: list[str] = []
    sent: float | None = None
    for line in process.stderr:
        log.append(line.rstrip("\n"))
        if marker in line:
            time.sleep(delay)
            process.send_signal(signum)
            sent = time.monotonic()
            break
    stdout, rest = process.communicate(timeout=120)
    ended = time.monotonic()
    log += rest.splitlines()
    case.exit_code = process.returncode
    if sent is None:
        case.problems.append(f"the log never said {marker!r}")
        return case
    case.seconds_to_exit = round(ended - sent, 2)
    if process.returncode not in (stopped_code, 0):
        case.problems.append(f"exit {process.returncode}, not {stopped_code} (or 0)")
    if case.seconds_to_exit > 5:
        case.problems.append(f"{case.seconds_to_exit} s from the signal to the exit")
    stopped_lines = [ln for ln in log if ln.startswith("Stopped by")]
    if process.returncode == stopped_code and len(stopped_lines) != 1:
        case.problems.append(f"{len(stopped_lines)} 'Stopped by' lines")
    if any("Traceback" in ln for ln in log):
        case.problems.append("a traceback was printed")
    try:
        listed = {Path(p["path"]).name for p in json.loads(stdout)["products"]}
    except (ValueError, KeyError, TypeError):
        listed = set()
        case.problems.append(f"--json printed no products list: {stdout[-300:]!r}")
    files = sorted(p.name for p in out.iterdir()) if out.exists() else []
    case.products = files
    for name_ in files:
        if name_.startswith(".") or ".partial-" in name_:
            case.problems.append(f"temp file left: {name_}")
            continue
        if name_ not in listed:
            case.problems.append(f"{name_} is not among the products --json lists")
        try:
            with Image.open(out / name_) as im:
                im.load()
                size = im.size
            with Image.open(picture) as src:
                expected = (src.width * 2, src.height * 2)
            if size != expected:
                case.problems.append(f"{name_} is {size}, not {expected}")
        except Exception as e:
            case.problems.append(f"{name_} is not a finished image: {e}")
    if process.returncode == 0 and not files:
        case.problems.append("exit 0 but no product")
    return case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2400x1600", help="input picture, WIDTHxHEIGHT")
    parser.add_argument("--json", action="store_true", help="print the cases as JSON")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated moments")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    stages = [s for s in args.stages.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="tessera-signals-") as tmp:
        work = Path(tmp)
        model, picture = prepare(work, width, height)
        cases = [
            run_case(work, model, picture, name, stage) for name in SIGNALS for stage in stages
        ]
    if args.json:
        print(json.dumps([asdict(c) | {"ok": c.ok} for c in cases], indent=2))
    else:
        for c in cases:
            state = "ok " if c.ok else "FAIL"
            print(
                f"{state} {c.signal:<7} during {c.stage:<9} exit {c.exit_code!s:>4} "
                f"after {c.seconds_to_exit} s, products {c.products}"
                + ("" if c.ok else f"  <- {'; '.join(c.problems)}")
            )
    return 0 if all(c.ok for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
