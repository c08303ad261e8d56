"""`python -m engine …`: run operations, inspect devices, manage models, benchmark.

Exit codes of `run` (DESIGN §5): 0 all done, 2 usage, 3 resource, 4 bad input or model,
5 device unavailable, 130 cancelled (SIGINT), 143 terminated (SIGTERM).

Stopping a run: the engine works on a thread of its own; SIGINT and SIGTERM (on Windows also
Ctrl+Break and closing the console) set the request's cancel token, which is checked before
every model run, interrupts a run in flight, and is checked between blocks of rows while a PNG
is written and between frames while decoding. A C call (Pillow decoding one big image, zlib)
cannot be interrupted, so the main thread waits at most `STOP_GRACE_S` for the engine thread;
then it removes every temp file still registered (engine/files.py) and exits without waiting
further. Either way it prints one line, lists the products already written under `--json`, and
exits 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from engine.cancel import CancelToken, Terminated
from engine.errors import EXIT_CODES, Cancelled, EngineError, ErrorKind, UsageError
from engine.files import LIVE
from engine.operation_specs import operation_named, operations
from engine.options import parse_output_options, parse_video_options
from engine.requests import (
    MemoryReport,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
    Result,
)
from engine.runtime import kernel_choice, records
from engine.runtime.records import ProcessKind
from engine.settings import EngineSettings
from engine.stopping import ready_for_keyboard_interrupt

if TYPE_CHECKING:
    from engine.join import Joined

log = logging.getLogger("engine")

STOP_GRACE_S = 0.8  # after a stop signal, the longest wait for the engine thread
# A joined run's terminal is not held by an ORT run: it can wait for the app's word that the
# job ended (the app stops a run within ~0.1 s; a busy machine delays the reply, not the stop).
JOINED_STOP_GRACE_S = 2.0
TILE_RANGE = (16, 65536)
MEGABYTES_RANGE = (1, 16 * 1024 * 1024)  # 1 MB … 16 TiB


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the problem and where to read more, no usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def _tile(text: str) -> int | None:
    if text.strip().lower() == "auto":
        return None
    low, high = TILE_RANGE
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"--tile takes a whole number of pixels from {low} to {high}, or auto; not {text!r}"
        )
    return value


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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m engine", description="Tessera's engine.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run an operation on images")
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

    dev = sub.add_parser("devices", help="what each runtime really gives on this machine")
    dev.add_argument("--json", action="store_true")

    mem = sub.add_parser(
        "memory", help="every Tessera process and what it holds, and the other model users"
    )
    mem.add_argument("--json", action="store_true", help="one JSON object")

    bench = sub.add_parser("bench", help="the performance table of DESIGN §7")
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

    from engine.models.cli import add_models_parser
    from engine.watch_cli import add_watch_parser

    add_models_parser(sub)
    add_watch_parser(sub)
    return parser


def _parse_option(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise UsageError(f"--option {text}: write KEY=VALUE.")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


class ProgressBar:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._started = time.monotonic()

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
            label += _time_left(time.monotonic() - self._started, p.fraction)
            sys.stderr.write(
                f"\r[{'#' * done}{'.' * (width - done)}] {p.fraction * 100:5.1f}% {label}   "
            )
            sys.stderr.flush()
        elif p.kind is ProgressKind.INPUT_FAILED:
            sys.stderr.write("\n")

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _time_left(elapsed: float, fraction: float) -> str:
    """ " · 3 min left" from the pace so far (nothing before 2 % or 2 s: too early to tell)."""
    if fraction < 0.02 or elapsed < 2 or fraction >= 1:
        return ""
    left = elapsed * (1 - fraction) / fraction
    if left >= 90:
        return f" · {round(left / 60)} min left"
    return f" · {max(1, round(left))} s left"


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
        "memory": _memory_json(result.memory),
        "cpu_kernel": result.cpu_kernel,
    }


def _memory_json(report: MemoryReport | None) -> dict[str, int] | None:
    """Integer bytes; the GPU figures only where NVML sees the session's device."""
    if report is None:
        return None
    data = {
        "rss_after_load": report.rss_after_load,
        "rss_peak": report.rss_peak,
        "rss_after": report.rss_after,
    }
    if report.gpu_used_after_load is not None:
        data["gpu_used_after_load"] = report.gpu_used_after_load
    if report.gpu_used_after is not None:
        data["gpu_used_after"] = report.gpu_used_after
    return data


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
        ErrorKind.USAGE,  # e.g. an output folder that is a file, found at that input
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
        keep_cpu_arena=args.keep_cpu_arena,
    )
    request = OperationRequest(
        operation=operation_named(args.operation),
        model=args.model,
        inputs=tuple(args.inputs),
        device=args.device,
        runtime=args.runtime,
        output_dir=args.out,
        tile=args.tile,
        sequence=args.sequence,
        options=options,
        output=parse_output_options(
            args.format,
            args.quality,
            args.size,
            parse_video_options(
                args.video_codec, args.crf, args.video_preset, args.skip_broken_frames
            ),
        ),
    )
    request.typed_options()  # unknown keys and bad values: exit 2 before anything loads
    if os.environ.get("TESSERA_CPU_ISA"):  # a set this CPU lacks: exit 2 before anything loads
        from engine.runtime import winograd  # only then: startup stays light

        winograd.check_isa_setting()
    if args.resume:
        from engine.resume_cli import resumed_request

        if (left := resumed_request(request, settings, args.json)) is None:
            return 0
        request = left
    if not args.standalone:
        code = _run_in_app(settings, request, args)
        if code is not None:
            return code
    records.declare(ProcessKind.RUN)  # `engine memory` names this process and what it loads
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

    # The engine runs on a worker thread so a signal can cancel a run in flight (M8).
    worker = threading.Thread(target=work, name="engine", daemon=True)
    stop = StopSignals(cancel)
    with LIVE.watching() as placed, stop.installed():
        worker.start()
        while worker.is_alive() and not stop.waited_enough():
            worker.join(0.05)
        bar.close()
        if stop.signum is not None:
            return stop.finish(worker, outcome, LIVE.snapshot(placed), args.json)
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
                        "products": [{"path": str(p)} for p in placed],
                        "engine": THIS_PROCESS,
                    }
                )
            )
        print(f"error: {message}", file=sys.stderr)
        return code
    result: Result = outcome["result"]
    return _report_result(result, args.json, THIS_PROCESS)


