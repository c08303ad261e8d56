"""Per-frame maps kept on disk until a second pass needs them, so memory stays flat.

A product that depends on every frame (a depth sequence's shared range) is written in a
second pass; the small per-frame maps it is made from wait here, in a private temporary
folder that is removed with the spill.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from engine.errors import DiskFullError, ResourceError


def _save(path: Path, array: np.ndarray) -> None:
    """`np.save` through a plain write: numpy's own `tofile` reports a full disk as
    "190512 requested and 140256 written", with no errno to tell it by."""
    array = np.ascontiguousarray(array)
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        f.write(array.reshape(-1).view(np.uint8).data)


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
            try:
                if self._folder is None:
                    self._folder = Path(tempfile.mkdtemp(prefix=f"tessera-frames-{os.getpid()}-"))
                    assert self._first is not None
                    _save(self._folder / "0.npy", self._first)
                    self._first = None
                _save(self._folder / f"{self._count}.npy", array)
            except OSError as e:
                folder = self._folder.parent if self._folder else Path(tempfile.gettempdir())
                self.close()
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                    raise DiskFullError(
                        f"the disk holding the temporary folder {folder} is full; free some "
                        "space (or set TMPDIR to a folder on a larger disk)."
                    ) from e
                raise ResourceError(
                    f"the temporary folder {folder} cannot be written ({e.strerror or e})."
                ) from e
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
