"""Per-frame maps kept on disk until a second pass needs them, so memory stays flat.

A product that depends on every frame (a depth sequence's shared range) is written in a
second pass; the small per-frame maps it is made from wait here, in a private temporary
folder that is removed with the spill.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np


class FrameSpill:
    """Arrays appended one by one and read back in order; in memory while there is one."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._first: np.ndarray | None = None
        self._count = 0

    def append(self, array: np.ndarray) -> None:
        if self._count == 0:
            self._first = array
        else:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="tessera-frames-"))
                assert self._first is not None
                np.save(self._folder / "0.npy", self._first)
                self._first = None
            np.save(self._folder / f"{self._count}.npy", array)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[np.ndarray]:
        for index in range(self._count):
            if self._folder is None:
                assert self._first is not None
                yield self._first
            else:
                yield np.load(self._folder / f"{index}.npy")

    def close(self) -> None:
        self._first = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> FrameSpill:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
