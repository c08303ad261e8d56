"""Clips in the window (issue #23, the app's part): the real window on the offscreen platform,
a real engine thread, clips made here with PyAV (64×48, 10 frames).

- a dropped clip is one input with a poster thumbnail and a "clip · … · 10 frames" label;
  a damaged one is refused at once with the engine's message;
- the clip bar shows frame n with read_frame's pixels, and compare shows the same frame of the
  original and of the product clip;
- Preview on a clip previews the frame on screen;
- the Run estimate covers every frame of the clip.
"""

from __future__ import annotations

import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pytestqt.qtbot import QtBot

from engine.api import Engine
from engine.io.video import read_frame
from engine.requests import Operation, OperationRequest
from engine.settings import DEFAULT_MAX_PIXELS, EngineSettings
from gui.jobs import JobState
from gui.main_window import MainWindow
from gui.widgets.clip_bar import ClipBar
from gui.widgets.images import to_qimage
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.video_clips import make_clip
from tests.window_fixtures import as_array, drop_files, use_model, wait_ended

FRAMES = 10


def shown(win: MainWindow) -> tuple[np.ndarray | None, np.ndarray | None]:
    view = win.viewer.view
    before = view._before.toImage() if view._before is not None else None
    after = view._after.toImage() if view._after is not None else None
    return (
        as_array(before) if before is not None else None,
        as_array(after) if after is not None else None,
    )


def frame(path: Path, index: int) -> np.ndarray:
    # Through to_qimage as the viewer draws it (8-bit RGB), so the comparison is exact.
    return as_array(to_qimage(read_frame(path, index, DEFAULT_MAX_PIXELS)))


def open_clip(qtbot: QtBot, win: MainWindow, clip: Path) -> None:
    drop_files(win, [clip])
    qtbot.waitUntil(
        lambda: win.viewer.before is not None and win.viewer.before.path == clip, timeout=10_000
    )


def scrub_to(qtbot: QtBot, win: MainWindow, index: int) -> None:
    win.viewer.clip_bar.slider.setValue(index)
    qtbot.waitUntil(lambda: win.viewer.clip_frame == index, timeout=10_000)


def test_a_dropped_clip_is_one_input_with_a_poster_and_a_bad_one_is_refused_at_once(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "walk.mp4", FRAMES)
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(clip.read_bytes()[:300])
    open_clip(qtbot, window, clip)
    sources = list(window.workspace.sources.values())
    assert [s.paths for s in sources] == [(clip,)]
    source = sources[0]
    assert source.clip and source.frames == FRAMES
    assert source.label == f"walk.mp4 (clip · 0.4 s · {FRAMES} frames)"
    qtbot.waitUntil(lambda: source.key in window.inputs._thumbs, timeout=10_000)
    thumb = window.inputs._thumbs[source.key].toImage()
    poster = as_array(thumb.scaled(64, 48))
    assert np.abs(poster.astype(int) - frame(clip, 0).astype(int)).mean() < 12
    assert window.viewer.clip_bar.isVisibleTo(window.viewer)
    assert window.viewer.clip_bar.label.text() == f"frame 1/{FRAMES} · 00:00.0"

    drop_files(window, [bad])
    # the engine's reason, named, once the task thread has read the header; nothing queued
    qtbot.waitUntil(lambda: "broken.mp4" in window.notice.label.text(), timeout=10_000)
    assert len(window.workspace.sources) == 1


