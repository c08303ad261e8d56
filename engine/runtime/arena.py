"""The arenas every session shares, registered once in ONNX Runtime's environment: one for the
CPU (M9, M11) and one per CUDA device (M6).

ORT's default CPU arena (one per session, kNextPowerOfTwo) keeps what the biggest tile needed
for good: its first region is never freed. Tessera registers one arena in the environment
instead, shared by every session through `session.use_env_allocators=1`, with
kSameAsRequested so that a shrink (`cpu:0` on the last run, M2/M10) can hand back every
region no tensor still uses, and `max_mem` from the CPU memory limit (M9) or unlimited.

It is registered once per process and cannot change afterwards: a process that needs another
limit is a new process. With `keep_cpu_arena` and no limit nothing is registered and sessions
keep ORT's own arenas (no CPU hand-back).

Each CUDA device gets one arena too, at the first session Tessera loads there
(`create_and_register_allocator_v2` with the CUDA provider options of DESIGN §3): without it
every session has an arena of its own, and two sessions used in turn each keep their peak
(onnxruntime#29351 shows ~2 GB more per round). The sessions on that device share it through
the same `session.use_env_allocators=1`, and it is shrunk with `gpu:<id>` under the M2/M10
rules like the CPU's. Its `max_mem` (the GPU limit, M9) is fixed at registration; a session
asking for another limit later keeps arenas of its own, so that limit still holds. Where the
registration fails the sessions keep their own arenas, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

log = logging.getLogger(__name__)

USE_ENV_ALLOCATORS = "session.use_env_allocators"

_lock = threading.Lock()
_registered = False
_limit: int | None = None
# CUDA device id → the byte limit its arena was registered with (None: unlimited); a device
# whose registration failed maps to False and is not tried again.
_gpu: dict[int, int | bool | None] = {}


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


def register_gpu_arena(
    device_id: int, provider_options: Mapping[str, str], limit: int | None
) -> bool:
    """Register the shared arena of CUDA device `device_id` (once per device and process);
    True when the sessions there can use it (`session.use_env_allocators=1`).

    `provider_options` are the CUDA provider options of the device's sessions (device id,
    kSameAsRequested, HEURISTIC, the limit): ORT builds the arena's allocator from them.
    """
    import onnxruntime as ort

    with _lock:
        if device_id in _gpu:
            known = _gpu[device_id]
            if known is False:
                return False
            if known != (int(limit) if limit else None):
                log.info(
                    "gpu:%d's shared arena has the limit %s: a session asking for %s keeps "
                    "its own arenas",
                    device_id,
                    known or "none",
                    limit or "none",
                )
                return False
            return True
        info = ort.OrtMemoryInfo(
            "Cuda", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, device_id, ort.OrtMemType.DEFAULT
        )
        # kSameAsRequested (1) so a shrink can return every region; max_mem 0 is unlimited.
        cfg = ort.OrtArenaCfg({"max_mem": int(limit or 0), "arena_extend_strategy": 1})
        try:
            ort.create_and_register_allocator_v2(
                "CUDAExecutionProvider", info, dict(provider_options), cfg
            )
        except Exception as e:  # ORT's errors are not RuntimeError subclasses everywhere
            log.warning("gpu:%d keeps one arena per session: %s", device_id, e)
            _gpu[device_id] = False
            return False
        _gpu[device_id] = int(limit) if limit else None
        log.info("registered the shared arena of gpu:%d (limit %s)", device_id, limit)
        return True


def gpu_arena_registered(device_id: int) -> bool:
    return _gpu.get(device_id, False) is not False


def gpu_arena_shares(device_id: int, limit: int | None) -> bool | None:
    """Whether a session on `device_id` with the GPU limit `limit` can use the device's shared
    arena: True; False when the arena was registered under another limit (the session then
    keeps arenas of its own, so its limit holds, M9); None when there is no shared arena."""
    known = _gpu.get(device_id, False)
    if known is False:
        return None
    return known == (int(limit) if limit else None)
