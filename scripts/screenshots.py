"""Screenshots of the window's main states, for looking at the layout (not a test).

    Xvfb :99 -screen 0 1280x800x24 &  DISPLAY=:99 .venv/bin/python scripts/screenshots.py
    Xvfb :98 -screen 0 1024x640x24 &  DISPLAY=:98 .venv/bin/python scripts/screenshots.py

Uses the real starter models of the default models folder and sample photos from scikit-image,
with settings in a temporary folder. Writes shots/13-<state>-<W>x<H>.png: empty, running,
done-compare, failed, output-step, memory-panel (and notice), and for issue 14
shots/14-<state>-<W>x<H>.png: preview (a view half refined, "previewing tile n/m") and chain
(remove background → upscale, the chain in the strip). `--states preview,chain` takes only
those. `joined` (shots/35-joined-<W>x<H>.png): the window's own job running and a
`python -m engine run` that joined it, its row marked with its pid. `--states
memory-after-unload` writes docs/images/memory-after-unload-<W>x<H>.png (the memory panel
after Unload all, issue 35). The screen is grabbed whole, so dialogs show.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def photos(folder: Path) -> list[Path]:
    from skimage import data

    made = []
    for name, pixels, size in (
        ("IMG_0001.jpg", data.astronaut(), (320, 320)),
        ("IMG_0002.jpg", data.chelsea(), (360, 240)),
        ("IMG_0003.jpg", np.rot90(data.coffee()), (200, 300)),  # a portrait among landscapes
    ):
        path = folder / name
        Image.fromarray(pixels).resize(size, Image.Resampling.LANCZOS).save(path, quality=92)
        made.append(path)
    return made


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "shots")
    parser.add_argument(
        "--states",
        default=(
            "empty,running,done-compare,failed,output-step,memory-panel,notice,preview,chain,joined"
        ),
    )
    args = parser.parse_args()
    wanted = set(args.states.split(","))

    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    from engine.options import OutputFormat, OutputOptions
    from engine.requests import Operation
    from gui.main_window import MainWindow
    from gui.messages import Topic
    from gui.settings import AppSettings
    from gui.widgets.export_dialog import ExportDialog

    screen = app.primaryScreen()
    size = screen.size()
    tag = f"{size.width()}x{size.height()}"
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tessera-shots-"))
    store = QSettings(str(work / "settings.ini"), QSettings.Format.IniFormat)
    settings = AppSettings(store)
    settings.pasted_dir = work / "Pictures"
    window = MainWindow(settings, data_dir=work / "data")
    window.confirm_close = False
    window.setGeometry(screen.availableGeometry())
    window.show()

    def wait(condition: Callable[[], bool], seconds: float = 120) -> bool:
        end = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > end:
                return False
            app.processEvents()
            time.sleep(0.02)
        return True

    def settle(seconds: float = 0.6) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.02)

    def shot(state: str, issue: int = 13) -> None:
        settle()
        path = args.out / f"{issue}-{state}-{tag}.png"
        screen.grabWindow(0).save(str(path))
        print(path)

    wait(lambda: window.inventory is not None)
    wait(lambda: window.panel.runtime_hint.text() != "Checking which runtimes work here…", 30)
    if "empty" in wanted:
        shot("empty")

    images = photos(work)
    window.accept_paths(images)
    if "memory-after-unload" in wanted:
        # The audit's scenario (issue 35): 3 images run ×2, a product at 1:1, Unload all; the
        # memory panel then names each part of the RSS. Written for docs/window.md.
        window.panel.select_operation(Operation.UPSCALE)
        window.panel.select_model("realesrgan-animevideov3-x2")
        window.run_selected()
        wait(lambda: len(window.workspace.jobs) == 3 and not window.jobs.active(), 300)
        wait(lambda: window.viewer.after is not None, 60)
        settle(1.5)
        window.viewer.view.actual_size()
        window.show_memory_panel()
        settle(1.5)
        window.memory_panel.unload_all_button.click()
        wait(lambda: not window.memory_panel.sessions, 30)
        settle(2.5)
        page = ROOT / "docs" / "images" / f"memory-after-unload-{tag}.png"
        screen.grabWindow(0).save(str(page))
        print(page)
    if "running" in wanted:
        window.panel.select_model("realesrgan-x4plus")
        window.run_selected()
        wait(lambda: any(j.first_run for j in window.workspace.jobs.values()), 180)
        settle(2.5)
        shot("running")
        window.jobs.cancel_all()
        wait(lambda: not window.jobs.active(), 60)
        window.clear_finished()

    if wanted & {"done-compare", "output-step", "memory-panel"}:
        window.panel.select_model("realesrgan-animevideov3-x2")
        window.run_selected()
        wait(lambda: not window.jobs.active() and bool(window.workspace.jobs), 300)
        window.panel.select_model("realesrgan-x4plus-anime")
        window.run_one(str(images[0]))
        wait(lambda: not window.jobs.active(), 300)
        settle(1.0)
    if "done-compare" in wanted:
        window.inputs.select(str(images[0]))
        window.view.choose_input(str(images[0]), True)
        settle(1.0)
        window.viewer.view.set_split(0.45)
        shot("done-compare")

    if "failed" in wanted:
        broken = work / "truncated.png"
        whole = work / "whole.png"
        Image.fromarray(np.zeros((200, 300, 3), np.uint8) + 90).save(whole)
        broken.write_bytes(whole.read_bytes()[:300])
        outcome = window.accept_paths([broken])
        if outcome.sources:
            window.run_one(outcome.sources[0].key)
        wait(lambda: not window.jobs.active(), 60)
        shot("failed")

    if "output-step" in wanted:
        window.inputs.select(str(images[1]))
        window.view.choose_input(str(images[1]), True)
        settle(1.0)
        version = window._viewed()
        source = window.workspace.source(str(images[1]))
        if version is not None and version.path is not None and source is not None:
            dialog = ExportDialog(
                version.path,
                (source.width, source.height),
                window.panel.current_operation(),
                None,
                OutputOptions(OutputFormat.JPEG, 90, factor=2.0),
                window,
            )
            QTimer.singleShot(4000, dialog.reject)
            QTimer.singleShot(900, lambda: shot("output-step"))
            dialog.exec()

    if "memory-panel" in wanted:
        window.inputs.select(str(images[0]))
        window.view.choose_input(str(images[0]), True)
        window.show_memory_panel()
        settle(1.5)
        shot("memory-panel")

    if "notice" in wanted:
        frames = []
        for i in range(4):
            path = work / f"frame_{i:03d}.png"
            Image.fromarray(np.full((60, 80, 3), 40 * i, np.uint8)).save(path)
            frames.append(path)
        window.memory_dock.hide()
        window.accept_paths(frames)
        shot("notice")

    if "preview" in wanted:
        # A photo at 100 % of the ×2 product, Preview on: caught while it refines the view.
        from skimage import data

        big = work / "IMG_0100.jpg"
        Image.fromarray(data.chelsea()).resize((900, 600), Image.Resampling.LANCZOS).save(
            big, quality=92
        )
        window.memory_dock.hide()
        window.accept_paths([big])
        wait(lambda: window.viewer.before is not None and window.viewer.before.path == big, 30)
        window.panel.select_operation(Operation.UPSCALE)
        window.panel.select_model("realesrgan-animevideov3-x2")
        window.set_preview(True)
        wait(lambda: window.viewer.view.canvas_size().width() == 1800, 120)
        window.viewer.view.actual_size()
        window.viewer.view.set_split(0.3)
        wait(
            lambda: (
                len(window.preview.drawn) >= 2
                and window.viewer.preview_status.startswith("Previewing tile")
            ),
            120,
        )
        shot("preview", 14)
        window.set_preview(False)

    if "chain" in wanted:
        # Remove the background, use the cut-out as the next input, upscale it: the strip
        # shows Original, the cut-out, and the cut-out ×2.
        window.notice.clear_topic(Topic.INPUTS)
        window.inputs.select(str(images[0]))
        window.view.choose_input(str(images[0]), True)
        window.panel.select_operation(Operation.REMOVE_BACKGROUND)
        window.panel.select_model("u2netp")
        window.run_one(str(images[0]))
        wait(lambda: not window.jobs.active(), 120)
        settle(1.0)
        window.continue_from_result()
        window.panel.select_operation(Operation.UPSCALE)
        window.panel.select_model("realesrgan-animevideov3-x2")
        window.run_one(str(images[0]))
        wait(lambda: not window.jobs.active(), 300)
        settle(1.0)
        window.viewer.view.set_split(0.5)
        shot("chain", 14)

    if "joined" in wanted:
        joined_shot(window, work, images, wait, lambda: shot("joined", 35))

    window.close()
    return 0


def joined_shot(
    window: object,
    work: Path,
    images: list[Path],
    wait: Callable[..., bool],
    shoot: Callable[[], None],
) -> None:
    """A command line joins the window: its row runs, marked with its pid, the window's own
    job queued behind it."""
    import os
    import subprocess

    from engine.settings import join_socket_path
    from gui.controllers.joined import JoinedRequests
    from gui.main_window import MainWindow

    assert isinstance(window, MainWindow)
    runtime = work / "run"
    runtime.mkdir(mode=0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)  # this window's socket, not a real app's
    os.environ["TESSERA_INSTANCE_NAME"] = "screenshots"
    served = JoinedRequests(window.workspace, window.engine, window)
    served.listen(join_socket_path())
    window.memory_dock.hide()
    window.jobs.cancel_all()
    window.clear_finished()
    models = window.engine.settings.resolved_models_dir()
    out = work / "from-the-terminal"
    from skimage import data

    theirs = work / "terminal" / "IMG_0200.jpg"  # large enough to be caught mid-way
    theirs.parent.mkdir()
    Image.fromarray(data.chelsea()).resize((1200, 800), Image.Resampling.LANCZOS).save(theirs)
    cli = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", "upscale", str(theirs), "--model",
         "realesrgan-x4plus", "--models-dir", str(models), "--out", str(out), "--quiet"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    wait(
        lambda: any(
            j.origin and j.progress is not None and j.progress.run >= 2
            for j in window.workspace.jobs.values()
        ),
        180,
    )
    window.panel.select_model("realesrgan-x4plus")
    window.run_one(str(images[0]))
    wait(lambda: False, 2.5)
    shoot()
    window.jobs.cancel_all()
    wait(lambda: cli.poll() is not None, 60)
    served.close()


if __name__ == "__main__":
    raise SystemExit(main())
