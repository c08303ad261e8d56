"""The window's side of the bench's Unload-all rows (engine/bench/window_memory.py), in the
audit's scenario: a fresh window, offscreen, opens the images given on the command line, runs
them all with the model given (Run), shows the first image's product at 1:1, then Unload all.
It prints its readings as one JSON line and exits: the RSS of the fresh window, with the
product at 1:1, and after Unload all — each with its anonymous and file-backed parts (mapped
files: the libraries imported) and the memory panel's parts of the RSS.

    python -m gui.bench_pictures MODEL LARGE [IMAGE ...]

LARGE is the image whose product is viewed (the audit's 6000×4000, a 12000×8000 product
with a ×2 model); the other images are opened and run beside it, as a person's are.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from engine.requests import Operation
from engine.runtime.memory import rss_split, snapshot
from engine.settings import EngineSettings
from gui.main_window import MainWindow
from gui.memory_parts import heap_usage
from gui.settings import AppSettings

SETTLE_S = 1.0


def _wait(app: QApplication, done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        app.processEvents()
        time.sleep(0.01)
    return True


def _settle(app: QApplication, window: MainWindow, seconds: float = SETTLE_S) -> dict[str, object]:
    """The RSS as a person's window has it once the viewer has asked for what it needs (its
    details wait for a move to settle), the task thread is idle and the event loop has run for
    `seconds` — no trim of the bench's own: only what the window does itself counts."""
    _wait(app, lambda: False, 0.3)
    _wait(app, lambda: window.tasks.pending() == 0, 300)
    _wait(app, lambda: False, seconds)
    _wait(app, lambda: window.tasks.pending() == 0, 300)
    split = rss_split()
    panel = window.memory_panel
    panel.set_snapshot(snapshot())  # the panel's parts of this very RSS
    parts = panel.parts
    return {
        "rss": split.total,
        "anonymous": split.anonymous,
        "files": split.files,
        "parts": {**asdict(parts), "other": parts.other} if parts is not None else None,
        "heap": asdict(heap_usage()),
    }


def _show(app: QApplication, window: MainWindow, image: Path, timeout: float) -> Path | None:
    """Show `image`'s product (as a click on its version would) and wait until it is in view."""
    ws = window.workspace
    key = next(k for k, s in ws.sources.items() if s.paths[0] == image)
    results = ws.results(key)
    if not results:
        return None
    version = results[-1]
    product = version.paths[0]
    viewer = window.viewer
    if viewer.after is None or viewer.after.path != product:
        window.jobs.show(key, version.id)
    ok = _wait(app, lambda: viewer.after is not None and viewer.after.path == product, timeout)
    return product if ok else None


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    model, images = Path(argv[0]), [Path(a) for a in argv[1:]]
    large = images[0]
    app = QApplication.instance() or QApplication(["tessera-bench"])
    assert isinstance(app, QApplication)
    with tempfile.TemporaryDirectory(prefix="tessera-bench-window-") as d:
        store = QSettings(str(Path(d) / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(
            AppSettings(store),
            engine_settings=EngineSettings(models_dir=model.parent),
            data_dir=Path(d) / "data",
            probe_runtimes=False,
            calibrate=False,
        )
        window.confirm_close = False
        window.resize(1280, 800)
        window.show()
        _wait(app, lambda: window.inventory is not None, 30)
        fresh = _settle(app, window, 2.0)
        window.panel.select_operation(Operation.UPSCALE)
        panel = window.panel  # a starter model is offered by its catalog id
        if not (panel.select_model(str(model)) or panel.select_model(model.stem)):
            print(f"{model.name} is not offered", file=sys.stderr)
            window.shutdown()
            return 1
        jobs = window.workspace.jobs
        started = time.monotonic()
        window.accept_paths(images, run=False)
        _wait(app, lambda: len(window.workspace.sources) == len(images), 60)
        window.jobs.run_selected(window.panel.current_operation())
        ended = _wait(
            app,
            lambda: len(jobs) == len(images) and all(j.state.ended for j in jobs.values()),
            900,
        )
        ran_s = time.monotonic() - started
        product = _show(app, window, large, 300) if ended else None
        if product is None:
            print(f"{large.name}'s product was not shown in time", file=sys.stderr)
            window.shutdown()
            return 1
        window.viewer.view.actual_size()
        at_1_1 = _settle(app, window)
        pictures = window.workspace.pictures.total
        window.memory_panel.unload_all_button.click()
        unloaded = _settle(app, window, 2.0)
        print(
            json.dumps(
                {
                    "fresh": fresh,
                    "at_1_1": at_1_1,
                    "unloaded": unloaded,
                    "pictures": pictures,
                    "pictures_unloaded": window.workspace.pictures.total,
                    "ran_s": ran_s,
                    "product": product.name,
                }
            ),
            flush=True,
        )
        window.shutdown()
        window.deleteLater()
        app.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
