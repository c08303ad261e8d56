"""`python -m engine …`: run operations, inspect devices, manage models, benchmark.

Exit codes of `run` (DESIGN §5): 0 all done, 2 usage, 3 resource, 4 bad input or model,
5 device unavailable, 130 cancelled.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from engine.cancel import CancelToken
from engine.errors import EXIT_CODES, EngineError, ErrorKind, UsageError
from engine.options import parse_output_options
from engine.requests import Operation, OperationRequest, Progress, ProgressKind, Result
from engine.settings import EngineSettings

log = logging.getLogger("engine")


def _tile(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError("--tile takes a number of pixels or 'auto'") from e
    if value < 16:
        raise argparse.ArgumentTypeError("--tile must be at least 16 pixels")
    return value


def _megabytes(text: str) -> int:
    try:
        value = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError("give the limit in megabytes, for example 2048") from e
    if value <= 0:
        raise argparse.ArgumentTypeError("the limit must be positive")
    return int(value * 1024 * 1024)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Tessera's engine.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run an operation on images")
    run.add_argument("operation", choices=[o.value for o in Operation])
    run.add_argument("inputs", nargs="+", type=Path, metavar="INPUT")
    run.add_argument("--model", required=True, help="catalog id or path of an .onnx file")
    run.add_argument("--device", default="cpu", help="cpu or gpu:N (default cpu)")
    run.add_argument(
        "--runtime", default="auto", help="auto, cpu, cuda, tensorrt, directml, coreml"
    )
    run.add_argument(
        "--out", type=Path, default=None, help="output folder (default: beside each input)"
    )
    run.add_argument(
        "--tile", type=_tile, default=None, help="tile edge in pixels, or auto (default)"
    )
    run.add_argument("--max-tile", type=int, default=None, help="largest tile auto may choose")
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
        "refine_foreground; depth: normalization, process_res; geometry: num_tokens)",
    )
    run.add_argument(
        "--format",
        default=None,
        metavar="png|jpeg|webp",
        help="format of the main image (upscaled image, cut-out); default png. Masks, depth "
        "and normals keep theirs. JPEG has no transparency: a cut-out gets a white background",
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
    run.add_argument("--cpu-mem-limit", type=_megabytes, default=None, metavar="MB")
    run.add_argument("--gpu-mem-limit", type=_megabytes, default=None, metavar="MB")
    run.add_argument("--models-dir", type=Path, default=None)
    run.add_argument("--json", action="store_true", help="print one JSON object with the outcome")
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    dev = sub.add_parser("devices", help="what each runtime really gives on this machine")
    dev.add_argument("--json", action="store_true")

    bench = sub.add_parser("bench", help="the performance table of DESIGN §7")
    bench.add_argument(
        "--json", action="store_true", help="figures as JSON on stdout (the table goes to stderr)"
    )
    bench.add_argument("--quick", action="store_true", help="smaller images, fewer repeats")
    bench.add_argument("--gpu", action="store_true", help="GPU memory figures (NVIDIA only)")
    bench.add_argument("--models-dir", type=Path, default=None)

    from engine.models.cli import add_models_parser

    add_models_parser(sub)
    return parser


def _parse_option(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise UsageError(f"--option {text}: write KEY=VALUE.")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


class ProgressBar:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, p: Progress) -> None:
        if not self.enabled:
            return
        if p.kind in (ProgressKind.RUN_FINISHED, ProgressKind.FRAME_FINISHED, ProgressKind.STARTED):
            width = 30
            done = int(p.fraction * width)
            label = f"input {p.input_index + 1}/{p.input_count}"
            if p.frame_count > 1:
                label += f" · frame {p.frame + 1}/{p.frame_count}"
            if p.run_count > 1:
                label += f" · tile {p.run}/{p.run_count}"
            sys.stderr.write(
                f"\r[{'#' * done}{'.' * (width - done)}] {p.fraction * 100:5.1f}% {label}   "
            )
            sys.stderr.flush()
        elif p.kind is ProgressKind.INPUT_FAILED:
            sys.stderr.write("\n")

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _result_json(result: Result) -> dict[str, Any]:
    return {
        "request": result.request_id,
        "products": [
            {"path": str(p.path), "kind": p.kind.value, "source": str(p.source), "frames": p.frames}
            for p in result.products
        ],
        "failures": [
            {"source": str(f.source), "kind": f.kind.value, "message": f.message}
            for f in result.failures
        ],
        "runs": result.runs,
        "shrinks": result.shrinks,
        "sessions": {"created": result.sessions_created, "reused": result.sessions_reused},
        "tile": result.tile,
        "timings": dict(result.timings),
    }


def exit_code_for(result: Result) -> int:
    kinds = {f.kind for f in result.failures}
    if not kinds:
        return 0
    for kind in (
        ErrorKind.RESOURCE,
        ErrorKind.DEVICE,
        ErrorKind.BAD_INPUT,
        ErrorKind.BAD_MODEL,
        ErrorKind.INFERENCE,
    ):
        if kind in kinds:
            return EXIT_CODES[kind]
    return 1


def cmd_run(args: argparse.Namespace) -> int:
    from engine.api import Engine

    options: dict[str, object] = dict(_parse_option(o) for o in args.option)
    if args.max_tile is not None:
        options["max_tile"] = args.max_tile
    settings = EngineSettings(
        models_dir=args.models_dir,
        cpu_mem_limit=args.cpu_mem_limit,
        gpu_mem_limit=args.gpu_mem_limit,
    )
    request = OperationRequest(
        operation=Operation(args.operation),
        model=args.model,
        inputs=tuple(args.inputs),
        device=args.device,
        runtime=args.runtime,
        output_dir=args.out,
        tile=args.tile,
        sequence=args.sequence,
        options=options,
        output=parse_output_options(args.format, args.quality, args.size),
    )
    request.typed_options()  # unknown keys and bad values: exit 2 before anything loads
    cancel = CancelToken()
    bar = ProgressBar(not args.quiet and not args.json and sys.stderr.isatty())
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            engine = Engine(settings)
            outcome["result"] = engine.run(request, bar, cancel)
        except EngineError as e:
            outcome["error"] = e
        except Exception as e:  # the traceback goes to the log, not the user's face
            log.exception("unexpected failure")
            outcome["error"] = e

    # The engine runs on a worker thread so Ctrl+C can cancel a run in flight (M8).
    worker = threading.Thread(target=work, name="engine", daemon=True)

    def on_sigint(_signum: int, _frame: FrameType | None) -> None:
        cancel.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
    finally:
        signal.signal(signal.SIGINT, previous)
        bar.close()
    error = outcome.get("error")
    if error is not None:
        code = error.exit_code if isinstance(error, EngineError) else 1
        message = (
            str(error)
            if isinstance(error, EngineError)
            else f"unexpected error: {error} (details in the log)"
        )
        if args.json:
            print(
                json.dumps(
                    {
                        "error": {
                            "kind": getattr(getattr(error, "kind", None), "value", "internal"),
                            "message": message,
                        },
                        "exit_code": code,
                    }
                )
            )
        print(f"error: {message}", file=sys.stderr)
        return code
    result: Result = outcome["result"]
    for failure in result.failures:
        print(f"error: {failure.message}", file=sys.stderr)
    code = exit_code_for(result)
    if args.json:
        data = _result_json(result)
        data["exit_code"] = code
        print(json.dumps(data, indent=2))
    else:
        for p in result.products:
            print(p.path)
    return code


def cmd_devices(args: argparse.Namespace) -> int:
    from engine.runtime.devices import probe

    reports = probe()
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0
    for r in reports:
        state = "works" if r.ok else "unavailable"
        line = f"{r.runtime:<9} {r.device:<6} {state:<12} {r.provider or '-'}"
        if r.detail:
            line += f"  ({r.detail})"
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if isinstance(e.code, int) else 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "devices":
            return cmd_devices(args)
        if args.command == "bench":
            from engine.bench import run_bench

            return run_bench(args)
        if args.command == "models":
            from engine.models.cli import run_models_command

            return run_models_command(args)
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return 2
