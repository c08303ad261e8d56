"""Memory samplers: this process's RSS, and GPU memory through NVML, watched on a side thread."""

from __future__ import annotations

import os
import threading

from engine.runtime import memory


class PeakRss:
    """Samples this process's RSS every few milliseconds on a side thread."""

    def __init__(self, interval: float = 0.003) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, memory.process_rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.peak = memory.process_rss()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, memory.process_rss())


class GpuMeter:
    """Device memory through NVML: this process's own usage when the driver reports it (not
    on Windows WDDM, nor where the process is not listed, e.g. in another PID namespace),
    else the whole device's used memory. The source is fixed when the meter is made."""

    def __init__(self, index: int) -> None:
        import pynvml

        if memory.nvml_status() != "ok":
            raise RuntimeError(f"NVML is not available: {memory.nvml_status()}")
        self.index = index
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.source = "process" if self._own() is not None else "device"

    def _own(self) -> int | None:
        me = os.getpid()
        nv = self._nvml
        try:
            procs = list(nv.nvmlDeviceGetComputeRunningProcesses(self._handle))
        except nv.NVMLError:
            return None
        for p in procs:
            if p.pid == me and isinstance(p.usedGpuMemory, int):
                return int(p.usedGpuMemory)
        return None

    def read(self) -> int:
        if self.source == "process":
            own = self._own()
            if own is not None:
                return own
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)


class PeakGpu:
    """Samples a GpuMeter on a side thread while an operation runs."""

    def __init__(self, meter: GpuMeter, interval: float = 0.002) -> None:
        self.meter = meter
        self.interval = interval
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.meter.read())
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakGpu:
        self.peak = self.meter.read()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.meter.read())
