"""A request's inputs: grouped (a file, a folder of frames, or one sequence of them all),
loaded (an image, a clip whose frames are decoded as used, or a sequence), and the folder
their products go to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from engine.errors import BadInputError, UsageError
from engine.io.image import DecodedImage, is_video
from engine.io.reading import load_image
from engine.io.sequences import SEQUENCE_PRODUCTS, list_sequence, load_sequence


def input_groups(inputs: Sequence[Path], sequence: bool) -> list[list[Path]]:
    """One group a file or a folder of frames; all of them one group with `sequence`."""
    groups: list[list[Path]] = []
    if sequence:
        frames: list[Path] = []
        for p in inputs:
            frames.extend(list_sequence(p) if p.is_dir() else [p])
        if not frames:
            raise UsageError("The sequence has no image files.")
        return [frames]
    for p in inputs:
        if p.is_dir():
            frames = list_sequence(p)
            groups.append(frames if frames else [p])
        else:
            groups.append([p])
    return groups


def load_input(
    group: list[Path],
    max_pixels: int,
    check: Callable[[], None] | None,
    *,
    skip_broken: bool = False,
) -> DecodedImage:
    """The group's pictures, streamed: `check` is called between frames (cancel)."""
    if len(group) == 1 and is_video(group[0]) and not group[0].is_dir():
        from engine.io.video import load_video  # PyAV: imported when a clip comes

        # a clip: its frames decoded ahead as they are used
        return load_video(group[0], max_pixels, skip_broken=skip_broken)
    clips = [p for p in group if is_video(p)] if len(group) > 1 else []
    if clips:
        raise BadInputError(
            f"{clips[0].name}: a clip cannot be a frame of a sequence; run clips on their "
            "own (without --sequence), each is a sequence of its frames already."
        )
    if len(group) == 1 and not group[0].is_dir():
        return load_image(group[0], max_pixels, check, stream=True)
    return load_sequence(group, max_pixels, check, stream=True)


def output_folder(output_dir: Path | None, source: Path) -> Path:
    """Where the products of `source` go, made if missing: `output_dir`, else beside it.
    A sequence's products go into a `Tessera` folder inside its own folder, never among
    its frames: the next run of that folder must not take them as frames."""
    out = output_dir or (source / SEQUENCE_PRODUCTS if source.is_dir() else source.parent)
    if output_dir is not None and out.exists() and not out.is_dir():
        raise UsageError(f"The output folder {out} is a file; give a folder with --out.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInputError(f"The output folder {out} cannot be created ({e.strerror}).") from e
    return out
