"""The CPU arena every session shares (M9, M11): registered once in ONNX Runtime's environment.

ORT's default CPU arena (one per session, kNextPowerOfTwo) keeps what the biggest tile needed
for good: its first region is never freed. Tessera registers one arena in the environment
instead, shared by every session through `session.use_env_allocators=1`, with
kSameAsRequested so that a shrink (`cpu:0` on the last run, M2/M10) can hand back every
region no tensor still uses, and `max_mem` from the CPU memory limit (M9) or unlimited.

It is registered once per process and cannot change afterwards: a process that needs another
limit is a new process. With `keep_cpu_arena` and no limit nothing is registered and sessions
keep ORT's own arenas (no CPU hand-back).
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

USE_ENV_ALLOCATORS = "session.use_env_allocators"

_lock = threading.Lock()
_registered = False
_limit: int | None = None


def register_cpu_arena(limit: int | None) -> None:
    """Register the shared CPU arena (once per process); `limit` in bytes, None = unlimited."""
    global _registered, _limit
    import onnxruntime as ort  # here, not at import: the GUI's window must not wait for ORT

    with _lock:
        if _registered:
            if limit != _limit:
                log.warning(
                    "the CPU memory limit stays at %s until restart (asked for %s)",
                    _limit or "unlimited",
                    limit or "unlimited",
                )
            return
        info = ort.OrtMemoryInfo(
            "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
        )
        # kSameAsRequested (1) so a shrink can return every region; max_mem 0 is unlimited.
        cfg = ort.OrtArenaCfg({"max_mem": int(limit or 0), "arena_extend_strategy": 1})
        ort.create_and_register_allocator(info, cfg)
        _registered = True
        _limit = int(limit) if limit else None


def cpu_arena_registered() -> bool:
    return _registered


def cpu_arena_limit() -> int | None:
    """The shared arena's byte limit, None when unlimited or not registered."""
    return _limit
