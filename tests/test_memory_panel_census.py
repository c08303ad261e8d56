"""The memory panel shows what every Tessera process of this user holds, with the warnings of
`python -m engine memory` (issue #22 item 2): a real second process that holds the model this
one holds is named as a duplicate in the window's panel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytestqt.qtbot import QtBot

from gui.main_window import MainWindow

ROOT = Path(__file__).resolve().parents[1]

# A second Tessera process whose record says it holds the model in argv[1], until stdin closes.
HOLDER = """
import sys
from engine.runtime import records
from engine.runtime.records import HeldSession, ProcessKind
records.declare(ProcessKind.RUN)
records.THIS.hold(1, (HeldSession("photo-x4", sys.argv[1], 1, 1, 1, "cpu", "cpu", 67_000_000),))
print("ready", flush=True)
sys.stdin.read()
"""


def _holder(model: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, model],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


def test_the_panel_names_a_model_two_other_tessera_processes_hold(
    qtbot: QtBot, runtime_dir: Path, window: MainWindow, tmp_path: Path
) -> None:
    model = str(tmp_path / "photo-x4.onnx")
    holders = [_holder(model), _holder(model)]
    try:
        window.memory_panel.census = None

        def named() -> bool:
            window.memory.poll()  # every fifth reading takes the census
            text = window.memory_panel.diagnosis()
            return "photo-x4 is loaded twice" in text

        qtbot.waitUntil(named, timeout=20_000)
        text = window.memory_panel.diagnosis()
        assert all(f"pid {h.pid}" in text for h in holders), text
    finally:
        for h in holders:
            h.communicate("")
