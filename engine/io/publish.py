"""Publishing outputs: a hidden temp file in the target folder, then a name that did not
exist (DESIGN §5: never overwrite, never half written)."""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.errors import BadInputError, ResourceError

__all__ = ["atomic_output", "unique_path", "write_bytes"]


def _numbered(path: Path, number: int) -> Path:
    return path if number == 0 else path.with_name(f"{path.stem}-{number}{path.suffix}")


def unique_path(path: Path) -> Path:
    """`path`, or name-1.ext, name-2.ext ... : the first that does not exist yet."""
    path = Path(path)
    number = 0
    while os.path.lexists(_numbered(path, number)):  # a dangling link is taken as well
        number += 1
    return _numbered(path, number)


def _write_error(path: Path, exc: OSError) -> Exception:
    folder = path.parent
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return ResourceError(f"{path.name}: the disk holding {folder} is full; free some space.")
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return BadInputError(
            f"{path.name}: permission denied; Tessera may not write into the folder {folder}. "
            "Choose another output folder."
        )
    if exc.errno == errno.EROFS:
        return BadInputError(
            f"{path.name}: the folder {folder} is on a read-only disk. Choose another output folder."
        )
    if isinstance(exc, FileNotFoundError):
        return BadInputError(f"{path.name}: the output folder {folder} does not exist.")
    if isinstance(exc, NotADirectoryError):
        return BadInputError(f"{path.name}: the output location {folder} is not a folder.")
    return BadInputError(f"{path.name}: cannot be written to {folder} ({exc.strerror or exc}).")


def _fsync(path: Path) -> None:
    with open(path, "r+b") as f:
        os.fsync(f.fileno())


def _publish(temp: Path, path: Path) -> Path:
    """Give the finished temp file its final name without ever replacing an existing file."""
    _fsync(temp)
    for number in range(100_000):
        target = _numbered(path, number)
        try:
            os.link(temp, target)  # fails if the name exists: no race with other writers
        except FileExistsError:
            continue
        except OSError:
            # Hard links unsupported (FAT, some network shares): check, then rename.
            if os.path.lexists(target):
                continue
            os.replace(temp, target)
            return target
        os.unlink(temp)
        return target
    raise BadInputError(f"{path.name}: too many numbered copies already exist in {path.parent}.")


@contextmanager
def atomic_output(path: Path) -> Iterator[tuple[Path, Callable[[], Path]]]:
    """Yield (temp path, publish). Write the temp file, then call publish() for the final path.

    The temp file lies in the target folder under a hidden name that does not look finished;
    it is removed when the block fails or ends without publish(). OSErrors of the block are
    reported as write errors of `path`.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name[:120]}.partial-{secrets.token_hex(4)}")
    try:
        descriptor = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666
        )
    except OSError as e:
        raise _write_error(path, e) from e
    os.close(descriptor)
    published: list[Path] = []

    def publish() -> Path:
        if not published:
            try:
                published.append(_publish(temp, path))
            except OSError as e:
                raise _write_error(path, e) from e
        return published[0]

    try:
        yield temp, publish
    except OSError as e:
        raise _write_error(path, e) from e
    finally:
        try:
            os.unlink(temp)  # already gone once published
        except FileNotFoundError:
            pass


def write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` atomically under `path` or a numbered variant; returns the final path."""
    with atomic_output(Path(path)) as (temp, publish):
        with open(temp, "wb") as f:
            f.write(data)
        return publish()
