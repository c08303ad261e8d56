"""The GUI's controllers without a window: jobs, inputs and their versions, the model picker's
groups, speeds and the calibration run — driven headless, with a real engine thread and real
contract models, and no widget created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from engine.models.catalog import Family, load_catalog
from engine.models.inventory import ModelInventory, discover
from engine.requests import Operation
from engine.samples.faulty_models import make_two_strings
from engine.samples.upscaler_models import make_upscaler
from gui.controllers.jobs import FOLLOW_AT_MOST, JobsController
from gui.controllers.models import (
    ModelsController,
    default_choice,
    get_offers,
    missing_hint,
    model_groups,
)
from gui.controllers.speed import Calibrator, SpeedBook
from gui.controllers.view import ViewController
from gui.engine_thread import EngineThread
from gui.jobs import ORIGINAL, JobSettings, JobState
from gui.settings import AppSettings
from gui.tasks import TaskThread
from gui.workspace import Workspace
from tests.engine_helpers import photo
from tests.model_files import upscaler
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard

ROOT = Path(__file__).resolve().parent.parent
JOB_MS = 60_000


MODELS = {"up2.onnx": upscaler(2)}


@pytest.fixture
def jobs(engine_thread: EngineThread, settings: AppSettings) -> JobsController:
    return JobsController(Workspace(), engine_thread, SpeedBook(settings))


def up2(models: Path, **kwargs: object) -> JobSettings:
    return JobSettings(Operation.UPSCALE, str(models / "up2.onnx"), "up2 ×2", **kwargs)  # type: ignore[arg-type]


def ended(jobs: JobsController) -> bool:
    return bool(jobs.workspace.jobs) and all(j.state.ended for j in jobs.workspace.jobs.values())


def test_the_controllers_load_no_widgets() -> None:
    code = (
        "import sys\n"
        "import gui.controllers.jobs, gui.controllers.models, gui.controllers.speed\n"
        "import gui.controllers.view, gui.controllers.results, gui.controllers.inputs\n"
        "import gui.controllers.preview, gui.controllers.memory, gui.workspace\n"
        "import gui.inputs, gui.jobs, gui.messages\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('PySide6.QtWidgets', "
        "'PySide6.QtGui', 'gui.widgets', 'gui.main_window')))\n"
        "print(bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_each_image_is_an_input_and_run_says_what_it_runs(
    jobs: JobsController, models: Path, tmp_path: Path
) -> None:
    shots = [photo(tmp_path / f"IMG_{i:04d}.png", 30, 20, seed=i) for i in (1, 2, 3)]
    shown: list[tuple[str, str]] = []
    jobs.showRequested.connect(lambda key, vid: shown.append((key, vid)))
    outcome = jobs.add_paths(shots)
    assert [s.paths for s in outcome.sources] == [(p,) for p in shots]
    assert outcome.sequence_offer == tuple(shots)  # equal sizes: offered, not applied
    assert shown == [(str(shots[0]), "")]  # the first new one is shown
    assert jobs.run_label([]) == "Run 3 images"
    assert jobs.run_label([str(shots[0])]) == "Run 3 images"  # one selected: still all
    assert jobs.run_label([str(shots[0]), str(shots[2])]) == "Run selected (2)"
    assert jobs.targets([str(shots[0]), str(shots[2])]) == [
        jobs.workspace.sources[str(shots[0])],
        jobs.workspace.sources[str(shots[2])],
    ]
    again = jobs.add_paths([shots[1]])
    assert again.sources == () and len(jobs.workspace.sources) == 3  # not added twice
    merged = jobs.merge_as_sequence(list(outcome.sequence_offer))
    assert merged is not None and merged.sequence and list(jobs.workspace.sources) == [merged.key]
    assert jobs.run_label([]) == "Run 1 image"


def test_results_become_versions_and_are_shown_as_they_come(
    qtbot: QtBot, jobs: JobsController, models: Path, tmp_path: Path
) -> None:
    a = photo(tmp_path / "a.png", 30, 20)
    b = photo(tmp_path / "b.png", 30, 20, seed=1)
    jobs.add_paths([a, b])
    shown: list[tuple[str, str]] = []
    jobs.showRequested.connect(lambda key, vid: shown.append((key, vid)))
    ids = jobs.queue(list(jobs.workspace.sources.values()), up2(models))
    qtbot.waitUntil(lambda: ended(jobs), timeout=JOB_MS)
    versions = jobs.workspace.versions(str(a))
    assert [v.label for v in versions] == ["Original", "up2 ×2"]
    assert versions[0].id == ORIGINAL and versions[1].paths == (tmp_path / "a-up2.png",)
    # both results were shown in turn: the person did not look elsewhere
    assert [key for key, _ in shown] == [str(a), str(b)]
    assert shown[1][1] == f"{ids[1]}:image"
    assert jobs.workspace.newest(str(b)) == jobs.workspace.versions(str(b))[1]


def test_a_large_batch_leaves_the_view_on_the_image_in_view(
    qtbot: QtBot, jobs: JobsController, models: Path, tmp_path: Path
) -> None:
    # Issue #21: the viewer jumped to each result of a long batch every second.
    paths = [photo(tmp_path / f"p{i:02d}.png", 12, 8, seed=i) for i in range(FOLLOW_AT_MOST + 2)]
    jobs.add_paths(paths)
    shown: list[str] = []
    jobs.showRequested.connect(lambda key, _vid: shown.append(key))
    jobs.queue(list(jobs.workspace.sources.values()), up2(models))
    qtbot.waitUntil(lambda: ended(jobs), timeout=JOB_MS)
    assert shown == [str(paths[0])]  # the image in view got its result; no other took the view
    assert all(len(jobs.workspace.versions(str(p))) == 2 for p in paths)


def test_a_result_elsewhere_does_not_take_the_view_the_person_chose(
    qtbot: QtBot, jobs: JobsController, models: Path, tmp_path: Path
) -> None:
    a = photo(tmp_path / "a.png", 30, 20)
    b = photo(tmp_path / "b.png", 30, 20, seed=1)
    jobs.add_paths([a, b])
    jobs.queue([jobs.workspace.sources[str(b)]], up2(models))
    jobs.workspace.set_following(False)  # a click on a, while b runs
    jobs.workspace.set_viewing(str(a), None)
    shown: list[str] = []
    jobs.showRequested.connect(lambda key, _vid: shown.append(key))
    qtbot.waitUntil(lambda: ended(jobs), timeout=JOB_MS)
    assert shown == []
    assert jobs.workspace.viewing == (str(a), None)
    # pressing Run again means "show me": the next result is followed
    jobs.queue([jobs.workspace.sources[str(a)]], up2(models))
    qtbot.waitUntil(lambda: len(shown) == 1, timeout=JOB_MS)
    assert shown == [str(a)]


def test_a_bad_file_makes_a_failed_job_with_its_reason(
    qtbot: QtBot, jobs: JobsController, models: Path, tmp_path: Path
) -> None:
    good = photo(tmp_path / "whole.png", 30, 20)
    broken = tmp_path / "cut.png"
    broken.write_bytes(good.read_bytes()[:100])
    jobs.add_paths([broken])
    (job_id,) = jobs.queue(list(jobs.workspace.sources.values()), up2(models))
    qtbot.waitUntil(lambda: ended(jobs), timeout=JOB_MS)
    assert jobs.workspace.jobs[job_id].state is JobState.FAILED
    reason = jobs.workspace.failure(str(broken))
    assert "cut.png" in reason and "truncated" in reason
    (failed,) = [v for v in jobs.workspace.versions(str(broken)) if v.job_id == job_id]
    assert not failed.viewable and failed.failed == reason


def test_the_speed_book_keeps_the_fixed_cost_apart_from_the_rate(settings: AppSettings) -> None:
    """Issue #21: a tiny input teaches only the fixed cost, and one real job gives figures
    within 2× for other sizes (here a job costs 2 s + 10 s per Mpx)."""
    book = SpeedBook(settings)
    op = Operation.UPSCALE
    assert book.estimate(op, "m", "cpu", 2.0, 1) is None
    book.learn(op, "m", "cpu", 2.0 + 10 * 0.0001, 0.0001, 1)  # a 10×10 image
    assert book.estimate(op, "m", "cpu", 2.0, 1) is None  # no rate from it
    tiny = book.estimate(op, "m", "cpu", 0.0004, 1)  # but the next tiny one costs the same
    assert tiny is not None and tiny.seconds == pytest.approx(2.0, rel=0.01)
    book.learn(op, "m", "cpu", 2.0 + 10 * 1.0, 1.0, 1)
    for mp in (0.5, 4.0, 12.0):
        first = book.estimate(op, "m", "cpu", mp, 1)
        assert first is not None and not first.rough
        assert 0.5 <= first.seconds / (2.0 + 10 * mp) <= 2.0
    batch = book.estimate(op, "m", "cpu", 3.0, 3)  # one figure for 3 images of 1 Mpx
    assert batch is not None and batch.seconds == pytest.approx(3 * 2.0 + 10 * 3.0, rel=0.05)
    book.learn(op, "m", "cpu", 2.0 + 14 * 1.0, 1.0, 1)  # it ran slower: half way
    refined = book.estimate(op, "m", "cpu", 1.0, 1)
    assert refined is not None and refined.seconds == pytest.approx(2.0 + 12.0, rel=0.01)
    # families that run at the model's own resolution: seconds per image
    book.learn(Operation.DEPTH, "d", "cpu", 8.0, 12.0, 2)
    depth = book.estimate(Operation.DEPTH, "d", "cpu", 99.0, 3)
    assert depth is not None and depth.seconds == pytest.approx(12)
    # remembered
    again = SpeedBook(AppSettings(settings.store))
    assert again.estimate(op, "m", "cpu", 1.0, 1) == refined


def test_a_model_never_run_gets_a_rough_figure_from_its_size(settings: AppSettings) -> None:
    sizes = {"small": 1_000_000, "big": 4_000_000, "unknown": None}
    book = SpeedBook(settings, model_bytes=sizes.get)
    op = Operation.UPSCALE
    assert book.estimate(op, "big", "cpu", 1.0, 1) is None  # nothing has run on this CPU yet
    book.learn(op, "small", "cpu", 10.0, 1.0, 1)
    guess = book.estimate(op, "big", "cpu", 1.0, 1)
    assert guess is not None and guess.rough
    # Four times the weights, four times the work (the cost per image, 30 ms, apart).
    assert guess.seconds == pytest.approx(40.0, rel=0.01)
    assert book.estimate(op, "big", "gpu:0", 1.0, 1) is None  # another device knows nothing
    assert book.estimate(op, "unknown", "cpu", 1.0, 1) is None
    assert book.estimate(Operation.DEPTH, "big", "cpu", 1.0, 1) is None  # another family


def test_choosing_a_model_runs_nothing(
    qtbot: QtBot, engine_thread: EngineThread, settings: AppSettings, models: Path
) -> None:
    """Issue #22: no calibration run — nothing is loaded that the person did not ask for."""
    book = SpeedBook(settings)
    calibrator = Calibrator(engine_thread, book)
    model = str(models / "up2.onnx")
    assert not calibrator.needed(model, "cpu")
    assert not calibrator.calibrate(Operation.UPSCALE, model, "cpu", "auto", engine_idle=True)
    assert not calibrator.busy and not engine_thread.is_busy()
    assert book.model_bytes is not None and book.model_bytes(model) == Path(model).stat().st_size


