"""The window's live preview of what the viewer shows, and chained operations: the window with a
real engine thread on the offscreen platform, real ORT sessions on models built here.

- a pan cancels the running preview, and only the newest preview is drawn (the race made
  real: an older preview's pixels queued behind a model change are never drawn);
- the preview's pixels equal the same region of the full product, and the job reuses them;
- remove background → upscale as a chain keeps the cut-out's alpha, the strip shows the
  chain, and the chain runs again on other images;
- a preview asked for during a job waits for it and never creates a second session; a job
  asked for during a preview goes first and the preview comes back after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from engine.api import Engine
from engine.previews import PreviewPatch, PreviewRequest, PreviewResult
from engine.requests import (
    Operation,
    OperationCancellation,
    OperationRequest,
    ProductKind,
    Result,
)
from engine.settings import EngineSettings
from gui.jobs import JobState
from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.model_files import slow, synthetic, u2net, upscaler
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import as_array, wait_ended

JOB_MS = 60_000


MODELS = {
    "up2.onnx": upscaler(2),
    "net4.onnx": synthetic(features=8, blocks=3),
    "slow.onnx": slow(300),
    "slower.onnx": slow(1200),  # about 1 s a 256-px tile here
    "u2netp.onnx": u2net,
}


class Events:
    """Every preview and job signal of the window's engine thread, in order."""

    def __init__(self, win: MainWindow) -> None:
        self.log: list[tuple[str, object]] = []
        e = win.engine
        for name in (
            "previewStarted",
            "previewPatched",
            "previewFinished",
            "previewFailed",
            "previewCancelled",
            "operationStarted",
            "operationFinished",
            "operationCancelled",
        ):
            getattr(e, name).connect(lambda payload, n=name: self.log.append((n, payload)))

    def of(self, name: str) -> list[object]:
        return [p for n, p in self.log if n == name]

    def index(self, name: str, match: Callable[[object], bool]) -> int:
        return next(i for i, (n, p) in enumerate(self.log) if n == name and match(p))

    def finished(self, generation: int) -> PreviewResult | None:
        done = [r for r in self.of("previewFinished") if isinstance(r, PreviewResult)]
        return next((r for r in done if r.generation == generation), None)


def use(win: MainWindow, models: Path, name: str, operation: Operation = Operation.UPSCALE) -> None:
    win.panel.select_operation(operation)
    # A file named as a catalog model is offered under its catalog id.
    chosen = win.panel.select_model(str(models / name)) or win.panel.select_model(Path(name).stem)
    assert chosen, f"{name} is not offered"


def open_image(qtbot: QtBot, win: MainWindow, path: Path) -> None:
    win.accept_paths([path])
    qtbot.waitUntil(
        lambda: win.viewer.before is not None and win.viewer.before.path == path, timeout=10_000
    )


def wait_preview(qtbot: QtBot, win: MainWindow, events: Events) -> PreviewResult:
    """The newest preview's result, once the view has stopped moving (the debounce)."""
    qtbot.waitUntil(lambda: not win.preview.waiting, timeout=5000)
    qtbot.waitUntil(lambda: events.finished(win.preview.generation) is not None, timeout=JOB_MS)
    result = events.finished(win.preview.generation)
    assert result is not None
    return result


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im)


