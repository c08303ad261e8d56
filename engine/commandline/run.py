"""`python -m engine run`: one request on an engine thread of this process, or in the running
app (engine/commandline/joined.py) unless `--standalone`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from typing import Any

from engine.cancel import CancelToken
from engine.commandline.arguments import parse_option
from engine.commandline.joined import run_in_app
from engine.commandline.reporting import THIS_PROCESS, ProgressBar, report_result
from engine.commandline.signals import StopSignals
from engine.errors import EngineError
from engine.files import LIVE
from engine.operation_specs import operation_named
from engine.options import parse_output_options, parse_video_options
from engine.requests import OperationRequest, Result
from engine.runtime import records
from engine.runtime.records import ProcessKind
from engine.settings import EngineSettings

log = logging.getLogger("engine")


def cmd_run(args: argparse.Namespace) -> int:
    from engine.api import Engine

    options: dict[str, object] = dict(parse_option(o) for o in args.option)
    if args.max_tile is not None:
        options["max_tile"] = args.max_tile
    settings = EngineSettings(
        models_dir=args.models_dir,
        cpu_mem_limit=args.cpu_mem_limit,
        gpu_mem_limit=args.gpu_mem_limit,
        keep_cpu_arena=args.keep_cpu_arena,
        **({"max_pixels": args.max_megapixels} if args.max_megapixels is not None else {}),
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
    # The app refuses and admits by its own pixel limit: a run with its own limit stays here.
    if not args.standalone and args.max_megapixels is None:
        code = run_in_app(settings, request, args)
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
    return report_result(result, args.json, THIS_PROCESS)
