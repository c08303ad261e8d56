"""A `run` sent to the running app (engine/join.py): the same progress, lines, products, exit
code and `--json` as a run in this process."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.cancel import CancelToken
from engine.commandline.reporting import (
    ProgressBar,
    exit_code_for,
    report_failure,
    report_result,
    result_json,
)
from engine.commandline.signals import JOINED_STOP_GRACE_S, StopSignals
from engine.errors import EXIT_CODES, ErrorKind
from engine.requests import (
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    Result,
)
from engine.settings import EngineSettings

if TYPE_CHECKING:
    from engine.join import Joined

_GONE = object()  # the request could not even be sent


def run_in_app(
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


def _joined(joined: Joined, request: OperationRequest, args: argparse.Namespace) -> int | None:
    """Drive one request in the app: the same progress, lines, products, exit code and
    --json as a run here; a stop signal sends a cancel and the app's job ends."""
    from engine import wire

    bar = ProgressBar(not args.quiet and not args.json and sys.stderr.isatty())
    stop = StopSignals(CancelToken())
    outcome: object = None
    lost = ""
    stall_s = wire.stall_seconds()
    with stop.installed():
        try:
            joined.send(request)
        except OSError as e:  # a stopped app whose buffer is full: as good as gone
            lost = str(e) or type(e).__name__
            outcome = _GONE
        heard = time.monotonic()  # the app answers at least every HEARTBEAT_S while it works
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
            if stop.signum is None and time.monotonic() - heard > stall_s:
                bar.close()
                with contextlib.suppress(OSError):  # read once the app runs again
                    joined.send(wire.Abandon(request.id))
                print(
                    f"Running standalone: the Tessera {joined.label} stopped answering "
                    f"(no word for {stall_s:g} s).",
                    file=sys.stderr,
                )
                return None
            try:
                message = joined.receive()
            except (EOFError, OSError, wire.WireError) as e:
                lost = str(e)
                break
            if message is not None:
                heard = time.monotonic()
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
    if outcome is _GONE:
        outcome = None
    engine = joined.label
    if stop.signum is not None:
        return _stopped_in_app(stop, outcome, args.json, engine)
    if isinstance(outcome, Result):
        return report_result(outcome, args.json, engine)
    if isinstance(outcome, OperationFailure):
        code = EXIT_CODES.get(outcome.kind, 1)
        return report_failure(
            outcome.kind, code, outcome.message, list(outcome.products), args.json, engine
        )
    if isinstance(outcome, OperationCancellation):
        count = len(outcome.products)
        # The app cancels a joined job only at the person's word (a row's Cancel, Cancel
        # all, Esc, closing the window): the line says it was the window's.
        line = (
            f"Cancelled in the Tessera window (pid {joined.welcome.pid}): "
            f"{count} product{'s' if count != 1 else ''} written."
        )
        return report_failure(
            ErrorKind.CANCELLED, 130, line, list(outcome.products), args.json, engine
        )
    # The app quit or was killed mid-job: a script still gets its product, made here.
    line = f"Running standalone: the Tessera {engine} went away before the job ended ({lost})."
    print(line, file=sys.stderr)
    return None


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
    if outcome is None:  # the app was in a step it cannot stop (a session being made)
        line = (
            f"Stopped by {name}: the Tessera {engine} cancels the job when its current step "
            "ends; what it wrote before stays."
        )
    print(line, file=sys.stderr)
    if as_json:
        data: dict[str, Any] = (
            result_json(outcome)
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
