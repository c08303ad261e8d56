"""glibc's malloc as the engine sets it (engine/runtime/memory.py): blocks of a few MiB — a
job's tiles and bands, the viewer's rows — get pages of their own, which go back to the system
when they are freed, even after a large block raised glibc's dynamic mmap threshold. Measured in
bytes in a fresh interpreter, since the settings count from the module's import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

MIB = 2**20

# After a 24 MiB block is freed, glibc's default takes blocks up to 24 MiB from the heap; each
# block here is a little larger than the last (tiles of a new size), with an object made after
# it that outlives it (a job's record).
_SCRIPT = """
import ctypes, json
from engine.runtime import memory

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
MIB = 2**20

big = libc.malloc(24 * MIB)
ctypes.memset(big, 1, 24 * MIB)
libc.free(big)
before = memory.rss_split().anonymous
kept = []
for i in range(12):
    size = 8 * MIB + i * 256 * 1024
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    kept.append(libc.malloc(256))
    libc.free(block)
after = memory.rss_split().anonymous
print(json.dumps({"grown": after - before, "fixed": getattr(memory, "FIXED_MMAP_THRESHOLD", None)}))
"""


def _run(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    return {**env, **extra}


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")


@linux_only
def test_freed_blocks_of_a_few_mib_go_back_after_a_large_block_raised_the_threshold() -> None:
    result = _run(_env())
    grown = result["grown"]
    assert isinstance(grown, int)
    # glibc's default keeps the last freed block (11 MiB, measured) at the heap's top, below
    # the trim threshold it raised with the mmap threshold.
    assert grown < 2 * MIB, f"{grown / MIB:.1f} MiB of freed blocks still resident"
    assert result["fixed"] is True


@linux_only
def test_the_persons_own_malloc_setting_wins() -> None:
    assert _run(_env(MALLOC_MMAP_THRESHOLD_=str(64 * MIB)))["fixed"] is False
    assert _run(_env(GLIBC_TUNABLES="glibc.malloc.trim_threshold=0"))["fixed"] is False
