"""Frames of a multi-frame file decoded one at a time as they are used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from engine.errors import BadInputError
from engine.io.frames import apply_orientation, frame_pixels
from engine.io.image import LazyFrames, reshape_channels, to_16bit
from engine.io.opening import damaged


class StreamedFrames(LazyFrames):
    """The frames of a multi-frame file, decoded one at a time as they are used.

    In order they cost one decode each (the file stays open until the last frame was read, or
    `close()`); going back restarts the decoder at the file's first frame. Every frame comes
    upright, in the one channel layout and dtype of the whole file, read-only.
    """

    def __init__(
        self,
        path: Path,
        indices: list[int],
        shape: tuple[int, int, int],
        dtype: np.dtype[Any],
        orientation: int,
    ) -> None:
        self.path = path
        self._indices = indices
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self._orientation = orientation
        self._im: Image.Image | None = None
        self._cached: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._indices)

    def frame(self, index: int) -> np.ndarray:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1]
        try:
            if self._im is None:
                self._im = Image.open(self.path)
            self._im.seek(self._indices[index])
            height, width = self.shape[:2] if self._orientation < 5 else self.shape[1::-1]
            if self._im.size != (width, height):  # from the header: never decode a grown page
                raise BadInputError(
                    f"{self.path.name}: frame {index + 1} changed while it was being read."
                )
            self._im.load()
            pixels = frame_pixels(self.path, self._im)
        except BadInputError:
            self.close()
            raise
        except Exception as e:  # the file changed or broke since it was first read
            self.close()
            raise damaged(self.path, e) from e
        wide = self.dtype == np.uint16
        frame = reshape_channels(
            to_16bit(pixels) if wide else pixels, self.shape[2] >= 3, self.shape[2] in (2, 4)
        )
        frame = apply_orientation(frame, self._orientation)
        if frame.shape != self.shape:
            self.close()
            raise BadInputError(
                f"{self.path.name}: frame {index + 1} changed while it was being read."
            )
        frame.setflags(write=False)
        self._cached = (index, frame)
        if index == len(self) - 1:
            self.close()
        return frame

    def close(self) -> None:
        if self._im is not None:
            self._im.close()
            self._im = None
