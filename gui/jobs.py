"""The GUI's record of each job (GUI thread only) and the texts its row shows."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from engine.requests import (
    Operation,
    OperationRequest,
    Product,
    ProductKind,
    Progress,
    ProgressKind,
    Result,
)


class JobState(Enum):
    QUEUED = "Queued"
    LOADING = "Loading model…"
    RUNNING = "Running"
    CANCELLING = "Cancelling…"
    FINISHED = "Done"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def ended(self) -> bool:
        return self in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED)

    @property
    def cancellable(self) -> bool:
        return self in (JobState.QUEUED, JobState.LOADING, JobState.RUNNING)


# What the viewer can show, best first per operation.
VIEWABLE = (
    ProductKind.IMAGE,
    ProductKind.DEPTH_PREVIEW,
    ProductKind.NORMAL,
    ProductKind.MASK,
    ProductKind.DEPTH16,
    ProductKind.CONFIDENCE,
    ProductKind.SKY,
)
PRODUCT_LABELS = {
    ProductKind.IMAGE: "Result",
    ProductKind.MASK: "Mask",
    ProductKind.DEPTH16: "Depth (16-bit)",
    ProductKind.DEPTH_PREVIEW: "Depth",
    ProductKind.NORMAL: "Normals",
    ProductKind.CONFIDENCE: "Confidence",
    ProductKind.SKY: "Sky",
}
VIEWABLE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".tif", ".tiff", ".bmp"}


def viewable_products(products: tuple[Product, ...] | list[Product]) -> list[Product]:
    found = [
        p for p in products if p.kind in VIEWABLE and p.path.suffix.lower() in VIEWABLE_SUFFIXES
    ]
    return sorted(found, key=lambda p: VIEWABLE.index(p.kind))


def progress_text(event: Progress | None, operation: Operation) -> str:
    """'frame 2/5 · tile 14/36': what the progress bar says."""
    if event is None:
        return ""
    parts: list[str] = []
    if event.input_count > 1:
        parts.append(f"input {min(event.input_index + 1, event.input_count)}/{event.input_count}")
    if event.frame_count > 1:
        parts.append(f"frame {event.frame + 1}/{event.frame_count}")
    if event.run_count > 1:
        unit = "tile" if operation is Operation.UPSCALE else "run"
        parts.append(f"{unit} {event.run}/{event.run_count}")
    return " · ".join(parts)


def fmt_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def describe_inputs(inputs: tuple[Path, ...], sequence: bool) -> str:
    if len(inputs) == 1:
        name = inputs[0].name
        return f"{name}/ (frames)" if sequence or inputs[0].is_dir() else name
    if sequence:
        return f"{inputs[0].name} … ({len(inputs)} frames)"
    return f"{inputs[0].name} and {len(inputs) - 1} more"


@dataclass
class Job:
    """One job as the GUI sees it. Mutable, and only ever touched on the GUI thread."""

    request: OperationRequest
    model_label: str
    state: JobState = JobState.QUEUED
    progress: Progress | None = None
    queued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    ended_at: float | None = None
    first_run: tuple[float, float] | None = None  # (time, fraction) at the first finished run
    result: Result | None = None
    message: str = ""

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def title(self) -> str:
        return (
            f"{self.request.operation.label} · "
            f"{describe_inputs(self.request.inputs, self.request.sequence)} · {self.model_label}"
        )

    @property
    def fraction(self) -> float:
        if self.state is JobState.FINISHED:
            return 1.0
        return self.progress.fraction if self.progress is not None else 0.0

    def on_started(self) -> None:
        self.state = JobState.LOADING
        self.started_at = time.monotonic()

    def on_progress(self, event: Progress) -> None:
        self.progress = event
        if (
            event.kind in (ProgressKind.LOADED, ProgressKind.RUN_FINISHED)
            and self.state is JobState.LOADING
        ):
            self.state = JobState.RUNNING
        if event.kind is ProgressKind.RUN_FINISHED:
            if self.first_run is None:
                self.first_run = (time.monotonic(), event.fraction)

    def on_cancel_requested(self) -> None:
        if self.state in (JobState.LOADING, JobState.RUNNING):
            self.state = JobState.CANCELLING

    def on_finished(self, result: Result) -> None:
        self.state = JobState.FINISHED
        self.result = result
        self.ended_at = time.monotonic()
        if result.failures:
            done = len(self.request.inputs) - len(result.failures)
            first = result.failures[0].message
            self.message = (
                f"{len(result.failures)} of {len(result.failures) + max(done, 0)} inputs failed: {first}"
                if len(result.failures) > 1 or done > 0
                else first
            )

    def on_failed(self, message: str) -> None:
        self.state = JobState.FAILED
        self.message = message
        self.ended_at = time.monotonic()

    def on_cancelled(self) -> None:
        self.state = JobState.CANCELLED
        self.ended_at = time.monotonic()

    def elapsed(self, now: float | None = None) -> float:
        if self.started_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else (now or time.monotonic())
        return end - self.started_at

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left, from the pace since the first finished run (model loading excluded)."""
        if self.state is not JobState.RUNNING or self.first_run is None:
            return None
        t0, f0 = self.first_run
        now = now or time.monotonic()
        done = self.fraction - f0
        if done <= 0 or now <= t0:
            return None
        return (1.0 - self.fraction) * (now - t0) / done

    def viewable(self) -> list[Product]:
        return viewable_products(self.result.products) if self.result is not None else []
