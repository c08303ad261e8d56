"""Which version of a file: what every kept thing of a model (its optimised copy, its analysed
chain, its contract, its measured overlap and kernel choice) is bound to, and the session
cache's key.

Size, inode and modification time are not enough: `cat x3.onnx > x2.onnx; touch -r …` keeps
all three, and every later run would trust x2's kept files for x3's graph. The change time
(ctime) moves whenever the file's content or metadata is written and no one can set it back,
so it is part of the identity. A copied models folder (new inodes and ctimes) is analysed
again: a second of work, never a wrong product.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import astuple, dataclass
from pathlib import Path

from engine.errors import ModelError


@dataclass(frozen=True)
class FileIdentity:
    """A file's version: a model replaced in place (a download, fetch-starter, `cat … >`) is
    another version, so the next request loads it and its kept files are made again."""

    size: int
    mtime_ns: int
    inode: int
    ctime_ns: int = 0
    device: int = 0

    @classmethod
    def read(cls, path: Path | str) -> FileIdentity:
        """The identity of `path` now; OSError where it cannot be read."""
        st = os.stat(path)
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_dev)

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        """The identity of a model file; a ModelError a person can act on where it is gone."""
        try:
            return cls.read(path)
        except OSError as e:
            raise ModelError(
                f"The model file {Path(path).name} cannot be read ({e.strerror or e})."
            ) from e

    def digest(self, *salt: object) -> str:
        """A short name for this version (and whatever else the kept thing depends on)."""
        text = "|".join(map(str, (*astuple(self), *salt)))
        return hashlib.sha256(text.encode()).hexdigest()[:16]
