"""The window holds what it shows (issue #21, item 1): a large product in view costs about a
screen of pictures, not its full size; the window's pictures are accounted in one budget the
memory panel names; Unload all lets go of them; 1:1 still shows the file's own pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot

from engine.bench.window_memory import make_product, product_rows
from engine.requests import Operation
from engine.runtime.memory import process_rss, trim_heap
from gui.main_window import MainWindow
from gui.widgets.pictures_binding import PREVIEW
from gui.widgets.vram_gauge import fmt_bytes
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory

WIDTH, HEIGHT = 6000, 4000  # 24 Mpx: a full decode is 72 MB, its QImage and QPixmap 168 MB
FULL_BYTES = WIDTH * HEIGHT * 3
LOAD_MS = 60_000


@pytest.fixture
def window(make_window: WindowFactory) -> MainWindow:
    """A window that does not probe its runtimes: that loads ONNX Runtime on the engine thread
    at some moment, which would land in an RSS reading."""
    return make_window(probe_runtimes=False)


@pytest.fixture(scope="module")
def product(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_product(tmp_path_factory.mktemp("large") / "product.png", WIDTH, HEIGHT)


def _rss(qtbot: QtBot, window: MainWindow) -> int:
    qtbot.waitUntil(lambda: window.tasks.pending() == 0, timeout=LOAD_MS)
    qtbot.wait(200)
    trim_heap()
    return process_rss()


def _show(qtbot: QtBot, window: MainWindow, path: Path) -> None:
    window.accept_paths([path], run=False)
    viewer = window.viewer
    qtbot.waitUntil(
        lambda: viewer.before is not None and viewer.before.path == path, timeout=LOAD_MS
    )


def _screen_bytes(window: MainWindow) -> float:
    view = window.viewer.view
    return view.width() * view.height() * view.devicePixelRatioF() ** 2 * 4


def _as_rgb(image: QImage) -> np.ndarray:
    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h = rgb.width(), rgb.height()
    data = np.frombuffer(rgb.constBits(), np.uint8, rgb.sizeInBytes())
    return data.reshape(h, rgb.bytesPerLine())[:, : w * 3].reshape(h, w, 3).copy()


def test_1_a_large_product_in_view_holds_about_a_screen_of_pictures(
    qtbot: QtBot, window: MainWindow, product: Path, tmp_path: Path
) -> None:
    idle = _rss(qtbot, window)
    _show(qtbot, window, product)
    shown = window.viewer.before
    assert shown is not None and (shown.width, shown.height) == (WIDTH, HEIGHT)
    assert window.viewer.title.toolTip().endswith(f"({WIDTH}×{HEIGHT})")
    grown = _rss(qtbot, window) - idle
    assert grown < FULL_BYTES / 2, f"{grown / 1e6:.0f} MB above the idle window"
    budget = window.workspace.pictures
    # The frame and its pixmap, about the view's size: a few screens at most, not 168 MB.
    assert 0 < budget.total <= 4 * _screen_bytes(window), fmt_bytes(budget.total)
    # Another, small image in view: the large one's pictures are gone (851 MB stayed before).
    _show(qtbot, window, photo(tmp_path / "small.png", 64, 48))
    assert budget.total < 1e6
    assert _rss(qtbot, window) - idle < FULL_BYTES / 2


def test_1_at_1_to_1_the_view_shows_the_files_own_pixels(
    qtbot: QtBot, window: MainWindow, product: Path
) -> None:
    _show(qtbot, window, product)
    view = window.viewer.view
    view.actual_size()
    qtbot.waitUntil(lambda: view.detail(0) is not None, timeout=LOAD_MS)
    held = view.detail(0)
    assert held is not None
    where, pixmap = held
    assert where.contains(view.visible_of(0))  # the part in view, and a margin for a pan
    x0, y0 = int(where.x()), int(where.y())
    got = _as_rgb(pixmap.toImage())
    assert got.shape == (int(where.height()), int(where.width()), 3)  # 1:1: a pixel a pixel
    want = product_rows(WIDTH, HEIGHT)[y0 : y0 + got.shape[0]][:, x0 : x0 + got.shape[1]]
    assert np.array_equal(got, want)
    # Zoomed in further the detail stays the file's own pixels; zoomed out it is dropped.
    view.zoom_in()
    qtbot.waitUntil(lambda: view.detail(0) is not None, timeout=LOAD_MS)
    view.fit()
    qtbot.waitUntil(lambda: view.detail(0) is None, timeout=LOAD_MS)


def test_1_unload_all_lets_go_of_the_windows_pictures(
    qtbot: QtBot, window: MainWindow, product: Path
) -> None:
    idle = _rss(qtbot, window)
    _show(qtbot, window, product)
    window.show_memory_panel()
    panel = window.memory_panel
    assert panel.unload_all_button.isEnabled()  # no model is loaded: the pictures are there
    assert "Window pictures: " in panel.diagnosis()
    view = window.viewer.view
    view.actual_size()
    qtbot.waitUntil(lambda: view.detail(0) is not None, timeout=LOAD_MS)
    budget = window.workspace.pictures
    qtbot.waitUntil(lambda: f"· {fmt_bytes(budget.total)}" in panel.diagnosis())
    held, rss_held = budget.total, _rss(qtbot, window)
    qtbot.mouseClick(panel.unload_all_button, Qt.MouseButton.LeftButton)
    assert budget.total < held  # only what is on screen is kept
    # what is on screen is read again, without the margin around it
    qtbot.waitUntil(lambda: view.detail(0) is not None, timeout=LOAD_MS)
    where = view.detail(0)
    assert where is not None and where[0].width() <= view.width() + 2
    qtbot.waitUntil(lambda: f"· {fmt_bytes(budget.total)}" in panel.diagnosis())
    rss = _rss(qtbot, window)
    assert rss <= rss_held + 4e6, f"{(rss - rss_held) / 1e6:.1f} MB more after Unload all"
    assert rss - idle < FULL_BYTES / 2


def test_the_budget_asks_its_holders_once_over_the_cap(qtbot: QtBot) -> None:
    from gui.pictures import PictureBudget

    budget = PictureBudget(cap=100)
    asked: list[int] = []
    budget.releaseRequested.connect(lambda: asked.append(budget.total))
    budget.account("viewer", 2, 60)
    budget.account("preview", 5, 50)  # over the cap: the holders are asked
    assert asked == [110] and budget.pictures == 7
    budget.account("viewer", 1, 70)  # still over: not again until well below it
    assert asked == [110]
    budget.account("viewer", 1, 10)
    budget.account("viewer", 3, 90)
    assert len(asked) == 2
    budget.release()  # Unload all asks whatever the total
    assert len(asked) == 3


@pytest.mark.parametrize("kind", ["rgba16", "la8", "l16", "rgb8"])
def test_a_small_still_is_shown_as_the_decoded_frame_was(tmp_path: Path, kind: str) -> None:
    """Read at its own size through the picture reader, a still is the same QImage as the
    decoded frame the viewer showed before (16 bits shown as their high byte, alpha kept)."""
    from engine.io.png import encode_png
    from engine.io.reading import load_image
    from engine.settings import DEFAULT_MAX_PIXELS
    from gui.widgets.images import load_display, to_qimage

    rng = np.random.default_rng(3)
    channels = {"rgba16": 4, "la8": 2, "l16": 1, "rgb8": 3}[kind]
    dtype = np.uint16 if kind.endswith("16") else np.uint8
    pixels = rng.integers(0, np.iinfo(dtype).max, (37, 53, channels), dtype=dtype)
    path = tmp_path / f"{kind}.png"
    encode_png(path, [pixels], durations=[0])
    shown = load_display(path)
    assert shown.readable and not shown.reduced and (shown.width, shown.height) == (53, 37)
    assert shown.bit_depth == (16 if dtype == np.uint16 else 8)
    assert shown.has_alpha == (channels in (2, 4))
    want = to_qimage(load_image(path, DEFAULT_MAX_PIXELS).frames[0])
    assert shown.frames[0] == want


def test_a_turned_jpeg_is_shown_upright_when_reduced(tmp_path: Path) -> None:
    from PIL import Image

    from gui.widgets.images import load_display

    picture = Image.new("RGB", (1600, 900), (200, 40, 40))
    picture.paste((40, 40, 200), (0, 0, 800, 900))  # left half blue, as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise: the blue half on top
    path = tmp_path / "turned.jpg"
    picture.save(path, exif=exif, quality=95)
    shown = load_display(path, frame_size=(300, 300))
    assert (shown.width, shown.height) == (900, 1600) and shown.reduced
    frame = shown.frames[0]
    assert frame.height() == 300 and frame.width() < 300
    top = frame.pixelColor(frame.width() // 2, 10)
    bottom = frame.pixelColor(frame.width() // 2, frame.height() - 10)
    assert top.blue() > 150 > top.red() and bottom.red() > 150 > bottom.blue()


def test_1_unload_all_lets_go_of_the_previews_drawn_patches(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """The preview controller kept every patch it passed on, at full resolution, until the next
    reset (288 MB at fit on a 12000×8000 preview), counted in the budget but out of Unload
    all's reach. Now the budget's release lets go of them; the viewer keeps what it draws, and
    the preview goes on: a pan previews again."""
    image = photo(tmp_path / "shot.png", 400, 260, seed=5)
    _show(qtbot, window, image)
    window.panel.select_operation(Operation.UPSCALE)
    assert window.panel.select_model(str(models / "up2.onnx"))
    window.panel.tile.setValue(64)
    view = window.viewer.view
    view.actual_size()  # 1:1 of the 800×520 product: part of it in view
    window.set_preview(True)
    preview, budget = window.preview, window.workspace.pictures
    qtbot.waitUntil(
        lambda: bool(preview.drawn) and budget.holding(PREVIEW).nbytes > 0, timeout=LOAD_MS
    )
    qtbot.waitUntil(lambda: not preview.waiting and not window.engine.is_busy(), timeout=LOAD_MS)
    held = budget.holding(PREVIEW).nbytes
    assert held == sum(p.pixels.nbytes for p in preview.drawn)
    layer = view.preview
    assert layer is not None and layer.patches
    window.show_memory_panel()
    qtbot.mouseClick(window.memory_panel.unload_all_button, Qt.MouseButton.LeftButton)
    assert budget.holding(PREVIEW).nbytes == 0 and not preview.drawn
    assert layer.patches  # what is on screen is still drawn
    # The preview goes on after it: a pan previews the part now in view.
    generation = preview.generation
    view.zoom_in()
    qtbot.waitUntil(lambda: preview.generation > generation, timeout=LOAD_MS)
    qtbot.waitUntil(
        lambda: any(p.generation == preview.generation for p in preview.drawn), timeout=LOAD_MS
    )
    assert budget.holding(PREVIEW).nbytes == sum(p.pixels.nbytes for p in preview.drawn) > 0
    window.set_preview(False)
