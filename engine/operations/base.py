"""What every operation shares: the run context (session, runner, cancel, progress) and the base class.

The context knows how many runs the request will make, so exactly the request's final run is
marked `last` and asks for the arena shrink (M2); operations never decide that themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.cancel import CancelToken
from engine.errors import ResourceError, UsageError
from engine.io.image import DecodedImage
from engine.requests import Operation, OperationRequest, Product, Progress, ProgressKind
from engine.runtime.runner import Runner
from engine.runtime.sessions import SessionEntry
from engine.settings import EngineSettings


@dataclass
class RunContext:
    request: OperationRequest
    settings: EngineSettings
    runner: Runner
    entry: SessionEntry
    cancel: CancelToken | None
    emit: Callable[[Progress], None]
    renew_session: Callable[[], SessionEntry]  # release the session (M5) and load a fresh one
    release_session: Callable[[], None]  # release the session (M5) without loading another
    model_name: str
    model_options: Mapping[str, Any] = field(default_factory=dict)  # the catalog's contract options
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
    ) -> list[Any]:
        """One counted model run of the current frame, with progress after it."""
        last = count and self.is_last_run()
        try:
            result = self.runner.run(
                self.entry, feeds, last=last, cancel=self.cancel, outputs=outputs
            )
        except ResourceError:
            # M5 for every family, not only upscale: the session that ran out of memory is
            # destroyed with its arena, so the next request starts on a fresh one.
            self.release_session()
            raise
        self.last_run_shrunk = last and self.entry.shrink_target is not None
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

    def option(self, name: str, default: Any) -> Any:
        """A request option, else the model's catalog option, else the default."""
        if name in self.request.options:
            return self.request.options[name]
        return self.model_options.get(name, default)


class OperationBase(ABC):
    operation: ClassVar[Operation]

    @abstractmethod
    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        """Run the model over every frame of `image` and write the products atomically."""

    def minimal_feeds(self, entry: SessionEntry) -> dict[str, np.ndarray] | None:
        """The smallest valid input, for the shrink run after a cancel or failure (M10).

        None for models with fixed input shapes: a full-size run would cost a peak of its own.
        """
        return None

    def check_request(self, request: OperationRequest) -> None:
        if not request.inputs:
            raise UsageError("No input files were given.")


def output_name(source: Path, suffix: str, ext: str) -> str:
    return f"{source.stem}-{suffix}{ext}"
