"""Screenshots of the model browser and the resume offer (issue #34), for looking at them.

    Xvfb :97 -screen 0 1280x800x24 &  DISPLAY=:97 .venv/bin/python scripts/screenshots_models_resume.py

Writes shots/34-browser-<W>x<H>.png (the browser on the shipped catalogue, a non-commercial
model selected), 34-browser-restore-… (filtered to ×1 restore models), 34-browser-download-…
(a download from a local HTTP server under way, with its progress and Cancel) and
34-resume-… (a window started over a journal of a 1000-job batch killed after 388: the notice
"Resume 612 of 1000 (Photo ×4)"). Settings, data and models are in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class _Slow(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def copyfile(self, source, outputfile) -> None:  # type: ignore[no-untyped-def]
        try:
            while chunk := source.read(16384):  # slow: the shot shows the download under way
                outputfile.write(chunk)
                outputfile.flush()
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the download was cancelled


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "shots")
    args = parser.parse_args()
    import numpy as np
    from PIL import Image
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    from engine.models.browse import refreshed_snapshot_path
    from engine.models.openmodeldb import build
    from engine.requests import Operation
    from engine.samples.upscaler_models import make_upscaler
    from engine.settings import EngineSettings
    from engine.wire import to_json
    from gui.controllers.queue_store import JOURNAL
    from gui.jobs import JobSettings
    from gui.main_window import MainWindow
    from gui.settings import AppSettings

    screen = app.primaryScreen()
    size = screen.size()
    tag = f"{size.width()}x{size.height()}"
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tessera-shots-"))
    models = work / "models"
    models.mkdir()
    make_upscaler(models / "up4.onnx", 4)

    def wait(condition: Callable[[], bool], seconds: float = 60) -> bool:
        end = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > end:
                return False
            app.processEvents()
            time.sleep(0.02)
        return True

    def shot(name: str) -> None:
        wait(lambda: False, 0.6)
        path = args.out / f"34-{name}-{tag}.png"
        screen.grabWindow(0).save(str(path))
        print(path)

    def window(data: Path) -> MainWindow:
        settings = AppSettings(QSettings(str(work / "settings.ini"), QSettings.Format.IniFormat))
        win = MainWindow(settings, engine_settings=EngineSettings(models_dir=models), data_dir=data)
        win.confirm_close = False
        win.setGeometry(screen.availableGeometry())
        win.show()
        wait(lambda: win.inventory is not None)
        return win

    # The resume offer: a 1000-job batch whose window was killed after 388 jobs.
    data = work / "data"
    data.mkdir()
    out = work / "out"
    out.mkdir()
    pixels = Image.fromarray(np.full((8, 8, 3), 120, np.uint8))
    settings = JobSettings(Operation.UPSCALE, str(models / "up4.onnx"), "Photo ×4")
    jobs = [[f"j{n}", [str(work / "in" / f"IMG_{n:04}.jpg")]] for n in range(1000)]
    ends = []
    for n in range(388):
        product = out / f"IMG_{n:04}-x4.png"
        pixels.save(product)
        ends.append([f"j{n}", "done", [str(product)]])
    lines = [
        {
            "t": "batch",
            "id": "j0",
            "label": "Photo ×4",
            "settings": to_json(settings),
            "jobs": jobs,
        },
        {"t": "end", "jobs": ends},
    ]
    (data / JOURNAL).write_text("".join(json.dumps(r) + "\n" for r in lines))
    win = window(data)
    wait(win.notice.action_button.isVisible)
    shot("resume")
    win.close()

    # The browser: the shipped catalogue, a non-commercial model selected.
    win = window(work / "data2")
    win.panel.select_operation(Operation.UPSCALE)
    dialog = win.browse_models()
    dialog.resize(1100, 640)
    private = next(e for e in dialog.shown if e.needs_acceptance and e.file is not None)
    dialog.select(private.id)
    shot("browser")
    dialog.search.setText("")
    dialog.scale.setCurrentIndex(dialog.scale.findData(1))
    dialog.select("1x-DeNoise-realplksr-otf")
    shot("browser-restore")
    dialog.close()

    # A download under way, from a local server holding a catalogue of one model.
    served = work / "served"
    served.mkdir()
    model = make_upscaler(served / "model.onnx", 2)
    import onnx

    proto = onnx.load(str(model))
    proto.doc_string = "x" * 3_000_000  # a file that takes a few seconds at this pace
    onnx.save(proto, str(model))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Slow, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    import hashlib

    blob = model.read_bytes()
    card = {
        "name": "2xLocalTest",
        "author": "tessera",
        "license": "CC-BY-4.0",
        "description": "A local stand-in for a photo upscaler, served from this machine.",
        "scale": 2,
        "architecture": "span",
        "tags": ["photo"],
        "date": "2026-12-05",
        "resources": [
            {
                "platform": "onnx",
                "type": "onnx",
                "size": len(blob),
                "sha256": hashlib.sha256(blob).hexdigest(),
                "urls": [f"http://127.0.0.1:{httpd.server_address[1]}/model.onnx"],
            }
        ],
    }
    snap = build({"2x-LocalTest": card}, {"span": {"name": "SPAN"}}, {}, "2026-12-05")
    refreshed_snapshot_path(models).write_text(json.dumps(snap))
    dialog = win.browse_models()
    dialog.resize(1100, 640)
    dialog.select("2x-LocalTest")
    dialog.get_button.click()
    wait(lambda: dialog.progress.value() >= 30, 60)
    shot("browser-download")
    dialog.cancel_button.click()
    dialog.close()
    win.close()
    httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
