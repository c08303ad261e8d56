"""One source for what the window counts: Run's label names a result chosen with "Use as
input ▸" (README: "Run on Quick cut-out") even with other images beside it."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from engine.requests import ProductKind
from gui.main_window import MainWindow
from gui.widgets.inputs_panel import InputMark
from tests.engine_helpers import photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.window_fixtures import use_model, wait_ended


def test_run_names_the_result_used_as_input_beside_other_images(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    first = photo(tmp_path / "cat.png", 60, 40, seed=1)
    second = photo(tmp_path / "dog.png", 50, 30, seed=2)
    window.accept_paths([first, second])
    window.jobs.run_one(str(first))
    wait_ended(qtbot, window)
    key = str(first)
    made = next(v for v in window.workspace.versions(key) if v.kind is ProductKind.IMAGE)
    assert window.jobs.use_as_input(key, made.id) == made
    window._update_run()
    label = window.panel.run_button.text()
    assert label == f"Run on {made.label} and 1 image", label
    window.workspace.set_base(key, window.workspace.versions(key)[0].id)  # back to the original
    window._update_run()
    assert window.panel.run_button.text().startswith("Run 1 image")


def test_clearing_the_images_takes_their_ended_jobs_out_of_the_list_and_counts(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    use_model(window, models, "up2.onnx")
    shots = [photo(tmp_path / f"s{i}.png", 40, 30, seed=i) for i in range(3)]
    window.accept_paths(shots)
    ids = window.run_selected()
    wait_ended(qtbot, window)
    assert all(window.job_list.row(i) is not None for i in ids)
    window.accept_paths([photo(tmp_path / "kept.png", 40, 30, seed=9)])
    window.jobs.remove([str(shots[0])])  # one image removed: its ended job leaves the list
    assert ids[0] not in window.workspace.jobs
    qtbot.waitUntil(lambda: window.job_list.row(ids[0]) is None, timeout=5000)
    assert window.job_list.row(ids[1]) is not None
    window.clear_inputs()
    assert not window.workspace.jobs  # every job of a cleared image is out of the counts
    qtbot.waitUntil(lambda: all(window.job_list.row(i) is None for i in ids), timeout=5000)


def test_the_status_bar_and_run_never_disagree_on_what_run_runs(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """A file whose header reads but whose pixels do not is found broken by its thumbnail,
    after the add: Run's button then says "Run 1 image", and the status bar, which spoke at
    the add, must not still say "Press Run 2 images"."""
    use_model(window, models, "up2.onnx")
    good = photo(tmp_path / "good.png", 40, 30, seed=1)
    data = photo(tmp_path / "whole.png", 80, 60, seed=5).read_bytes()
    broken = tmp_path / "broken.png"
    broken.write_bytes(data[: len(data) // 2])  # the header is whole, the pixels cut short
    window.accept_paths([good, broken])
    qtbot.waitUntil(lambda: window.inputs.mark(str(broken)) is InputMark.BROKEN, timeout=10000)
    assert window.panel.run_button.text() == "Run 1 image"
    status = window.statusBar().currentMessage()
    assert status.startswith("Added 2 images.") and "Run 2" not in status, status


def test_the_batch_line_stops_counting_jobs_of_images_cleared_while_it_runs(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    """Jobs cancelled and then taken out with their images are out of the batch line's
    "done/total" too, not only out of its "cancelled" (it said "578 cancelled" of images
    already cleared)."""
    use_model(window, models, "slow.onnx", tile=64)
    shots = [photo(tmp_path / f"s{i}.png", 128, 128, seed=i) for i in range(4)]
    window.accept_paths(shots)
    ids = window.run_selected()
    for job_id in ids[2:]:
        window.jobs.cancel(job_id)
    qtbot.waitUntil(lambda: all(window.workspace.jobs[i].state.ended for i in ids[2:]))
    window.jobs.remove([str(p) for p in shots[2:]])
    assert window.workspace.jobs[ids[0]].state.active
    qtbot.waitUntil(lambda: window.job_list.summary.text().startswith("0/2"), timeout=5000)
    assert "cancelled" not in window.job_list.summary.text()
    window.jobs.cancel_all()
    wait_ended(qtbot, window)