THIS_PROCESS = "this process"  # --json's "engine": where the request ran


def _report_result(result: Result, as_json: bool, engine: str) -> int:
    for failure in result.failures:
        print(f"error: {failure.message}", file=sys.stderr)
    code = exit_code_for(result)
    if as_json:
        data = _result_json(result)
        data["exit_code"] = code
        data["engine"] = engine
        print(json.dumps(data, indent=2))
    else:
        print_paths([p.path for p in result.products])
    return code


def print_paths(paths: list[Path]) -> None:
    """One path a line, as the bytes the file system has: a name that is not UTF-8 (a Latin-1
    file from an old archive) cannot be encoded by a strict UTF-8 stdout, and the product is
    already written. (`--json` writes such names with its escapes instead.)"""
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)
    for path in paths:
        if out is None:  # a stdout without bytes (a test's StringIO): its own encoding
            print(os.fsdecode(path))
        else:
            out.write(os.fsencode(path) + b"\n")
    if out is not None:
        out.flush()


def _report_failure(
    kind: ErrorKind, code: int, message: str, placed: list[Path], as_json: bool, engine: str
) -> int:
    if as_json:
        print(
            json.dumps(
                {
                    "error": {"kind": kind.value, "message": message},
                    "exit_code": code,
                    "products": [{"path": str(p)} for p in placed],
                    "engine": engine,
                }
            )
        )
    print(f"error: {message}", file=sys.stderr)
    return code


def _run_in_app(
    settings: EngineSettings, request: OperationRequest, args: argparse.Namespace
) -> int | None:
    """The request sent to the running app (engine/join.py); None: run it here instead."""
    from engine import __version__, join, wire

    models_dir = os.path.realpath(settings.resolved_models_dir().expanduser())
    hello = wire.Hello(
        pid=os.getpid(),
        version=__version__,
        models_dir=models_dir,
        cpu_mem_limit=settings.cpu_mem_limit,
        gpu_mem_limit=settings.gpu_mem_limit,
        keep_cpu_arena=settings.keep_cpu_arena,
    )
    found = join.connect(hello)
    if found is None:
        return None
    if isinstance(found, join.Standalone):
        print(found.line, file=sys.stderr)
        return None
    try:
        return _joined(found, wire.for_sending(request), args)
    finally:
        found.close()


