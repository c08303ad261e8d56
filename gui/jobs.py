"""The GUI's record of each job, the versions an input has, and the texts they show. Qt-free;
touched on the GUI thread only."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from engine.io.image import VIDEO_SUFFIXES
from engine.io.sequences import SEQUENCE_PRODUCTS
from engine.options import OperationOptions, OutputOptions
from engine.requests import (
    Operation,
    OperationRequest,
    Product,
    ProductKind,
    Progress,
    ProgressKind,
    Result,
)


def is_tiled(operation: Operation) -> bool:
    """Whether the operation runs tile by tile (a preview follows the view; a job reports
    tiles and takes a tile size). The GUI asks here, and here asks the operation table."""
    return operation.tiled


def has_scale(operation: Operation) -> bool:
    """Whether the operation's product is the input times the model's scale (the output
    step's "Model's size (×4)"); the others keep the input's size."""
    return operation.has_scale


class SaveTo(Enum):
    """Where a job's products go (the output step's "Save to")."""

    # A `Tessera` folder beside each image, made at the first result: products never lie among
    # the inputs, so a folder reopened as frames never takes them (the rule the command line
    # keeps for folders of frames). The app's default.
    TESSERA = "tessera"
    BESIDE = "beside"  # next to each image (a folder of frames: its own `Tessera` folder)
    FOLDER = "folder"  # one folder the person chose


def products_folder(inputs: tuple[Path, ...]) -> Path:
    """The `Tessera` folder beside `inputs` (inside a folder of frames)."""
    first = inputs[0]
    return first / SEQUENCE_PRODUCTS if first.is_dir() else first.parent / SEQUENCE_PRODUCTS


@dataclass(frozen=True)
class JobSettings:
    """What the operation panel says when Run is pressed; every job of the batch keeps it."""

    operation: Operation
    model: str  # a catalog id or a file path
    model_label: str  # "Photo ×4"
    device: str = "cpu"
    runtime: str = "auto"
    tile: int | None = None
    output_dir: Path | None = None  # the folder the person chose; None: per input (`save_to`)
    output: OutputOptions = field(default_factory=OutputOptions)
    # Without a chosen folder: the engine's own rule (beside each input), as a request that
    # names no folder; the panel says what the person chose.
    save_to: SaveTo = SaveTo.BESIDE
    options: OperationOptions | None = None  # the operation's own (a clip's point clouds)

    @property
    def job_tile(self) -> int | None:
        """The tile size a request carries: only tiled operations have one."""
        return self.tile if is_tiled(self.operation) else None

    def output_folder(self, inputs: tuple[Path, ...]) -> Path | None:
        """The folder a job on the input `inputs` (its original files) writes into; None: the
        engine's rule, beside each file it is run on."""
        if self.output_dir is not None:
            return self.output_dir
        if self.save_to is SaveTo.TESSERA and inputs:
            return products_folder(inputs)
        return None

    @property
    def makes(self) -> tuple[object, ...]:
        """What the product depends on: the operation, the model and the output step (not the
        device, the runtime, the tile size or the folder). Two jobs with the same `makes` on
        one input make the same picture."""
        return (self.operation, self.model, self.output)


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

    @property
    def active(self) -> bool:
        return not self.ended


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
VIEWABLE_SUFFIXES = {
    ".png",
    ".jpg",
    ".jpeg",
    ".webp",
    ".gif",
    ".tif",
    ".tiff",
    ".bmp",
    *VIDEO_SUFFIXES,  # a product clip: the clip bar reads its frames
}


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
        unit = "tile" if is_tiled(operation) else "run"
        parts.append(f"{unit} {event.run}/{event.run_count}")
    return " · ".join(parts)


def fmt_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def fmt_estimate(seconds: float) -> str:
    """'about 4 min', for a time not yet spent: rounded the way a person says it."""
    if seconds < 10:
        return "a few seconds"
    if seconds < 60:
        return f"about {round(seconds / 10) * 10} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"about {max(1, round(minutes))} min"
    hours = minutes / 60
    return f"about {hours:.1f} h".replace(".0 h", " h")


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
    started_at: float | None = None
    running_at: float | None = None  # the model is loaded and the first run began
    ended_at: float | None = None
    first_run: tuple[float, float] | None = None  # (time, fraction) at the first finished run
    result: Result | None = None
    message: str = ""
    expected_s: float | None = None  # the estimate when it was queued (measured speed)
    expected_write_s: float | None = None  # of that, writing the products (when known)
    writing_at: float | None = None  # when its last run ended and the writing began
    megapixels: float = 0.0  # of its input, for the speed it will teach
    frames: int = 1
    parent_label: str = ""  # the result it was run on ("Quick cut-out"); empty: the original
    origin: str = ""  # who asked, when not this window: "command line (pid 123)"
    queued_at: float = field(default_factory=time.monotonic)  # when the window made it

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def title(self) -> str:
        heading = self.heading
        return f"{heading} {self.origin_mark}" if self.origin else heading

    @property
    def heading(self) -> str:
        """The title without who asked: "Upscale · photo.png · Photo ×4"."""
        return (
            f"{self.request.operation.label} · "
            f"{describe_inputs(self.request.inputs, self.request.sequence)} · {self.model_label}"
        )

    @property
    def origin_mark(self) -> str:
        """Who asked, for a job asked from outside the window: "— from the command line
        (pid 123)"; empty for the window's own."""
        return f"— from the {self.origin}" if self.origin else ""

    @property
    def fraction(self) -> float:
        if self.state is JobState.FINISHED:
            return 1.0
        return self.progress.fraction if self.progress is not None else 0.0

    @property
    def failed(self) -> bool:
        return self.state is JobState.FAILED

    def on_started(self) -> None:
        self.state = JobState.LOADING
        self.started_at = time.monotonic()

    def on_progress(self, event: Progress) -> None:
        self.progress = event
        if event.kind is ProgressKind.LOADED and self.running_at is None:
            self.running_at = time.monotonic()
        if (
            event.kind in (ProgressKind.LOADED, ProgressKind.RUN_FINISHED)
            and self.state is JobState.LOADING
        ):
            self.state = JobState.RUNNING
        if event.kind is ProgressKind.RUN_FINISHED:
            if self.first_run is None:
                self.first_run = (time.monotonic(), event.fraction)
        if self.writing_at is None and self.writing:
            self.writing_at = time.monotonic()

    def on_cancel_requested(self) -> None:
        if self.state in (JobState.LOADING, JobState.RUNNING):
            self.state = JobState.CANCELLING

    def on_finished(self, result: Result) -> None:
        """Done — or Failed when no input gave a product (one bad file is a failed job)."""
        self.result = result
        self.ended_at = time.monotonic()
        self.state = (
            JobState.FAILED if result.failures and not result.products else JobState.FINISHED
        )
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

    def working_seconds(self) -> float | None:
        """Seconds the finished job spent on its runs and files, model loading and the
        engine's once-per-model measurement (the tile overlap's probe) excluded."""
        if self.result is None or self.started_at is None or self.ended_at is None:
            return None
        timings = self.result.timings
        once = float(timings.get("load_s", 0.0)) + float(timings.get("probe_s", 0.0))
        # The engine's own figure when the window heard of the start late (a busy loop).
        took = max(self.ended_at - self.started_at, float(timings.get("total_s", 0.0)))
        return max(0.0, took - once)

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left: from the pace since the first finished run (model loading excluded)
        and the products' writing time, or before that from the measured speed this job was
        queued with; while writing, what the writing has left (None when not known)."""
        if self.state not in (JobState.LOADING, JobState.RUNNING):
            return None
        now = now or time.monotonic()
        write = self.expected_write_s
        if self.writing:
            if write is None or self.writing_at is None:
                return None
            return max(1.0, write - (now - self.writing_at))
        if self.first_run is not None:
            t0, f0 = self.first_run
            done = self.fraction - f0
            if done > 0 and now > t0:
                return (1.0 - self.fraction) * (now - t0) / done + (write or 0.0)
        if self.expected_s is None:
            return None
        spent = now - self.running_at if self.running_at is not None else 0.0
        return max(1.0, self.expected_s - spent)

    @property
    def writing(self) -> bool:
        """Every run of the input's last frame is done: its products are being written (a
        12000×8000 PNG takes seconds), which the engine reports only when they are."""
        event = self.progress
        if self.state is not JobState.RUNNING or event is None:
            return False
        return (
            event.kind in (ProgressKind.RUN_FINISHED, ProgressKind.FRAME_FINISHED)
            and event.frame + 1 >= event.frame_count
            and event.run >= event.run_count
        )

    def eta_is_estimate(self) -> bool:
        """True while the time left comes from the measured speed, not this job's own pace."""
        return self.first_run is None or self.fraction <= self.first_run[1]

    def viewable(self) -> list[Product]:
        return viewable_products(self.result.products) if self.result is not None else []


