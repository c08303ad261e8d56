"""Memory snapshots: GPU memory through NVML (nvidia-ml-py) and RAM through psutil.

No Qt here; the GUI polls these off the engine thread about once a second.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    name: str
    used: int | None  # bytes; None where the driver does not say (Windows WDDM)


@dataclass(frozen=True)
class GpuSnapshot:
    index: int
    name: str
    total: int
    used: int
    free: int
    own: int | None  # this process's share, when the driver reports per-process usage
    others: tuple[ProcessUsage, ...]


@dataclass(frozen=True)
class RamSnapshot:
    total: int
    available: int
    process_rss: int


@dataclass(frozen=True)
class MemorySnapshot:
    gpus: tuple[GpuSnapshot, ...]
    ram: RamSnapshot
    nvml_error: str | None  # why there is no GPU reading, for the gauge's tooltip


_nvml_lock = threading.Lock()
_nvml_state: str | None = None  # None: not tried; "ok"; otherwise the reason it failed


def _nvml() -> object | None:
    global _nvml_state
    try:
        import pynvml
    except ImportError:
        _nvml_state = "nvidia-ml-py is not installed"
        return None
    with _nvml_lock:
        if _nvml_state is None:
            try:
                pynvml.nvmlInit()
                _nvml_state = "ok"
            except pynvml.NVMLError as e:
                _nvml_state = f"no NVIDIA driver ({e})"
    return pynvml if _nvml_state == "ok" else None


def nvml_status() -> str:
    _nvml()
    return _nvml_state or "unknown"


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return f"pid {pid}"


def gpu_snapshots() -> tuple[GpuSnapshot, ...]:
    nv = _nvml()
    if nv is None:
        return ()
    import pynvml

    me = os.getpid()
    out: list[GpuSnapshot] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            own: int | None = None
            others: list[ProcessUsage] = []
            try:
                procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
                procs += list(pynvml.nvmlDeviceGetGraphicsRunningProcesses(h))
            except pynvml.NVMLError:
                procs = []
            seen: set[int] = set()
            for p in procs:
                if p.pid in seen:
                    continue
                seen.add(p.pid)
                used = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else None
                if p.pid == me:
                    own = used
                else:
                    others.append(ProcessUsage(p.pid, _process_name(p.pid), used))
            out.append(
                GpuSnapshot(
                    i, str(name), int(mem.total), int(mem.used), int(mem.free), own, tuple(others)
                )
            )
    except pynvml.NVMLError as e:
        log.warning("NVML query failed: %s", e)
    return tuple(out)


def ram_snapshot() -> RamSnapshot:
    vm = psutil.virtual_memory()
    return RamSnapshot(int(vm.total), int(vm.available), int(psutil.Process().memory_info().rss))


def snapshot() -> MemorySnapshot:
    gpus = gpu_snapshots()
    return MemorySnapshot(gpus, ram_snapshot(), None if gpus else nvml_status())


def free_gpu_memory(index: int) -> int | None:
    for g in gpu_snapshots():
        if g.index == index:
            return g.free
    return None


def process_rss() -> int:
    return int(psutil.Process().memory_info().rss)


@dataclass(frozen=True)
class RssSplit:
    """This process's RSS in two parts: `anonymous` (heaps, arenas, buffers: what the process
    can hand back) and `files` (mapped files, above all shared libraries: once imported, ONNX
    Runtime's stay)."""

    anonymous: int
    files: int

    @property
    def total(self) -> int:
        return self.anonymous + self.files


def rss_split() -> RssSplit:
    """The RSS split into anonymous and file-backed memory, from /proc/self/smaps_rollup;
    where there is none (not Linux) all of it counts as anonymous."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except (OSError, ValueError):
        fields = {}
    if "Rss" not in fields or "Anonymous" not in fields:
        return RssSplit(process_rss(), 0)
    return RssSplit(fields["Anonymous"], fields["Rss"] - fields["Anonymous"])


def _libc() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


_LIBC = _libc()

_M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENA_ENV = ("MALLOC_ARENA_MAX", "glibc.malloc.arena_max")  # the person's own choice wins


def one_heap_arena() -> bool:
    """Have every thread allocate from glibc's main heap (mallopt M_ARENA_MAX=1); True when set.

    By default each thread that allocates gets an arena of its own (the engine thread, the
    viewer's reader, ONNX Runtime's intra-op threads, the writers). `malloc_trim` hands back
    the free pages inside every arena but the free top of the main heap only: what a job left
    at the top of another thread's arena stays until that arena grows past glibc's trim
    threshold, which it raises to up to 64 MB (measured: 18 MiB left after one 3000×2000 ×2
    job and Unload all, 32 MiB after three; 1.4 MiB with one arena, with no more page
    faults and no slower job). It counts only for arenas made afterwards, so it is set when
    this module is imported, before the engine or the window start a thread. A no-op where
    there is no glibc, or where MALLOC_ARENA_MAX or GLIBC_TUNABLES already says how many.
    """
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is None:
        return False
    if "MALLOC_ARENA_MAX" in os.environ or ARENA_ENV[1] in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return bool(mallopt(_M_ARENA_MAX, 1))


ONE_HEAP_ARENA = one_heap_arena()


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim).

    numpy's temporaries of a few MB come from the heap once glibc has raised its mmap
    threshold, and freed heap memory stays in the process: after an operation that is tens of
    MB of RSS held for nothing (M11). With one heap arena (`one_heap_arena`) that is all of
    it. A no-op where there is no glibc.
    """
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def _read_hwm() -> int | None:
    """This process's peak RSS (VmHWM) in bytes, from /proc; None where there is no /proc."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _reset_hwm() -> bool:
    """Start a new peak-RSS measurement (Linux: writing 5 to clear_refs resets VmHWM)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return _read_hwm() is not None


class RssPeak:
    """The process's RSS high-water mark over a `with` block.

    Exact on Linux (the kernel's VmHWM, reset at the start); elsewhere sampled every few
    milliseconds on a side thread, which can miss a peak shorter than that.
    """

    def __init__(self, interval: float = 0.003) -> None:
        self.interval = interval
        self.peak = 0
        self._exact = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, process_rss())

    def read(self) -> int:
        """The peak so far."""
        if self._exact:
            return max(self.peak, _read_hwm() or 0)
        return max(self.peak, process_rss())

    def __enter__(self) -> RssPeak:
        self.peak = process_rss()
        self._exact = _reset_hwm()
        if not self._exact:
            self._thread = threading.Thread(target=self._loop, name="rss-peak", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = self.read()


def gpu_used(index: int) -> int | None:
    """Bytes of GPU `index` this process uses where the driver says, else the device's used
    memory; None where NVML does not see the device."""
    for g in gpu_snapshots():
        if g.index == index:
            return g.own if g.own is not None else g.used
    return None
