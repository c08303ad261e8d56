"""Publishing outputs: a hidden temp file in the target folder, written through its own
descriptor, then a name that did not exist (DESIGN §5: never overwrite, never half written).

The final name is taken with `engine.files.move_new`, which never replaces a file on any file
system, so concurrent writers of one name each get their own numbered file. Every temp file is
registered in `engine.files.LIVE` while it exists, so a signal can remove it (engine/cli.py).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from engine.errors import BadInputError, DiskFullError
from engine.files import LIVE, ReplacedError, name_limits, partial_name, sweep_leftovers

log = logging.getLogger(__name__)

__all__ = [
    "EFBIG_OR_FULL",
    "PendingOutput",
    "atomic_output",
    "check_output_name",
    "open_output",
    "unique_path",
    "write_bytes",
    "write_error",
]

_MAX_NUMBER = 100_000
_TEMP_STEM_BYTES = 100  # the temp name keeps this much of the product's name, in bytes


def _numbered(path: Path, number: int) -> Path:
    return path if number == 0 else path.with_name(f"{path.stem}-{number}{path.suffix}")


def unique_path(path: Path) -> Path:
    """`path`, or name-1.ext, name-2.ext ... : the first that does not exist yet (a hint only:
    publishing claims its name atomically)."""
    path = Path(path)
    number = 0
    while os.path.lexists(_numbered(path, number)):  # a dangling link is taken as well
        number += 1
    return _numbered(path, number)


FULL = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
EFBIG_OR_FULL = FULL | {errno.EFBIG}  # every write that fails for want of room


def write_error(path: Path, exc: OSError) -> Exception:
    """The sentence for a failed write of `path`; every writer maps its OSErrors here."""
    folder = path.parent
    if exc.errno in FULL:
        return DiskFullError(f"{path.name}: the disk holding {folder} is full; free some space.")
    if exc.errno == errno.EFBIG:
        return DiskFullError(
            f"{path.name}: the disk holding {folder} is full for a file this large: it is "
            "larger than the file system allows (FAT holds at most 4 GB a file) or than this "
            "process may write. Choose an output folder on another disk."
        )
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return BadInputError(
            f"{path.name}: permission denied; Tessera may not write into the folder {folder}. "
            "Choose another output folder."
        )
    if exc.errno == errno.EROFS:
        return BadInputError(
            f"{path.name}: the folder {folder} is on a read-only disk. Choose another output folder."
        )
    if exc.errno == errno.ENAMETOOLONG:
        return BadInputError(
            f"{path.name}: the name is too long for the file system of {folder}. Rename the "
            "input to a shorter name, or choose an output folder with a shorter path."
        )
    if exc.errno in (errno.EINVAL, errno.EILSEQ):
        return BadInputError(
            f"{path.name}: the file system of {folder} refuses this name (characters such as "
            '< > : " | ? * \\ are not allowed on FAT, exFAT and Windows shares). Rename the '
            "input, or choose another output folder."
        )
    if isinstance(exc, FileNotFoundError):
        if folder.is_dir():  # /proc, /sys: a folder that takes no new files
            return BadInputError(
                f"{path.name}: the folder {folder} does not take new files (a system folder). "
                "Choose another output folder."
            )
        return BadInputError(f"{path.name}: the output folder {folder} does not exist.")
    if isinstance(exc, NotADirectoryError):
        return BadInputError(f"{path.name}: the output location {folder} is not a folder.")
    return BadInputError(f"{path.name}: cannot be written to {folder} ({exc.strerror or exc}).")


def _temp_name(path: Path) -> Path:
    """A hidden name beside `path` that does not look finished, with this process's id (the
    next run sweeps a killed one's); cut by bytes, not characters, so a long non-ASCII name
    still gives a temp name the file system takes."""
    stem = os.fsencode(path.name)[:_TEMP_STEM_BYTES].decode("utf-8", "ignore")
    if not stem:  # a cut through a surrogate-escaped name: keep it simple
        stem = "output"
    return path.with_name(partial_name(stem))


class PendingOutput:
    """A temp file being written for `path`: write to `file`, then `publish()` once."""

    def __init__(self, path: Path, temp: Path, file: BinaryIO) -> None:
        self.path = path
        self.temp = temp
        self.file = file
        self.published: Path | None = None

    def publish(self) -> Path:
        """Sync the file and give it the first free name of `path`, path-1, path-2, …"""
        if self.published is not None:
            return self.published
        log.info("publishing %s", self.path.name)
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            written = os.fstat(self.file.fileno())
            self.file.close()
            for number in range(_MAX_NUMBER):
                target = _numbered(self.path, number)
                try:
                    LIVE.place(self.temp, target, (written.st_dev, written.st_ino))
                except FileExistsError:
                    continue
                self.published = target
                return target
        except ReplacedError as e:
            raise BadInputError(
                f"{self.path.name}: its temporary file in {self.path.parent} was replaced by "
                "another program while Tessera wrote it; nothing was published."
            ) from e
        except OSError as e:
            raise write_error(self.path, e) from e
        raise BadInputError(
            f"{self.path.name}: too many numbered copies already exist in {self.path.parent}."
        )


@contextmanager
def open_output(path: Path) -> Iterator[PendingOutput]:
    """A temp file for `path`, open for binary writing through its own descriptor.

    Call `publish()` for the final path. The temp file is removed when the block fails or ends
    without publishing; OSErrors of the block are reported as write errors of `path`.
    """
    path = Path(path)
    sweep_leftovers(path.parent)  # what a killed run left here (once per folder)
    temp = _temp_name(path)
    try:
        descriptor = LIVE.create(temp)
    except OSError as e:
        raise write_error(path, e) from e
    pending = PendingOutput(path, temp, os.fdopen(descriptor, "w+b"))
    try:
        yield pending
    except OSError as e:
        raise write_error(path, e) from e
    finally:
        if not pending.file.closed:
            try:
                pending.file.close()
            except OSError:
                pass  # the block's own error (or the missing publish) is what matters
        if pending.published is None:
            LIVE.discard(temp)


@contextmanager
def atomic_output(path: Path) -> Iterator[tuple[Path, Callable[[], Path]]]:
    """Yield (temp path, publish) for writers that need a path rather than a file object.

    Prefer `open_output`: writing by name reopens the temp file, which another program could
    have replaced in between.
    """
    with open_output(path) as pending:
        yield pending.temp, pending.publish


def write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` atomically under `path` or a numbered variant; returns the final path."""
    with open_output(Path(path)) as pending:
        pending.file.write(data)
        return pending.publish()


