"""What crosses threads: requests, progress events and results (frozen dataclasses, enums)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from engine.errors import ErrorKind, UsageError
from engine.operation_specs import Operation
from engine.options import OperationOptions, OutputOptions, check_options, parse_options

_ids = itertools.count(1)


def new_request_id() -> str:
    return f"job-{next(_ids)}"


@dataclass(frozen=True)
class OperationRequest:
    """One job: an operation with one model over one or more inputs.

    `tile` is a tile edge in input pixels, or None for automatic sizing (largest tile that
    fits the memory budget, halved on out-of-memory). `sequence` treats all inputs as the
    frames of one sequence. `options` are the operation's typed options (engine/options.py);
    None means the model's defaults. A mapping of names to values or text is accepted too
    (tests, scripts) and checked like the command line's `--option`s when the request runs.
    `output` is the main image product's format, quality and size (engine/options.py); data
    products (masks, depth, normals) keep their own formats.
    """

    operation: Operation
    model: str
    inputs: tuple[Path, ...]
    device: str = "cpu"
    runtime: str = "auto"
    output_dir: Path | None = None
    tile: int | None = None
    sequence: bool = False
    options: OperationOptions | Mapping[str, object] | None = None
    output: OutputOptions = field(default_factory=OutputOptions)
    id: str = field(default_factory=new_request_id)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(Path(p) for p in self.inputs))
        options = self.options
        if (
            options is not None
            and not isinstance(options, MappingProxyType)
            and not _typed(options)
        ):
            given = cast(Mapping[str, object], options)
            object.__setattr__(self, "options", MappingProxyType(dict(given)))

    def typed_options(self) -> OperationOptions:
        """The request's options as its operation's type, checked: UsageError names the
        accepted keys or range."""
        self.output.check()
        cls = self.operation.options_type
        if self.options is None:
            return cls()
        if _typed(self.options):
            if not isinstance(self.options, cls):
                raise UsageError(
                    f"{self.operation.label} takes {cls.__name__}, not "
                    f"{type(self.options).__name__}."
                )
            check_options(self.options, self.operation.value)
            return self.options
        given: type[Any] = cls
        return parse_options(given, cast(Mapping[str, object], self.options), self.operation.value)


def _typed(options: object) -> bool:
    """An options object built by code (a frozen dataclass), not a mapping of names."""
    return dataclasses.is_dataclass(options) and not isinstance(options, type)


class ProgressKind(Enum):
    STARTED = "started"  # the request left the queue and its model is being loaded
    LOADED = "loaded"  # the session is ready (created or reused); runs follow
    RUN_FINISHED = "run_finished"  # one model run (a tile, or a whole frame) ended
    FRAME_FINISHED = "frame_finished"  # every run of one frame ended
    INPUT_FINISHED = "input_finished"  # one input's products are written
    INPUT_FAILED = "input_failed"  # one input failed; the batch goes on


@dataclass(frozen=True)
class Progress:
    request_id: str
    kind: ProgressKind
    input_index: int = 0
    input_count: int = 1
    frame: int = 0  # 0-based index of the current frame
    frame_count: int = 1
    run: int = 0  # runs finished in the current frame (1-based once a run ended)
    run_count: int = 1
    message: str = ""

    @property
    def fraction(self) -> float:
        """Overall completion of the request, 0…1."""
        per_input = 1.0 / max(self.input_count, 1)
        per_frame = per_input / max(self.frame_count, 1)
        done_runs = self.run / max(self.run_count, 1)
        if self.kind in (ProgressKind.INPUT_FINISHED, ProgressKind.INPUT_FAILED):
            return min(1.0, (self.input_index + 1) * per_input)
        return min(
            1.0, self.input_index * per_input + self.frame * per_frame + done_runs * per_frame
        )


class ProductKind(Enum):
    IMAGE = "image"  # upscaled image, cut-out
    MASK = "mask"
    DEPTH16 = "depth16"
    DEPTH_FLOAT = "depth_float"
    DEPTH_PREVIEW = "depth_preview"
    NORMAL = "normal"
    INTRINSICS = "intrinsics"
    POINT_CLOUD = "point_cloud"
    CONFIDENCE = "confidence"
    SKY = "sky"


@dataclass(frozen=True)
class Product:
    path: Path
    kind: ProductKind
    source: Path
    frames: int = 1


@dataclass(frozen=True)
class InputFailure:
    source: Path
    kind: ErrorKind
    message: str


@dataclass(frozen=True)
class MemoryReport:
    """What the process held around one request, in bytes (M11: memory handed back)."""

    rss_after_load: int  # process RSS once the model's session was ready
    rss_peak: int  # the process's high-water mark during the request
    rss_after: int  # after the operation and its hand-back
    gpu_used_after_load: int | None = None  # where NVML sees the session's device
    gpu_used_after: int | None = None


@dataclass(frozen=True)
class Result:
    request_id: str
    products: tuple[Product, ...]
    failures: tuple[InputFailure, ...]
    runs: int
    shrinks: int
    sessions_created: int
    sessions_reused: int
    timings: Mapping[str, float]
    tile: int | None = None  # tile edge finally used (after any halving), None when untiled
    memory: MemoryReport | None = None
    # What ran the request's CPU convolutions: "avx512", "avx2", "baseline" or "neon" (Tessera's
    # kernel), "onnxruntime"; None where it ran on a GPU or made no run (docs/cpu-paths.md).
    cpu_kernel: str | None = None
    # Runs the request did not make because a preview had made their tiles (upscale): its time
    # is not the time of `runs` + these.
    runs_reused: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class OperationFailure:
    """A request that ended with an error as a whole (not one bad input of a batch)."""

    request_id: str
    kind: ErrorKind
    message: str  # for a person; the traceback of an unexpected error is in the log
    products: tuple[Path, ...] = ()  # files written before it failed (they stay)


@dataclass(frozen=True)
class OperationCancellation:
    request_id: str
    started: bool  # False when the job was cancelled before it left the queue
    products: tuple[Path, ...] = ()  # files written before the cancel (they stay)