# -------------------------------------------------------------------------------- the models


@pytest.fixture
def catalog_models(tmp_path: Path) -> ModelInventory:
    folder = tmp_path / "models"
    make_upscaler(folder / "realesrgan-x4plus.onnx", scale=4)
    make_upscaler(folder / "RealESRGAN_x2plus.onnx", scale=2)
    for scale in (2, 4):
        make_upscaler(folder / f"realesrgan-animevideov3-x{scale}.onnx", scale=scale)
    make_upscaler(folder / "realesr-animevideov3.onnx", scale=4)  # the same ×4, downloaded
    make_upscaler(folder / "mine.onnx", scale=3)
    return discover(folder)


def test_models_are_grouped_by_purpose_with_scales(catalog_models: ModelInventory) -> None:
    groups = model_groups(catalog_models, Family.UPSCALE)
    assert [(g.text, g.scales) for g in groups] == [
        ("Photo", [2, 4]),
        ("Fast preview", [2, 4]),
        ("mine (own model) ×3", [3]),
    ]
    photo_group = groups[0]
    assert photo_group.choice(4).model == "realesrgan-x4plus"
    assert photo_group.choice(2).model == "realesrgan-x2plus"
    fast = groups[1]
    assert fast.choice(4).model == "realesrgan-animevideov3-x4"  # the better-ranked of two
    assert "Anime and video" in fast.choice(2).purpose
    assert default_choice(groups).model == "realesrgan-x4plus"  # type: ignore[union-attr]
    assert default_choice(groups, "realesrgan-animevideov3-x2").model == (  # type: ignore[union-attr]
        "realesrgan-animevideov3-x2"
    )
    assert default_choice(groups, "gone").model == "realesrgan-x4plus"  # type: ignore[union-attr]
    assert groups[2].choices[0].purpose.startswith("Your own model")


