"""What this process's RAM is made of, for the memory panel: the models' weights, the window's
pictures, the interpreter and its libraries (file-backed pages: Python, Qt, ONNX Runtime,
numpy), the heap the C allocator keeps free, and the rest ("other": Python objects, ORT's
working memory, thread stacks).

The file-backed share is Linux's `RssFile` (/proc/self/status); the allocator's free
heap is glibc's `mallinfo2().fordblks` (bytes free inside its arenas: held by the process,
given back by malloc_trim). Where either cannot be read it counts as 0 and is said to be
unmeasured, so "other" is never smaller than it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MemoryParts:
    rss: int
    models: int
    pictures: int
    code: int  # the interpreter and libraries: resident file-backed pages
    free_heap: int  # bytes the allocator keeps free in its arenas
    measured: bool = True  # code and free heap were read (Linux with glibc)

    @property
    def other(self) -> int:
        return max(self.rss - self.models - self.pictures - self.code - self.free_heap, 0)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_LIBC = _libc()


def free_heap() -> int | None:
    """Bytes free inside glibc's malloc arenas (kept by the process), or None."""
    info = getattr(_LIBC, "mallinfo2", None)
    if info is None:
        return None
    info.restype = _MallInfo2
    return int(info().fordblks)


def file_backed(status: Path = Path("/proc/self/status")) -> int | None:
    """Resident file-backed bytes (code and read-only data of the interpreter and libraries)."""
    try:
        text = status.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    return None


def read_parts(rss: int, models: int, pictures: int) -> MemoryParts:
    code, heap = file_backed(), free_heap()
    return MemoryParts(rss, models, pictures, code or 0, heap or 0, None not in (code, heap))


def parts_line(parts: MemoryParts, show: Callable[[int], str]) -> str:
    """One line naming each part, in the panel's units (`show`: bytes → text)."""
    line = (
        f"Of it: models {show(parts.models)}, window pictures {show(parts.pictures)}, "
        f"interpreter and libraries {show(parts.code)}, heap kept by the allocator "
        f"{show(parts.free_heap)}, other {show(parts.other)}."
    )
    return line if parts.measured else line + " (libraries and heap not measured here)"
