"""What every operation shares: the run context of one input, and the operation's base class.

The context knows how many runs the request will make, so exactly the request's final run is
marked `last` and asks for the arena shrink (M2); operations never decide that themselves.
The session itself is the request's `SessionHandle`: it runs, releases on out-of-memory (M5)
and renews; an operation only asks it to.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from engine.cancel import CancelToken
from engine.errors import ModelError, UsageError
from engine.io.image import DecodedImage
from engine.io.publish import check_output_name
from engine.io.resize import check_product_size
from engine.models.catalog import Family
from engine.models.contracts import Contract, ModelSpec
from engine.options import OperationOptions, OutputOptions
from engine.previews import PreviewPatch, PreviewRequest, PreviewResult
from engine.requests import Operation, OperationRequest, Product, Progress, ProgressKind
from engine.runtime.handle import SessionHandle
from engine.settings import EngineSettings
from engine.tiling.cache import TileSource

log = logging.getLogger(__name__)

# Outputs that may hold NaN or ±inf by their model's contract, and the output that says where:
# MoGe-2 remaps z = exp(z) inside the graph, which may overflow where its own mask marks a
# pixel invalid (sky, far background); infer() drops those pixels (reference/models.md). Every
# other output of every family must be finite everywhere.
NONFINITE_WHERE_INVALID: Mapping[Family, Mapping[str, str]] = {
    Family.GEOMETRY: {"points": "mask"},
}


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
    tiles: TileSource | None = None  # tiles a preview made for this input and model (upscale)

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
        log.info("model run %s", self._where() or "1 of 1")
        result = self.session.run(
            feeds, last=shrink, cancel=self.cancel, outputs=outputs, into=buffers
        )
        self.last_run_shrunk = shrink and self.session.shrink_target is not None
        self._check_finite(result, outputs)
        if count:
            self.runs_done += 1
            self.emit(self.progress(ProgressKind.RUN_FINISHED))
        return result

    def _where(self) -> str:
        """ "frame 2 of 5, tile 3 of 12" for the run in progress (empty for a single run)."""
        parts = []
        if self.frame_count > 1:
            parts.append(f"frame {self.frame + 1} of {self.frame_count}")
        if self.run_count > 1:
            parts.append(f"tile {self.runs_done + 1} of {self.run_count}")
        return ", ".join(parts)

    def _check_finite(self, result: Sequence[Any], outputs: Sequence[str] | None) -> None:
        """A model that returns NaN or ±inf (an fp16 overflow, a broken export) would give an
        all-black product and exit 0: it is a bad-model error naming the model and the first
        frame and tile where it happened. Two reductions per output, no copy."""
        names = list(outputs) if outputs else [f"#{i + 1}" for i in range(len(result))]
        arrays = {n: np.asarray(r) for n, r in zip(names, result, strict=False)}
        allowed = NONFINITE_WHERE_INVALID.get(self.spec.family, {})
        for name, values in arrays.items():
            if values.dtype.kind != "f" or values.size == 0:
                continue
            if np.isfinite(values.min()) and np.isfinite(values.max()):
                continue
            mask = arrays.get(allowed.get(name, ""))
            if mask is not None:
                finite = np.isfinite(values)
                if finite.shape != mask.shape:
                    finite = finite.all(axis=-1)
                if finite.shape == mask.shape and bool(np.all(finite | ~(mask > 0.5))):
                    continue  # non-finite only where the model itself says "invalid"
            what = "NaN" if np.isnan(values).any() else "infinite"
            where = self._where()
            raise ModelError(
                f"{self.spec.path.name} returned {what} values in its output {name!r}"
                + (f" ({where})" if where else "")
                + ": the model file is broken or its float16 arithmetic overflows. Try its "
                "float32 version or another model; nothing was written for this input."
            )

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


@dataclass(frozen=True)
class RegionOutcome:
    """How a preview of a region ended (see `PreviewHost.region`)."""

    size: tuple[int, int]  # the whole product's (width, height)
    scale: int
    tiles_run: int
    tiles_cached: int
    tiles_needed: int
    truncated: bool  # more tiles reach the region than one preview runs
    first_pixels_at: float | None  # perf_counter when the first pixels were sent


# Runs the model on the part `request.region` of the decoded `frame` and sends its final pixels
# as they are ready; the context is the request's (session, cancel, the engine's tile cache).
RegionDraw = Callable[
    [np.ndarray, "RunContext", PreviewRequest, Callable[[PreviewPatch], None]], RegionOutcome
]


class PreviewHost(Protocol):
    """What the engine offers an operation's preview (engine/api.py): the operation picks."""

    def whole(self) -> PreviewResult:
        """The job itself is the preview: one run of the whole image, its products written to
        the preview folder and kept until the input, model or options change."""
        ...

    def region(self, draw: RegionDraw) -> PreviewResult:
        """The session, the decoded input (kept for the next pan) and the tile cache, for
        `draw` to run only what the region needs."""
        ...


