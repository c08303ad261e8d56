"""Sequences: the image files of a folder in natural order, and several files as one sequence."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from engine.errors import BadInputError
from engine.io.image import IMAGE_SUFFIXES, DecodedImage, ImageMeta
from engine.io.reading import fmt_pixels, image_size, load_image, read_only, unify_frames


def load_sequence(
    paths: Sequence[Path], max_pixels: int, check: Callable[[], None] | None = None
) -> DecodedImage:
    """The frames of several files as one sequence; all must have the same size. `check` is
    called between files and frames and may raise to stop (a cancel)."""
    files = [Path(p) for p in paths]
    if not files:
        raise BadInputError("The sequence has no frames: no image files were given.")
    sizes = [image_size(p) for p in files]
    first_w, first_h, _ = sizes[0]
    for p, (w, h, _) in zip(files, sizes, strict=True):
        if (w, h) != (first_w, first_h):
            raise BadInputError(
                f"{p.name}: this frame is {w}×{h} pixels but {files[0].name} is "
                f"{first_w}×{first_h}; all frames of a sequence must have the same size."
            )
    total = sum(w * h * n for w, h, n in sizes)
    if total > max_pixels:
        raise BadInputError(
            f"{files[0].parent.name or files[0].name}: the sequence of {len(files)} files has "
            f"{fmt_pixels(total)}; the limit is {fmt_pixels(max_pixels)}. Use fewer frames "
            "or raise the pixel limit in the settings."
        )
    images = [load_image(p, max_pixels, check) for p in files]
    frames: list[np.ndarray] = []
    for image in images:
        if image.size != images[0].size:
            raise BadInputError(
                f"{image.source.name}: this frame is {image.size[0]}×{image.size[1]} pixels but "
                f"{files[0].name} is {images[0].size[0]}×{images[0].size[1]}; all frames of a "
                "sequence must have the same size."
            )
        frames.extend(image.frames)
    unified = unify_frames(files[0], frames)
    first = images[0].meta
    all_timed = all(len(i.meta.durations) == len(i.frames) for i in images)
    meta = ImageMeta(
        format=first.format,
        mode=first.mode,
        bit_depth=16 if unified[0].dtype == np.uint16 else 8,
        has_alpha=unified[0].shape[2] in (2, 4),
        icc_profile=first.icc_profile,
        exif=first.exif,
        durations=tuple(d for i in images for d in i.meta.durations) if all_timed else (),
        loop=first.loop,
        dpi=first.dpi,
    )
    return DecodedImage(source=files[0], frames=read_only(unified), meta=meta)


def _natural_key(name: str) -> tuple[list[int | str], str]:
    parts: list[int | str] = [
        int(part) if index % 2 else part.casefold()
        for index, part in enumerate(re.split(r"(\d+)", name))
    ]
    return parts, name


def list_sequence(folder: Path) -> list[Path]:
    """The image files of `folder` in natural order (frame2 before frame10); hidden files skipped."""
    folder = Path(folder)
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError as e:
        raise BadInputError(
            f"{folder.name}: the folder does not exist (looked in {folder.parent})."
        ) from e
    except NotADirectoryError as e:
        raise BadInputError(f"{folder.name}: this is a file, not a folder of frames.") from e
    except PermissionError as e:
        raise BadInputError(
            f"{folder.name}: permission denied; Tessera may not list this folder."
        ) from e
    except OSError as e:
        raise BadInputError(f"{folder.name}: the folder cannot be read ({e.strerror or e}).") from e
    names = [
        entry.name
        for entry in entries
        if not entry.name.startswith(".")
        and Path(entry.name).suffix.lower() in IMAGE_SUFFIXES
        and entry.is_file()
    ]
    return [folder / name for name in sorted(names, key=_natural_key)]
