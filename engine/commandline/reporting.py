"""What a run prints: the progress bar, the lines, `--json`'s object and the exit code."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from engine.errors import EXIT_CODES, ErrorKind
from engine.requests import MemoryReport, Progress, ProgressKind, Result

THIS_PROCESS = "this process"  # --json's "engine": where the request ran


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


def result_json(result: Result) -> dict[str, Any]:
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
        "memory": memory_json(result.memory),
        "cpu_kernel": result.cpu_kernel,
    }


def memory_json(report: MemoryReport | None) -> dict[str, int] | None:
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


def report_result(result: Result, as_json: bool, engine: str) -> int:
    for failure in result.failures:
        print(f"error: {failure.message}", file=sys.stderr)
    code = exit_code_for(result)
    if as_json:
        data = result_json(result)
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


def report_failure(
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
