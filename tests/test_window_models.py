"""Choosing a model in the window: by purpose and scale with a photo default, and the families
without a model say how to get one and what it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from engine.requests import Operation
from engine.samples.contract_models import make_upscaler
from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory, wait_ended


@pytest.fixture
def catalog_models(models: Path) -> Path:
    """Contract models under the file names of catalog models: the picker knows them by id."""
    make_upscaler(models / "realesrgan-x4plus.onnx", scale=4)
    make_upscaler(models / "realesrgan-x4plus-anime.onnx", scale=4)
    for scale in (2, 3, 4):
        make_upscaler(models / f"realesrgan-animevideov3-x{scale}.onnx", scale=scale)
    return models


def test_4_the_model_picker_shows_purpose_scale_and_a_photo_default(
    qtbot: QtBot, catalog_models: Path, make_window: WindowFactory, tmp_path: Path
) -> None:
    win = make_window()
    panel = win.panel
    texts = [panel.model.itemText(i) for i in range(panel.model.count())]
    assert texts[:3] == ["Photo ×4", "Anime ×4", "Fast preview"]
    assert not any("starter" in t for t in texts)
    assert panel.current_model() is not None
    assert panel.current_model().model == "realesrgan-x4plus"  # type: ignore[union-attr]
    assert "Photos" in panel.model_hint.text()
    assert not panel.scale_row.isVisibleTo(panel)  # one scale: nothing to choose
    panel.model.setCurrentIndex(2)
    assert panel.scale_row.isVisibleTo(panel)
    assert [b.text() for b in panel.scale_buttons.buttons()] == ["×2", "×3", "×4"]
    assert panel.select_scale(2)
    assert panel.current_model().model == "realesrgan-animevideov3-x2"  # type: ignore[union-attr]
    assert "Anime and video frames" in panel.model_hint.text()

    # an estimate from this model's measured speed on this machine
    image = photo(tmp_path / "photo.png", 40, 30)
    win.accept_paths([image])
    assert panel.estimate.text().startswith("The first job measures")
    win.speeds.learn(Operation.UPSCALE, "realesrgan-animevideov3-x2", "cpu", 180, 0.0012, 1)
    win._update_estimate()
    assert panel.estimate.text().startswith("About 3 min on this CPU for 1 image")

    # output names carry the model
    for model in ("realesrgan-x4plus", "realesrgan-x4plus-anime", "realesrgan-animevideov3-x4"):
        assert panel.select_model(model)
        win.run_selected()
    wait_ended(qtbot, win)
    names = sorted(p.name for p in tmp_path.glob("photo-*"))
    assert names == [
        "photo-realesrgan-animevideov3-x4.png",
        "photo-realesrgan-x4plus-anime.png",
        "photo-realesrgan-x4plus.png",
    ]


@pytest.mark.parametrize(
    ("operation", "writes", "download"),
    [
        (Operation.DEPTH, "depth map", "Download Depth Anything 3 Small"),
        (Operation.GEOMETRY, "point cloud", "Download MoGe-2 ViT-S (normal)"),
    ],
)
def test_5_depth_and_geometry_say_how_to_get_a_model_and_what_it_writes(
    window: MainWindow, operation: Operation, writes: str, download: str
) -> None:
    window.panel.select_operation(operation)
    hint = window.panel.model_hint.text()
    assert "Get…" in hint and writes in hint
    assert "python -m engine" not in hint and "fetch-starter" not in hint
    assert not window.panel.run_button.isEnabled()
    actions = [a for a in window.panel.get_menu.actions() if a.text()]
    assert actions[0].text().startswith(download)
    assert writes in actions[0].toolTip()
    assert not any("starter" in a.text() for a in actions)  # no starter model does this
    assert actions[-1].text() == "Add a model file (.onnx)…"


def test_13_fast_preview_keeps_its_scale_across_groups_operations_and_restarts(
    qtbot: QtBot, catalog_models: Path, make_window: WindowFactory, tmp_path: Path
) -> None:
    win = make_window()
    panel = win.panel
    fast = next(i for i in range(panel.model.count()) if panel.model.itemText(i) == "Fast preview")
    panel.model.setCurrentIndex(fast)
    # The person clicks ×2, as on screen.
    button = panel.scale_buttons.button(2)
    assert button is not None
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert panel.current_model().model == "realesrgan-animevideov3-x2"  # type: ignore[union-attr]

    # Another model and back: the group comes back at the scale chosen last.
    panel.model.setCurrentIndex(0)
    assert panel.current_model().model == "realesrgan-x4plus"  # type: ignore[union-attr]
    panel.model.setCurrentIndex(fast)
    assert panel.current_scale() == 2
    assert panel.current_model().model == "realesrgan-animevideov3-x2"  # type: ignore[union-attr]

    # Another operation and back, and other images viewed.
    panel.select_operation(Operation.REMOVE_BACKGROUND)
    panel.select_operation(Operation.UPSCALE)
    win.accept_paths([photo(tmp_path / "a.png", 40, 30), photo(tmp_path / "b.png", 30, 20)])
    win.inputs.select(str(tmp_path / "b.png"))
    assert panel.current_scale() == 2

    # The Photo model chosen for upscaling, then Fast preview again in a new window: still ×2.
    panel.model.setCurrentIndex(0)
    win.close()
    again = make_window(win.settings)
    again.panel.model.setCurrentIndex(fast)
    assert again.panel.current_model().model == "realesrgan-animevideov3-x2"  # type: ignore[union-attr]
