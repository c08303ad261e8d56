"""How fast the jobs run: the estimates the window shows, and what each finished job teaches.

`JobSpeed` turns a model's measured speed (`gui.controllers.speed.SpeedBook`) into the line
above Run and each job's expected time, measures a model never run on a device (the
calibration run) and learns from every finished job. The jobs controller owns one and hands
it its jobs' endings; it never queues anything itself.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject

from engine.models.catalog import load_catalog
from engine.requests import Operation
from engine.runtime.sessions import SessionInfo
from gui.controllers.speed import (
    MIN_MARGINAL,
    TINY_MP,
    Calibrator,
    Estimate,
    Rate,
    SpeedBook,
)
from gui.engine_thread import EngineThread
from gui.inputs import InputSource, count_words
from gui.jobs import Job, JobSettings, fmt_duration, fmt_estimate
from gui.workspace import Workspace

log = logging.getLogger(__name__)

BACK_TO_BACK_S = 0.25  # a job that started this soon after the last ended ran after it


class JobSpeed:
    """Estimates from the speed book, and the speed book taught by finished jobs."""

    def __init__(
        self, workspace: Workspace, engine: EngineThread, speeds: SpeedBook, parent: QObject
    ) -> None:
        self.workspace = workspace
        self.speeds = speeds
        self.calibrator = Calibrator(engine, speeds, parent)
        self.calibrator.calibrated.connect(self._on_calibrated)
        self._ends: deque[float] = deque(maxlen=9)  # the last back-to-back jobs' end times
        # (model file name, device) of the sessions loaded now: a batch of a model not in
        # memory waits for its loading first (after a restart, or Unload all).
        self._loaded: set[tuple[str, str]] = set()
        engine.sessionsChanged.connect(self._on_sessions)

    def _on_sessions(self, sessions: tuple[SessionInfo, ...]) -> None:
        self._loaded = {(info.model_name, info.device) for info in sessions}

    def loaded(self, model: str, device: str) -> bool:
        """Whether `model` (a catalog id or a file) is in memory on `device` now."""
        entry = load_catalog().get(model)
        name = entry.file if entry is not None else Path(model).name
        return (name, device) in self._loaded

    def rate(self, settings: JobSettings) -> Rate | None:
        return self.speeds.rate(settings.operation, settings.model, settings.device)

    def estimate(self, sources: Sequence[InputSource], settings: JobSettings) -> Estimate | None:
        """One figure for the whole batch: the model's loading when it is not in memory, then
        fixed cost × images (frames) + rate × megapixels."""
        megapixels = sum(s.megapixels for s in sources)
        frames = sum(max(s.frames, 1) for s in sources)
        model, device = settings.model, settings.device
        guess = self.speeds.estimate(settings.operation, model, device, megapixels, frames)
        if guess is None or self.loaded(model, device):
            return guess
        return replace(guess, seconds=guess.seconds + self.speeds.load_seconds(model, device))

    def estimate_text(
        self, sources: Sequence[InputSource], settings: JobSettings, where: str, idle: bool
    ) -> str:
        """The line above Run: "About 4 min on this CPU for 3 images." A model never measured
        on this device is measured now when the engine is idle (the calibration run)."""
        calibrator = self.calibrator
        if calibrator.needed(settings.model, settings.device):
            calibrator.calibrate(
                settings.operation, settings.model, settings.device, settings.runtime, idle
            )
        if not sources:
            return ""
        guess = self.estimate(sources, settings)
        what = count_words(sources)  # "1 image and 1 clip": a clip counted as a clip
        if len(sources) == 1 and sources[0].clip:  # frames × the per-frame figure
            what = f"the clip's {sources[0].frames} frames"
        if guess is not None:
            rough = " (a first rough figure)" if guess.rough else ""
            return f"{fmt_estimate(guess.seconds).capitalize()} on {where} for {what}{rough}."
        if calibrator.busy:
            return f"Measuring how fast {settings.model_label} runs on {where}…"
        return f"The first job measures how fast {settings.model_label} runs on {where}."

    def expect(
        self, operation: Operation, megapixels: float, frames: int, rate: Rate | None
    ) -> tuple[float | None, float | None]:
        """A new job's time and its products' writing time, from the model's measured speed
        (None where unknown). The job is made with them; a job already in the workspace gets
        its figure through the workspace (`job_estimated`), the one writer of its fields."""
        if rate is None:
            return None, None
        if operation is Operation.UPSCALE and megapixels <= 0:
            return None, None  # the size is unknown
        return rate.seconds(megapixels, frames), rate.writing(megapixels)

    def expect_added(self, job_id: str) -> None:
        """A job asked for from outside the window (a command line's) gets the estimate the
        window's own would: its row says how long it will take while it waits."""
        job = self.workspace.jobs.get(job_id)
        if job is None or not job.origin or job.expected_s is not None:
            return
        request = job.request
        rate = self.speeds.rate(request.operation, request.model, request.device)
        seconds, write_s = self.expect(request.operation, job.megapixels, job.frames, rate)
        if seconds is not None:
            self.workspace.job_estimated(job.id, seconds, write_s)

    def _on_calibrated(self, model: str, device: str) -> None:
        """A speed is known now: jobs queued before it get their estimate."""
        for job in list(self.workspace.jobs.values()):
            request = job.request
            if job.expected_s is not None or not job.state.active:
                continue
            if (request.model, request.device) != (model, device):
                continue
            guess = self.speeds.estimate(
                request.operation, model, device, job.megapixels, job.frames
            )
            if guess is not None:
                self.workspace.job_estimated(job.id, guess.seconds)

    def ended(self, job: Job) -> None:
        """Keep the end times of the jobs that ran back to back (each started as the one
        before it ended), so a job's cost includes the engine's work between jobs."""
        if job.started_at is None or job.ended_at is None:
            return
        ends = self._ends
        if not ends or job.started_at - ends[-1] > BACK_TO_BACK_S:
            ends.clear()
        ends.append(job.ended_at)

    def _engine_seconds(self, job: Job, seconds: float) -> float:
        """What the job cost the engine: its own time, or in a run of back-to-back jobs the
        time since the one before it ended (for tiny ones, whose endings arrive in bursts,
        the mean over the last few), whichever is more."""
        ends = self._ends
        if len(ends) < 2 or ends[-1] != job.ended_at:
            # Alone, it also cost the engine's turn to it (queued to started), which the
            # interval between back-to-back jobs counts: a tiny job's own time was a third
            # of what each of the next six took.
            if job.started_at is None:
                return seconds
            return seconds + min(max(job.started_at - job.queued_at, 0.0), BACK_TO_BACK_S)
        load = float(job.result.timings.get("load_s", 0.0)) if job.result else 0.0
        if job.megapixels < TINY_MP * max(job.frames, 1):
            interval = (ends[-1] - ends[0]) / (len(ends) - 1)
        else:
            interval = ends[-1] - ends[-2]
        return max(seconds, interval - load)

    def learn(self, job: Job) -> None:
        seconds = job.working_seconds()
        result = job.result
        if seconds is None or result is None:
            return
        seconds = self._engine_seconds(job, seconds)
        if result.sessions_created:
            # Loading and what the engine prepared before the first run are the session's
            # cost, paid once per batch when the model is not in memory (`estimate`), not
            # each image's: a first tiny job otherwise taught 3× what the next ones took.
            timings = result.timings
            load = float(timings.get("load_s", 0.0))
            start = max(float(timings.get("first_run_s", load)), load)
            self.speeds.learn_load(job.request.model, job.request.device, start)
            seconds = max(seconds - (start - load), MIN_MARGINAL * seconds)
        frames = sum(p.frames for p in result.products[:1]) or 1
        if result.runs_reused:
            return  # a preview had made some of its tiles: its time says nothing of the rate
        cold = bool(result.sessions_created)
        if cold and job.first_run is not None and job.ended_at is not None:
            # A fresh session's first run costs many runs' time (ORT's first allocations): the
            # job's pace after it is what the next jobs will see.
            at, fraction = job.first_run
            if 0 < fraction < 1:
                seconds = min(seconds, (job.ended_at - at) / (1 - fraction))
                cold = False
        self.speeds.learn(
            job.request.operation,
            job.request.model,
            job.request.device,
            seconds,
            job.megapixels,
            frames,
            float(result.timings.get("io_s", 0.0)),
            cold,
        )
        log.info("%s took %s", job.title, fmt_duration(seconds))
