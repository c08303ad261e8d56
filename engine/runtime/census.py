"""Who holds what on this machine: every Tessera process and what it has loaded, the other
processes on each NVIDIA GPU, and the other processes with ONNX Runtime loaded (M6).

`take()` returns one frozen `Census` — for `python -m engine memory` and the memory panel.
Tessera's own processes come from their records (records.py); a GPU's other processes from
NVML (memory.py); on the CPU, a process counts as an ONNX Runtime user when it has
`libonnxruntime` mapped (Linux /proc/PID/maps; processes we may not read are skipped and
counted). ORT closes a model file once it is loaded, so open files cannot tell which model
another program holds: only Tessera's own records can, which is why they exist.
"""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from engine.runtime import memory, records
from engine.runtime.records import ProcessKind, ProcessRecord

ORT_LIBRARY = b"libonnxruntime"


@dataclass(frozen=True)
class TesseraProcess:
    record: ProcessRecord
    rss: int | None  # bytes; None where the process cannot be read
    this: bool = False  # the process taking the census

    @property
    def label(self) -> str:
        return self.record.label


@dataclass(frozen=True)
class OtherProcess:
    pid: int
    name: str
    used: int | None  # bytes: GPU memory on a GPU, RSS on the CPU; None where not said


@dataclass(frozen=True)
class GpuOthers:
    index: int
    name: str
    used: int  # the whole device's used bytes
    total: int
    others: tuple[OtherProcess, ...]  # every process on it that is not a Tessera process
    tessera: tuple[OtherProcess, ...]  # Tessera's own processes on it, with their memory


@dataclass(frozen=True)
class Duplicate:
    """One model loaded by more than one Tessera process."""

    model: str
    weight_bytes: int
    holders: tuple[str, ...]  # labels: "the app (pid 123)"

    @property
    def message(self) -> str:
        count = len(self.holders)
        times = {2: "twice", 3: "three times"}.get(count, f"{count} times")
        who = ", ".join(self.holders[:-1]) + " and " + self.holders[-1]
        return f"{self.model} is loaded {times}: {who}, {_mb(self.weight_bytes)} each"


@dataclass(frozen=True)
class Census:
    processes: tuple[TesseraProcess, ...]  # oldest first
    gpus: tuple[GpuOthers, ...]
    cpu_onnx: tuple[OtherProcess, ...]  # other processes with ONNX Runtime mapped, RSS
    duplicates: tuple[Duplicate, ...]
    old: tuple[str, ...]  # an older Tessera still running beside a newer one, one line each
    unmeasured: tuple[str, ...] = field(default=())  # what could not be seen, and why

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(d.message for d in self.duplicates) + self.old

    @property
    def sessions(self) -> int:
        return sum(len(p.record.sessions) for p in self.processes)


def _mb(n: int) -> str:
    n = max(n, 0)
    if n >= 10**9:
        return f"{n / 1e9:.1f} GB"
    if n >= 10**6:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e3:.0f} kB"