ORIGINAL = "original"


@dataclass(frozen=True)
class Version:
    """One picture an input has: the original, or a product of one of its jobs."""

    input_key: str
    label: str  # "Original", "Photo ×4", "Mask · Quick cut-out"
    paths: tuple[Path, ...]  # one file, a folder, or the numbered files of a sequence product
    job_id: str | None = None
    kind: ProductKind | None = None
    failed: str = ""  # the reason, for a failed job (it has no paths)

    @property
    def id(self) -> str:
        if self.job_id is None:
            return ORIGINAL
        return f"{self.job_id}:{self.kind.value if self.kind else 'failed'}"

    @property
    def is_original(self) -> bool:
        return self.job_id is None

    @property
    def viewable(self) -> bool:
        return bool(self.paths)

    @property
    def path(self) -> Path | None:
        return self.paths[0] if self.paths else None


def job_versions(job: Job, input_key: str) -> list[Version]:
    """The versions a finished or failed job adds to its input's strip."""
    if job.state is JobState.FAILED:
        chain = f"{job.parent_label} → " if job.parent_label else ""
        return [
            Version(input_key, f"{chain}{job.model_label} — failed", (), job.id, None, job.message)
        ]
    if job.state is not JobState.FINISHED:
        return []
    by_kind: dict[ProductKind, list[Path]] = {}
    for product in job.viewable():
        by_kind.setdefault(product.kind, []).append(product.path)
    versions = []
    # A step of a chain says what it was run on: "Quick cut-out → Anime ×2".
    chain = f"{job.parent_label} → " if job.parent_label else ""
    for kind, paths in by_kind.items():
        label = (
            job.model_label
            if kind is ProductKind.IMAGE
            else f"{PRODUCT_LABELS[kind]} · {job.model_label}"
        )
        versions.append(Version(input_key, chain + label, tuple(paths), job.id, kind))
    return versions


def ended_text(job: Job) -> tuple[str, str]:
    """What the window says when a job ends: the status line and the notification's text."""
    took = fmt_duration(job.elapsed())
    name = Path(job.request.inputs[0]).name
    if job.state is JobState.FINISHED and job.result is not None and job.result.products:
        text = f"{job.request.operation.label} of {name} done in {took}."
        return f"{text} {job.result.products[0].path.name}", text
    if job.state is JobState.FAILED:
        text = f"{job.request.operation.label} of {name} failed: {job.message}"
        return text.splitlines()[0], text
    text = f"Cancelled: {job.title}"
    return text, text
