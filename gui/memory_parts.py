"""What this process's RAM is made of, for the memory panel: the models' weights, the window's
pictures, the interpreter and its libraries (file-backed pages: Python, Qt, ONNX Runtime,
numpy), the heap the C allocator keeps free, and the rest ("other": Python objects, ORT's
working memory, thread stacks).

The file-backed share is Linux's `RssFile` (/proc/self/status). The allocator's free heap is
what glibc's main heap has resident beyond the bytes in use: the `[heap]` mapping's Rss
(/proc/self/smaps) less `mallinfo2().uordblks`. Not `fordblks` alone: after `malloc_trim` the
free chunks stay in glibc's books while their pages went back to the system, and the panel
then named more than the RSS (31 MiB "kept" of which 15 MiB were resident, measured). Where
either cannot be read it counts as 0 and is said to be unmeasured, so "other" is never
smaller than it is.
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
    models: int  # the weights of the sessions held in RAM (not those on a GPU)
    pictures: int
    code: int  # the interpreter and libraries: resident file-backed pages
    free_heap: int  # resident bytes the allocator keeps free in its heap
    measured: bool = True  # code and free heap were read (Linux with glibc)

    @property
    def named(self) -> int:
        return self.models + self.pictures + self.code + self.free_heap

    @property
    def other(self) -> int:
        return max(self.rss - self.named, 0)


@dataclass(frozen=True)
class HeapUsage:
    """glibc's heap: bytes in use and free in its arenas, its mmapped blocks, and the main
    heap's resident pages (0 where unknown)."""

    in_use: int
    free: int
    mmapped: int
    resident: int

    @property
    def kept(self) -> int:
        """Resident bytes of the heap not in use: what `malloc_trim` could hand back."""
        return min(max(self.resident - self.in_use, 0), self.free)


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


def _mallinfo() -> _MallInfo2 | None:
    info = getattr(_LIBC, "mallinfo2", None)
    if info is None:
        return None
    info.restype = _MallInfo2
    result: _MallInfo2 = info()
    return result


def free_heap() -> int | None:
    """Bytes free inside glibc's malloc arenas (resident or not), or None."""
    info = _mallinfo()
    return None if info is None else int(info.fordblks)


def heap_resident(smaps: Path = Path("/proc/self/smaps")) -> int | None:
    """Resident bytes of the main heap (every `[heap]` mapping: it is not always one piece
    after a large job), or None without /proc.

    Read line by line: the whole file read at once is ~1 MB of text, and it was freed into the
    very heap it measures."""
    total = 0
    try:
        with smaps.open(encoding="ascii", errors="replace") as f:
            in_heap = False
            for line in f:
                head = line.split(maxsplit=1)
                if not head:
                    continue
                if not head[0].endswith(":"):  # a mapping's first line: "start-end perms …"
                    in_heap = line.rstrip().endswith("[heap]")
                elif in_heap and head[0] == "Rss:":
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return total


def heap_usage() -> HeapUsage:
    info, resident = _mallinfo(), heap_resident()
    if info is None:
        return HeapUsage(0, 0, 0, resident or 0)
    return HeapUsage(int(info.uordblks), int(info.fordblks), int(info.hblkhd), resident or 0)


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


@dataclass(frozen=True)
class ProcessReading:
    """The parts read from the system: the libraries' pages and the heap kept."""

    code: int
    free_heap: int
    measured: bool


def read_process() -> ProcessReading:
    code, resident, info = file_backed(), heap_resident(), _mallinfo()
    measured = None not in (code, resident, info)
    return ProcessReading(code or 0, heap_usage().kept if measured else 0, measured)


def read_parts(
    rss: int, models: int, pictures: int, process: ProcessReading | None = None
) -> MemoryParts:
    """The parts of `rss`; `process` read now when not given."""
    got = process if process is not None else read_process()
    return MemoryParts(rss, models, pictures, got.code, got.free_heap, got.measured)


def parts_lines(parts: MemoryParts, show: Callable[[int], str]) -> list[str]:
    """One line per part, in the panel's units (`show`: bytes → text)."""
    lines = [
        f"  models: {show(parts.models)}",
        f"  window pictures: {show(parts.pictures)}",
        f"  interpreter and libraries: {show(parts.code)}",
        f"  heap kept by the allocator: {show(parts.free_heap)}",
        f"  other: {show(parts.other)} (Python objects, Qt's and ONNX Runtime's own)",
    ]
    if not parts.measured:
        lines.append("  (libraries and heap not measured here)")
    return lines
