"""The window's side of the bench's picture rows (engine/bench/window_memory.py): a real
window, offscreen, runs an upscale of the image given on the command line with the model given,
shows its product beside the image (fitted, at 1:1 and zoomed), then Unload all; it prints its
RSS at each step as one JSON line and exits: each reading the RSS, its anonymous part and its
file-backed part (mapped files: the libraries imported).

    python -m gui.bench_pictures IMAGE MODEL [SMALL]

With SMALL (a small image), its job runs first: the RSS after it is the window with the engine
loaded and a job done (ONNX Runtime's libraries, the session), so what the large product adds
to that is told apart.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from engine.requests import Operation
from engine.runtime.memory import rss_split, trim_heap
from engine.settings import EngineSettings
from gui.main_window import MainWindow
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


def _settle(app: QApplication, window: MainWindow, seconds: float = SETTLE_S) -> dict[str, int]:
    """RSS once the viewer has asked for what it needs (its details wait for a move to
    settle), the task thread is idle and the event loop has run for `seconds`."""
    _wait(app, lambda: False, 0.3)
    _wait(app, lambda: window.tasks.pending() == 0, 300)
    _wait(app, lambda: False, seconds)
    trim_heap()
    split = rss_split()
    return {"rss": split.total, "anonymous": split.anonymous, "files": split.files}


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    picture, model = Path(argv[0]), Path(argv[1])
    small = Path(argv[2]) if len(argv) == 3 else None
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
        idle = _settle(app, window, 2.0)
        window.panel.select_operation(Operation.UPSCALE)
        if not window.panel.select_model(str(model)):
            print(f"{model.name} is not offered", file=sys.stderr)
            window.shutdown()
            return 1
        jobs = window.workspace.jobs
        engine_loaded, ended = idle, False
        for image in (small, picture):
            if image is None:
                continue
            if image == picture and small is not None:
                engine_loaded = _settle(app, window, 1.0)  # the engine loaded, a job done
            started = time.monotonic()
            window.accept_paths([image], run=False)
            key = next(k for k, s in window.workspace.sources.items() if s.paths[0] == image)
            window.jobs.run_one(key, window.panel.current_operation())
            ended = _wait(
                app, lambda: bool(jobs) and all(j.state.ended for j in jobs.values()), 900
            )
        viewer = window.viewer
        name = f"{picture.stem}-{model.stem}.png"  # wherever the output step put it
        products = [p.path for j in jobs.values() if j.result for p in j.result.products]
        product = next((p for p in products if p.name == name), picture.with_name(name))
        shown = ended and _wait(
            app, lambda: viewer.after is not None and viewer.after.path == product, 300
        )
        if not shown:
            print(f"{product.name} was not shown in time", file=sys.stderr)
            window.shutdown()
            return 1
        shown_s = time.monotonic() - started
        fit = _settle(app, window)
        budget = window.workspace.pictures
        readings = [fit]
        view = viewer.view
        for step in (view.actual_size, view.zoom_in, view.zoom_out, view.zoom_out):
            step()
            readings.append(_settle(app, window, 0.5))
        pictures = budget.total
        window.memory_panel.unload_all_button.click()
        unloaded = _settle(app, window, 2.0)
        print(
            json.dumps(
                {
                    "idle": idle,
                    "engine_loaded": engine_loaded,
                    "fit": fit,
                    "in_view": max(readings, key=lambda r: r["rss"]),
                    "unloaded": unloaded,
                    "pictures": pictures,
                    "pictures_unloaded": budget.total,
                    "shown_s": shown_s,
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
