"""What every operation shares: the run context of one input, and the operation's base class.

The context knows how many runs the request will make, so exactly the request's final run is
marked `last` and asks for the arena shrink (M2); operations never decide that themselves.
The session itself is the request's `SessionHandle`: it runs, releases on out-of-memory (M5)
and renews; an operation only asks it to.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.cancel import CancelToken
from engine.errors import UsageError
from engine.io.image import DecodedImage
from engine.models.contracts import Contract, ModelSpec
from engine.options import OperationOptions
from engine.requests import Operation, OperationRequest, Product, Progress, ProgressKind
from engine.runtime.sessions import SessionHandle
from engine.settings import EngineSettings


@dataclass
class RunContext:
    """One input of a request, as its operation sees it."""

    request: OperationRequest
    settings: EngineSettings
    session: SessionHandle
    spec: ModelSpec
    cancel: CancelToken | None
    emit: Callable[[Progress], None]
    input_index: int = 0
    input_count: int = 1
    final_input: bool = True  # this input's last run is the request's last run
    sequence: bool = False  # the frames come from several files (a folder or --sequence)
    out_dir: Path = Path()
    frame: int = 0
    frame_count: int = 1
    run_count: int = 1
    runs_done: int = 0
    last_run_shrunk: bool = False
    used_tile: int | None = None  # tile edge finally used, reported in the result
    io_seconds: float = 0.0  # decoding and writing files, kept apart from the model's work

    def start_frame(self, frame: int, frame_count: int, run_count: int) -> None:
        self.frame, self.frame_count, self.run_count, self.runs_done = (
            frame,
            frame_count,
            run_count,
            0,
        )

    def is_last_run(self) -> bool:
        """True for the request's final run: last run of the last frame of the final input."""
        return (
            self.final_input
            and self.frame == self.frame_count - 1
            and self.runs_done == self.run_count - 1
        )

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        count: bool = True,
        into: Mapping[str, np.ndarray] | None = None,
    ) -> list[Any]:
        """One counted model run of the current frame, with progress after it. `count=False`
        is a probe: never the last run, no progress. `into`: the outputs' buffers (see
        SessionHandle.run).

        The request's last run asks for the arena shrink (M2) when its outputs can be written
        outside the arena — into `into`, or into buffers of the shapes the graph states or an
        earlier run with the same inputs showed — because an output left in the arena would
        pin an arena region through the shrink. Otherwise the engine's hand-back run after the
        operation is the one that shrinks."""
        last = count and self.is_last_run()
        buffers = (
            into
            or static_buffers(self.spec.contract, outputs)
            or self.session.buffers_for(feeds, outputs)
        )
        shrink = last and buffers is not None
        result = self.session.run(
            feeds, last=shrink, cancel=self.cancel, outputs=outputs, into=buffers
        )
        self.last_run_shrunk = shrink and self.session.shrink_target is not None
        if count:
            self.runs_done += 1
            self.emit(self.progress(ProgressKind.RUN_FINISHED))
        return result

    def progress(self, kind: ProgressKind, message: str = "") -> Progress:
        return Progress(
            request_id=self.request.id,
            kind=kind,
            input_index=self.input_index,
            input_count=self.input_count,
            frame=self.frame,
            frame_count=self.frame_count,
            run=self.runs_done,
            run_count=self.run_count,
            message=message,
        )


class OperationBase(ABC):
    """One request's operation: configured once from its options and model, then run per input."""

    operation: ClassVar[Operation]

    @abstractmethod
    def configure(self, options: OperationOptions, spec: ModelSpec) -> None:
        """Settle the options once: the request's, else the model's defaults, else Tessera's."""

    def complete(self, spec: ModelSpec, session: SessionHandle) -> ModelSpec:
        """The model's description with what only a run can tell (an upscaler's scale when the
        graph is silent). Called once per model file; the engine keeps the result."""
        return spec

    @abstractmethod
    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        """Run the model over every frame of `image` and write the products atomically."""

    def minimal_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        """The smallest valid input, for the hand-back run after a cancel or failure (M10).

        None for models with fixed input shapes (see `full_feeds`).
        """
        return None

    def output_buffers(
        self, spec: ModelSpec, feeds: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray] | None:
        """Buffers for every output of a run on `feeds` (the hand-back run), where the model's
        description tells their shapes without running it; None where it does not."""
        return static_buffers(spec.contract, None)

    def full_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        """A fixed-size model's whole input (zeros), for the hand-back run when the operation's
        final inputs failed before running (M2): it costs one run, and its own peak goes back
        at its end. None where the model's input size is dynamic."""
        return None

    def check_request(self, request: OperationRequest) -> None:
        if not request.inputs:
            raise UsageError("No input files were given.")


def static_buffers(
    contract: Contract, outputs: Sequence[str] | None
) -> dict[str, np.ndarray] | None:
    """Buffers for the outputs asked for (all when None) where the graph states their whole
    shape; None where one of them is dynamic."""
    names = list(outputs) if outputs else [t.name for t in contract.outputs]
    buffers: dict[str, np.ndarray] = {}
    for name in names:
        spec = contract.tensor(name)
        dims = spec.shape
        if dims is None or not all(isinstance(d, int) and d > 0 for d in dims):
            return None
        if spec.dtype not in ("float32", "float16"):
            return None
        buffers[name] = np.empty([d for d in dims if isinstance(d, int)], spec.dtype)
    return buffers


def output_name(source: Path, suffix: str, ext: str) -> str:
    return f"{source.stem}-{suffix}{ext}"
