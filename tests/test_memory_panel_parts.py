"""The memory panel accounts for the process: its RAM split into the models' weights, the
window's pictures, the interpreter and libraries, the heap the allocator keeps, and other."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from engine.requests import Operation
from engine.runtime import memory
from gui.memory_parts import file_backed, free_heap, heap_resident, read_parts
from gui.widgets.memory_panel import MemoryPanel
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory

MIB = 2**20
LOAD_MS = 60_000


def test_the_panel_names_each_part_of_this_process_and_they_add_up(qtbot: QtBot) -> None:
    panel = MemoryPanel()
    qtbot.addWidget(panel)
    panel.set_pictures(3, 40 << 20)
    snap = memory.snapshot()
    panel.set_snapshot(snap)
    text = panel.diagnosis()
    lines = text.splitlines()
    for part in (
        "models: ",
        "window pictures: 40 MB",
        "interpreter and libraries: ",
        "heap kept by the allocator: ",
        "other: ",
    ):
        assert any(line.strip().startswith(part) for line in lines), text
    parts = panel.parts
    assert parts is not None and parts.rss == snap.ram.process_rss
    # The named parts are within the RSS (none counts pages the process does not hold), so
    # with "other" they add up to it.
    assert parts.named <= parts.rss + 2 * MIB
    assert abs(parts.named + parts.other - parts.rss) <= 2 * MIB


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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
def test_the_heap_kept_falls_by_what_the_allocator_hands_back() -> None:
    """The panel named glibc's free bytes as "heap kept" although malloc_trim had handed their
    pages back: after Unload all it said tens of MB kept that the process no longer held."""
    blocks = [np.ones(16384, np.uint8) for _ in range(3000)]  # 48 MiB touched, in the heap
    keep = blocks[::2]  # the freed blocks lie between kept ones: they stay with the process
    del blocks
    rss = memory.process_rss()
    kept = read_parts(rss, 0, 0).free_heap
    memory.trim_heap()
    given = rss - memory.process_rss()
    assert given > 8 * MIB  # the pages inside the freed blocks went back to the system
    after = read_parts(memory.process_rss(), 0, 0)
    assert kept - after.free_heap >= 0.7 * given, (kept / MIB, after.free_heap / MIB)
    assert after.named <= after.rss
    del keep


def test_the_heap_is_counted_in_every_piece(tmp_path: Path) -> None:
    """After a large job glibc's main heap was two `[heap]` mappings with another between;
    only the first was counted."""
    smaps = tmp_path / "smaps"
    smaps.write_text(
        "55e0-55f0 rw-p 00000000 00:00 0          [heap]\nSize:  64 kB\nRss:  40 kB\n"
        "VmFlags: rd wr mr mw me ac\n"
        "55f0-5600 rw-p 00000000 00:00 0 \nRss:  8 kB\n"
        "5600-5610 rw-p 00000000 00:00 0          [heap]\nRss:  4 kB\n"
        "7f00-7f10 r-xp 00000000 fe:00 1   /usr/lib/libc.so.6\nRss:  100 kB\n"
    )
    assert heap_resident(smaps) == 44 * 1024
    assert heap_resident(tmp_path / "missing") is None


def test_after_unload_all_the_models_and_pictures_lines_are_about_nothing(
    qtbot: QtBot, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    """The audit's scenario, small: images opened, run, the product at 1:1, Unload all. The
    panel's models line is 0 and its pictures line at most what is on screen; the parts add
    up to the process's RSS."""
    window = make_window(probe_runtimes=False)
    images = [photo(tmp_path / f"shot{i}.png", 640, 420, seed=i) for i in range(3)]
    window.panel.select_operation(Operation.UPSCALE)
    assert window.panel.select_model(str(models / "up2.onnx"))
    window.accept_paths(images, run=False)
    qtbot.waitUntil(lambda: len(window.workspace.sources) == 3, timeout=LOAD_MS)
    window.jobs.run_selected(window.panel.current_operation())
    jobs = window.workspace.jobs
    qtbot.waitUntil(
        lambda: len(jobs) == 3 and all(j.state.ended and j.result for j in jobs.values()),
        timeout=LOAD_MS,
    )
    viewer = window.viewer
    qtbot.waitUntil(lambda: viewer.after is not None, timeout=LOAD_MS)
    viewer.view.actual_size()
    qtbot.waitUntil(lambda: window.tasks.pending() == 0, timeout=LOAD_MS)
    window.show_memory_panel()
    panel = window.memory_panel
    qtbot.waitUntil(lambda: bool(panel.sessions), timeout=LOAD_MS)
    panel.set_snapshot(memory.snapshot())
    loaded = panel.parts
    assert loaded is not None and loaded.models > 0 and loaded.pictures > 0
    qtbot.mouseClick(panel.unload_all_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.sessions, timeout=LOAD_MS)
    qtbot.waitUntil(lambda: window.tasks.pending() == 0, timeout=LOAD_MS)
    panel.set_snapshot(memory.snapshot())
    parts = panel.parts
    assert parts is not None
    # What stays is what is drawn: the two pictures (each also as the view's pixmap) and
    # the details of the part in view.
    view = viewer.view
    screen = view.width() * view.height() * view.devicePixelRatioF() ** 2 * 4
    assert viewer.before is not None and viewer.after is not None
    frames = viewer.before.nbytes + viewer.after.nbytes
    assert parts.models == 0 and parts.pictures <= 2 * frames + 2 * screen, parts
    assert "  models: 0 MB" in panel.diagnosis().splitlines()
    assert parts.named <= parts.rss and parts.named + parts.other == parts.rss


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
