"""What this process holds, written where every other Tessera process can read it (M6).

Each Tessera process — the app, a standalone `engine run`, the bench, a script holding an
Engine — keeps one small JSON record in the private runtime folder
(`engine.settings.private_runtime_dir()`, `processes/<pid>.json`): its pid, its real start
time (so a recycled pid is never taken for it), its kind, and per loaded session the model's
identity, device, runtime and weight bytes. The session cache (sessions.py) reports each
load and unload here; the record is rewritten atomically (a temp file renamed over it) and
removed at exit (atexit; the command line's stop path calls `withdraw` before its os._exit).
A record whose process is gone — killed, or ended by a signal nobody handled — is ignored and
swept by whoever reads the folder.

`python -m engine memory` and the memory panel read the records through census.py.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import stat
import threading
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import psutil

from engine.settings import private_runtime_dir

log = logging.getLogger(__name__)

SCHEMA = 1
START_SLACK_S = 1.0  # create_time is derived from clock ticks since boot: equal within this
MAX_RECORD_BYTES = 1 << 20  # a record is a few hundred bytes per session: more is not one


class ProcessKind(Enum):
    APP = "app"
    RUN = "engine run"
    BENCH = "bench"
    SCRIPT = "script"  # any other program holding an Engine (a script, a test)


@dataclass(frozen=True)
class HeldSession:
    """One loaded session of a process, as recorded."""

    model: str  # the model's name: the file's stem ("realesrgan-x4plus")
    path: str  # the model file, absolute
    size: int  # the file's identity: size, mtime and inode at load
    mtime_ns: int
    inode: int
    device: str  # "cpu", "gpu:0"
    runtime: str  # "cpu", "cuda"…
    weight_bytes: int

    @property
    def same_model_key(self) -> tuple[str, int]:
        """Two sessions of one model, even from two copies of its file: name and byte count."""
        return (self.model, self.size)


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    started: float  # the process's start time (seconds since the epoch), from the kernel
    kind: ProcessKind
    sessions: tuple[HeldSession, ...]
    version: str = ""
    endpoint: str = ""  # the app's instance socket, so a command line can find it (no Qt)

    @property
    def label(self) -> str:
        """ "the app (pid 123)", "engine run (pid 456)"."""
        what = "the app" if self.kind is ProcessKind.APP else self.kind.value
        return f"{what} (pid {self.pid})"

    @property
    def weight_bytes(self) -> int:
        return sum(s.weight_bytes for s in self.sessions)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind.value
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_json(cls, data: Any) -> ProcessRecord:
        """Raises ValueError (or KeyError/TypeError) for anything that is not a record."""
        if not isinstance(data, dict):
            raise TypeError(f"a record is a JSON object, not {type(data).__name__}")
        if data.get("schema") != SCHEMA:
            raise ValueError(f"record schema {data.get('schema')!r}")
        sessions = tuple(
            HeldSession(
                model=str(s["model"]),
                path=str(s["path"]),
                size=int(s["size"]),
                mtime_ns=int(s["mtime_ns"]),
                inode=int(s["inode"]),
                device=str(s["device"]),
                runtime=str(s["runtime"]),
                weight_bytes=int(s["weight_bytes"]),
            )
            for s in data["sessions"]
        )
        return cls(
            pid=int(data["pid"]),
            started=float(data["started"]),
            kind=ProcessKind(data["kind"]),
            sessions=sessions,
            version=str(data.get("version", "")),
            endpoint=str(data.get("endpoint", "")),
        )


def records_dir() -> Path | None:
    base = private_runtime_dir()
    if base is None:
        return None
    folder = base / "processes"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder


def process_start(pid: int) -> float | None:
    """When process `pid` started (the kernel's figure), None when there is no such process."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def alive(record: ProcessRecord) -> bool:
    """The recorded process still runs: its pid exists and started when the record says."""
    started = process_start(record.pid)
    return started is not None and abs(started - record.started) <= START_SLACK_S


class _ThisProcess:
    """This process's record: what each session cache holds, written on every change."""

    def __init__(self) -> None:
        # Re-entrant: a session's finaliser may run (garbage collection) in the middle of a
        # write on the same thread and call hold(); it must not wait for itself.
        self._lock = threading.RLock()
        self._writing = False  # a write is under way on the thread holding the lock
        self._dirty = False  # hold() came in during that write: write again after it
        self._kind: ProcessKind | None = None
        self._endpoint = ""
        self._held: dict[int, tuple[HeldSession, ...]] = {}  # per session cache
        self._path: Path | None = None  # the record file, once written
        self._pid = os.getpid()
        self._started: float | None = None
        self._hooked = False
        self._broken = False  # the folder cannot be used: said once in the log, then quiet
        self._ended = False

    def declare(self, kind: ProcessKind, endpoint: str = "") -> None:
        """Say what this process is (and where the app listens); its record is written now,
        even with nothing loaded."""
        with self._lock:
            self._kind = kind
            self._endpoint = endpoint
            self._write()

    def hold(self, owner: int, sessions: tuple[HeldSession, ...]) -> None:
        """What the session cache `owner` (its id) holds now; () when it holds nothing."""
        with self._lock:
            if sessions:
                self._held[owner] = sessions
            else:
                self._held.pop(owner, None)
            if self._kind is None and not self._held and self._path is None:
                return  # an undeclared process that never loaded anything keeps no record
            if self._writing:
                self._dirty = True  # re-entered from a finaliser: the outer write redoes it
                return
            self._write()

    def forget(self, owner: int) -> None:
        """A session cache that was garbage-collected: what it held goes from the record at
        the next write. No lock: the finaliser may run inside a write that holds it (a GC in
        the middle of `declare`), which would wait for itself for good."""
        self._held.pop(owner, None)

    def record(self) -> ProcessRecord:
        with self._lock:
            return self._record()

    def withdraw(self) -> None:
        """Remove the record (at exit; a process that ends by os._exit calls this first)."""
        # No lock: a signal handler may call this while a write holds it.
        self._ended = True  # nothing is written after this (finalisers at exit, say)
        path, self._path = self._path, None
        if path is not None and os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                path.unlink()

    def _record(self) -> ProcessRecord:
        from engine import __version__

        if self._started is None:
            self._started = process_start(self._pid) or 0.0
        sessions = tuple(s for held in self._held.values() for s in held)
        kind = self._kind or ProcessKind.SCRIPT
        return ProcessRecord(self._pid, self._started, kind, sessions, __version__, self._endpoint)

    def _write(self) -> None:
        self._writing = True
        try:
            self._dirty = True
            while self._dirty:
                self._dirty = False
                self._write_once()
        finally:
            self._writing = False

    def _write_once(self) -> None:
        if self._broken or self._ended or os.getpid() != self._pid:
            return  # a forked child is not the process this record describes
        folder = records_dir()
        if folder is None:
            self._broken = True
            log.warning("no private runtime folder: this process's models are not recorded")
            return
        path = folder / f"{self._pid}.json"
        temp = folder / f".{self._pid}.{threading.get_ident()}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._record().to_json(), f)
            os.replace(temp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                temp.unlink()
            self._broken = True
            log.warning("cannot write this process's record in %s: %s", folder, e)
            return
        self._path = path
        self._hook_exit()

    def _hook_exit(self) -> None:
        # The command line's and the app's signal handlers end through a normal exit, so
        # atexit covers them; an os._exit calls withdraw() first. No SIGTERM handler is added
        # here: a Python handler waits for the main thread (an ORT run, Qt's event loop), and
        # a process killed outright leaves a record that readers ignore and sweep.
        if not self._hooked:
            self._hooked = True
            atexit.register(self.withdraw)


THIS = _ThisProcess()


def declare(kind: ProcessKind, endpoint: str = "") -> None:
    THIS.declare(kind, endpoint)


def withdraw() -> None:
    THIS.withdraw()


def read_all(*, sweep: bool = True) -> tuple[ProcessRecord, ...]:
    """The records of every live Tessera process of this user, oldest first; the records of
    processes that are gone (or whose pid now belongs to another process) are removed."""
    folder = records_dir()
    if folder is None:
        return ()
    out: list[ProcessRecord] = []
    for path in sorted(folder.iterdir()):
        name = path.name
        if name.startswith("."):
            # A temp file left by a writer that died between writing and renaming.
            pid = _pid_in(name.split(".")[1] if name.count(".") >= 2 else "")
            if sweep and pid is not None and process_start(pid) is None:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        if not name.endswith(".json"):
            continue
        try:
            data = _read_record(path)
        except _NotARecord as e:  # no writer of ours made it: swept whatever its pid
            log.info("ignoring %s, which is not a process record: %s", name, e)
            if sweep:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        try:
            record = ProcessRecord.from_json(data)
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as e:
            log.info("ignoring the unreadable process record %s: %s", name, e)
            pid = _pid_in(name[: -len(".json")])
            if sweep and pid is not None and process_start(pid) is None:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        if alive(record):
            out.append(record)
        elif sweep:
            log.info("removing the record of %s, which is no longer running", record.label)
            with contextlib.suppress(OSError):
                path.unlink()
    return tuple(sorted(out, key=lambda r: (r.started, r.pid)))


class _NotARecord(Exception):
    """A file in the records folder that no Tessera process wrote as its record."""


def _read_record(path: Path) -> Any:
    """The JSON in `path`, read without ever waiting: a FIFO or a device would block an open
    or a read for good (`engine memory` hung), so the file is opened non-blocking, without
    following a link, and read only when it is a regular file under `MAX_RECORD_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise _NotARecord(e.strerror or str(e)) from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotARecord("not a regular file")
        if info.st_size > MAX_RECORD_BYTES:
            raise _NotARecord(f"{info.st_size} bytes")
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    except OSError as e:
        raise _NotARecord(e.strerror or str(e)) from e
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise _NotARecord("too large")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _NotARecord(f"not JSON ({e})") from e
    if not isinstance(parsed, dict):
        raise _NotARecord(f"JSON {type(parsed).__name__}, not an object")
    return parsed


def _pid_in(text: str) -> int | None:
    return int(text) if text.isdigit() else None
