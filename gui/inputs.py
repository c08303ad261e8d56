"""Sorting dropped or opened paths into job inputs, models to install, and refusals with a reason."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError
from engine.io.reading import image_size
from engine.io.sequences import list_sequence
from gui.widgets.inputs_panel import InputSource

MIN_SEQUENCE = 3  # fewer numbered files are just files
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class Classified:
    sources: tuple[InputSource, ...]
    models: tuple[Path, ...]  # .onnx files to validate and install
    refused: tuple[str, ...]  # one readable reason per refused path


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
    """Sources in the order given; a numbered set of stills becomes one sequence source."""
    entries: list[InputSource | Path] = []  # a Path is a still image, decided at the end
    models: list[Path] = []
    refused: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.suffix.lower() == ".onnx" and path.is_file():
            models.append(path)
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
            entries.append(InputSource((path,), sequence=True, frames=len(frames)))
            continue
        try:
            count = image_size(path)[2]  # reads the header only; the error says why not
        except EngineError as e:
            refused.append(str(e))
            continue
        entries.append(InputSource((path,), frames=count) if count > 1 else path)
    stills = [e for e in entries if isinstance(e, Path)]
    sequence = numbered_sequence(stills)
    sources: list[InputSource] = []
    for entry in entries:
        if not isinstance(entry, Path):
            sources.append(entry)
        elif sequence is None:
            sources.append(InputSource((entry,)))
        elif entry == stills[0]:
            sources.append(InputSource(tuple(sequence), sequence=True, frames=len(sequence)))
    return Classified(tuple(sources), tuple(models), tuple(refused))