def _joined(joined: Joined, request: OperationRequest, args: argparse.Namespace) -> int:
    """Drive one request in the app: the same progress, lines, products, exit code and
    --json as a run here; a stop signal sends a cancel and the app's job ends."""
    from engine import wire

    bar = ProgressBar(not args.quiet and not args.json and sys.stderr.isatty())
    stop = StopSignals(CancelToken())
    outcome: object = None
    lost = ""
    with stop.installed():
        joined.send(request)
        cancel_sent = False
        while outcome is None:
            if stop.signum is not None and not cancel_sent:
                name = (
                    signal.Signals(stop.signum).name if stop.signum in set(signal.Signals) else ""
                )
                with contextlib.suppress(OSError):
                    joined.send(wire.Cancel(request.id, name or "SIGTERM"))
                cancel_sent = True
            if stop.waited_enough(JOINED_STOP_GRACE_S):
                break  # the app got the cancel; the terminal does not wait any longer
            try:
                message = joined.receive()
            except (EOFError, OSError, wire.WireError) as e:
                lost = str(e)
                break
            if isinstance(message, Progress) and message.request_id == request.id:
                bar(message)
            elif isinstance(message, wire.Queued) and message.ahead and bar.enabled:
                sys.stderr.write(
                    f"Queued in the Tessera {joined.label} after {message.ahead} "
                    f"job{'s' if message.ahead != 1 else ''}.\n"
                )
            elif isinstance(message, (Result, OperationFailure, OperationCancellation)):
                outcome = message
        bar.close()
    engine = joined.label
    if stop.signum is not None:
        return _stopped_in_app(stop, outcome, args.json, engine)
    if isinstance(outcome, Result):
        return _report_result(outcome, args.json, engine)
    if isinstance(outcome, OperationFailure):
        code = EXIT_CODES.get(outcome.kind, 1)
        return _report_failure(
            outcome.kind, code, outcome.message, list(outcome.products), args.json, engine
        )
    if isinstance(outcome, OperationCancellation):
        count = len(outcome.products)
        line = (
            f"Cancelled in the Tessera {engine}: {count} product{'s' if count != 1 else ''} "
            "written."
        )
        return _report_failure(
            ErrorKind.CANCELLED, 130, line, list(outcome.products), args.json, engine
        )
    text = f"the Tessera {engine} ended the connection before the job ended ({lost})"
    return _report_failure(ErrorKind.INTERNAL, 1, text, [], args.json, engine)


def _stopped_in_app(stop: StopSignals, outcome: object, as_json: bool, engine: str) -> int:
    """Ctrl-C or SIGTERM while the app ran the request: the line and --json of a stopped
    standalone run (StopSignals.finish)."""

    code = stop.exit_code()
    name = signal.Signals(stop.signum).name if stop.signum in set(signal.Signals) else "stop"
    placed: list[Path] = []
    if isinstance(outcome, Result):
        code = exit_code_for(outcome)  # it had finished: reported as such
        placed = [p.path for p in outcome.products]
    elif isinstance(outcome, OperationFailure):
        code = EXIT_CODES.get(outcome.kind, 1)
        placed = list(outcome.products)
    elif isinstance(outcome, OperationCancellation):
        placed = list(outcome.products)
    count = len(placed)
    line = f"Stopped by {name}: {count} product{'s' if count != 1 else ''} written" + (
        "." if code in (130, 143) else f"; the run had already ended (exit {code})."
    )
    print(line, file=sys.stderr)
    if as_json:
        data: dict[str, Any] = (
            _result_json(outcome)
            if isinstance(outcome, Result)
            else {"products": [{"path": str(p)} for p in placed]}
        )
        data.update(
            signal=name,
            exit_code=code,
            error={"kind": ErrorKind.CANCELLED.value, "message": line},
            engine=engine,
            # whether the app said its job ended before the terminal stopped waiting
            app_confirmed=outcome is not None,
        )
        print(json.dumps(data, indent=2))
    return code


SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


