"""How fast each model runs here, for the estimate before a job ("about 4 min on this CPU").

The speed of a (model, device) pair is learnt from finished jobs — never from previews, nor from
a job whose tiles a preview had made — and remembered in the data folder (`speed_store`). Upscalers' work grows with
the pixels, so their speed is a rate per megapixel of input with a fixed cost per image kept
apart (decoding, padding, the smallest run, writing), fitted to the last few jobs (medians, so
one odd job does not decide): tiny inputs (under TINY_MP) teach only the fixed cost, and the
fixed cost never takes more than most of a real job's time, so a 1×1 image cannot poison the
rate. A batch's figure is one sum, fixed cost × images + rate × their megapixels, worked out
once per batch (`rate`), not once per job. Until a tiny job of the model ran, its fixed cost is
the device's (other models' tiny jobs), else DEFAULT_FIXED_S: one real job alone would call
small images free. The model's start (loading, the engine's first preparations) is learnt
apart (`learn_load`), for a batch whose model is not in memory. How long the products take to write is learnt
apart too, per megapixel of input, so a job's time left counts its writing. The families that
run the model at its own resolution have a time per image.

Nothing is run to measure a model (issue #22: the idle window holds nothing). Loading Photo ×4
at start to time two tiny images cost seconds of CPU and, on a GPU, a CUDA context and VRAM
kept for the life of the process — beside a game, for an estimate. Until a model's first job,
its figure is guessed from its size: the seconds per megapixel per weight byte that the
models already run on this device showed (convolutional models' work per pixel grows with
their weights), marked as a first rough figure. A device where nothing has run yet gets no
figure: "The first job measures how fast … runs".

`Calibrator` keeps the interface the window wires (signals, `needed`, `calibrate`, `stop`) but
runs nothing; the window's refactor can drop it.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.models.catalog import load_catalog
from engine.requests import Operation
from gui.controllers.speed_store import SpeedStore
from gui.engine_thread import EngineThread
from gui.settings import AppSettings

log = logging.getLogger(__name__)

TINY_MP = 0.05  # inputs under ~250×200 px are all fixed cost: they teach no rate
LEARN_WEIGHT = 0.5  # how much a new job moves the remembered time per image (other families)
MIN_MARGINAL = 0.2  # the rate keeps at least this share of a job's time (a fixed cost too high)
HISTORY = 9  # the jobs of each kind (tiny, real) the rate and the fixed cost are fitted to
# A job's own cost whatever its size (reading, writing, the engine's turn between jobs), until
# a tiny job of some model on the device measured it: 20-30 ms on an idle 2-core machine, 40-80
# ms on a busy one. Without
# it one real job taught only a rate, and 1000 small images were "about 20 s" for 80 s.
DEFAULT_FIXED_S = 0.03
SIZE_CACHE_S = 30.0  # a model file's size is read again after this long

ModelBytes = Callable[[str], int | None]


@dataclass(frozen=True)
class Speed:
    per_mp: float  # seconds per megapixel of input, the fixed cost apart (0: not known yet)
    fixed: float  # seconds per image whatever its size
    per_image: float  # seconds per image (frame): families at the model's own resolution
    samples: int  # finished jobs that taught the rate (or the time per image)
    weight_bytes: int = 0  # the model's size, so other models' first figures can scale by it
    write_per_mp: float = 0.0  # seconds of reading and writing files per megapixel of input

    def encode(self) -> str:
        return (
            f"3;{self.per_mp:.6g};{self.fixed:.6g};{self.per_image:.6g};{self.samples};"
            f"{self.weight_bytes};{self.write_per_mp:.6g}"
        )

    @staticmethod
    def decode(text: str) -> Speed | None:
        parts = text.split(";")
        try:
            if len(parts) == 7 and parts[0] == "3":
                return Speed(
                    float(parts[1]),
                    float(parts[2]),
                    float(parts[3]),
                    int(parts[4]),
                    int(parts[5]),
                    float(parts[6]),
                )
            if len(parts) == 6 and parts[0] == "2":
                return Speed(
                    float(parts[1]), float(parts[2]), float(parts[3]), int(parts[4]), int(parts[5])
                )
            if len(parts) == 3:  # before the fixed cost was kept apart
                per_mp, per_image, samples = float(parts[0]), float(parts[1]), int(parts[2])
                if samples == 0:
                    return None  # a 64-px calibration run's guess: forget it
                return Speed(per_mp, 0.0, per_image, samples)
        except ValueError:
            return None
        return None


@dataclass(frozen=True)
class Estimate:
    seconds: float
    rough: bool  # guessed from the model's size, not from a finished job of this model


@dataclass(frozen=True)
class Rate:
    """A model's speed on a device as one batch's figures are worked out from it."""

    fixed: float  # seconds per image (frame)
    per_mp: float  # seconds per megapixel of input (0: the family's time is per image)
    rough: bool
    write_per_mp: float = 0.0

    def seconds(self, megapixels: float, frames: int) -> float:
        return self.fixed * max(frames, 1) + self.per_mp * max(megapixels, 0.0)

    def estimate(self, megapixels: float, frames: int) -> Estimate:
        return Estimate(self.seconds(megapixels, frames), self.rough)

    def writing(self, megapixels: float) -> float | None:
        """Seconds the products of `megapixels` of input take to write, when known."""
        return self.write_per_mp * megapixels if self.write_per_mp > 0 else None


def _scales_with_pixels(operation: Operation) -> bool:
    # A tiled operation runs the model over every input pixel; the others resize the input
    # to the model's own size, so their time hardly depends on it.
    return operation.tiled


def _warm(history: list[tuple[float, float, bool]]) -> list[tuple[float, float]]:
    """The samples to fit: a cold job (its session's first) only while no warm job of its
    kind (tiny, or real) says better."""
    warm_tiny = any(not cold and mp < TINY_MP for mp, _, cold in history)
    warm_real = any(not cold and mp >= TINY_MP for mp, _, cold in history)
    return [
        (mp, s)
        for mp, s, cold in history
        if not cold or not (warm_tiny if mp < TINY_MP else warm_real)
    ]


def _kept(history: list[tuple[float, float, bool]]) -> list[tuple[float, float, bool]]:
    """The last HISTORY tiny jobs and the last HISTORY real ones, in their order: a batch of
    300 tiny images must not push out what the real jobs taught of the rate (the next large
    image was "The first job measures…" again)."""
    tiny = [i for i, (mp, _, _) in enumerate(history) if mp < TINY_MP][-HISTORY:]
    real = [i for i, (mp, _, _) in enumerate(history) if mp >= TINY_MP][-HISTORY:]
    return [history[i] for i in sorted(tiny + real)]


def fit(samples: list[tuple[float, float]], prior: float = 0.0) -> tuple[float, float]:
    """(fixed seconds per image, seconds per megapixel) from (megapixels, seconds) per image.

    Tiny images are all fixed cost: their median is it (without one, `prior`: the device's
    per-job cost as other models' tiny jobs showed it). Real ones give the rate, each its own
    (seconds − fixed) / megapixels, and the median of those; when their sizes differ enough and
    no tiny image measured the fixed cost, a straight line through them gives it. Either way
    the fixed cost stays under (1 − MIN_MARGINAL) of the quickest real image, so a slow tiny
    job (a first run's allocations) cannot make every image of a batch cost seconds."""
    tiny = [s for m, s in samples if m < TINY_MP]
    real = [(m, s) for m, s in samples if m >= TINY_MP]
    fixed = statistics.median(tiny) if tiny else prior
    if not real:
        return fixed, 0.0
    sizes = [m for m, _ in real]
    if not tiny and len(real) >= 3 and max(sizes) >= 2 * min(sizes):
        mean_m = statistics.fmean(sizes)
        mean_s = statistics.fmean(s for _, s in real)
        spread = sum((m - mean_m) ** 2 for m in sizes)
        slope = sum((m - mean_m) * (s - mean_s) for m, s in real) / spread
        if slope > 0:
            fixed = max(mean_s - slope * mean_m, 0.0)
    fixed = min(fixed, (1 - MIN_MARGINAL) * min(s for _, s in real))
    return fixed, statistics.median((s - fixed) / m for m, s in real)


def model_file_bytes(model: str, models_dir: Path) -> int | None:
    """The size of a model's file: a catalog id's installed file (else the catalog's figure),
    or the file a path names; None when neither is known."""
    entry = load_catalog().get(model)
    path = models_dir / entry.file if entry is not None else Path(model).expanduser()
    try:
        return path.stat().st_size
    except OSError:
        pass
    if entry is not None:
        return entry.size or entry.approx_size
    return None


class SpeedBook:
    """The remembered speeds (GUI thread only)."""

    def __init__(
        self,
        settings: AppSettings,
        model_bytes: ModelBytes | None = None,
        store: SpeedStore | None = None,
    ) -> None:
        self.settings = settings
        self.store = store or SpeedStore(None, settings)
        self.model_bytes = model_bytes  # None: sizes unknown, so no first figure from size
        self._sizes: dict[str, tuple[float, int]] = {}  # model → (when read, its size)

    @staticmethod
    def key(model: str, device: str) -> str:
        return f"{device}\t{model}"

    def get(self, model: str, device: str) -> Speed | None:
        text = self.store.get(self.key(model, device))
        return Speed.decode(text) if text else None

    def _put(self, model: str, device: str, speed: Speed) -> Speed:
        self.store.set(self.key(model, device), speed.encode())
        self._remember_model(model, device)
        return speed

    def _history(self, model: str, device: str) -> list[tuple[float, float, bool]]:
        """The last jobs' (megapixels, seconds) per image, and whether the job was its
        session's first (cold), oldest first."""
        found = []
        for entry in self.store.get("jobs\t" + self.key(model, device)).split(";"):
            parts = entry.split(":")
            try:
                found.append((float(parts[0]), float(parts[1]), parts[2:] == ["c"]))
            except (ValueError, IndexError):
                continue
        return found

    def _put_history(
        self, model: str, device: str, history: list[tuple[float, float, bool]]
    ) -> None:
        text = ";".join(f"{mp:.6g}:{s:.6g}" + (":c" if cold else "") for mp, s, cold in history)
        self.store.set("jobs\t" + self.key(model, device), text)

    def learn(
        self,
        operation: Operation,
        model: str,
        device: str,
        seconds: float,
        megapixels: float,
        frames: int,
        io_seconds: float = 0.0,
        cold: bool = False,
    ) -> Speed | None:
        """Learn from one finished job: `seconds` of work (model loading excluded) over
        `megapixels` of input in `frames` images (frames of a sequence), `io_seconds` of them
        reading and writing files; `cold`: its session was made for it, so its first run
        carried the session's first allocations (counted until a warm job of its kind ran)."""
        if seconds <= 0 or (megapixels <= 0 and frames <= 0):
            return None
        frames = max(frames, 1)
        old = self.get(model, device)
        weight = self._bytes(model)
        w = LEARN_WEIGHT
        if not _scales_with_pixels(operation):
            per_image = seconds / frames
            if old is None or old.samples == 0:
                return self._put(model, device, Speed(0.0, 0.0, per_image, 1, weight))
            mixed = (1 - w) * old.per_image + w * per_image
            return self._put(
                model, device, Speed(0.0, 0.0, mixed, old.samples + 1, weight or old.weight_bytes)
            )
        history = self._history(model, device)
        if not history and old is not None and old.samples > 0:
            history = [(1.0, old.fixed + old.per_mp, False)]  # kept before the history was
        history = _kept([*history, (megapixels / frames, seconds / frames, cold)])
        self._put_history(model, device, history)
        fixed, per_mp = fit(_warm(history), self.fixed_prior(model, device))
        base = old or Speed(0.0, 0.0, 0.0, 0, weight)
        tiny = megapixels < TINY_MP * frames
        write = base.write_per_mp
        if not tiny and io_seconds > 0:
            fresh = io_seconds / megapixels
            write = fresh if write <= 0 else (1 - w) * write + w * fresh
        per_image = base.per_image if tiny else seconds / frames
        return self._put(
            model,
            device,
            Speed(
                per_mp,
                fixed,
                per_image,
                base.samples + (0 if tiny else 1),
                weight or base.weight_bytes,
                write,
            ),
        )

    def fixed_prior(self, model: str, device: str) -> float:
        """A job's cost whatever its size on `device` before `model` ran a tiny one: the
        median of what the other models' tiny jobs there showed, else DEFAULT_FIXED_S."""
        known = [
            speed.fixed
            for other in self._models(device)
            if other != model
            and (speed := self.get(other, device)) is not None
            and speed.fixed > 0
            and any(mp < TINY_MP for mp, _, _ in self._history(other, device))
        ]
        return statistics.median(known) if known else DEFAULT_FIXED_S

    def learn_load(self, model: str, device: str, seconds: float) -> None:
        """A job loaded the model (its session was made for it) and made its first run
        `seconds` after it began: what a batch waits for before its first image when the
        model is not in memory (after a restart or Unload all)."""
        if seconds <= 0:
            return
        old = self.load_seconds(model, device)
        mixed = seconds if old <= 0 else (1 - LEARN_WEIGHT) * old + LEARN_WEIGHT * seconds
        self.store.set("load\t" + self.key(model, device), f"{mixed:.6g}")

    def load_seconds(self, model: str, device: str) -> float:
        """The model's loading and first preparations on `device` as jobs measured them
        (0: not known)."""
        try:
            return float(self.store.get("load\t" + self.key(model, device)) or 0.0)
        except ValueError:
            return 0.0

    def rate(self, operation: Operation, model: str, device: str) -> Rate | None:
        """The figures a batch's estimate is made of, read once for the whole batch."""
        pixels = _scales_with_pixels(operation)
        speed = self.get(model, device)
        if speed is not None and speed.samples > 0:
            if pixels:
                return Rate(speed.fixed, speed.per_mp, False, speed.write_per_mp)
            return Rate(speed.per_image, 0.0, False)
        guess = self._guess(operation, model, device)
        if guess is None:
            if pixels and speed is not None and speed.fixed > 0:
                return Rate(speed.fixed, 0.0, False)  # only tiny ones so far: no rate yet
            return None
        if pixels:
            fixed = speed.fixed if speed is not None and speed.fixed > 0 else guess.fixed
            return Rate(fixed, guess.per_mp, True)
        return Rate(guess.per_image, 0.0, True)

    def estimate(
        self, operation: Operation, model: str, device: str, megapixels: float, frames: int
    ) -> Estimate | None:
        """The time of a batch of `frames` images over `megapixels` in all: one figure."""
        pixels = _scales_with_pixels(operation)
        if pixels and megapixels <= 0:
            return None
        rate = self.rate(operation, model, device)
        if rate is None:
            return None
        if pixels and rate.per_mp <= 0 and megapixels >= TINY_MP * max(frames, 1):
            return None  # the fixed cost alone says nothing of a real image's time
        return rate.estimate(megapixels, frames)

    def _guess(self, operation: Operation, model: str, device: str) -> Speed | None:
        """A first figure for a model never run on `device`: its size times the time per
        weight byte of the models already run there (the median, so one odd model does not
        decide), and their median fixed cost."""
        weight = self._bytes(model)
        if not weight:
            return None
        pixels = _scales_with_pixels(operation)
        rates: list[float] = []
        fixed: list[float] = []
        for other in self._models(device):
            if other == model:
                continue
            known = self.get(other, device)
            if known is None or known.samples == 0 or known.weight_bytes <= 0:
                continue
            figure = known.per_mp if pixels else known.per_image
            if figure <= 0 or (known.per_mp > 0) != pixels:
                continue  # another family's kind of figure
            rates.append(figure / known.weight_bytes)
            fixed.append(known.fixed)
        if not rates:
            return None
        rate = statistics.median(rates) * weight
        return Speed(
            rate if pixels else 0.0, statistics.median(fixed), 0.0 if pixels else rate, 0, weight
        )

    def _bytes(self, model: str) -> int:
        """The model file's size, read at most every SIZE_CACHE_S (the catalog and the file
        are not read again for each of a thousand jobs)."""
        if self.model_bytes is None:
            return 0
        now = time.monotonic()
        cached = self._sizes.get(model)
        if cached is not None and now - cached[0] < SIZE_CACHE_S:
            return cached[1]
        try:
            size = int(self.model_bytes(model) or 0)
        except OSError:
            size = 0
        self._sizes[model] = (now, size)
        return size

    # The models with a remembered speed on each device, so a guess can look at them.
    def _models(self, device: str) -> list[str]:
        return [m for m in self.store.get(f"index\t{device}").split("\n") if m]

    def _remember_model(self, model: str, device: str) -> None:
        models = self._models(device)
        if model not in models:
            models.append(model)
            self.store.set(f"index\t{device}", "\n".join(models))


class Calibrator(QObject):
    """Formerly ran a tiny image through each new model to time it; now runs nothing (the idle
    window holds no model, and nothing is loaded that the person did not ask for). Its only
    work: tell the speed book how big each model's file is, for first figures from size."""

    calibrated = Signal(str, str)  # model, device: a speed is known now (never emitted)
    busyChanged = Signal(bool)

    def __init__(self, engine: EngineThread, book: SpeedBook, parent: QObject | None = None):
        super().__init__(parent)
        self.engine = engine
        self.book = book
        self.enabled = True
        if book.model_bytes is None:
            book.model_bytes = lambda model: model_file_bytes(
                model, engine.settings.resolved_models_dir()
            )

    @property
    def busy(self) -> bool:
        return False

    def owns(self, request_id: str) -> bool:
        return False

    def needed(self, model: str, device: str) -> bool:
        return False

    def calibrate(
        self, operation: Operation, model: str, device: str, runtime: str, engine_idle: bool
    ) -> bool:
        """Nothing to run: the first job of a model is its measurement."""
        return False

    def stop(self) -> None:
        pass
