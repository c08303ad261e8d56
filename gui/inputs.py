"""Sorting dropped or opened paths into inputs, models to install, and refusals with a reason.

Every dropped image is its own input. A sequence is a dropped folder, an animated file, or the
person's explicit choice: when several equally sized, numbered stills arrive together, the
drop offers "Process as one sequence" (`Classified.sequence_offer`) — Tessera never guesses,
because a guess changes the results (frames must match in size, numbered products, depth
normalised over all of them). Qt-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from engine.errors import EngineError
from engine.io.image import is_video
from engine.io.reading import image_size
from engine.io.sequences import SEQUENCE_PRODUCTS, list_sequence
from engine.settings import DEFAULT_MAX_PIXELS

MIN_SEQUENCE = 3  # fewer numbered files are never offered as a sequence
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class InputSource:
    """One input of a job: an image file, an animated file, a folder of frames, or a set of
    dropped frames the person chose to process as one sequence."""

    paths: tuple[Path, ...]
    sequence: bool = False
    frames: int = 1
    width: int = 0  # of one frame, from the header; 0 when unknown
    height: int = 0
    seconds: float = 0.0  # a clip's duration, from its header

    # Kept once made (the fields never change): a Run plan over 1000 inputs asks both of
    # every input, on every add part and job ending (issue #21).
    @cached_property
    def clip(self) -> bool:
        """A video file: one input whose frames are read on demand, never all decoded."""
        return len(self.paths) == 1 and is_video(self.paths[0])

    @cached_property
    def key(self) -> str:
        return "\n".join(str(p) for p in self.paths)

    @property
    def name(self) -> str:
        first = self.paths[0]
        if len(self.paths) > 1:
            return f"{first.name} … ({len(self.paths)} frames)"
        return f"{first.name}/" if first.is_dir() else first.name

    @property
    def label(self) -> str:
        """The name with its frame count, as the job list writes it."""
        if self.clip:
            return f"{self.name} ({self.clip_words})"
        if len(self.paths) == 1 and self.frames > 1:
            return f"{self.name} ({self.frames} frames)"
        return self.name

    @property
    def detail(self) -> str:
        """`4000×3000 · 12 frames`."""
        parts = [f"{self.width}×{self.height}"] if self.width and self.height else []
        if self.clip:
            parts.append(self.clip_words)
        elif self.frames > 1:
            parts.append(f"{self.frames} frames")
        return " · ".join(parts)

    @property
    def clip_words(self) -> str:
        """`clip · 12 s · 300 frames`."""
        seconds = f"{self.seconds:.0f} s" if self.seconds >= 10 else f"{self.seconds:.1f} s"
        return f"clip · {seconds} · {self.frames} frame{'s' if self.frames != 1 else ''}"

    @property
    def megapixels(self) -> float:
        """Pixels of every frame, in millions (for estimates); 0 when the size is unknown."""
        return self.width * self.height * max(self.frames, 1) / 1e6


@dataclass(frozen=True)
class Classified:
    sources: tuple[InputSource, ...]
    models: tuple[Path, ...]  # .onnx files to validate and install
    refused: tuple[str, ...]  # one readable reason per refused path
    # equally sized numbered stills among the sources, in frame order: offered as a sequence
    sequence_offer: tuple[Path, ...] = ()


def numbered_sequence(paths: Sequence[Path]) -> list[Path] | None:
    """The paths in frame order when they are one numbered set (frame_001.png, frame_002.png…)."""
    if len(paths) < MIN_SEQUENCE:
        return None
    keyed: list[tuple[int, Path]] = []
    prefix: str | None = None
    suffix: str | None = None
    for p in paths:
        m = _NUMBERED.match(p.stem)
        if m is None:
            return None
        if prefix is None:
            prefix, suffix = m.group(1).casefold(), p.suffix.lower()
        elif m.group(1).casefold() != prefix or p.suffix.lower() != suffix:
            return None
        keyed.append((int(m.group(2)), p))
    if len({p.parent for p in paths}) != 1:
        return None
    return [p for _, p in sorted(keyed)]


def classify_paths(paths: Sequence[Path]) -> Classified:
    """Sources in the order given, one per image; folders and animated files are sequences.
    Tessera's own results never become inputs by the way: a `Tessera` folder dropped with the
    images beside it is left out (a folder of frames leaves out the products in it, and its
    `Tessera` folder, `list_sequence`)."""
    sources: list[InputSource] = []
    models: list[Path] = []
    refused: list[str] = []
    given = [Path(raw) for raw in paths]
    for path in given:
        if path.suffix.lower() == ".onnx" and path.is_file():
            models.append(path)
            continue
        if _products_folder_among(path, given):
            refused.append(
                f"{path.name}/: left out, it holds the results Tessera wrote for these images. "
                "Add it on its own to use them as inputs."
            )
            continue
        if path.is_dir():
            try:
                frames = list_sequence(path)
            except EngineError as e:
                refused.append(str(e))
                continue
            if not frames:
                refused.append(f"{path.name}: the folder holds no image files Tessera can read.")
                continue
            width, height = _size_or_zero(frames[0])
            sources.append(InputSource((path,), True, len(frames), width, height))
            continue
        if is_video(path):
            try:
                sources.append(_clip(path))
            except EngineError as e:  # the engine's reason, at once: no job is queued for it
                refused.append(str(e))
            continue
        try:
            width, height, count = image_size(path)  # reads the header only; says why not
        except EngineError as e:
            refused.append(str(e))
            continue
        sources.append(InputSource((path,), False, count, width, height))
    return Classified(tuple(sources), tuple(models), tuple(refused), sequence_offer(sources))


def _products_folder_among(path: Path, given: Sequence[Path]) -> bool:
    """`path` is the `Tessera` results folder of other paths given with it (a select-all)."""
    if path.name != SEQUENCE_PRODUCTS or len(given) < 2 or not path.is_dir():
        return False
    return any(other != path and other.parent == path.parent for other in given)


def _clip(path: Path) -> InputSource:
    """A clip from its header and first frame (no pass over its packets: a drop stays quick)."""
    from engine.io.video import probe_video  # PyAV loads only when a clip arrives

    meta = probe_video(path, DEFAULT_MAX_PIXELS, count_frames=False)
    width, height = meta.stored_size
    if meta.rotation in (90, 270):
        width, height = height, width
    return InputSource((path,), False, meta.frame_count, width, height, meta.duration_s)


def too_large(source: InputSource, max_pixels: int) -> str:
    """Why the input is over the pixel limit (all its frames together), or empty."""
    frames = max(source.frames, 1)
    total = source.width * source.height * frames
    if total <= max_pixels:
        return ""
    name = source.paths[0].name if len(source.paths) == 1 else source.paths[0].parent.name
    size = f"{source.width}×{source.height} pixels" + (f" × {frames} frames" if frames > 1 else "")
    return (
        f"{name}: {size} ({total / 1e6:,.0f} Mpx) is over the limit of "
        f"{max_pixels / 1e6:,.0f} Mpx. Reduce the image, or raise “Largest image” in "
        "File ▸ Preferences."
    )


def _size_or_zero(path: Path) -> tuple[int, int]:
    try:
        width, height, _ = image_size(path)
    except EngineError:
        return 0, 0
    return width, height


def sequence_offer(sources: Sequence[InputSource]) -> tuple[Path, ...]:
    """The stills in frame order when they are equally sized numbered frames, else ()."""
    stills = [s for s in sources if len(s.paths) == 1 and not s.sequence and s.frames == 1]
    ordered = numbered_sequence([s.paths[0] for s in stills])
    if ordered is None:
        return ()
    if len({(s.width, s.height) for s in stills}) != 1:
        return ()  # a portrait among landscapes: these are photos, not frames
    return tuple(ordered)


def as_sequence(sources: Sequence[InputSource]) -> InputSource:
    """The stills as one sequence source, in frame order (the person asked for it)."""
    ordered = numbered_sequence([s.paths[0] for s in sources]) or [s.paths[0] for s in sources]
    first = sources[0]
    return InputSource(tuple(ordered), True, len(ordered), first.width, first.height)


def count_words(sources: Sequence[InputSource]) -> str:
    """`3 images`, `1 clip`, `2 images and 1 clip`: a clip is counted as a clip. The one way
    the window counts inputs: Run's label, the estimate's line and the status bar's."""
    clips = sum(1 for s in sources if s.clip)
    images = len(sources) - clips
    parts = []
    if images or not clips:
        parts.append(f"{images} image{'s' if images != 1 else ''}")
    if clips:
        parts.append(f"{clips} clip{'s' if clips != 1 else ''}")
    return " and ".join(parts)
