"""`python -m gui.bench_estimates`: how far the figure above Run is from the time a batch took,
after one job of a size and after a restart, on a real window.

For each size (64×48, 1024×768 and a large one by default), a window with a data folder of its
own runs one job of that size, then says how long `--images` more of that size will take (the
line above Run's figure), and runs them: the error is how many times off it was, either way.
With `--home DIR` the data folders stay in DIR; `--restart` then starts windows on them again
(this process is a new one, so the speeds come from what the first kept, not from memory) and
measures the figure before any job of theirs. One JSON object on stdout;
engine/bench/window_estimates.py makes it rows of `python -m engine bench`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ORT_LOGGING_LEVEL", "3")

from PySide6.QtWidgets import QApplication

from engine.samples.synthetic import synthetic_upscaler
from gui.bench_batches import a_window, choose, run_jobs

DEFAULT_SIZES = ((64, 48), (1024, 768), (2048, 1536))
TINY = (64, 48)
TINY_COUNT = 20
TIMEOUT_S = 1800.0


@dataclass
class SizeFigures:
    width: int
    height: int
    images: int
    estimate_s: float  # the figure for the images (0: none was given)
    measured_s: float  # from queueing them to the last of them done
    first_s: float  # the one job that taught the speed (0 after a restart)
    # After that one job (of a real size), the figure for TINY_COUNT 64×48 images and their
    # time: a per-pixel rate alone would call them free (0: not measured).
    tiny_estimate_s: float = 0.0
    tiny_measured_s: float = 0.0

    @property
    def tiny_error(self) -> float:
        low, high = sorted((self.tiny_estimate_s, self.tiny_measured_s))
        return high / low if low > 0 else float("inf")

    @property
    def error(self) -> float:
        """How many times off the figure was, either way (1.0: exact)."""
        low, high = sorted((self.estimate_s, self.measured_s))
        return high / low if low > 0 else float("inf")


def pictures(folder: Path, size: tuple[int, int], count: int, prefix: str) -> list[Path]:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(count):
        path = folder / f"{prefix}{i}.png"
        if not path.exists():
            Image.effect_noise(size, 40 + i).convert("RGB").save(path)
        made.append(path)
    return made


def measure_size(
    home: Path, model: Path, size: tuple[int, int], images: int, restart: bool
) -> SizeFigures:
    """One job of `size` teaches the speed (none after a restart: the kept speeds do), then
    the figure for `images` more against the time they took."""
    from gui.inputs import classify_paths

    w, h = size
    place = home / f"{w}x{h}"
    first = pictures(place / "inputs", size, 1, "first")
    batch = pictures(place / "inputs", size, images, "again" if restart else "batch")
    with a_window(place, model.parent) as win:
        choose(win, model)
        jobs = win.jobs  # type: ignore[attr-defined]
        workspace = win.workspace  # type: ignore[attr-defined]

        def run(paths: list[Path]) -> float:
            return run_jobs(win, paths, TIMEOUT_S)

        def figure(paths: list[Path]) -> float:
            guess = jobs.estimate(classify_paths(paths).sources, workspace.settings)
            return float(guess.seconds) if guess is not None else 0.0

        first_s = 0.0 if restart else run(first)
        estimate = figure(batch)
        tiny = [] if restart or size == TINY else pictures(place / "tiny", TINY, TINY_COUNT, "t")
        tiny_estimate = figure(tiny) if tiny else 0.0
        measured = run(batch)
        tiny_measured = run(tiny) if tiny else 0.0
    return SizeFigures(w, h, images, estimate, measured, first_s, tiny_estimate, tiny_measured)


def _size(text: str) -> tuple[int, int]:
    w, _, h = text.partition("x")
    return int(w), int(h)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gui.bench_estimates", description=__doc__)
    parser.add_argument("--model", type=Path, help="the model (default: a synthetic ×4)")
    parser.add_argument("--sizes", type=_size, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--images", type=int, nargs="+", default=[6, 3, 2], help="per size")
    parser.add_argument("--home", type=Path, help="keep the windows' data folders here")
    parser.add_argument("--restart", action="store_true", help="windows on --home's kept data")
    args = parser.parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    counts = [*args.images, *[args.images[-1]] * len(args.sizes)]
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="tessera-bench-estimates-") as d:
        home = args.home or Path(d)
        model = args.model or home / "models" / "synthetic-x4.onnx"
        if not model.exists():  # made once: a new file is a new model, measured again
            model.parent.mkdir(parents=True, exist_ok=True)
            synthetic_upscaler(model)
        figures = [
            measure_size(home, model, size, count, args.restart)
            for size, count in zip(args.sizes, counts, strict=False)
        ]
    out["sizes"] = [{**asdict(f), "error": f.error, "tiny_error": f.tiny_error} for f in figures]
    out["restart"] = args.restart
    del app
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
