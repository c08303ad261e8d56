"""The window's state (gui/workspace.py) and the controllers acting on it, against a fake of the
engine thread (tests/fake_engine.py): fast and headless, no engine, no window. The same
behaviour against the real engine thread is in test_controllers.py and the window tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from engine.operation_specs import operations
from engine.previews import Region
from engine.requests import Operation
from gui.controllers.jobs import JobsController
from gui.controllers.preview import PreviewController
from gui.controllers.speed import SpeedBook
from gui.controllers.view import ViewController
from gui.jobs import ORIGINAL, JobSettings, JobState, is_tiled
from gui.settings import AppSettings
from gui.tasks import TaskThread
from gui.workspace import Workspace
from tests.engine_helpers import photo
from tests.fake_engine import FakeEngine

UP2 = JobSettings(Operation.UPSCALE, "up2.onnx", "up2 ×2", tile=64)
CUT = JobSettings(Operation.REMOVE_BACKGROUND, "u2netp", "Quick cut-out", tile=64)


@pytest.fixture
def fake() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def ws() -> Workspace:
    return Workspace()


@pytest.fixture
def jobs(ws: Workspace, fake: FakeEngine, tmp_path: Path) -> JobsController:
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    controller = JobsController(ws, fake.handle(), SpeedBook(settings))
    controller.calibrator.enabled = False
    return controller


def product(tmp_path: Path, name: str) -> Path:
    return photo(tmp_path / name, 48, 32)


def test_one_writer_announces_each_change(qtbot: QtBot, ws: Workspace, tmp_path: Path) -> None:
    from gui.inputs import classify_paths

    a, b = photo(tmp_path / "a.png", 24, 16), photo(tmp_path / "b.png", 24, 16, seed=1)
    sources = classify_paths([a, b]).sources
    with qtbot.waitSignal(ws.inputsChanged):
        assert [s.key for s in ws.add_sources(sources)] == [str(a), str(b)]
    assert ws.add_sources(sources) == []  # already there: nothing new, nothing announced
    with qtbot.waitSignal(ws.settingsChanged):
        ws.set_settings(UP2)
    with qtbot.assertNotEmitted(ws.settingsChanged):
        ws.set_settings(UP2)  # the same settings again
    with qtbot.waitSignal(ws.previewChanged, check_params_cb=lambda on: on):
        ws.set_preview(True)
    with qtbot.waitSignal(ws.regionChanged):
        ws.set_region(Region(0, 0, 10, 10))
    with qtbot.waitSignal(ws.selectionChanged):
        ws.select([str(a), str(b)])
    ws.set_pair(str(a), ORIGINAL, ORIGINAL)
    ws.set_viewing(str(a), ORIGINAL)
    with qtbot.waitSignal(ws.inputsChanged):
        ws.remove_sources([str(a)])
    assert str(a) not in ws.pairs and ws.viewing == (None, None)  # nothing stale is left
    assert ws.selected == (str(b),)
    ws.clear_sources()
    assert ws.sources == {} and ws.pairs == {} and ws.selected == ()


def test_the_tiled_one_is_the_operation_tables_answer() -> None:
    assert is_tiled(Operation.UPSCALE)
    assert not any(is_tiled(op) for op in operations() if op is not Operation.UPSCALE)
    assert UP2.job_tile == 64 and CUT.job_tile is None  # only a tiled job carries a tile


def test_a_job_on_the_fake_engine_becomes_a_version_and_is_shown(
    qtbot: QtBot, ws: Workspace, jobs: JobsController, fake: FakeEngine, tmp_path: Path
) -> None:
    a = photo(tmp_path / "a.png", 24, 16)
    shown: list[tuple[str, str]] = []
    jobs.showRequested.connect(lambda key, vid: shown.append((key, vid)))
    jobs.add_paths([a])
    assert shown == [(str(a), "")]
    ws.set_settings(UP2)
    (job_id,) = jobs.run_selected()
    request = fake.submitted[-1]
    assert request.id == job_id and request.inputs == (a,) and request.tile == 64
    assert ws.jobs[job_id].state is JobState.QUEUED and ws.running_for(str(a))
    fake.start(job_id)
    fake.progress(job_id, 1, 4)
    assert ws.jobs[job_id].state is JobState.RUNNING and job_id in ws.dirty
    assert ws.take_dirty() == {job_id} and ws.dirty == set()
    out = product(tmp_path, "a-up2.png")
    with qtbot.waitSignal(ws.jobEnded):
        fake.finish(job_id, out)
    versions = ws.versions(str(a))
    assert [v.paths for v in versions] == [(a,), (out,)]
    assert shown[-1] == (str(a), versions[1].id) and ws.viewing == (str(a), versions[1].id)
    assert ws.chain_of(versions[1]) == (UP2,)
    assert jobs.forget_ended() == [job_id] and ws.jobs == {}
    assert len(ws.versions(str(a))) == 2  # the result stays in the strip


def test_a_failure_is_a_failed_version_and_a_chain_runs_step_after_step(
    ws: Workspace, jobs: JobsController, fake: FakeEngine, tmp_path: Path
) -> None:
    a = photo(tmp_path / "a.png", 24, 16)
    b = photo(tmp_path / "b.png", 24, 16, seed=1)
    notices: list[object] = []
    jobs.noticeRequested.connect(notices.append)
    jobs.add_paths([a, b])
    ws.set_settings(CUT)
    first = jobs.run_one(str(a))[0]
    fake.fail(first, "the file is truncated")
    assert ws.failure(str(a)) == "the file is truncated"
    assert not ws.versions(str(a))[1].viewable
    # a chain: cut-out, then ×2 — each step's product feeds the next, on the other image
    cut_id = jobs.run_one(str(a))[0]
    cutout = product(tmp_path, "a-cut.png")
    fake.finish(cut_id, cutout)
    made = ws.versions(str(a))[-1]
    assert jobs.use_as_input(str(a), made.id) == made and ws.base(str(a)) == made
    ws.set_settings(UP2)
    assert jobs.run_label() == f"Run on {made.label} and 1 image"  # the chosen base, named
    up_id = jobs.run_one(str(a))[0]
    assert fake.submitted[-1].inputs == (cutout,)  # from the chosen base, not the original
    fake.finish(up_id, product(tmp_path, "a-cut-up2.png"))
    chained = ws.versions(str(a))[-1]
    assert ws.chain_of(chained) == (CUT, UP2)
    ws.set_viewing(str(a), chained.id)
    (step1,) = jobs.run_chain_from(ws.viewed())
    assert fake.submitted[-1].inputs == (b,)  # the other image, from its original
    b_cut = product(tmp_path, "b-cut.png")
    fake.finish(step1, b_cut)
    step2 = fake.submitted[-1]
    assert step2.inputs == (b_cut,) and step2.operation is Operation.UPSCALE
    fake.cancel(step2.id)
    assert ws.jobs[step2.id].state is JobState.CANCELLED
    assert [n.text for n in notices if "chain" in n.text] == []  # type: ignore[attr-defined]


@pytest.fixture
def tasks() -> Iterator[TaskThread]:
    thread = TaskThread()
    thread.start()
    yield thread
    thread.stop()


def test_the_view_after_clear_finished_and_clear_loads_nothing_stale(
    qtbot: QtBot,
    ws: Workspace,
    jobs: JobsController,
    fake: FakeEngine,
    tasks: TaskThread,
    tmp_path: Path,
) -> None:
    view = ViewController(ws, tasks, lambda paths: paths)
    jobs.showRequested.connect(view.show)
    cleared: list[bool] = []
    view.cleared.connect(lambda: cleared.append(True))
    paths = [photo(tmp_path / f"p{i}.png", 24, 16, seed=i) for i in range(3)]
    jobs.add_paths(paths)
    ws.set_settings(UP2)
    for job_id in jobs.run_selected():
        fake.finish(job_id, product(tmp_path, f"out-{job_id}.png"))
    jobs.forget_ended()
    jobs.clear()
    view.choose_input(str(paths[0]), False)  # the list's current item, just removed
    assert cleared and ws.viewing == (None, None)


def test_the_preview_follows_the_workspace_and_asks_the_fake_engine(
    qtbot: QtBot, ws: Workspace, jobs: JobsController, fake: FakeEngine, tmp_path: Path
) -> None:
    preview = PreviewController(ws, fake.handle())
    a = photo(tmp_path / "a.png", 24, 16)
    jobs.add_paths([a])
    ws.set_settings(UP2)
    assert preview.follow_left() == ""
    preview.set_enabled(True)
    assert ws.preview_on and preview.enabled
    (first,) = fake.preview_requests
    assert first.source == a and first.job.tile == 64 and first.generation == preview.generation
    preview.set_region(Region(0, 0, 12, 8))  # a pan: asked again after the debounce
    assert ws.region == Region(0, 0, 12, 8) and preview.waiting
    qtbot.waitUntil(lambda: len(fake.preview_requests) == 2)
    assert fake.preview_requests[-1].region == Region(0, 0, 12, 8)
    ws.set_settings(CUT)  # another operation: one run of the whole image, no region
    preview.refresh()
    assert fake.preview_requests[-1].region is None and fake.preview_requests[-1].job.tile is None
    preview.set_enabled(False)
    assert not ws.preview_on and fake.previews_cancelled >= 1 and fake.released == 1


def test_no_controller_or_widget_writes_a_jobs_fields_past_the_workspace() -> None:
    """A job the window holds changes only through `Workspace` (its one writer), so every
    change is announced: no `job.<field> = …` in the controllers or the widgets."""
    import ast

    root = Path(__file__).resolve().parent.parent / "gui"
    found = []
    for path in sorted([*root.glob("controllers/*.py"), *root.glob("widgets/*.py")]):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id.endswith("job")
                ):
                    found.append(f"{path.name}:{target.lineno} {target.value.id}.{target.attr}")
    assert not found, found
