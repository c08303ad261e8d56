"""`python -m engine watch DIR --model …`: run an operation on every image that arrives in DIR.

One engine (one session of the model, M1) runs the files one at a time on a worker thread
while the main thread keeps looking at the folder (engine/watch.py). One line per file: when
it is queued, and when it is done (its products) or failed (the reason); a failed file does
not stop the watch. Files already in the folder are taken too, except those whose products
are present and whole (engine/resume.py), so a watch started again does not redo its work.
Ctrl+C (or SIGTERM) cancels the file in flight, removes its temp files and exits 130 (143).
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

from engine.cancel import CancelToken, Terminated
from engine.errors import Cancelled, EngineError, UsageError
from engine.files import LIVE
from engine.operation_specs import for_family, operation_named, operations
from engine.options import parse_output_options, parse_tile
from engine.requests import OperationRequest
from engine.runtime import records
from engine.runtime.records import ProcessKind
from engine.settings import EngineSettings

log = logging.getLogger("engine.watch")

STOP_GRACE_S = 2.0  # after Ctrl+C, the longest wait for the file in flight to stop
DEFAULT_INTERVAL_S = 0.5  # between looks at the folder; the parser is built at every start:
# the watch's modules (numpy, Pillow, the operations) are imported only when it runs


def _tile(text: str) -> int | None:
    try:
        return parse_tile(text)
    except UsageError as e:  # argparse says it in its own one-line error
        raise argparse.ArgumentTypeError(str(e)) from e


def add_watch_parser(sub: Any) -> None:
    watch = sub.add_parser("watch", help="run an operation on every image that lands in a folder")
    watch.add_argument("folder", type=Path, metavar="DIR", help="the folder to watch")
    watch.add_argument("--model", required=True, help="catalog id or path of an .onnx file")
    watch.add_argument(
        "--operation",
        choices=[o.value for o in operations()],
        default=None,
        help="default: the model's own (an upscaler upscales)",
    )
    watch.add_argument("--out", type=Path, default=None, help="output folder (default DIR/Tessera)")
    watch.add_argument("--device", default="cpu", help="cpu or gpu:N (default cpu)")
    watch.add_argument("--runtime", default="auto", help="as for run (default auto)")
    watch.add_argument(
        "--tile", type=_tile, default=None, help="tile edge in pixels, or auto (default)"
    )
    watch.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="as for run"
    )
    watch.add_argument(
        "--format", default=None, metavar="png|jpeg|webp|tiff|exr", help="as for run"
    )
    watch.add_argument("--quality", default=None, metavar="1-100", help="as for run")
    watch.add_argument("--size", default=None, metavar="xF|WIDTH", help="as for run")
    watch.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between looks at the folder (default {DEFAULT_INTERVAL_S}); a file is "
        "taken once it is unchanged over two looks",
    )
    watch.add_argument("--models-dir", type=Path, default=None)


def _request(args: argparse.Namespace, settings: EngineSettings) -> OperationRequest:
    from engine.io.sequences import SEQUENCE_PRODUCTS
    from engine.models.inventory import resolve_model

    folder: Path = args.folder
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; give the folder to watch.")
    if args.operation is not None:
        operation = operation_named(args.operation)
    else:
        operation = for_family(resolve_model(args.model, settings.resolved_models_dir()).family)
    options: dict[str, object] = {}
    for text in args.option:
        key, sep, value = text.partition("=")
        if not sep:
            raise UsageError(f"--option {text}: write KEY=VALUE.")
        options[key.strip()] = value.strip()
    request = OperationRequest(
        operation=operation,
        model=args.model,
        inputs=(folder,),
        device=args.device,
        runtime=args.runtime,
        output_dir=args.out or folder / SEQUENCE_PRODUCTS,
        tile=args.tile,
        options=options,
        output=parse_output_options(args.format, args.quality, args.size),
    )
    request.typed_options()  # a bad option: exit 2 before the watch starts
    return request


def _say(line: str) -> None:
    print(line, flush=True)


def run_watch(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from engine.api import Engine
    from engine.models.inventory import resolve_model
    from engine.resume import is_done
    from engine.watch import FolderWatch

    settings = EngineSettings(models_dir=args.models_dir)
    template = _request(args, settings)
    spec = resolve_model(template.model, settings.resolved_models_dir())
    if args.interval <= 0:
        raise UsageError("--interval takes a number of seconds above 0.")
    watch = FolderWatch(args.folder)
    records.declare(ProcessKind.RUN)  # `engine memory` names this process and what it loads
    jobs: queue.Queue[Path | None] = queue.Queue()
    cancel = CancelToken()
    engine = Engine(settings)
    counts = {"done": 0, "failed": 0}

    def work() -> None:
        while (path := jobs.get()) is not None:
            started = time.monotonic()
            try:
                result = engine.run(replace(template, inputs=(path,)), None, cancel)
            except Cancelled:
                return
            except EngineError as e:  # the model itself: every file would fail the same way
                _say(f"{path.name}: error: {e}")
                counts["failed"] += 1
                continue
            except Exception as e:  # a bug: said, logged, and the watch goes on
                log.exception("unexpected failure on %s", path)
                _say(f"{path.name}: error: unexpected ({e}); see the log")
                counts["failed"] += 1
                continue
            watch.add_products([p.path for p in result.products])
            for failure in result.failures:
                _say(f"{path.name}: error: {failure.message}")
                counts["failed"] += 1
            if result.products:
                names = ", ".join(p.path.name for p in result.products)
                _say(f"{path.name}: done in {time.monotonic() - started:.1f} s → {names}")
                counts["done"] += 1

    worker = threading.Thread(target=work, name="engine", daemon=True)
    worker.start()
    out = template.output_dir
    _say(
        f"Watching {args.folder} ({template.operation.label}, {Path(template.model).name}) → "
        f"{out}. Ctrl+C stops."
    )
    try:
        while True:
            arrivals = watch.poll()
            for stalled in watch.stalled:
                _say(
                    f"{stalled.name}: not whole yet, waiting for the rest (a copy that stopped, "
                    "or a damaged file)"
                )
            for arrival in arrivals:
                if is_done(template, spec, arrival.path):
                    _say(f"{arrival.path.name}: already done (its products are whole in {out})")
                    continue
                jobs.put(arrival.path)
                _say(f"{arrival.path.name}: queued ({arrival.size} bytes)")
            time.sleep(args.interval)  # the poll loop's own pace, not a synchronisation
    except KeyboardInterrupt as e:
        cancel.cancel()
        jobs.put(None)
        worker.join(STOP_GRACE_S)
        abandoned = worker.is_alive()  # stuck in a C call: not waited for any longer
        removed = LIVE.abandon() if abandoned else []
        line = f"Stopped watching: {counts['done']} done, {counts['failed']} failed"
        if removed:
            line += f", {len(removed)} unfinished file(s) removed"
        print(line + ".", file=sys.stderr)
        code = 143 if isinstance(e, Terminated) else 130
        if abandoned:  # no finaliser may wait for the engine thread (as `run` does)
            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
            records.withdraw()
            os._exit(code)
        return code
