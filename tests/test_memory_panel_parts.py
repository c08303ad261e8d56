"""The memory panel accounts for the process: its RAM split into the models' weights, the
window's pictures, the interpreter and libraries, the heap the allocator keeps, and other."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from engine.runtime import memory
from gui.memory_parts import file_backed, free_heap, read_parts
from gui.widgets.memory_panel import MemoryPanel
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard


def test_the_panel_names_each_part_of_this_process_and_they_add_up(qtbot: QtBot) -> None:
    panel = MemoryPanel()
    qtbot.addWidget(panel)
    panel.set_pictures(3, 40 << 20)
    snap = memory.snapshot()
    panel.set_snapshot(snap)
    text = panel.diagnosis()
    for part in (
        "models",
        "window pictures 40 MB",
        "interpreter and libraries",
        "heap kept by the allocator",
        "other",
    ):
        assert part in text, text
    parts = panel.parts
    assert parts is not None and parts.rss == snap.ram.process_rss
    named = parts.models + parts.pictures + parts.code + parts.free_heap + parts.other
    assert named >= parts.rss  # every byte is in a part ("other" is never negative)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
def test_the_allocator_s_free_heap_grows_when_freed_memory_is_kept() -> None:
    code, before = file_backed(), free_heap()
    assert code is not None and code > 10 << 20  # Python, Qt and numpy are mapped
    assert before is not None
    # Many small blocks freed inside the heap (below the mmap threshold) stay with the process.
    # Measured against the heap with the blocks in use: a process that already kept freed
    # memory serves them from it, so the heap before them can be larger still.
    blocks = [np.ones(8192, np.uint8) for _ in range(4000)]
    keep = blocks[::2]
    in_use = free_heap()
    del blocks
    held = free_heap()
    assert in_use is not None and held is not None and held >= in_use + (8 << 20)
    memory.trim_heap()
    assert read_parts(0, 0, 0).measured
    del keep


def test_the_whole_diagnosis_can_be_read_in_a_low_panel(qtbot: QtBot) -> None:
    """At a low dock the diagnosis was clipped: its last lines (the parts of the RAM) could
    not be read at all. The label keeps the height its text needs; the side scrolls."""
    panel = MemoryPanel()
    qtbot.addWidget(panel)
    panel.set_pictures(3, 40 << 20)
    panel.set_snapshot(memory.snapshot())
    panel.resize(700, 100)
    panel.show()
    qtbot.waitExposed(panel)
    label = panel.summary
    needed = label.heightForWidth(label.width())
    assert needed > panel.height()  # the text is longer than the panel is high
    assert label.height() >= needed
