"""Memory snapshots: GPU memory through NVML (nvidia-ml-py) and RAM through psutil.

No Qt here; the GUI polls these off the engine thread about once a second.
"""

from __future__ import annotations

import logging
import os
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