def check_output_name(folder: Path, name: str) -> None:
    """Refuse, before any work, a product name the file system of `folder` will not take:
    too long, or with characters it refuses (tried with a hidden probe file of the same
    characters, removed at once)."""
    name_max, path_max = name_limits(folder)
    size = len(os.fsencode(name))
    target = folder / name
    if size > name_max or len(os.fsencode(str(target))) >= path_max:
        what = f"{size} bytes" if size > name_max else f"a path of {len(str(target))} characters"
        limit = f"{name_max} bytes" if size > name_max else f"{path_max} bytes"
        raise BadInputError(
            f"{name}: this output name is too long for the file system of {folder} ({what}; "
            f"it allows {limit}). Rename the input to a shorter name, or choose an output "
            "folder with a shorter path."
        )
    # The probe starts with a dot and 6 letters of our own, and loses as many bytes of the
    # name's end (our own ASCII suffix), so it has the input's characters at the same length.
    prefix = f".{secrets.token_hex(3)}"
    encoded = os.fsencode(prefix + name)[:name_max]
    probe = folder / os.fsdecode(encoded)
    try:
        os.close(LIVE.create(probe))
    except FileExistsError:
        return  # someone's file of that name: the name itself is fine
    except OSError as e:
        raise write_error(target, e) from e
    LIVE.discard(probe)
