"""Choosing a model in the window: by purpose and scale with a photo default, and the families
without a model say how to get one and what it writes."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from engine.requests import Operation
from engine.runtime.sessions import SessionInfo
from engine.samples.upscaler_models import make_upscaler
from gui.main_window import MainWindow
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import WindowFactory, use_model, wait_ended


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


# -- Get… for more upscalers (#21, item 11) --------------------------------------------------


def test_11_get_offers_more_upscalers_with_size_and_licence(
    catalog_models: Path, window: MainWindow
) -> None:
    panel = window.panel
    panel.select_operation(Operation.UPSCALE)
    texts = [a.text() for a in panel.get_menu.actions() if a.text()]
    assert "Download 4xNomosWebPhoto ESRGAN (67 MB, CC-BY-4.0)" in texts
    assert "Download 4xSPANkendata (2 MB, CC-BY-SA-4.0)" in texts
    assert "Download 2x StarSample V1.0 (2 MB, CC0-1.0)" in texts
    assert "Get Real-ESRGAN x2plus yourself… (67 MB, BSD-3-Clause)" in texts
    assert texts[-1] == "Add a model file (.onnx)…"
    tip = next(a for a in panel.get_menu.actions() if "SPANkendata" in a.text()).toolTip()
    assert "Clean, undegraded photos" in tip and "CC-BY-SA-4.0" in tip


def test_11_a_model_without_checksum_says_where_to_get_it_and_fetches_nothing(
    catalog_models: Path, window: MainWindow
) -> None:
    window.panel.select_operation(Operation.UPSCALE)
    action = next(a for a in window.panel.get_menu.actions() if "x2plus" in a.text())
    action.trigger()
    text = window.notice.text()
    url = "https://github.com/ketaevweb/ai-video-enhancer/releases/download/models-v1/"
    assert url + "RealESRGAN_x2plus.onnx" in text
    assert f"put it in {catalog_models} as RealESRGAN_x2plus.onnx" in text
    assert not window.models.fetcher.is_running()


def test_11_an_offline_download_names_the_address_the_file_and_the_folder(
    qtbot: QtBot, catalog_models: Path, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Offline, made real: the download command's every connection goes to a proxy on a
    # closed local port (urllib honours these variables), so nothing leaves the machine.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    for name in ("https_proxy", "http_proxy", "HTTPS_PROXY", "HTTP_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    window.panel.select_operation(Operation.UPSCALE)
    action = next(a for a in window.panel.get_menu.actions() if "SPANkendata" in a.text())
    action.trigger()
    assert window.models.fetcher.is_running()
    qtbot.waitUntil(lambda: "failed" in window.notice.text(), timeout=60_000)
    text = window.notice.text()
    assert (
        "https://raw.githubusercontent.com/terrainer/AI-Upscaling-Models/"
        "99613b7b3d429cee4f94eea8fadc99f16de384c3/4xSPANkendata/4xSPANkendata_fp32.onnx"
    ) in text
    assert f"put it in {catalog_models} as 4xSPANkendata_fp32.onnx" in text
    assert text.count("4xSPANkendata_fp32.onnx") == 2  # said once, not by the app and the command
    assert not (catalog_models / "4xSPANkendata_fp32.onnx").exists()


def test_last_used_in_the_models_list_is_when_the_job_ended(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """It said "Last used 5 min ago" 35 s after a job ended (its start): it is its end."""
    import time

    use_model(window, models, "slow.onnx", tile=64)
    runs: list[float] = []
    # Stamped in the engine thread as each run ends (a queued slot may hear of them late).
    window.engine.runFinished.connect(
        lambda _event: runs.append(time.time()), Qt.ConnectionType.DirectConnection
    )
    sessions: list[tuple[SessionInfo, ...]] = []
    window.engine.sessionsChanged.connect(sessions.append)
    window.accept_paths([photo(tmp_path / "a.png", 160, 128, seed=1)])
    window.run_selected()
    wait_ended(qtbot, window)
    assert len(runs) > 2
    (info,) = sessions[-1]
    assert runs[0] <= info.last_used <= runs[-1], (info.last_used, runs)