def drag(qtbot: QtBot, win: MainWindow, dx: int, dy: int) -> None:
    """A pan with the mouse, away from the split line."""
    view = win.viewer.view
    start = QPoint(view.width() * 3 // 4, view.height() // 2)
    QTest.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    steps = 6
    for i in range(1, steps + 1):
        QTest.mouseMove(view, start + QPoint(dx * i // steps, dy * i // steps))
    QTest.mouseRelease(
        view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start + QPoint(dx, dy)
    )


# -- preview: pan, cancel, newest only ------------------------------------------------------


def test_a_pan_cancels_the_running_preview_and_only_the_newest_is_drawn(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    image = photo(tmp_path / "wide.png", 1200, 700)
    open_image(qtbot, window, image)
    use(window, models, "slower.onnx")  # about a second a tile: a pan finds it running
    view = window.viewer.view
    view.actual_size()
    for _ in range(3):
        view.zoom_in()  # about 2:1, so a few tiles cover what is in view
    window.set_preview(True)
    qtbot.waitUntil(lambda: bool(events.of("previewStarted")), timeout=10_000)
    (first,) = events.of("previewStarted")
    assert isinstance(first, PreviewRequest)
    assert first.region is not None and first.region.width < 1200  # what is in view, not all
    drawn_before = len(window.preview.drawn)

    drag(qtbot, window, -300, -120)
    qtbot.waitUntil(
        lambda: any(
            isinstance(c, OperationCancellation) and c.request_id == first.id and c.started
            for c in events.of("previewCancelled")
        ),
        timeout=10_000,
    )
    newest = wait_preview(qtbot, window, events)
    assert newest.generation > first.generation
    assert events.finished(first.generation) is None  # the first one never finished
    (latest,) = [
        r
        for r in events.of("previewStarted")
        if isinstance(r, PreviewRequest) and r.generation == newest.generation
    ]
    assert latest.region is not None and latest.region != first.region
    assert latest.region.x0 > first.region.x0  # the view moved right over the picture
    # Everything drawn since the pan is the newest preview's, inside its region.
    after_pan = window.preview.drawn[drawn_before:]
    assert after_pan and all(p.generation == newest.generation for p in after_pan)
    stale = [
        p
        for p in events.of("previewPatched")
        if isinstance(p, PreviewPatch) and p.generation != newest.generation
    ]
    assert not any(p in after_pan for p in stale)
    region = latest.region
    assert all(p.region.intersects(region.scaled(1)) for p in after_pan)  # ×1 model: same pixels


def test_an_older_preview_queued_behind_a_change_is_never_drawn(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    image = photo(tmp_path / "in.png", 160, 120)
    open_image(qtbot, window, image)
    use(window, models, "up2.onnx")
    window.set_preview(True)
    first_generation = window.preview.generation
    # The GUI thread is busy while the engine runs that preview to its end: its pixels wait in
    # this thread's queue, undelivered (the worker marks the preview done after its last
    # signal)…
    deadline = time.monotonic() + 30
    while window.engine.preview_waiting is not None or window.engine.preview_running is not None:
        time.sleep(0.01)
        assert time.monotonic() < deadline
    # …and the person picks another model before they arrive.
    use(window, models, "net4.onnx")
    assert window.preview.generation > first_generation
    newest = wait_preview(qtbot, window, events)
    old = [
        p
        for p in events.of("previewPatched")
        if isinstance(p, PreviewPatch) and p.generation == first_generation
    ]
    assert old, "the first preview's pixels did arrive (after the change)"
    assert all(p.generation == newest.generation for p in window.preview.drawn)
    assert newest.scale == 4 and window.viewer.view.canvas_size().width() == 640
    layer = window.viewer.view.preview
    assert layer is not None and len(layer.patches) == len(window.preview.drawn)


# -- preview: the product's pixels ----------------------------------------------------------


def test_the_preview_region_equals_the_same_region_of_the_full_product(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    image = photo(tmp_path / "shot.png", 400, 260, seed=3)
    open_image(qtbot, window, image)
    use(window, models, "net4.onnx")
    window.panel.tile.setValue(64)
    window.set_preview(True)
    qtbot.waitUntil(lambda: window.viewer.view.canvas_size().width() == 1600, timeout=JOB_MS)
    window.viewer.view.actual_size()  # 1:1 of the product: a part of it is in view
    result = wait_preview(qtbot, window, events)
    assert not result.truncated and result.tiles_run + result.tiles_cached == result.tiles_needed
    layer = window.viewer.view.preview
    assert layer is not None and layer.patches
    engine = window.engine.worker._engine  # idle now: read what its tile cache holds
    assert engine is not None
    cached = len(engine.previews.tiles)

    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    job = window.workspace.jobs[job_id]
    assert job.state is JobState.FINISHED and job.result is not None
    product = pixels(job.result.products[0].path)
    assert product.shape == (1040, 1600, 3)
    worst = 0
    for rect, pix in layer.patches:
        got = as_array(pix.toImage()).astype(np.int32)
        want = product[rect.y() : rect.bottom() + 1, rect.x() : rect.right() + 1].astype(np.int32)
        worst = max(worst, int(np.abs(got - want).max()))
    assert worst == 0
    # The job did not run again what the preview made (one session for both, M1).
    fresh = Engine(EngineSettings(models_dir=models)).run(
        OperationRequest(
            Operation.UPSCALE, str(models / "net4.onnx"), (image,), output_dir=tmp_path, tile=64
        )
    )
    assert result.tiles_needed < fresh.runs  # only what is in view was previewed
    assert job.result.runs == fresh.runs - cached  # the job ran only what was not previewed
    assert len(engine.previews.tiles) == 0  # and the cache is empty after it
    assert job.result.sessions_created == 0 and job.result.sessions_reused == 1
    assert not window.preview.enabled  # the result is shown now, not the preview


# -- chains ---------------------------------------------------------------------------------


def test_a_chained_remove_background_then_upscale_keeps_alpha_and_runs_again_as_a_batch(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    first = photo(tmp_path / "cat.png", 90, 60, seed=1)
    second = photo(tmp_path / "dog.png", 70, 50, seed=2)
    open_image(qtbot, window, first)
    use(window, models, "u2netp.onnx", Operation.REMOVE_BACKGROUND)
    window.run_selected()
    wait_ended(qtbot, window)
    key = str(first)
    cutout = next(v for v in window.workspace.versions(key) if v.kind is ProductKind.IMAGE)
    qtbot.waitUntil(lambda: window.workspace.viewing == (key, cutout.id), timeout=10_000)

    window.continue_from_result()  # the cut-out is the next step's input: no save, no reopen
    assert window.workspace.pairs[key][0] == cutout.id  # shown on the left
    use(window, models, "up2.onnx")
    assert window.panel.run_button.text() == f"Run on {cutout.label}"
    (job_id,) = window.run_selected()
    job = window.workspace.jobs[job_id]
    assert job.request.inputs == cutout.paths  # the very file the first step wrote
    wait_ended(qtbot, window)
    assert job.result is not None and job.state is JobState.FINISHED
    upscaled = pixels(job.result.products[0].path)
    cut = pixels(cutout.paths[0])
    assert cut.shape == (60, 90, 4) and upscaled.shape == (120, 180, 4)
    alpha = cut[..., 3]
    assert alpha.min() < 128 < alpha.max()  # a real cut-out: transparent and opaque parts
    # The upscaler ran alpha through the model: the same as upscaling the cut-out directly.
    direct = Engine(EngineSettings(models_dir=models)).run(
        OperationRequest(
            Operation.UPSCALE, str(models / "up2.onnx"), cutout.paths, output_dir=tmp_path / "d"
        )
    )
    assert np.array_equal(upscaled, pixels(direct.products[0].path))

    # The strip shows the chain: Original → cut-out → the cut-out upscaled.
    labels = [v.label for v in window.viewer.strip.versions.values()]
    chained = [label for label in labels if "→" in label]
    assert chained == [f"{cutout.label} → {job.model_label}"], labels

    # The chain again, on the other image, as a batch: each step's product feeds the next.
    window.accept_paths([second])
    final = next(v for v in window.workspace.versions(key) if v.job_id == job_id)
    ids = window.run_chain_from(final.id)
    assert len(ids) == 1
    qtbot.waitUntil(
        lambda: len([j for j in window.workspace.jobs.values() if j.state.ended]) == 4,
        timeout=JOB_MS,
    )
    versions = window.workspace.versions(str(second))
    last = next(v for v in versions if "→" in v.label and v.kind is ProductKind.IMAGE)
    assert last.label == f"{cutout.label} → {job.model_label}"
    out = pixels(last.paths[0])
    assert out.shape == (100, 140, 4) and out[..., 3].min() < 128 < out[..., 3].max()
    assert window.workspace.chain_of(last) == window.workspace.chain_of(final)


# -- scheduling: jobs first, one session ----------------------------------------------------


def test_a_preview_during_a_full_job_waits_and_never_creates_a_second_session(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    image = photo(tmp_path / "job.png", 300, 200)
    open_image(qtbot, window, image)
    use(window, models, "slower.onnx")
    window.panel.tile.setValue(96)  # 15 tiles of a fifth of a second
    (job_id,) = window.run_selected()
    qtbot.waitUntil(lambda: window.workspace.jobs[job_id].first_run is not None, timeout=JOB_MS)
    window.set_preview(True)  # while the job runs
    assert window.viewer.preview_status == "Preview waits for the running job…"
    # A job asked for after the preview still goes before it (one the window does not show,
    # as the speed measurement's: the preview stays on).
    later = OperationRequest(
        Operation.UPSCALE,
        str(models / "slower.onnx"),
        (photo(tmp_path / "later.png", 64, 48),),
        output_dir=tmp_path / "o",
    )
    window.engine.submit(later)
    qtbot.waitUntil(lambda: len(events.of("operationFinished")) == 2, timeout=JOB_MS)
    later_done = events.index(
        "operationFinished", lambda r: isinstance(r, Result) and r.request_id == later.id
    )
    assert not any(n == "previewStarted" for n, _ in events.log[:later_done])
    # The job's result turned Preview off; turn it on again to see the preview itself run.
    window.set_preview(True)
    preview = wait_preview(qtbot, window, events)
    done = events.index("operationFinished", lambda r: isinstance(r, Result))
    started = events.index("previewStarted", lambda r: True)
    assert done < started
    first_job, later_job = [r for r in events.of("operationFinished") if isinstance(r, Result)]
    assert first_job.request_id == job_id and later_job.request_id == later.id
    assert first_job.sessions_created == 1 and later_job.sessions_reused == 1
    assert preview.sessions_created == 0 and preview.sessions_reused == 1  # the same session
    qtbot.waitUntil(lambda: window.models_button.text() == "1 model loaded", timeout=5000)


def test_a_job_asked_for_during_a_preview_goes_first_and_the_preview_comes_back(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    image = photo(tmp_path / "big.png", 500, 300)
    open_image(qtbot, window, image)
    use(window, models, "slower.onnx")
    window.set_preview(True)
    qtbot.waitUntil(lambda: bool(events.of("previewStarted")), timeout=10_000)
    (first,) = events.of("previewStarted")
    assert isinstance(first, PreviewRequest)
    # A job the window does not show (the speed measurement is one): the preview stays on.
    other = photo(tmp_path / "small.png", 64, 48)
    job = OperationRequest(
        Operation.UPSCALE, str(models / "slower.onnx"), (other,), output_dir=tmp_path / "o"
    )
    window.engine.submit(job)
    qtbot.waitUntil(lambda: bool(events.of("operationFinished")), timeout=JOB_MS)
    newest = wait_preview(qtbot, window, events)
    cancelled = events.index(
        "previewCancelled",
        lambda c: isinstance(c, OperationCancellation) and c.request_id == first.id,
    )
    job_started = events.index("operationStarted", lambda r: True)
    job_done = events.index("operationFinished", lambda r: True)
    again = events.index(
        "previewStarted",
        lambda r: isinstance(r, PreviewRequest) and r.id != first.id,
    )
    assert cancelled < job_done and job_started < again and job_done < again
    assert newest.generation == first.generation  # the same preview, put back after the job
    assert window.preview.enabled and window.preview.drawn
    assert newest.sessions_created == 0


# -- the non-tiled families, and Preview off --------------------------------------------------


def test_a_cut_out_preview_is_one_run_and_preview_off_hands_back_what_previews_kept(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    image = photo(tmp_path / "in.png", 90, 60, seed=1)
    open_image(qtbot, window, image)
    use(window, models, "u2netp.onnx", Operation.REMOVE_BACKGROUND)
    window.set_preview(True)
    result = wait_preview(qtbot, window, events)
    assert result.runs == 1 and result.products
    layer = window.viewer.view.preview
    assert layer is not None
    qtbot.waitUntil(lambda: layer.image is not None, timeout=10_000)
    assert layer.image is not None and (layer.image.width(), layer.image.height()) == (90, 60)
    cutout = next(p for p in result.products if p.kind is ProductKind.IMAGE)
    assert pixels(cutout.path).shape == (60, 90, 4)
    # A pan asks nothing of the engine: the whole image was the one run.
    window.viewer.view.actual_size()
    drag(qtbot, window, -40, -20)
    qtbot.wait(300)
    assert len(events.of("previewStarted")) == 1

    # An upscale preview keeps the decoded image and its tiles; Preview off hands them back,
    # and the preview folder goes.
    use(window, models, "up2.onnx")
    wait_preview(qtbot, window, events)
    engine = window.engine.worker._engine
    assert engine is not None and engine.previews.held_bytes > 0
    window.set_preview(False)
    qtbot.waitUntil(lambda: engine.previews.held_bytes == 0, timeout=10_000)
    qtbot.waitUntil(lambda: not cutout.path.parent.exists(), timeout=10_000)
    assert window.viewer.preview_status == "" and not window.viewer.preview_on


# -- the preview belongs to one image, operation and model (#21, item 7) ----------------------


def right_side(win: MainWindow) -> np.ndarray:
    """The view as drawn, a patch right of the split line (where the preview is, inside the
    fitted picture), as pixels."""
    view = win.viewer.view
    view.repaint()
    shot = as_array(view.grab().toImage())
    h, w = shot.shape[:2]
    return shot[h * 3 // 8 : h * 5 // 8, w // 2 + h // 16 : w // 2 + h // 4]


def test_no_model_clears_the_preview_its_dimming_and_its_line_on_every_image_after(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    first = photo(tmp_path / "first.png", 160, 120, seed=4)
    second = photo(tmp_path / "second.png", 120, 90, seed=5)
    open_image(qtbot, window, first)
    use(window, models, "up2.onnx")
    window.set_preview(True)
    wait_preview(qtbot, window, events)
    assert window.viewer.preview_status.startswith("Preview: ")  # "… keeps 1 MB …"
    engine = window.engine.worker._engine
    assert engine is not None and engine.previews.held_bytes > 0

    # Depth: no model of it is installed here, so there is nothing to preview.
    window.panel.select_operation(Operation.DEPTH)
    assert window.workspace.settings is None and window.preview.enabled
    status = window.viewer.preview_status
    assert not status.startswith("Preview: ") and "model" in status
    layer = window.viewer.view.preview
    assert layer is not None and not layer.patches and layer.image is None
    shown = right_side(window)
    window.set_preview(False)
    plain = right_side(window)  # the same picture, the same place: the left one undimmed
    assert_undimmed(shown, plain)
    qtbot.waitUntil(lambda: engine.previews.held_bytes == 0, timeout=10_000)

    # Another image viewed with Preview on and still no model: nothing of the old preview.
    window.set_preview(True)
    assert "model" in window.viewer.preview_status
    window.accept_paths([second])
    window.inputs.select(str(second))
    qtbot.waitUntil(
        lambda: window.viewer.before is not None and window.viewer.before.path == second,
        timeout=10_000,
    )
    assert window.preview.enabled and not window.viewer.preview_status.startswith("Preview: ")
    assert_undimmed(right_side(window), _plain_right(window))

    # A model again: the preview runs for this image, its own line and pixels.
    window.panel.select_operation(Operation.UPSCALE)
    assert window.panel.select_model(str(models / "up2.onnx"))
    result = wait_preview(qtbot, window, events)
    assert result.scale == 2 and window.viewer.view.canvas_size().width() == 240


def assert_undimmed(shown: np.ndarray, plain: np.ndarray) -> None:
    """The same picture (a column may round differently where the split clips it); the
    preview's shade would take about 40 % off every pixel."""
    assert np.abs(shown.astype(np.int32) - plain.astype(np.int32)).mean() < 2


def _plain_right(win: MainWindow) -> np.ndarray:
    win.set_preview(False)
    try:
        return right_side(win)
    finally:
        win.set_preview(True)


def test_turning_preview_on_at_100_percent_keeps_100_percent_of_the_product(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    events = Events(window)
    image = photo(tmp_path / "shot.png", 600, 400, seed=6)
    open_image(qtbot, window, image)
    use(window, models, "up2.onnx")
    view = window.viewer.view
    view.actual_size()
    assert view.zoom == 1.0 and window.viewer.zoom_label.text() == "100 %"
    window.set_preview(True)
    qtbot.waitUntil(lambda: view.canvas_size().width() == 1200, timeout=JOB_MS)
    wait_preview(qtbot, window, events)
    # The product's pixels 1:1, as the person asked: not the same picture at 50 %.
    assert view.zoom == 1.0 and window.viewer.zoom_label.text() == "100 %"
    # The middle of the view still shows the middle of the picture: the preview side starts
    # at the split line, in the middle.
    region = window.preview.region
    assert region is not None
    assert abs(region.x0 - 300) <= 2 and abs((region.y0 + region.y1) / 2 - 200) <= 2
    # Another model (×4) while Preview is on: its product at 100 % too, once its size is known.
    use(window, models, "net4.onnx")
    qtbot.waitUntil(lambda: view.canvas_size().width() == 2400, timeout=JOB_MS)
    assert view.zoom == 1.0 and window.viewer.zoom_label.text() == "100 %"
    # No model (depth): the original at 100 %; a model again: its product at 100 %.
    window.panel.select_operation(Operation.DEPTH)
    assert view.zoom == 1.0 and view.canvas_size().width() == 600
    use(window, models, "up2.onnx")
    qtbot.waitUntil(lambda: view.canvas_size().width() == 1200, timeout=JOB_MS)
    assert view.zoom == 1.0
    window.set_preview(False)  # and back on the original: 100 % of it
    assert view.zoom == 1.0 and view.canvas_size().width() == 600
