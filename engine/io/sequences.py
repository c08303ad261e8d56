"""Sequences: the image files of a folder in natural order, and several files as one sequence."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import PIXEL_LIMIT_LEVER, BadInputError, PixelLimitError
from engine.io.frames import read_only, unify_frames
from engine.io.image import (
    IMAGE_SUFFIXES,
    DecodedImage,
    ImageMeta,
    LazyFrames,
    fmt_pixels,
    reshape_channels,
    to_16bit,
)
from engine.io.opening import image_size
from engine.io.reading import load_image

# Where a sequence's products go when no output folder is given: a folder of this name in
# the sequence's own folder (list_sequence takes files only, so never them as frames). The app
# writes every image's products into one beside it by default.
SEQUENCE_PRODUCTS = "Tessera"


def load_sequence(
    paths: Sequence[Path],
    max_pixels: int,
    check: Callable[[], None] | None = None,
    *,
    stream: bool = False,
) -> DecodedImage:
    """The frames of several files as one sequence; all must have the same size. `check` is
    called between files and frames and may raise to stop (a cancel). `stream`: the files are
    decoded as their frames are used (`SequenceFrames`), so memory does not grow with them."""
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
        raise PixelLimitError(
            f"{files[0].parent.name or files[0].name}: the sequence of {len(files)} files has "
            f"{fmt_pixels(total)}; the limit is {fmt_pixels(max_pixels)}. Use fewer frames "
            f"or {PIXEL_LIMIT_LEVER}.",
            total,
            max_pixels,
        )
    if stream:
        return _streamed(files, max_pixels, check)
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
    metas = [(i.meta, len(i.frames)) for i in images]
    return DecodedImage(source=files[0], frames=read_only(unified), meta=_meta(metas, unified[0]))


def _meta(metas: list[tuple[ImageMeta, int]], first_frame: np.ndarray) -> ImageMeta:
    first = metas[0][0]
    all_timed = all(len(meta.durations) == count for meta, count in metas)
    return ImageMeta(
        format=first.format,
        mode=first.mode,
        bit_depth=16 if first_frame.dtype == np.uint16 else 8,
        has_alpha=first_frame.shape[2] in (2, 4),
        icc_profile=first.icc_profile,
        exif=first.exif,
        durations=tuple(d for meta, _ in metas for d in meta.durations) if all_timed else (),
        loop=first.loop,
        dpi=first.dpi,
    )


def _streamed(files: list[Path], max_pixels: int, check: Callable[[], None] | None) -> DecodedImage:
    """The sequence decoded once to learn each file's frames and their common layout, then
    again one file at a time as the frames are used: memory does not grow with the frames."""
    metas: list[tuple[ImageMeta, int]] = []
    layouts: list[np.ndarray] = []
    where: list[tuple[int, int]] = []  # (file, frame in that file) of each frame
    size: tuple[int, int] | None = None
    for index, path in enumerate(files):
        image = load_image(path, max_pixels, check, stream=True)
        size = size or image.size
        if image.size != size:
            raise BadInputError(
                f"{path.name}: this frame is {image.size[0]}×{image.size[1]} pixels but "
                f"{files[0].name} is {size[0]}×{size[1]}; all frames of a sequence must have "
                "the same size."
            )
        count = len(image.frames)
        shape = getattr(image.frames, "shape", None) or image.frames[0].shape
        dtype = getattr(image.frames, "dtype", None) or image.frames[0].dtype
        layouts.append(np.zeros((1, 1, shape[2]), dtype))
        metas.append((image.meta, count))
        where.extend((index, frame) for frame in range(count))
        del image
    first = unify_frames(files[0], layouts)[0]
    assert size is not None
    frames = SequenceFrames(
        files, where, (size[1], size[0], first.shape[2]), first.dtype, max_pixels
    )
    return DecodedImage(source=files[0], frames=frames, meta=_meta(metas, first))


class SequenceFrames(LazyFrames):
    """The frames of a sequence of files, each file decoded when one of its frames is used
    (the last file's frames kept until another file is needed); in the sequence's one
    channel layout and dtype, read-only."""

    def __init__(
        self,
        files: list[Path],
        where: list[tuple[int, int]],
        shape: tuple[int, int, int],
        dtype: np.dtype[Any],
        max_pixels: int,
    ) -> None:
        self.files, self._where = files, where
        self.shape, self.dtype = shape, np.dtype(dtype)
        self._max_pixels = max_pixels
        self._file: tuple[int, Sequence[np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self._where)

    def frame(self, index: int) -> np.ndarray:
        file, frame = self._where[index]
        if self._file is None or self._file[0] != file:
            self._file = None  # the previous file's frames go before the next is decoded
            image = load_image(self.files[file], self._max_pixels, stream=True)
            self._file = (file, image.frames)
        pixels = self._file[1][frame]
        wide = self.dtype == np.uint16
        out = reshape_channels(
            to_16bit(pixels) if wide else pixels, self.shape[2] >= 3, self.shape[2] in (2, 4)
        )
        if out is not pixels:
            out.setflags(write=False)
        return out


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
    names.sort(key=_natural_key)
    return [folder / name for name in _without_products(names)]


# Tessera's products are named after the file they were made from: `<stem>-<suffix>.<ext>`,
# and a sequence's after its first frame, numbered per frame: `<first>-<suffix>-0001.<ext>`
# (engine/operations/products.py). The suffix names the model or the product ("up2",
# "realesrgan-x4plus", "cutout", "depth-preview"): it has a letter, where a frame number has none.
_PRODUCT_TAIL = re.compile(r"-.+-\d{4}\.[^.]+$")
_SINGLE_PRODUCT_TAIL = re.compile(r"-.*[^\W\d_].*\.[^.]+$")


def _without_products(names: list[str]) -> list[str]:
    """`names` less Tessera's own products (left in the folder by an earlier run that wrote
    next to its inputs, issue #21): a name that is another image's stem, then `-suffix`, then
    an optional frame number. A frame number alone (`shot-2.png` beside `shot.png`) is a frame."""
    stems = {Path(n).stem for n in names}
    kept = []
    for name in names:
        cuts = [i for i, ch in enumerate(name) if ch == "-" and name[:i] in stems]
        if not any(
            _PRODUCT_TAIL.match(name, i) or _SINGLE_PRODUCT_TAIL.match(name, i) for i in cuts
        ):
            kept.append(name)
    return kept
