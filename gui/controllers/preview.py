"""Preview without widgets: what to preview, when to ask the engine again, what to draw.

With Preview on, the viewer's right side shows the panel's operation and model applied to the
left version (the original, or any result — that is how a chain is tried before it is run).
Every change that alters what the view needs — a pan or zoom (debounced), another input or
left version, another operation, model, device or tile — makes a new generation: the engine
thread replaces the waiting preview and cancels the one running, and only patches of the
newest generation are passed on to be drawn. A change of what is previewed (input, model,
settings) also tells the view to forget what it drew (`resetRequested`); a pan keeps it, since
those pixels are still the product's.

Background, depth and geometry run the model once on the whole image whatever the view shows:
a pan asks nothing of the engine for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from engine.previews import PreviewPatch, PreviewRequest, PreviewResult, Region
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
)
from gui.controllers.jobs import JobSettings
from gui.engine_thread import EngineThread

PAN_DEBOUNCE_MS = 40  # a drag sends many moves; the engine hears of the view at this pace


@dataclass(frozen=True)
class PreviewTarget:
    """What is previewed: the image (one file of one input) and the settings applied to it."""

    input_key: str
    path: Path
    operation: Operation
    model: str
    model_label: str
    device: str
    runtime: str
    tile: int | None

    @property
    def tiled(self) -> bool:
        return self.operation is Operation.UPSCALE


class PreviewController(QObject):
    patched = Signal(object)  # PreviewPatch of the newest generation: draw it
    resetRequested = Signal()  # what is previewed changed: forget what was drawn
    statusChanged = Signal(str, bool)  # what the preview is doing; True while it runs
    finished = Signal(object)  # PreviewResult of the newest generation
    failed = Signal(str)
    enabledChanged = Signal(bool)

    def __init__(
        self,
        engine: EngineThread,
        settings: Callable[[], JobSettings | None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.engine = engine
        self.settings = settings
        self.enabled = False
        self.generation = 0
        self.region: Region | None = None  # in the previewed image's pixels
        self.target: PreviewTarget | None = None
        self._source: tuple[str, Path] | None = None
        self._started: str | None = None  # the newest generation's request on the engine
        self.drawn: list[PreviewPatch] = []  # passed on since the last reset (tests read it)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(PAN_DEBOUNCE_MS)
        self._timer.timeout.connect(self._request)
        engine.previewStarted.connect(self._on_started)
        engine.previewProgressed.connect(self._on_progress)
        engine.previewPatched.connect(self._on_patch)
        engine.previewFinished.connect(self._on_finished)
        engine.previewFailed.connect(self._on_failed)
        engine.previewCancelled.connect(self._on_cancelled)

    # -- what changes -------------------------------------------------------------------------
    def set_enabled(self, on: bool) -> None:
        if on == self.enabled:
            return
        self.enabled = on
        self.enabledChanged.emit(on)
        if on:
            self.refresh()
        else:
            self._timer.stop()
            self.generation += 1  # whatever is still on its way is stale
            self.engine.cancel_previews()
            self.engine.release_previews()  # Preview off: its pixels and tiles go back
            self.target = None
            self.drawn = []
            self.resetRequested.emit()
            self.statusChanged.emit("", False)

    def set_source(self, input_key: str | None, path: Path | None) -> None:
        """The image the preview works on: the left version's file."""
        source = (input_key, path) if input_key is not None and path is not None else None
        if source != self._source:
            self._source = source
            self.region = None  # the view says what it shows of the new image
            self.refresh()

    def set_region(self, region: Region | None) -> None:
        """The part of the image the view shows (a pan or zoom): asked again after a pause."""
        if region == self.region:
            return
        self.region = region
        if self.enabled and self.target is not None and self.target.tiled:
            self._timer.start()

    def refresh(self) -> None:
        """The operation, model or settings may have changed: preview again if they did."""
        if not self.enabled:
            return
        target = self._target()
        if target != self.target:
            self.target = target
            self.drawn = []
            self.resetRequested.emit()
            self._timer.stop()
            self._request()

    @property
    def waiting(self) -> bool:
        """A pan or zoom not yet asked of the engine (the debounce)."""
        return self._timer.isActive()

    def close(self) -> None:
        """The window closes: nothing more is asked (the engine thread cancels the rest)."""
        self._timer.stop()
        self.enabled = False

    def cancel(self) -> None:
        """The person's ✕: stop the preview in flight; Preview stays on for the next change."""
        self._timer.stop()
        self.generation += 1
        self.engine.cancel_previews()
        self.statusChanged.emit("Preview stopped.", False)

    # -- asking the engine --------------------------------------------------------------------
    def _target(self) -> PreviewTarget | None:
        settings = self.settings()
        if settings is None or self._source is None:
            return None
        key, path = self._source
        return PreviewTarget(
            key,
            path,
            settings.operation,
            settings.model,
            settings.model_label,
            settings.device,
            settings.runtime,
            settings.tile if settings.operation is Operation.UPSCALE else None,
        )

    def _request(self) -> None:
        target = self.target
        if not self.enabled or target is None or not self.engine.is_running():
            return
        if target.tiled and self.region is not None and self.region.empty:
            return  # nothing of the image is in view
        self.generation += 1
        job = OperationRequest(
            operation=target.operation,
            model=target.model,
            inputs=(target.path,),
            device=target.device,
            runtime=target.runtime,
            tile=target.tile,
        )
        request = PreviewRequest(job, self.region if target.tiled else None, self.generation)
        self.engine.submit_preview(request)
        waiting = self.engine.is_busy()
        self.statusChanged.emit(
            "Preview waits for the running job…" if waiting else "Previewing…", True
        )

    # -- what the engine says -----------------------------------------------------------------
    # By generation, not request id: a preview put back after a job (engine_thread.py) is a new
    # request of the same generation.
    def _on_started(self, request: PreviewRequest) -> None:
        if request.generation == self.generation:
            self._started = request.id
            self.statusChanged.emit("Previewing…", True)

    def _on_progress(self, event: Progress) -> None:
        if event.request_id != self._started or self.target is None:
            return
        if event.kind is ProgressKind.LOADED:
            self.statusChanged.emit(f"Previewing with {self.target.model_label}…", True)
        elif event.kind is ProgressKind.RUN_FINISHED and event.run_count > 1:
            unit = "tile" if self.target.tiled else "run"
            self.statusChanged.emit(
                f"Previewing {unit} {min(event.run + 1, event.run_count)}/{event.run_count}", True
            )

    def _on_patch(self, patch: PreviewPatch) -> None:
        if patch.generation != self.generation or not self.enabled:
            return  # an older preview's pixels: only the newest is drawn
        self.drawn.append(patch)
        self.patched.emit(patch)

    def _on_finished(self, result: PreviewResult) -> None:
        if result.generation != self.generation or not self.enabled:
            return
        self.statusChanged.emit(_summary(result), False)
        self.finished.emit(result)

    def _on_failed(self, failure: OperationFailure) -> None:
        if failure.request_id == self._started and self.enabled:
            self.statusChanged.emit("", False)
            self.failed.emit(f"Preview: {failure.message}")

    def _on_cancelled(self, cancellation: OperationCancellation) -> None:
        if cancellation.request_id == self._started:
            self._started = None


def _summary(result: PreviewResult) -> str:
    if result.products:
        return "Preview ready."
    if result.truncated:
        shown = result.tiles_run + result.tiles_cached
        return (
            f"Preview shows the centre ({shown} of {result.tiles_needed} tiles); "
            "zoom in to see the rest."
        )
    seconds = result.timings.get("total_s", 0.0)
    cached = f", {result.tiles_cached} kept" if result.tiles_cached else ""
    held = f" · keeps {result.held_bytes / 1e6:.0f} MB for the next pan and the job"
    return f"Preview: {result.tiles_run} tiles in {seconds:.1f} s{cached}{held}."
