"""`python -m engine …`: run operations, inspect devices, manage models, benchmark.

Exit codes of `run` (DESIGN §5): 0 all done, 2 usage, 3 resource, 4 bad input or model,
5 device unavailable, 130 cancelled (SIGINT), 143 terminated (SIGTERM).

Each command is one row of `COMMANDS`: its name, its help line, the function that adds its
arguments and the one that runs it. Its parts live in engine/commandline/ (arguments,
reporting, stop signals, the run here or in the app, the machine's devices and memory).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from engine.cancel import Terminated
from engine.commandline.arguments import (
    Parser,
    add_bench_arguments,
    add_devices_arguments,
    add_memory_arguments,
    add_run_arguments,
)
from engine.commandline.machine import cmd_devices, cmd_memory
from engine.commandline.reporting import ProgressBar, exit_code_for, print_paths
from engine.commandline.run import cmd_run
from engine.errors import EngineError
from engine.runtime import kernel_choice, records
from engine.runtime.records import ProcessKind
from engine.stopping import ready_for_keyboard_interrupt

__all__ = ["COMMANDS", "ProgressBar", "build_parser", "exit_code_for", "main", "print_paths"]


@dataclass(frozen=True)
class Command:
    """One subcommand: `add_arguments` fills its parser, `run` gets the parsed arguments."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def cmd_bench(args: argparse.Namespace) -> int:
    from engine.bench import run_bench

    records.declare(ProcessKind.BENCH)
    return run_bench(args)


COMMANDS: tuple[Command, ...] = (
    Command("run", "run an operation on images", add_run_arguments, cmd_run),
    Command(
        "devices",
        "what each runtime really gives on this machine",
        add_devices_arguments,
        cmd_devices,
    ),
    Command(
        "memory",
        "every Tessera process and what it holds, and the other model users",
        add_memory_arguments,
        cmd_memory,
    ),
    Command("bench", "the performance table of DESIGN §7", add_bench_arguments, cmd_bench),
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m engine", description="Tessera's engine.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_arguments(sub.add_parser(command.name, help=command.help))

    from engine.models.cli import add_models_parser

    add_models_parser(sub)  # `models`: its own subcommands (engine/models/cli.py)
    from engine.watch_cli import add_watch_parser

    add_watch_parser(sub)  # `watch`: engine/watch_cli.py
    return parser


def _runner(name: str) -> Callable[[argparse.Namespace], int] | None:
    for command in COMMANDS:
        if command.name == name:
            return command.run
    if name == "watch":
        from engine.watch_cli import run_watch

        return run_watch
    if name == "models":
        from engine.models.cli import run_models_command

        return run_models_command
    return None


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
        runner = _runner(args.command)
        if runner is not None:
            return runner(args)
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
