"""How fast each model runs here, for the estimate before a job ("about 4 min on this CPU").

The speed of a (model, device) pair is learnt from finished jobs and remembered in QSettings:
seconds per megapixel of input for upscalers (their work grows with the pixels), seconds per
image for the families that run the model at its own resolution. A model never run on this
device gets a rough first figure from a calibration run: two tiny images in one request through
the engine thread, as soon as the model is chosen and the engine is idle. The first image pays
for the session's first run (its allocations); the time from the first image's end to the
second's is the figure. The run also loads the model, so the first real job starts without the
load wait.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtCore import QObject, Signal

from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
    Result,
)
from gui.engine_thread import EngineThread
from gui.settings import AppSettings

log = logging.getLogger(__name__)

CALIBRATION_EDGE = 64  # pixels: a few seconds even for Real-ESRGAN x4plus on a laptop CPU
# Real jobs run overlapping tiles (32 px of context on each side of 128–512-px tiles: 1.3–2.3×
# the pixels); a 64-px calibration image is one tile with none.
TILE_OVERHEAD = 1.6
LEARN_WEIGHT = 0.5  # how much a new job moves the remembered speed


@dataclass(frozen=True)
class Speed:
    per_mp: float  # seconds per megapixel of input
    per_image: float  # seconds per image (frame)
    samples: int  # finished jobs it was learnt from; 0: a calibration run only

    def encode(self) -> str:
        return f"{self.per_mp:.6g};{self.per_image:.6g};{self.samples}"

    @staticmethod
    def decode(text: str) -> Speed | None:
        try:
            per_mp, per_image, samples = text.split(";")
            return Speed(float(per_mp), float(per_image), int(samples))
        except ValueError:
            return None


@dataclass(frozen=True)
class Estimate:
    seconds: float
    rough: bool  # from a calibration run, not a finished job


def _scales_with_pixels(operation: Operation) -> bool:
    return operation is Operation.UPSCALE


class SpeedBook:
    """The remembered speeds (GUI thread only)."""

    def __init__(self, settings: AppSettings) -> None:
        self.settings = settings

    @staticmethod
    def key(model: str, device: str) -> str:
        return f"{device}\t{model}"

    def get(self, model: str, device: str) -> Speed | None:
        text = self.settings.speed_for(self.key(model, device))
        return Speed.decode(text) if text else None

    def learn(
        self,
        operation: Operation,
        model: str,
        device: str,
        seconds: float,
        megapixels: float,
        frames: int,
        *,
        calibration: bool = False,
    ) -> Speed | None:
        if seconds <= 0 or (megapixels <= 0 and frames <= 0):
            return None
        per_mp = seconds / megapixels if megapixels > 0 else 0.0
        per_image = seconds / max(frames, 1)
        if calibration and _scales_with_pixels(operation):
            per_mp *= TILE_OVERHEAD
        old = self.get(model, device)
        if calibration:
            if old is not None and old.samples > 0:
                return old  # a finished job knows better than a 64-px run
            speed = Speed(per_mp, per_image, 0)
        elif old is None or old.samples == 0:
            speed = Speed(per_mp, per_image, 1)
        else:
            w = LEARN_WEIGHT
            speed = Speed(
                (1 - w) * old.per_mp + w * per_mp,
                (1 - w) * old.per_image + w * per_image,
                old.samples + 1,
            )
        self.settings.set_speed_for(self.key(model, device), speed.encode())
        return speed

    def estimate(
        self, operation: Operation, model: str, device: str, megapixels: float, frames: int
    ) -> Estimate | None:
        speed = self.get(model, device)
        if speed is None:
            return None
        if _scales_with_pixels(operation):
            if megapixels <= 0:
                return None
            seconds = speed.per_mp * megapixels
        else:
            seconds = speed.per_image * max(frames, 1)
        return Estimate(seconds, speed.samples == 0)


class Calibrator(QObject):
    """Runs the calibration image through the engine thread, one model at a time."""

    calibrated = Signal(str, str)  # model, device: a speed is known now
    busyChanged = Signal(bool)

    def __init__(self, engine: EngineThread, book: SpeedBook, parent: QObject | None = None):
        super().__init__(parent)
        self.engine = engine
        self.book = book
        self.enabled = True
        self._running: dict[str, tuple[OperationRequest, Path]] = {}
        self._tried: set[tuple[str, str]] = set()
        self._marks: dict[str, list[float]] = {}  # request id → when each image was done
        engine.progressChanged.connect(self._on_progress)
        engine.operationFinished.connect(self._on_finished)
        engine.operationFailed.connect(self._on_ended)
        engine.operationCancelled.connect(self._on_ended)

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def owns(self, request_id: str) -> bool:
        return request_id in self._running

    def needed(self, model: str, device: str) -> bool:
        return self.book.get(model, device) is None and (model, device) not in self._tried

    def calibrate(
        self, operation: Operation, model: str, device: str, runtime: str, engine_idle: bool
    ) -> bool:
        """Queue the calibration run if the speed is unknown and nothing else waits for the
        engine (a real job teaches the speed better, and must not wait behind this)."""
        if not self.enabled or not engine_idle or self._running:
            return False
        if not self.needed(model, device) or not self.engine.is_running():
            return False
        self._tried.add((model, device))
        folder = Path(tempfile.mkdtemp(prefix="tessera-speed-"))
        images = []
        for index in range(2):
            image = folder / f"calibration-{index}.png"
            rng = np.random.default_rng(7 + index)
            pixels = rng.integers(0, 256, (CALIBRATION_EDGE, CALIBRATION_EDGE, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(image)
            images.append(image)
        request = OperationRequest(
            operation,
            model,
            tuple(images),
            device=device,
            runtime=runtime,
            output_dir=folder / "out",
        )
        self._marks[request.id] = []
        self._running[request.id] = (request, folder)
        self.engine.submit(request)
        self.busyChanged.emit(True)
        log.info("measuring the speed of %s on %s", model, device)
        return True

    def _on_progress(self, event: Progress) -> None:
        marks = self._marks.get(event.request_id)
        if marks is not None and event.kind is ProgressKind.INPUT_FINISHED:
            marks.append(time.monotonic())

    def _forget(self, request_id: str) -> OperationRequest | None:
        entry = self._running.pop(request_id, None)
        if entry is None:
            return None
        request, folder = entry
        shutil.rmtree(folder, ignore_errors=True)
        self.busyChanged.emit(False)
        return request

    def _on_finished(self, result: Result) -> None:
        marks = self._marks.pop(result.request_id, [])
        request = self._forget(result.request_id)
        if request is None or not result.ok:
            return
        if len(marks) >= 2:
            seconds = marks[1] - marks[0]  # the second image: a warm session
        else:
            timings = result.timings
            seconds = float(timings.get("total_s", 0.0)) - float(timings.get("load_s", 0.0))
            seconds = (seconds - float(timings.get("io_s", 0.0))) / 2
        megapixels = CALIBRATION_EDGE * CALIBRATION_EDGE / 1e6
        if self.book.learn(
            request.operation,
            request.model,
            request.device,
            max(seconds, 1e-3),
            megapixels,
            1,
            calibration=True,
        ):
            self.calibrated.emit(request.model, request.device)

    def _on_ended(self, payload: OperationFailure | OperationCancellation) -> None:
        self._marks.pop(payload.request_id, None)
        self._forget(payload.request_id)

    def stop(self) -> None:
        for request_id in list(self._running):
            self.engine.cancel(request_id)
            self._forget(request_id)
