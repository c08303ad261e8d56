"""The model browser in a real window: Get… opens it on the whole shipped catalogue, its filters,
the licence to accept, and a download from a local HTTP server with progress, Cancel and a
resume mid-file; a refresh of the catalogue."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pytestqt.qtbot import QtBot

from engine.models.browse import load_snapshot, refreshed_snapshot_path
from engine.models.catalog import Family
from engine.models.downloads import part_path
from engine.requests import Operation
from gui.controllers.models import model_groups
from gui.main_window import MainWindow
from gui.widgets.model_browser import ModelBrowser
from tests.http_fixtures import ServerState, card, catalogue, server
from tests.window_fixtures import WindowFactory

__all__ = ["catalogue", "server"]  # the fixtures, used by name

BROWSE = "Browse more models (OpenModelDB)…"


def _rows(dialog: ModelBrowser) -> list[list[str]]:
    t = dialog.table
    cells = [[t.item(r, c) for c in range(t.columnCount())] for r in range(t.rowCount())]
    return [[item.text() if item is not None else "" for item in row] for row in cells]


def test_get_opens_the_browser_on_the_whole_catalogue_with_its_filters(
    window: MainWindow, qtbot: QtBot
) -> None:
    window.panel.select_operation(Operation.UPSCALE)
    actions = {a.text(): a for a in window.panel.get_menu.actions()}
    actions[BROWSE].trigger()
    dialog = window.findChild(ModelBrowser)
    assert dialog is not None and dialog.isVisible()
    shipped = load_snapshot()
    assert dialog.table.rowCount() == len(shipped.entries) >= 60
    assert shipped.date in dialog.dated.text() and "shipped with Tessera" in dialog.dated.text()
    licences = [row[4] for row in _rows(dialog)]
    marked = ["non-commercial" in text for text in licences]
    assert marked == sorted(marked) and any(marked)  # permissive first, the others marked

    dialog.scale.setCurrentIndex(dialog.scale.findData(1))
    assert {row[1] for row in _rows(dialog)} == {"Restore ×1"}
    dialog.search.setText("denoise")
    assert _rows(dialog) and all(
        "denoise" in (e.name + e.purpose + " ".join(e.tags)).lower() for e in dialog.shown
    )
    dialog.scale.setCurrentIndex(0)
    dialog.search.setText("no such model anywhere")
    assert dialog.table.rowCount() == 0 and "No model matches" in dialog.details.text()

    dialog.search.setText("")
    private = next(e for e in dialog.shown if e.needs_acceptance and e.file is not None)
    assert dialog.select(private.id)
    assert dialog.accept_box.isVisible() and not dialog.get_button.isEnabled()
    dialog.accept_box.setChecked(True)
    assert dialog.get_button.isEnabled()
    assert "non-commercial" in dialog.details.text()
    # Other families get no browser: OpenModelDB's models are all image to image.
    window.panel.select_operation(Operation.REMOVE_BACKGROUND)
    assert BROWSE not in [a.text() for a in window.panel.get_menu.actions()]
    dialog.close()


def test_the_browser_downloads_with_progress_cancels_and_resumes_mid_file(
    make_window: WindowFactory,
    models: Path,
    catalogue: tuple[str, ServerState, Path, bytes],
    qtbot: QtBot,
) -> None:
    _, state, served_dir, data = catalogue
    shutil.copy(refreshed_snapshot_path(served_dir), refreshed_snapshot_path(models))
    win = make_window()
    first = win.browse_models()
    first.close()  # deleted on close: the next one's download must not reach it
    qtbot.waitUntil(lambda: win.findChild(ModelBrowser) is None, timeout=5_000)
    dialog = win.browse_models()
    assert dialog.select("2x-Big") and dialog.get_button.isEnabled()
    dest = models / "2x-Big.onnx"
    state.pace_s = 0.25  # a slow server: there is time to see progress and to cancel
    dialog.get_button.click()
    assert dialog.cancel_button.isVisible() and not dialog.get_button.isEnabled()
    qtbot.waitUntil(lambda: dialog.progress.value() > 0, timeout=30_000)
    qtbot.waitUntil(lambda: part_path(dest).exists(), timeout=10_000)
    dialog.cancel_button.click()
    assert not dialog.cancel_button.isVisible() and "Cancelled" in dialog.status.text()
    kept = part_path(dest).stat().st_size
    assert 0 < kept < len(data) and not dest.exists()

    state.pace_s = 0.0
    state.ranges.clear()
    with qtbot.waitSignal(win.models.fetchEnded, timeout=30_000) as ended:
        dialog.get_button.click()
    assert ended.args == [True], dialog.status.text()
    assert dest.read_bytes() == data and not part_path(dest).exists()
    assert state.ranges[0] is not None and state.ranges[0].startswith("bytes=")
    assert int(state.ranges[0][6:-1]) >= kept  # only the rest was asked for
    assert "is installed" in dialog.status.text()
    qtbot.waitUntil(
        lambda: win.inventory is not None and any(u.path == dest for u in win.inventory.unknown),
        timeout=10_000,
    )
    # The picker names it as the browser did, with its purpose and licence.
    group = next(g for g in model_groups(win.inventory, Family.UPSCALE) if "Big" in g.label)
    assert group.text == "Big (OpenModelDB) ×2"
    assert "A test model" in group.choices[0].purpose and "CC-BY-4.0" in group.choices[0].tip
    dialog.close()


def test_a_bad_hash_in_the_browser_installs_nothing_and_says_why(
    make_window: WindowFactory,
    models: Path,
    catalogue: tuple[str, ServerState, Path, bytes],
    qtbot: QtBot,
) -> None:
    _, _, served_dir, _ = catalogue
    shutil.copy(refreshed_snapshot_path(served_dir), refreshed_snapshot_path(models))
    win = make_window()
    dialog = win.browse_models()
    assert dialog.select("2x-BadHash")
    with qtbot.waitSignal(win.models.fetchEnded, timeout=30_000) as ended:
        dialog.get_button.click()
    assert ended.args == [False]
    assert "not the expected one" in win.notice.text()
    assert not list(models.glob("2x-BadHash*"))
    dialog.close()


def test_refresh_reads_the_catalogue_from_the_address_in_the_settings(
    window: MainWindow, server: tuple[str, ServerState], tmp_path: Path, qtbot: QtBot
) -> None:
    url, state = server
    cards = {"4x-Fresh": card("Fresh", 4, "MIT", [f"{url}/f.onnx"], b"x" * 10)}
    state.files["/api/models.json"] = json.dumps(cards).encode()
    state.files["/api/architectures.json"] = b"{}"
    state.files["/api/tags.json"] = b"{}"
    dialog = window.browse_models()
    dialog.url.setText(f"{url}/nowhere/")
    dialog.refresh_button.click()
    qtbot.waitUntil(lambda: dialog.refresh_button.isEnabled(), timeout=10_000)
    assert "not refreshed" in dialog.status.text() and dialog.table.rowCount() > 1
    dialog.url.setText(f"{url}/api/")
    dialog.refresh_button.click()
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 1, timeout=10_000)
    assert _rows(dialog)[0][:2] == ["Fresh", "Upscale ×4"]
    assert "your refreshed copy" in dialog.dated.text() and "1 ONNX models" in dialog.dated.text()
    assert window.settings.catalogue_url == f"{url}/api/"
    dialog.close()