def test_every_catalog_upscaler_has_a_label_and_a_purpose() -> None:
    for entry in load_catalog().values():
        assert entry.label and entry.purpose, entry.id
        assert "(starter)" not in entry.name
    labels = {e.id: e.short_label for e in load_catalog().values()}
    assert labels["realesrgan-x4plus"] == "Photo ×4"
    assert labels["realesrgan-x4plus-anime"] == "Anime ×4"
    assert labels["realesrgan-animevideov3-x2"] == "Fast preview ×2"


def test_missing_families_are_offered_with_what_they_write(tmp_path: Path) -> None:
    empty = discover(tmp_path / "none")
    for family, writes in ((Family.DEPTH, "depth map"), (Family.GEOMETRY, "point cloud")):
        hint = missing_hint(empty, family)
        assert "Get…" in hint and writes in hint and "python -m" not in hint
        offers = get_offers(empty, family)
        assert offers and all(o.entry is not None for o in offers)  # no starter model
        assert all(writes in o.tip for o in offers)
    starter = get_offers(empty, Family.UPSCALE)[0]
    assert starter.entry is None and "offline" in starter.text


def test_the_models_controller_lists_installs_and_refuses(qtbot: QtBot, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    tasks = TaskThread()
    tasks.start()
    controller = ModelsController(tasks, lambda: folder)
    notices: list[str] = []
    controller.noticeRequested.connect(lambda n: notices.append(n.text))
    try:
        with qtbot.waitSignal(controller.inventoryChanged, timeout=10_000):
            controller.refresh()
        assert controller.inventory is not None and not controller.inventory.unknown
        mine = make_upscaler(tmp_path / "in" / "mine.onnx", scale=3)
        with qtbot.waitSignal(controller.inventoryChanged, timeout=10_000):
            controller.install(mine)
        assert "Added mine.onnx" in notices[-1]
        groups = model_groups(controller.inventory, Family.UPSCALE)
        assert [g.text for g in groups] == ["mine (own model) ×3"]
        strings = make_two_strings(tmp_path / "in" / "strings.onnx")
        controller.install(strings)
        qtbot.waitUntil(lambda: "strings.onnx was not added" in notices[-1], timeout=10_000)
    finally:
        controller.stop()
        tasks.stop()


def test_the_view_remembers_each_inputs_pair_and_drops_stale_loads(
    qtbot: QtBot, jobs: JobsController, models: Path, tmp_path: Path
) -> None:
    tasks = TaskThread()
    tasks.start()
    # the loader is the window's decoder; here the paths themselves stand for the pictures
    view = ViewController(jobs.workspace, tasks, lambda paths: paths)
    jobs.showRequested.connect(view.show)
    loaded: list[tuple[object, object, tuple[str, str]]] = []
    view.loaded.connect(lambda before, after, labels: loaded.append((before, after, labels)))
    selected: list[str] = []
    view.selectRequested.connect(selected.append)
    try:
        a = photo(tmp_path / "a.png", 30, 20)
        b = photo(tmp_path / "b.png", 30, 20, seed=1)
        jobs.add_paths([a, b])
        qtbot.waitUntil(lambda: bool(loaded))
        assert loaded[-1] == ((a,), None, ("Original", "Original"))
        jobs.queue([jobs.workspace.sources[str(a)]], up2(models))
        qtbot.waitUntil(lambda: loaded[-1][1] == (tmp_path / "a-up2.png",), timeout=JOB_MS)
        assert selected[-1] == str(a)
        result = jobs.workspace.versions(str(a))[1]
        assert view.choose_version(result.id, True) == ""  # the result on the left too
        qtbot.waitUntil(lambda: loaded[-1][0] == (tmp_path / "a-up2.png",))
        view.choose_input(str(b), True)
        qtbot.waitUntil(lambda: loaded[-1][0] == (b,))
        view.choose_input(str(a), True)
        qtbot.waitUntil(lambda: loaded[-1][0] == (tmp_path / "a-up2.png",))  # a's pair
        assert view.viewed() == result
        count = len(loaded)
        view.choose_input(str(b), True)
        view.choose_input(str(a), True)  # b's load is stale before it arrives
        qtbot.waitUntil(lambda: len(loaded) > count)
        qtbot.wait(100)
        assert [entry[0] for entry in loaded[count:]] == [(tmp_path / "a-up2.png",)]
    finally:
        tasks.stop()