def _rss(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


def _name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return f"pid {pid}"


def _has_onnxruntime(pid: int) -> bool | None:
    """Whether process `pid` has ONNX Runtime's library mapped; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return any(ORT_LIBRARY in line for line in f)
    except OSError:
        return None


def cpu_onnx_processes(exclude: set[int]) -> tuple[tuple[OtherProcess, ...], int]:
    """Other processes with ONNX Runtime loaded, and how many processes could not be read."""
    if not sys.platform.startswith("linux"):
        return (), -1
    found: list[OtherProcess] = []
    unreadable = 0
    for pid in psutil.pids():
        if pid in exclude:
            continue
        mapped = _has_onnxruntime(pid)
        if mapped is None:
            unreadable += 1
        elif mapped:
            found.append(OtherProcess(pid, _name(pid), _rss(pid)))
    return tuple(found), unreadable


def duplicates(processes: tuple[TesseraProcess, ...]) -> tuple[Duplicate, ...]:
    holders: dict[tuple[str, int], list[ProcessRecord]] = {}
    weights: dict[tuple[str, int], int] = {}
    for p in processes:
        seen: set[tuple[str, int]] = set()
        for s in p.record.sessions:
            key = s.same_model_key
            if key in seen:
                continue  # one process's copies on two devices are M6's "one per device"
            seen.add(key)
            holders.setdefault(key, []).append(p.record)
            weights[key] = max(weights.get(key, 0), s.weight_bytes)
    return tuple(
        Duplicate(key[0], weights[key], tuple(r.label for r in recs))
        for key, recs in holders.items()
        if len(recs) > 1
    )


def old_processes(processes: tuple[TesseraProcess, ...]) -> tuple[str, ...]:
    """An app window started before another app window of this user is still running: the
    newer one was meant to replace it (a second launch hands over, so two apps mean one was
    left behind — or runs another version)."""
    apps = [p.record for p in processes if p.record.kind is ProcessKind.APP]
    if len(apps) < 2:
        return ()
    newest = max(apps, key=lambda r: r.started)
    lines = []
    for r in apps:
        if r is newest:
            continue
        version = f" (version {r.version})" if r.version and r.version != newest.version else ""
        lines.append(
            f"An older Tessera is still running: {r.label}{version}, started "
            f"{_when(r.started)}, beside {newest.label}, started {_when(newest.started)}."
        )
    return tuple(lines)


def _when(t: float) -> str:
    moment = datetime.datetime.fromtimestamp(t)
    today = datetime.datetime.now().date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M")


def take(*, scan_cpu: bool = True) -> Census:
    """The census now. `scan_cpu` reads every process's memory map (tens of milliseconds):
    a panel refreshed every second may take it less often."""
    me = os.getpid()
    recs = records.read_all()
    processes = tuple(TesseraProcess(r, _rss(r.pid), r.pid == me) for r in recs)
    ours = {r.pid for r in recs} | {me}
    unmeasured: list[str] = []

    gpus: list[GpuOthers] = []
    for g in memory.gpu_snapshots():
        own = (OtherProcess(me, "this process", g.own),) if g.own is not None and me in ours else ()
        tessera = own + tuple(
            OtherProcess(p.pid, p.name, p.used) for p in g.others if p.pid in ours
        )
        others = tuple(OtherProcess(p.pid, p.name, p.used) for p in g.others if p.pid not in ours)
        gpus.append(GpuOthers(g.index, g.name, g.used, g.total, others, tessera))
        if any(p.used is None for p in g.others):
            unmeasured.append(
                f"GPU {g.index}: the driver does not report every process's memory "
                "(Windows WDDM does not)."
            )
    if not gpus:
        unmeasured.append(f"No NVIDIA GPU readings: {memory.nvml_status()}.")

    cpu: tuple[OtherProcess, ...] = ()
    if scan_cpu:
        cpu, unreadable = cpu_onnx_processes(ours)
        if unreadable < 0:
            unmeasured.append(
                "Other programs using ONNX Runtime on the CPU are found on Linux only."
            )
        elif unreadable:
            who = "process" if unreadable == 1 else "processes"
            unmeasured.append(
                f"{unreadable} {who} of other users (or protected ones) could not be checked "
                "for ONNX Runtime."
            )
    return Census(
        processes,
        tuple(gpus),
        cpu,
        duplicates(processes),
        old_processes(processes),
        tuple(unmeasured),
    )


def report(census: Census) -> str:
    """The census as `python -m engine memory` prints it."""
    lines: list[str] = []
    lines.append("Tessera processes:" if census.processes else "No Tessera process is running.")
    for p in census.processes:
        r = p.record
        rss = f"RSS {_mb(p.rss)}" if p.rss is not None else "RSS unknown"
        count = len(r.sessions)
        held = f"{count} model{'s' if count != 1 else ''} loaded" if count else "no model loaded"
        lines.append(f"  {r.label:<24} started {_when(r.started)}  {rss}  {held}")
        for s in r.sessions:
            lines.append(
                f"      {s.model:<32} {s.device:<6} {s.runtime:<9} {_mb(s.weight_bytes)}"
                f"  {Path(s.path).parent}"
            )
    for g in census.gpus:
        lines.append(f"GPU {g.index} ({g.name}): {_mb(g.used)} of {_mb(g.total)} used")
        for o in g.tessera:
            lines.append(f"  Tessera pid {o.pid:<8} {_used(o.used)}")
        if not g.others:
            lines.append("  no other process")
        for o in g.others:
            lines.append(f"  pid {o.pid:<8} {o.name:<24} {_used(o.used)}")
    if census.cpu_onnx:
        lines.append("Other processes with ONNX Runtime loaded (CPU):")
        for o in census.cpu_onnx:
            lines.append(f"  pid {o.pid:<8} {o.name:<24} RSS {_used(o.used)}")
    else:
        lines.append("No other process has ONNX Runtime loaded.")
    for w in census.warnings:
        lines.append(f"warning: {w}")
    for u in census.unmeasured:
        lines.append(f"note: {u}")
    return "\n".join(lines)


def _used(n: int | None) -> str:
    return _mb(n) if n is not None else "not reported"


def as_json(census: Census) -> dict[str, object]:
    return {
        "processes": [
            {**p.record.to_json(), "label": p.label, "rss": p.rss, "this": p.this}
            for p in census.processes
        ],
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "used": g.used,
                "total": g.total,
                "tessera": [vars(o) for o in g.tessera],
                "others": [vars(o) for o in g.others],
            }
            for g in census.gpus
        ],
        "cpu_onnx": [vars(o) for o in census.cpu_onnx],
        "duplicates": [
            {
                "model": d.model,
                "weight_bytes": d.weight_bytes,
                "holders": list(d.holders),
                "message": d.message,
            }
            for d in census.duplicates
        ],
        "old": list(census.old),
        "warnings": list(census.warnings),
        "unmeasured": list(census.unmeasured),
        "sessions": census.sessions,
    }
