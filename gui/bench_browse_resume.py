"""`python -m gui.bench_browse_resume`: the model browser's start and the queue store's cost.

Printed as one JSON object on stdout (engine/bench/browse_resume.py makes them rows of
`python -m engine bench`), measured offscreen in a process of its own, on temporary folders:

- **browser_open_ms**: the model browser opened on the whole shipped catalogue (read, filled,
  shown), the median of a few opens (the first open, which reads the file, on its own);
- **queue**: what the window's queue journal costs: one Run of COUNT jobs recorded (one line,
  synced), each job's ending appended (per job), a sync (one per SYNC_MS whatever the count),
  and the next start's read of the journal with every product checked whole (per job).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PIL import Image
from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import QApplication

from engine.models.browse import bundled_snapshot_path, load_snapshot
from engine.requests import Operation


class _Jobs(QObject):
    """Stands in for the jobs controller: the store needs only its signal and its count."""

    batchQueued = Signal(object, list)

    def waiting(self) -> int:
        return 1  # never idle: the journal stays for the read below


def browser_open_ms(app: QApplication, home: Path, opens: int) -> dict[str, float]:
    from gui.controllers.models import ModelsController
    from gui.settings import AppSettings
    from gui.tasks import TaskThread
    from gui.widgets.model_browser import ModelBrowser

    tasks = TaskThread()
    models = ModelsController(tasks, lambda: home / "models")
    settings = AppSettings(QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat))
    times = []
    for _ in range(opens):
        began = time.perf_counter()
        dialog = ModelBrowser(models, settings)
        dialog.show()
        app.processEvents()
        times.append((time.perf_counter() - began) * 1000)
        rows = dialog.table.rowCount()
        dialog.close()
        dialog.deleteLater()
        app.processEvents()
    return {
        "first_ms": times[0],
        "median_ms": statistics.median(times[1:] or times),
        "rows": rows,
        "models": len(load_snapshot().entries),
        "snapshot_bytes": bundled_snapshot_path().stat().st_size,
    }


def queue_costs(home: Path, count: int) -> dict[str, float]:
    from gui.controllers.queue_store import QueueStore, read_journal
    from gui.jobs import JobSettings
    from gui.tasks import TaskThread
    from gui.workspace import Workspace

    data = home / "data"
    products = home / "out"
    products.mkdir()
    pixels = Image.new("RGB", (64, 48), (90, 120, 30))
    paths = []
    for n in range(count):
        path = products / f"img{n:04}-x4.png"
        pixels.save(path)
        paths.append(path)
    jobs = _Jobs()
    store = QueueStore(data, Workspace(), jobs, TaskThread())  # type: ignore[arg-type]
    settings = JobSettings(Operation.UPSCALE, str(home / "up.onnx"), "Photo ×4")
    batch: list[tuple[str, tuple[Path, ...]]] = [
        (f"job-{n}", (home / "in" / f"img{n:04}.png",)) for n in range(count)
    ]
    began = time.perf_counter()
    store.record_batch(settings, batch)
    record_ms = (time.perf_counter() - began) * 1000
    began = time.perf_counter()
    for n in range(count):  # what `_on_ended` writes for one finished job
        store._append({"t": "end", "jobs": [[f"job-{n}", "done", [str(paths[n])]]]}, sync=False)
    append_us = (time.perf_counter() - began) / count * 1e6
    store._unsynced = True
    began = time.perf_counter()
    store.sync()
    sync_ms = (time.perf_counter() - began) * 1000
    size = store.path.stat().st_size
    began = time.perf_counter()
    left = read_journal(store.path)
    read_ms = (time.perf_counter() - began) * 1000
    assert not left, "every job of the journal is done and whole"
    return {
        "jobs": count,
        "record_batch_ms": record_ms,
        "end_append_us_per_job": append_us,
        "sync_ms": sync_ms,
        "journal_bytes_per_job": size / count,
        "read_ms_per_job": read_ms / count,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="jobs in the recorded batch")
    parser.add_argument("--opens", type=int, default=5, help="browser opens measured")
    args = parser.parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    with tempfile.TemporaryDirectory(prefix="tessera-bench-browse-") as tmp:
        home = Path(tmp)
        (home / "models").mkdir()
        figures = {
            "browser": browser_open_ms(app, home, args.opens),
            "queue": queue_costs(home, args.count),
        }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