def test_a_clip_is_read_off_the_gui_thread_and_joins_the_inputs_when_read(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header and first frame of a dropped clip are read on the task thread: a clip on a
    slow disk or share must not freeze the window (the probe is spied on, and still runs)."""
    import engine.io.video

    threads: list[str] = []
    real = engine.io.video.probe_video

    def spy(*args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.io.video, "probe_video", spy)
    clip = make_clip(tmp_path / "walk.mp4", FRAMES)
    still = tmp_path / "still.png"
    Image.fromarray(np.full((8, 8, 3), 99, np.uint8)).save(still)
    drop_files(window, [clip, still])
    keys = [s.paths[0] for s in window.workspace.sources.values()]
    assert keys == [still]  # the still at once; the clip once it is read
    qtbot.waitUntil(lambda: len(window.workspace.sources) == 2, timeout=10_000)
    (source,) = [s for s in window.workspace.sources.values() if s.clip]
    assert source.frames == FRAMES
    assert threads and threading.main_thread().name not in threads


def test_the_scrubber_shows_frame_n_of_the_clip_and_of_its_product(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "walk.mp4", FRAMES)
    open_clip(qtbot, window, clip)
    scrub_to(qtbot, window, 6)
    before, _ = shown(window)
    assert before is not None and np.array_equal(before, frame(clip, 6))
    assert window.viewer.clip_bar.label.text() == f"frame 7/{FRAMES} · 00:00.2"

    use_model(window, models, "up2.onnx")
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    job = window.workspace.jobs[job_id]
    assert job.state is JobState.FINISHED and job.result is not None
    product = job.result.products[0].path
    qtbot.waitUntil(
        lambda: window.viewer.after is not None and window.viewer.after.path == product,
        timeout=10_000,
    )
    scrub_to(qtbot, window, 4)
    before, after = shown(window)
    assert before is not None and np.array_equal(before, frame(clip, 4))
    assert after is not None and after.shape == (96, 128, 3)
    assert np.array_equal(after, frame(product, 4))  # the same frame of the product clip


def test_preview_on_a_clip_previews_the_frame_on_screen(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "walk.mp4", FRAMES)
    open_clip(qtbot, window, clip)
    use_model(window, models, "up2.onnx")
    scrub_to(qtbot, window, 7)
    requests: list[int] = []
    window.engine.previewStarted.connect(lambda r: requests.append(r.frame))
    window.set_preview(True)
    qtbot.waitUntil(
        lambda: bool(window.preview.drawn) and not window.preview.waiting, timeout=30_000
    )
    assert requests and requests[-1] == 7
    patches = window.preview.drawn
    # The full job on frame 7 as a still (read_frame's pixels in a PNG): what Preview shows.
    still = tmp_path / "frame7.png"
    Image.fromarray(read_frame(clip, 7, DEFAULT_MAX_PIXELS)).save(still)
    job = OperationRequest(
        Operation.UPSCALE, str(models / "up2.onnx"), (still,), output_dir=tmp_path / "out"
    )
    with Image.open(Engine(EngineSettings(models_dir=models)).run(job).products[0].path) as im:
        want = np.asarray(im.convert("RGB"))
    for patch in patches:
        r = patch.region
        got = np.asarray(patch.pixels)[..., :3]
        assert np.array_equal(got, want[r.y0 : r.y1, r.x0 : r.x1])
    assert patches  # frame 0 differs (the gradient moves): these are frame 7's
    window.set_preview(False)


def test_the_run_estimate_covers_every_frame_of_the_clip(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "walk.mp4", FRAMES)
    open_clip(qtbot, window, clip)
    (source,) = window.workspace.sources.values()
    settings = window.workspace.settings
    assert settings is not None
    book = window.jobs.speeds
    book.learn(settings.operation, settings.model, settings.device, 2.0, 0.03, 10)
    guess = window.jobs.estimate([source], settings)
    one = book.estimate(settings.operation, settings.model, settings.device, 64 * 48 / 1e6, 1)
    assert guess is not None and one is not None
    assert guess.seconds == FRAMES * one.seconds
    assert f"the clip's {FRAMES} frames" in window.jobs.estimate_line("this CPU")


def test_a_running_clip_says_frame_and_tile_and_time_left(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "walk.mp4", FRAMES)
    open_clip(qtbot, window, clip)
    use_model(window, models, "up2.onnx")
    window.panel.tile.setValue(32)  # 64×48 frames: several tiles each
    lines: list[tuple[str, str]] = []

    def seen(_event: object) -> None:  # after the workspace took the event: the row redrawn
        for job_id in window.workspace.jobs:
            row = window.job_list.row(job_id)
            if row is not None:
                row.refresh()
                lines.append((row.bar.format(), row.time_label.text()))

    window.engine.progressChanged.connect(seen)
    window.run_selected()
    wait_ended(qtbot, window)
    window.engine.progressChanged.disconnect(seen)
    bars = [bar for bar, _ in lines]
    # 64×48 on 32-px tiles with their overlap: 6 tiles a frame, every frame and tile named
    for index in range(1, FRAMES + 1):
        assert [f"frame {index}/{FRAMES} · tile {t}/6" for t in range(1, 7)] == [
            bar for bar in dict.fromkeys(bars) if bar.startswith(f"frame {index}/")
        ]
    assert all(times.endswith(" left") for bar, times in lines if bar.startswith("frame 5/"))


def test_geometry_on_a_clip_writes_point_clouds_only_when_ticked(
    qtbot: QtBot, tmp_path: Path
) -> None:
    from PySide6.QtCore import QSettings

    from engine.options import GeometryOptions
    from engine.requests import ProductKind
    from engine.samples.geometry_models import make_moge
    from gui.settings import AppSettings

    folder = tmp_path / "models"
    folder.mkdir()
    make_moge(folder / "moge.onnx")
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    settings.output_dir = str(tmp_path / "out")
    win = MainWindow(
        settings,
        engine_settings=EngineSettings(models_dir=folder),
        data_dir=tmp_path / "data",
        calibrate=False,
    )
    win.confirm_close = False
    try:
        win.show()
        qtbot.waitUntil(lambda: win.inventory is not None, timeout=10_000)
        panel = win.panel
        assert not panel.point_clouds.isVisibleTo(panel)  # upscaling: no such choice
        panel.select_operation(Operation.GEOMETRY)
        assert panel.select_model(str(folder / "moge.onnx"))
        assert panel.point_clouds.isVisibleTo(panel) and not panel.point_clouds.isChecked()
        clip = make_clip(tmp_path / "walk.mp4", 3, audio=None)
        open_clip(qtbot, win, clip)
        settings_now = panel.job_settings()
        assert settings_now is not None and settings_now.options is None  # off by default
        panel.point_clouds.setChecked(True)
        (job_id,) = win.run_selected()
        wait_ended(qtbot, win)
        job = win.workspace.jobs[job_id]
        assert job.request.options == GeometryOptions(point_clouds=True)
        assert job.state is JobState.FINISHED and job.result is not None
        clouds = [p.path for p in job.result.products if p.kind is ProductKind.POINT_CLOUD]
        assert [(p.parent.name, p.name) for p in clouds] == [
            ("walk-points", f"walk-points-{i:04d}.ply") for i in (1, 2, 3)
        ]
    finally:
        win.close()


def test_the_output_step_chooses_the_clips_codec_and_quality(
    qtbot: QtBot, window: MainWindow, models: Path, tmp_path: Path
) -> None:
    from engine.options import VideoCodec, VideoOptions
    from gui.widgets.output_options import OutputEditor
    from tests.video_clips import decoded

    editor = window.panel.output_editor
    assert (
        editor.codec.isVisibleTo(window.panel) and editor.codec.currentText() == "Clip's own codec"
    )
    assert not OutputEditor().codec.isVisibleTo(window)  # Save as (an image) has no such row
    clip = make_clip(tmp_path / "walk.mp4", 4)
    open_clip(qtbot, window, clip)
    use_model(window, models, "up2.onnx")
    editor.codec.setCurrentIndex(editor.codec.findData(VideoCodec.HEVC.value))
    editor.crf.setValue(30)
    (job_id,) = window.run_selected()
    wait_ended(qtbot, window)
    job = window.workspace.jobs[job_id]
    assert job.request.output.video == VideoOptions(VideoCodec.HEVC, 30)
    assert job.result is not None
    _, _, info = decoded(job.result.products[0].path)
    assert info["codec"] == "hevc" and info["audio_codecs"] == ["aac"]
    # remembered for the next start; FFV1 has no CRF to set
    assert window.settings.output_options.video == VideoOptions(VideoCodec.HEVC, 30)
    editor.codec.setCurrentIndex(editor.codec.findData(VideoCodec.FFV1.value))
    assert not editor.crf.isEnabled()


def test_play_runs_at_the_clip_rate_and_drops_frames_while_one_is_read(qtbot: QtBot) -> None:
    bar = ClipBar()
    qtbot.addWidget(bar)
    bar.set_clip(100, Fraction(50))
    asked: list[int] = []
    bar.frameRequested.connect(asked.append)
    bar.play_button.setChecked(True)
    qtbot.waitUntil(lambda: bool(asked), timeout=2000)
    qtbot.wait(200)  # the frame is still being read: ten ticks later, nothing more is asked
    assert len(asked) == 1
    bar.shown(asked[0])
    qtbot.waitUntil(lambda: len(asked) == 2, timeout=2000)
    assert asked[1] >= asked[0] + 5  # the frame due now, not the next one: the rest dropped
    bar.stop()
    assert not bar.timer.isActive()


def test_playing_a_clip_in_the_window_ends_on_its_last_frame(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "walk.mp4", FRAMES)
    open_clip(qtbot, window, clip)
    window.viewer.clip_bar.play_button.setChecked(True)
    qtbot.waitUntil(lambda: not window.viewer.clip_bar.playing, timeout=10_000)
    qtbot.waitUntil(lambda: window.viewer.clip_frame == FRAMES - 1, timeout=5000)
    before, _ = shown(window)
    assert before is not None and np.array_equal(before, frame(clip, FRAMES - 1))


def test_a_folder_of_a_thousand_frames_scrubs_all_of_them_holding_one(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    """A frame folder's bar spans every frame (it showed the first 300 of 1000), each read
    when shown, like a clip's: the window holds the frame on screen, not the folder."""
    from PIL import Image

    folder = tmp_path / "frames"
    folder.mkdir()
    count = 1000
    for i in range(count):
        Image.new("RGB", (8, 6), (i % 256, i // 256, 7)).save(folder / f"f{i:04d}.png")
    window.accept_paths([folder])
    qtbot.waitUntil(
        lambda: window.viewer.before is not None and window.viewer.before.path == folder,
        timeout=20_000,
    )
    viewer = window.viewer
    assert viewer.before is not None and len(viewer.before.frames) == 1  # one decoded, not 1000
    assert viewer.clip_bar.isVisibleTo(viewer) and not viewer.scrubber_row.isVisibleTo(viewer)
    assert viewer.clip_bar.slider.maximum() == count - 1
    scrub_to(qtbot, window, 900)
    before, _ = shown(window)
    assert before is not None and tuple(before[0, 0]) == (900 % 256, 900 // 256, 7)
    assert viewer.clip_bar.label.text().startswith(f"frame 901/{count}")
