"""The command line's arguments: one-line errors and the checked types of `run`'s options."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import NoReturn

from engine.errors import UsageError
from engine.operation_specs import operations
from engine.options import parse_tile
from engine.settings import DEFAULT_MAX_PIXELS

MEGABYTES_RANGE = (1, 16 * 1024 * 1024)  # 1 MB … 16 TiB


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the problem and where to read more, no usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def _tile(text: str) -> int | None:
    try:
        return parse_tile(text)
    except UsageError as e:  # argparse says it in its own one-line error
        raise argparse.ArgumentTypeError(str(e)) from e


def _megapixels(text: str) -> int:
    """Pixels from megapixels (the limit the window's Preferences call Largest image)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 1_000_000):
        raise argparse.ArgumentTypeError(
            f"--max-megapixels takes megapixels above 0, for example 400; not {text!r}"
        )
    return int(value * 1_000_000)


def _megabytes(text: str) -> int:
    low, high = MEGABYTES_RANGE
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high):
        raise argparse.ArgumentTypeError(
            f"the limit takes megabytes from {low} to {high}, for example 2048; not {text!r}"
        )
    return int(value * 1024 * 1024)


def _folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("--out needs a folder; an empty name is not one")
    return Path(text)


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("operation", choices=[o.value for o in operations()])
    run.add_argument("inputs", nargs="+", type=Path, metavar="INPUT")
    run.add_argument("--model", required=True, help="catalog id or path of an .onnx file")
    run.add_argument("--device", default="cpu", help="cpu or gpu:N (default cpu)")
    run.add_argument(
        "--runtime",
        default="auto",
        help="auto, cpu, cuda, tensorrt, directml, coreml, openvino, migraphx",
    )
    run.add_argument(
        "--out", type=_folder, default=None, help="output folder (default: beside each input)"
    )
    run.add_argument(
        "--tile", type=_tile, default=None, help="tile edge in pixels, or auto (default)"
    )
    run.add_argument(
        "--max-tile", default=None, metavar="N", help="largest tile auto may choose (16…8192)"
    )
    run.add_argument(
        "--sequence", action="store_true", help="treat all inputs as frames of one sequence"
    )
    run.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the operation, e.g. num_tokens=2400 or refine_foreground=true "
        "(upscale: max_tile, auto_start; remove-background: normalization, input_size, "
        "refine_foreground; depth: normalization, process_res; geometry: num_tokens, "
        "process_res, point_clouds (a clip's PLY per frame))",
    )
    run.add_argument(
        "--format",
        default=None,
        metavar="png|jpeg|webp|tiff|exr",
        help="format of the main image (upscaled image, cut-out); default png. Masks, depth "
        "and normals keep theirs (exr adds float EXR depth beside them). JPEG has no "
        "transparency: a cut-out gets a white background",
    )
    run.add_argument(
        "--quality",
        default=None,
        metavar="1-100",
        help="JPEG/WebP quality (default 90; WebP at 100 is lossless)",
    )
    run.add_argument(
        "--size",
        default=None,
        metavar="xF|WIDTH",
        help="size of the main image: a factor of the input (x2 writes ×2 with a ×4 model) or "
        "a width in pixels (1920); default: the model's own size",
    )
    run.add_argument(
        "--video-codec",
        default=None,
        metavar="auto|h264|hevc|vp9|av1|prores|ffv1|png",
        help="codec of a clip's products (default auto: the input's codec where Tessera encodes "
        "it, else H.264; png writes numbered PNG frames). A cut-out clip is VP9 with alpha "
        "(ProRes 4444 with prores, FFV1 with ffv1); masks, depth and normals are FFV1",
    )
    run.add_argument(
        "--crf", default=None, metavar="0-63", help="a clip's quality: lower is better and larger"
    )
    run.add_argument(
        "--video-preset",
        default=None,
        metavar="NAME|N",
        help="encoder speed: ultrafast … veryslow (H.264/HEVC; VP9/AV1 map it), or SVT-AV1's 0-13",
    )
    run.add_argument(
        "--skip-broken-frames",
        action="store_true",
        help="a clip's frame that cannot be decoded is replaced by the one before it "
        "(default: the clip fails, naming the frame)",
    )
    run.add_argument(
        "--max-megapixels",
        type=_megapixels,
        default=None,
        metavar="MP",
        help="refuse inputs larger than this many megapixels, all frames together (default "
        f"{DEFAULT_MAX_PIXELS / 1e6:.0f}, which is 16384²); runs in this process, the app "
        "keeping its own limit (its Preferences' Largest image)",
    )
    run.add_argument("--cpu-mem-limit", type=_megabytes, default=None, metavar="MB")
    run.add_argument("--gpu-mem-limit", type=_megabytes, default=None, metavar="MB")
    run.add_argument(
        "--keep-cpu-arena",
        action="store_true",
        help="do not hand the CPU arena back after each operation (faster repeats, more RAM held)",
    )
    run.add_argument("--models-dir", type=Path, default=None)
    run.add_argument(
        "--resume",
        action="store_true",
        help="skip the inputs whose products exist and are whole (a folder: each image an input)",
    )
    run.add_argument("--json", action="store_true", help="print one JSON object with the outcome")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--standalone",
        action="store_true",
        help="run in this process even when the Tessera app is running (it would run the "
        "request with the models it holds)",
    )


def add_devices_arguments(dev: argparse.ArgumentParser) -> None:
    dev.add_argument("--json", action="store_true")


def add_memory_arguments(mem: argparse.ArgumentParser) -> None:
    mem.add_argument("--json", action="store_true", help="one JSON object")


def add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument(
        "--json", action="store_true", help="figures as JSON on stdout (the table goes to stderr)"
    )
    bench.add_argument("--quick", action="store_true", help="smaller images, fewer repeats")
    bench.add_argument("--gpu", action="store_true", help="GPU memory figures (NVIDIA only)")
    bench.add_argument("--models-dir", type=Path, default=None)
    bench.add_argument(
        "--packages-dir",
        type=Path,
        default=None,
        help="where the ncnn originals of the starter models are kept (default: fetch-starter's)",
    )


def parse_option(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise UsageError(f"--option {text}: write KEY=VALUE.")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()