class StopSignals:
    """SIGINT and SIGTERM (Windows: also Ctrl+Break and closing the console) cancel the run.

    The first signal is kept: it decides the exit code. The handlers only set flags (they run
    in the main thread between two bytecodes); the main thread does the rest in `finish`.
    """

    def __init__(self, cancel: CancelToken) -> None:
        self.cancel = cancel
        self.signum: int | None = None
        self.at = 0.0
        self.done = threading.Event()  # set once the process may end (Windows console close)

    def stop(self, signum: int) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
        self.cancel.cancel()

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.stop(signum)

    def waited_enough(self, grace: float = STOP_GRACE_S) -> bool:
        return self.signum is not None and time.monotonic() - self.at > grace

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        names = ["SIGINT", "SIGTERM", "SIGBREAK"]  # SIGBREAK: Ctrl+Break, Windows only
        numbers = [getattr(signal, n) for n in names if hasattr(signal, n)]
        previous = {n: signal.signal(n, self._handler) for n in numbers}
        console = _console_close_handler(self) if sys.platform == "win32" else None
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            self.done.set()
            del console  # kept alive until here: the console may call it at any time

    def exit_code(self) -> int:
        # SIGBREAK and closing the console count as terminated.
        return {int(k): v for k, v in SIGNAL_EXIT.items()}.get(self.signum or 0, 143)

    def finish(
        self, worker: threading.Thread, outcome: dict[str, Any], placed: list[Path], as_json: bool
    ) -> int:
        """After a stop signal: clean up, print one line (and the JSON), and end."""
        abandoned = worker.is_alive()  # stuck in a C call: do not wait for it any longer
        removed = LIVE.abandon()  # the temp files it (or a finished cancel) left registered
        code = self.exit_code()
        name = signal.Signals(self.signum).name if self.signum in set(signal.Signals) else "stop"
        result = outcome.get("result")
        if isinstance(result, Result) and not abandoned:
            code = exit_code_for(result)  # the run had already finished: it is reported as such
        error = outcome.get("error")
        if error is not None and not isinstance(error, Cancelled) and not abandoned:
            code = error.exit_code if isinstance(error, EngineError) else 1
        count = len(placed)
        line = (
            f"Stopped by {name}: {count} product{'s' if count != 1 else ''} written"
            + (f", {len(removed)} unfinished file(s) removed" if removed else "")
            + ("." if code in (130, 143) else f"; the run had already ended (exit {code}).")
        )
        print(line, file=sys.stderr)
        if as_json:
            data: dict[str, Any] = (
                _result_json(result)
                if isinstance(result, Result) and not abandoned
                else {"products": [{"path": str(p)} for p in placed]}
            )
            data.update(
                signal=name,
                exit_code=code,
                error={"kind": ErrorKind.CANCELLED.value, "message": line},
                engine=THIS_PROCESS,
            )
            print(json.dumps(data, indent=2))
        if abandoned:
            # The engine thread may sit in a C call for a long time; no finaliser may wait
            # for it (or run ORT's destructors under it), so end the process here.
            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
            records.withdraw()  # os._exit skips atexit, which would remove it
            os._exit(code)
        return code


def _console_close_handler(stop: StopSignals) -> object:  # pragma: no cover - Windows only
    """Closing the console window, logging off or shutting down: Windows calls this on a
    thread of its own and ends the process when it returns (or after about 5 s)."""
    if sys.platform != "win32":
        return None
    import ctypes
    from ctypes import wintypes

    events = (2, 5, 6)  # CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT

    @ctypes.WINFUNCTYPE(wintypes.BOOL, wintypes.DWORD)
    def handler(event: int) -> bool:
        if event not in events:
            return False  # Ctrl+C and Ctrl+Break arrive as SIGINT / SIGBREAK
        stop.stop(signal.SIGTERM)
        stop.done.wait(STOP_GRACE_S + 2.0)  # let the main thread clean up before Windows ends us
        return True

    ctypes.windll.kernel32.SetConsoleCtrlHandler(handler, True)
    return handler


def cmd_memory(args: argparse.Namespace) -> int:
    from engine.runtime import census

    now = census.take()
    if args.json:
        print(json.dumps(census.as_json(now), indent=2))
    else:
        print(census.report(now))
    return 0


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
        if r.cpu_kernel is not None:
            print(f"{'':<16} convolutions: {r.cpu_kernel}  ({r.cpu_kernel_note})")
    from engine.runtime.runtime_setup import gpu_lines

    print("\nGPUs:\n" + "\n".join(f"  {line}" for line in gpu_lines()))
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
    # Outside `run` (which cancels its engine thread instead), SIGTERM unwinds the main thread
    # like Ctrl+C, so the `finally` blocks remove their temp files; downloads keep their .part.
    # (Until here, engine/stopping.py's early handlers ended the process quietly.)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    previous_int = ready_for_keyboard_interrupt()
    try:
        if args.command in ("run", "bench", "devices"):
            kernel_choice.setting()  # TESSERA_CPU_KERNELS: a wrong word is a usage error (exit 2)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "devices":
            return cmd_devices(args)
        if args.command == "memory":
            return cmd_memory(args)
        if args.command == "bench":
            from engine.bench import run_bench

            records.declare(ProcessKind.BENCH)
            return run_bench(args)
        if args.command == "watch":
            from engine.watch_cli import run_watch

            return run_watch(args)
        if args.command == "models":
            from engine.models.cli import run_models_command

            return run_models_command(args)
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        print("Stopped.", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)  # type: ignore[arg-type]
    parser.error(f"unknown command {args.command}")


def _raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated
