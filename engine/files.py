"""Placing files without ever replacing one, and the temp files this process has open.

Two writers of one name must never overwrite each other or both be told they succeeded, on any
file system. `move_new` gives a finished file its final name only if that name is free:
`renameat2(RENAME_NOREPLACE)` where the kernel and file system have it, else a hard link (fails
when the name exists), else — FAT/exFAT, some network shares: no hard links — the final name
created exclusively (`O_CREAT|O_EXCL`) as a placeholder that the finished file then replaces.
The placeholder is ours alone, so nothing but it can be replaced.

`LIVE` knows every temp file this process is writing. A signal handler that cannot wait for
the thread writing one (a C call such as a Pillow encode cannot be interrupted) removes them
with `LIVE.abandon()`, which also refuses new ones, so the process can exit leaving nothing
half written. Creating, placing and abandoning hold one lock, so a temp file is either still
live (and removed) or already placed (and kept): never a half-placed placeholder.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import secrets
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.errors import Cancelled

__all__ = [
    "LIVE",
    "LiveFiles",
    "ReplacedError",
    "move_new",
    "name_limits",
    "partial_name",
    "sweep_leftovers",
]

# Errors that mean "this file system (or kernel) cannot do that", not "that failed".
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP}
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


class ReplacedError(OSError):
    """A temp file's name no longer refers to the file written through its descriptor."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ESTALE, "replaced by another program while being written", str(path))


def _find_renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a libc older than glibc 2.28, or musl
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function


_renameat2 = _find_renameat2()


def _rename_noreplace(src: Path, dst: Path) -> bool:
    """True when renamed; False when the kernel or the file system cannot rename without
    replacing. FileExistsError when `dst` exists."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(dst))


def _link(src: Path, dst: Path) -> bool:
    """True when `dst` is a new hard link to `src`; False when the file system has none."""
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno in _UNSUPPORTED or e.errno == errno.EMLINK:
            return False
        raise
    return True


def move_new(src: Path, dst: Path) -> None:
    """Rename the finished file `src` to `dst`, which must not exist: FileExistsError if it
    does (then `src` is untouched). Never replaces another file, on any file system."""
    if _rename_noreplace(src, dst):
        return
    if _link(src, dst):
        os.unlink(src)
        return
    # No atomic no-replace rename and no hard links: claim the name with an empty placeholder
    # created exclusively, then move the finished file over our own placeholder.
    descriptor = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0))
    os.close(descriptor)
    try:
        os.replace(src, dst)
    except BaseException:
        os.unlink(dst)
        raise


def name_limits(folder: Path) -> tuple[int, int]:
    """(longest file name, longest path) in bytes that the file system of `folder` takes."""
    name_max, path_max = 255, 4096
    if hasattr(os, "pathconf"):
        try:
            name_max = os.pathconf(folder, "PC_NAME_MAX")
            path_max = os.pathconf(folder, "PC_PATH_MAX")
        except (OSError, ValueError):
            pass
    elif os.name == "nt":
        name_max, path_max = 255, 32767
    return name_max, path_max


class LiveFiles:
    """The temp files this process is writing, and the paths it placed while watched."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: set[Path] = set()
        self._closed = False
        self._watchers: list[list[Path]] = []

    def create(self, path: Path, mode: int = 0o666) -> int:
        """Create `path` exclusively, register it and return its descriptor (read and write:
        some encoders read back what they wrote, e.g. Pillow's multi-page TIFF)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        flags |= getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
        with self._lock:
            if self._closed:
                raise Cancelled("Stopped: no new file is written while the run ends.")
            descriptor = os.open(path, flags, mode)
            self._paths.add(path)
        return descriptor

    def discard(self, path: Path) -> None:
        """Remove a temp file that will not be placed. Never raises: it runs while another
        error is being reported (the file may be gone, or its folder never existed)."""
        with self._lock:
            self._paths.discard(path)
            try:
                os.unlink(path)
            except OSError:
                pass

    def forget(self, path: Path) -> None:
        """Stop tracking `path` without touching it (it was renamed by other means)."""
        with self._lock:
            self._paths.discard(path)

    def place(self, temp: Path, dst: Path, identity: tuple[int, int] | None = None) -> None:
        """`move_new(temp, dst)`, atomically with respect to `abandon()`. With `identity`
        (st_dev, st_ino of the file written), refuse when `temp` is no longer that file."""
        with self._lock:
            if self._closed:
                raise Cancelled("Stopped before the file was finished.")
            if identity is not None:
                now = os.lstat(temp)
                if (now.st_dev, now.st_ino) != identity:
                    raise ReplacedError(temp)
            move_new(temp, dst)
            self._paths.discard(temp)
            for watcher in self._watchers:
                watcher.append(dst)

    def abandon(self) -> list[Path]:
        """Remove every live temp file and refuse new ones; returns what was removed. For a
        process that is about to exit while a thread may still be writing."""
        removed: list[Path] = []
        with self._lock:
            self._closed = True
            for path in sorted(self._paths):
                try:
                    os.unlink(path)
                    removed.append(path)
                except OSError:
                    pass
            self._paths.clear()
        return removed

    @contextmanager
    def watching(self) -> Iterator[list[Path]]:
        """A list that receives every path placed while the block runs (any thread)."""
        placed: list[Path] = []
        with self._lock:
            self._watchers.append(placed)
        try:
            yield placed
        finally:
            with self._lock:
                self._watchers.remove(placed)

    def snapshot(self, placed: list[Path]) -> list[Path]:
        """A copy of a watcher's list, taken under the lock."""
        with self._lock:
            return list(placed)


LIVE = LiveFiles()


log = logging.getLogger(__name__)

# Every temp name Tessera makes: `.NAME.partial-PID-HEX` (products, kept model copies), so the
# next run in that folder can tell the leftovers of a killed process from a live writer's.
# (Before, kept model copies were `.NAME.onnx.partial-PID`: those are swept too.)
_PARTIAL = re.compile(r"^\..+(?:\.partial-(\d+)-[0-9a-f]{8}|\.onnx\.partial-(\d+))$")
_swept: set[Path] = set()
_swept_lock = threading.Lock()


def partial_name(name: str) -> str:
    """The hidden temp name of `name`, carrying this process's id."""
    return f".{name}.partial-{os.getpid()}-{secrets.token_hex(4)}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process (EPERM): alive, and not ours to judge
        return True
    return True


def sweep_leftovers(folder: Path) -> list[Path]:
    """Remove in `folder` the temp files of Tessera processes that are gone (SIGKILL, a
    crash): only names Tessera makes, only this user's files, only of dead processes. Once per
    folder and process; never raises (a folder we cannot read or write keeps its files)."""
    folder = Path(folder)
    with _swept_lock:
        if folder in _swept:
            return []
        _swept.add(folder)
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for name in names:
        match = _PARTIAL.match(name)
        if match is None or _alive(int(match.group(1) or match.group(2))):
            continue
        path = folder / name
        try:
            info = os.lstat(path)
            if uid is not None and info.st_uid != uid:
                continue
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    if removed:
        log.info("removed %d leftover temp file(s) of ended processes in %s", len(removed), folder)
    return removed
