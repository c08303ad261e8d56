"""Preview without widgets: what to preview, when to ask the engine again, what to draw.

With Preview on, the viewer's right side shows the panel's operation and model applied to the
left version (the original, or any result — that is how a chain is tried before it is run).
Every change that alters what the view needs — a pan or zoom (debounced), another input or
left version, another operation, model, device or tile — makes a new generation: the engine
thread replaces the waiting preview and cancels the one running, and only patches of the
newest generation are passed on to be drawn. A change of what is previewed (input, model,
settings) also tells the view to forget what it drew (`resetRequested`); a pan keeps it, since
those pixels are still the product's.

Preview on/off, the region in view and the settings are the workspace's (`gui.workspace`);
this controller is where a preview is asked for and where its answer is turned into what the
viewer draws.

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
from gui.engine_thread import EngineThread
from gui.jobs import is_tiled, viewable_products
from gui.messages import for_window
from gui.tasks import TaskOutcome, TaskThread
from gui.workspace import Workspace

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
    frame: int = 0  # of a clip: the one the viewer shows

    @property
    def tiled(self) -> bool:
        return is_tiled(self.operation)


class PreviewController(QObject):
    patched = Signal(object)  # PreviewPatch of the newest generation: draw it
    resetRequested = Signal()  # what is previewed changed: forget what was drawn
    # Nothing to preview (no model, a sequence): forget what was drawn, dim nothing; why.
    targetCleared = Signal(str)
    statusChanged = Signal(str, bool)  # what the preview is doing; True while it runs
    finished = Signal(object)  # PreviewResult of the newest generation
    failed = Signal(str)
    enabledChanged = Signal(bool)
    pictureLoaded = Signal(object)  # a non-tiled family's whole preview, decoded: DisplayImage

    def __init__(
        self,
        workspace: Workspace,
        engine: EngineThread,
        tasks: TaskThread | None = None,
        loader: Callable[[tuple[Path, ...]], object] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.workspace = workspace
        self.engine = engine
        self.tasks = tasks
        self.loader = loader
        self.generation = 0
        self.target: PreviewTarget | None = None
        self._source: tuple[str, Path] | None = None
        self._sequence = False  # the left version is a sequence: not previewed
        self._started: str | None = None  # the newest generation's request on the engine
        # Passed on since the last reset or release (tests read it; the budget counts it).
        self.drawn: list[PreviewPatch] = []
        self.frame_of: Callable[[], int] = lambda: 0  # the clip frame on screen (the viewer's)
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

    @property
    def enabled(self) -> bool:
        return self.workspace.preview_on

    @property
    def region(self) -> Region | None:
        """The part of the image in view, in the previewed image's pixels."""
        return self.workspace.region

    # -- what changes -------------------------------------------------------------------------
    def set_enabled(self, on: bool) -> None:
        if on == self.enabled:
            return
        self.workspace.set_preview(on)
        self.enabledChanged.emit(on)
        if on:
            self.refresh()
            if self.target is None:  # on with nothing to preview: say why, dim nothing
                self.targetCleared.emit(self._why_not())
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
        self._sequence = input_key is not None and path is None
        if source != self._source:
            self._source = source
            self.workspace.set_region(None)  # the view says what it shows of the new image
            self.refresh()

    def follow_left(self) -> str:
        """The left version's file is what the preview works on (one image file). Returns
        why there is nothing to preview, or an empty string."""
        ws = self.workspace
        key = ws.viewing[0]
        path: Path | None = None
        if key is not None:
            version = ws.version(key, ws.pair(key)[0])
            if version is not None and len(version.paths) == 1 and version.paths[0].is_file():
                path = version.paths[0]
        self.set_source(key, path)
        if self.enabled and key is not None and path is None:
            return "Preview shows single images, not sequences."
        return ""

    def label(self) -> str:
        settings = self.workspace.settings
        return f"Preview · {settings.model_label}" if settings is not None else "Preview"

    def set_region(self, region: Region | None) -> None:
        """The part of the image the view shows (a pan or zoom): asked again after a pause."""
        if region == self.region:
            return
        self.workspace.set_region(region)
        if self.enabled and self.target is not None and self.target.tiled:
            self._timer.start()

    def refresh(self) -> None:
        """The operation, model or settings may have changed: preview again if they did.

        What a preview shows — its pixels, its dimming, its status line — belongs to one
        image, operation and model: any change forgets it, and with nothing to preview (no
        model chosen, a sequence) nothing of the last one stays on screen or in the engine."""
        if not self.enabled:
            return
        target = self._target()
        if target != self.target:
            self.target = target
            self.drawn = []
            self._timer.stop()
            self.statusChanged.emit("", False)  # the last preview's line was about another
            if target is None:
                self.generation += 1  # whatever is still on its way is stale
                self.engine.cancel_previews()
                self.engine.release_previews()
                self.targetCleared.emit(self._why_not())  # the view forgets, dims nothing
            else:
                self.resetRequested.emit()
                self._request()

    def _why_not(self) -> str:
        """Why there is nothing to preview, for the person."""
        if self._source is None:
            return "Preview shows single images, not sequences." if self._sequence else ""
        return "Choose a model (or Get… one) to preview this operation."

    def release_pictures(self) -> None:
        """Let go of the pixels passed on (Unload all, the window's pictures over their cap):
        what is on screen is the viewer's to keep (its preview layer), and a pan asks the
        engine again. Until then `drawn` held every patch at full resolution — 288 MB at fit
        on a 12000×8000 preview."""
        self.drawn = []

    @property
    def waiting(self) -> bool:
        """A pan or zoom not yet asked of the engine (the debounce)."""
        return self._timer.isActive()

    def close(self) -> None:
        """The window closes: nothing more is asked (the engine thread cancels the rest)."""
        self._timer.stop()
        self.workspace.set_preview(False)

    def cancel(self) -> None:
        """The person's ✕: stop the preview in flight; Preview stays on for the next change."""
        self._timer.stop()
        self.generation += 1
        self.engine.cancel_previews()
        self.statusChanged.emit("Preview stopped.", False)

    # -- asking the engine --------------------------------------------------------------------
    def _target(self) -> PreviewTarget | None:
        settings = self.workspace.settings
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
            settings.job_tile,
            self.frame_of(),
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
        request = PreviewRequest(
            job, self.region if target.tiled else None, self.generation, frame=target.frame
        )
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
        self._load_picture(result)

    def _load_picture(self, result: PreviewResult) -> None:
        """A non-tiled family's preview is a file: decode its picture off the GUI thread."""
        shown = viewable_products(result.products)
        if not shown or self.tasks is None or self.loader is None:
            return
        generation, path, loader = result.generation, shown[0].path, self.loader

        def loaded(outcome: TaskOutcome) -> None:
            if generation == self.generation and self.enabled and outcome.error is None:
                self.pictureLoaded.emit(outcome.value)

        self.tasks.submit(lambda: loader((path,)), loaded, urgent=True)

    def _on_failed(self, failure: OperationFailure) -> None:
        if failure.request_id == self._started and self.enabled:
            self.statusChanged.emit("", False)
            self.failed.emit(f"Preview: {for_window(failure.message)}")

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