class OperationBase(ABC):
    """One request's operation: configured once from its options and model, then run per input."""

    operation: ClassVar[Operation]  # its row of the operation table

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

    def preview(self, host: PreviewHost) -> PreviewResult:
        """How this operation previews. By default it runs once on the whole image whatever
        the view shows, so its preview is the job itself (a pan costs nothing)."""
        return host.whole()

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

    def product_scale(self, spec: ModelSpec) -> int | None:
        """How many times the input's size the main image product is (None: not known before
        the model's probe run)."""
        return spec.contract.scale if self.operation.has_scale else 1

    def product_names(self, image: DecodedImage, ctx: RunContext) -> list[str]:
        """The names this input's products will have: the model id, the output format's
        extension and the size tag of the main image, as the products step makes them."""
        numbered = "-0001" if len(image.frames) > 1 else ""
        output = ctx.request.output
        names = []
        for index, product in enumerate(self.operation.products):
            template = product.format(scale=ctx.spec.contract.scale or 1, model=model_id(ctx.spec))
            suffix, _, ext = template.rpartition(".")
            ext = "." + ext
            if index == 0 and self.operation.main_image:
                ext = output.format.suffix
                if output.resized:
                    suffix = f"{suffix}-{output.size_tag()}"
            names.append(output_name(image.source, suffix + numbered, ext))
        return names

    def check_product_size(
        self,
        name: str,
        size: tuple[int, int],
        spec: ModelSpec,
        output: OutputOptions,
        max_pixels: int,
    ) -> None:
        """Refuse a main image product over the pixel limit, from the input's size alone."""
        if not self.operation.main_image:
            return
        target = output.target_size(*size)
        if target is None:
            scale = self.product_scale(spec)
            if scale is None:
                return
            target = (size[0] * scale, size[1] * scale)
        check_product_size(name, *target, max_pixels)

    def check_output_names(self, image: DecodedImage, ctx: RunContext) -> None:
        """Refuse, before any model run, an input whose longest product name the output
        folder's file system would refuse (too long, or characters it does not take), or
        whose main product would be over the pixel limit."""
        self.check_product_size(
            image.source.name, image.size, ctx.spec, ctx.request.output, ctx.settings.max_pixels
        )
        if not self.operation.products:
            return
        names = self.product_names(image, ctx)
        check_output_name(ctx.out_dir, max(names, key=lambda n: len(n.encode("utf-8", "replace"))))


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


def model_id(spec: ModelSpec) -> str:
    """What an upscaled product's name carries: the catalog id, else the file's stem, so three
    ×4 models give three names (`photo-realesrgan-x4plus.png`), not `-x4`, `-x4-1`, `-x4-2`."""
    return spec.entry.id if spec.entry is not None else spec.path.stem


def output_name(source: Path, suffix: str, ext: str) -> str:
    return f"{source.stem}-{suffix}{ext}"
