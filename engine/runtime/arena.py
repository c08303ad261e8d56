"""The CPU arena every session shares (M9): registered once in ONNX Runtime's environment.

`max_mem` caps it; kSameAsRequested lets a shrink hand back every region. It cannot change
once registered, so a process that needs another limit is a new process.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

# The CPU arena limit (M9) is registered once per process and cannot change afterwards.
_cpu_arena_lock = threading.Lock()
_cpu_arena_limit: int | None = None


def register_cpu_arena(limit: int) -> None:
    global _cpu_arena_limit
    import onnxruntime as ort

    with _cpu_arena_lock:
        if _cpu_arena_limit is not None:
            if _cpu_arena_limit != limit:
                log.warning(
                    "CPU memory limit stays at %d bytes until restart (asked for %d)",
                    _cpu_arena_limit,
                    limit,
                )
            return
        info = ort.OrtMemoryInfo(
            "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
        )
        # kSameAsRequested (1) so a shrink can return every region, and max_mem for the cap.
        cfg = ort.OrtArenaCfg({"max_mem": int(limit), "arena_extend_strategy": 1})
        ort.create_and_register_allocator(info, cfg)
        _cpu_arena_limit = int(limit)


def cpu_arena_limit() -> int | None:
    return _cpu_arena_limit
