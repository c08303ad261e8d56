"""Tessera in child processes, for the tests that need a process of its own: the engine's
command line, an app ended as a session would end it, and a user whose folder modes bind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def engine_cli(
    *args: str | Path,
    cwd: Path | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """`python -m engine ARGS…` in a child, this checkout first on its path; `prefix` is a
    command that runs it (another user's, say)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "engine", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=cwd or ROOT,
    )


def end_process(process: subprocess.Popen[str]) -> None:
    """End a started app with SIGTERM, as a person's session would (killed if it does not go
    within 30 s), and collect its output."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def drop_root_override() -> tuple[str, ...]:
    """A command prefix under which a folder's mode binds this user (root included)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root ignores folder modes and setpriv is missing to drop that privilege")
    return (setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search")
