"""A frame's product is written while the next frame's model runs (docs/batch-pipeline.md):
the same files, in order, a failed or cancelled write leaves nothing half written, and the
peak does not grow with the number of frames."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.api import Engine
from engine.cancel import CancelToken
from engine.errors import Cancelled
from engine.io.sequences import SequenceFrames
from engine.io.writing import ImageStream
from engine.operations import tile_frames
from engine.requests import Operation, OperationRequest, Progress, ProgressKind
from engine.runtime.sessions import SessionKey
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from tests.engine_helpers import SessionProxy, photo
from tests.test_memory_bytes import LIVE_BYTES_ENV, MB, run_case

WAIT_S = 20.0


class _Runs(SessionProxy):
    """Calls `at(run_number)` (from 1) before every run."""

    def __init__(self, inner: Any, at: Any) -> None:
        super().__init__(inner)
        self.at, self.count = at, 0

    def before_run(self, feeds: dict[str, np.ndarray], run_options: Any) -> Any:
        self.count += 1
        self.at(self.count)
        return run_options


class _WriterGate(CancelToken):
    """A cancel token whose first check on a writer thread (between blocks of a frame's rows)
    waits until `opened` is set: whether it was, within the wait, is `seen_open`."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = threading.Event()
        self.seen_open: bool | None = None

    def check(self) -> None:
        if self.seen_open is None and threading.current_thread().name.startswith("tessera-writer"):
            self.seen_open = self.opened.wait(WAIT_S)
        super().check()


def _engine(tmp: Path, at: Any = None, **settings: Any) -> Engine:
    def wrap(session: Any, _key: SessionKey) -> Any:
        return _Runs(session, at) if at is not None else session

    return Engine(EngineSettings(models_dir=tmp, **settings), session_wrap=wrap)


def _frames(folder: Path, count: int, width: int = 48, height: int = 32) -> Path:
    folder.mkdir()
    for i in range(count):
        photo(folder / f"f{i + 1:04d}.png", width, height, seed=i)
    return folder


def _request(model: Path, *inputs: Path, out: Path) -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, str(model), inputs, output_dir=out)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_a_frames_write_goes_on_while_the_next_frame_runs(tmp_path: Path) -> None:
    # Fails before the write-behind: the engine waited for frame 1's write before frame 2's
    # first run, so the writer's gate was never opened.
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    frames = _frames(tmp_path / "frames", 3)
    gate = _WriterGate()
    finished = threading.Event()

    def progress(p: Progress) -> None:
        if p.kind is ProgressKind.FRAME_FINISHED:
            finished.set()

    def at(_run: int) -> None:
        if finished.is_set():  # a run of a later frame (the load's probes run before any)
            gate.opened.set()

    request = _request(model, frames, out=tmp_path / "o")
    result = _engine(tmp_path, at).run(request, progress, cancel=gate)
    assert result.ok and len(result.products) == 3
    assert gate.seen_open is True


def test_frames_written_behind_are_the_files_written_in_turn(tmp_path: Path) -> None:
    # A guard: the same files, bytes and order with and without the overlap.
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    frames = _frames(tmp_path / "frames", 5, 96, 64)
    behind = _engine(tmp_path).run(_request(model, frames, out=tmp_path / "a"))
    in_turn = _engine(tmp_path, overlap_tiles=False).run(
        _request(model, frames, out=tmp_path / "b")
    )
    assert behind.ok and in_turn.ok and len(behind.products) == 5
    assert [p.path.name for p in behind.products] == [p.path.name for p in in_turn.products]
    assert sorted(p.path.name for p in behind.products) == [p.path.name for p in behind.products]
    for a, b in zip(behind.products, in_turn.products, strict=True):
        assert a.path.read_bytes() == b.path.read_bytes()


def test_a_cancel_during_a_write_behind_leaves_nothing_half_written(tmp_path: Path) -> None:
    # A guard: the cancel comes while frame 1 is written behind frame 2's run.
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    frames = _frames(tmp_path / "frames", 3)
    gate = _WriterGate()

    finished = threading.Event()

    def progress(p: Progress) -> None:
        if p.kind is ProgressKind.FRAME_FINISHED:
            finished.set()

    def at(_run: int) -> None:
        if finished.is_set():  # the second frame's run, the first frame's write waiting
            gate.cancel()
            gate.opened.set()

    out = tmp_path / "o"
    with pytest.raises(Cancelled):
        _engine(tmp_path, at).run(_request(model, frames, out=out), progress, cancel=gate)
    assert _files(out) == []  # no frame published, no temp file left
    assert not [t for t in threading.enumerate() if t.name.startswith("tessera-writer")]


def test_a_failed_frame_write_fails_its_input_only_and_leaves_nothing(tmp_path: Path) -> None:
    # A guard: the middle frame's file is past the process's file size limit (as a full disk
    # stops a write) while the next frame runs; the other input of the batch is done.
    data = run_case(
        """
        import resource, signal
        from PIL import Image
        model = make_upscaler(w / "up2.onnx", scale=2)
        frames = w / "frames"
        frames.mkdir()
        rng = np.random.default_rng(0)
        for i in range(4):
            level = rng.integers(0, 256, (96, 128, 3)) if i == 1 else np.full((96, 128, 3), 90)
            Image.fromarray(level.astype(np.uint8)).save(frames / f"f{i + 1:04d}.png")
        single = photo(w / "single.png", 24, 16)
        engine = Engine(EngineSettings(models_dir=w))
        engine.run(OperationRequest(Operation.UPSCALE, str(model), (single,), output_dir=w / "warm"))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, resource.RLIM_INFINITY))
        out = w / "o"
        r = engine.run(OperationRequest(Operation.UPSCALE, str(model), (frames, single), output_dir=out))
        print(json.dumps({
            "failed": [str(f.source) for f in r.failures],
            "messages": [f.message for f in r.failures],
            "products": [str(p.path.relative_to(out)) for p in r.products],
            "files": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()),
        }))
        """,
        tmp_path,
    )
    assert data["failed"] == [str(tmp_path / "frames")], data
    assert data["products"] and all("single" in p for p in data["products"]), data
    assert data["files"] == data["products"], data  # nothing of the failed input, no temp file
    assert "traceback" not in data["messages"][0].lower()


def test_a_folders_next_frame_is_decoded_while_the_frame_before_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fails before frames_ahead.py: each file was decoded on the engine thread when its frame
    # came up, so during frame k's run frame k + 1's decoding never started.
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    frames = _frames(tmp_path / "frames", 4)
    started: list[int] = []
    changed = threading.Condition()
    decode = SequenceFrames.frame

    def frame(self: SequenceFrames, index: int) -> np.ndarray:
        with changed:
            started.append(index)
            changed.notify_all()
        return decode(self, index)

    monkeypatch.setattr(SequenceFrames, "frame", frame)
    done = 0
    seen: dict[int, bool] = {}

    def progress(p: Progress) -> None:
        nonlocal done
        if p.kind is ProgressKind.FRAME_FINISHED:
            done += 1

    def at(_run: int) -> None:
        # A run of frame `done` (the model's probes run before any frame is decoded).
        with changed:
            if done in started and done + 1 < 4 and done not in seen:
                seen[done] = changed.wait_for(lambda: done + 1 in started, timeout=5.0)

    result = _engine(tmp_path, at).run(_request(model, frames, out=tmp_path / "o"), progress)
    assert result.ok and len(result.products) == 4
    assert seen == {0: True, 1: True, 2: True}
    assert not [t for t in threading.enumerate() if t.name.startswith("tessera-frames")]


def test_a_broken_frame_of_a_folder_fails_when_it_is_reached_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    # A guard of the decoding ahead: frame 3 of 4 is not a picture. The input fails naming
    # it, no product of it is left, the other input of the batch is done.
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    frames = _frames(tmp_path / "frames", 4)
    (frames / "f0003.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    single = photo(tmp_path / "single.png", 24, 16)
    out = tmp_path / "o"
    result = _engine(tmp_path).run(_request(model, frames, single, out=out))
    assert [f.source for f in result.failures] == [frames]
    assert "f0003.png" in result.failures[0].message
    assert [p.path.name for p in result.products] == [p.name for p in _files(out)]
    assert all("single" in p.path.name for p in result.products)


def test_a_sequence_reuses_its_side_threads_instead_of_one_each_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fails before: every frame started (and joined) a writer thread and a tile thread of its
    # own, 2-4 ms of the engine thread's time a frame on a busy 2-core machine.
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    frames = _frames(tmp_path / "frames", 6, 48, 48)
    writers: set[threading.Thread] = set()
    tilers: set[threading.Thread] = set()
    add, cut = ImageStream.add, tile_frames.tile_input

    def stream_add(self: ImageStream, frame: Any) -> None:
        writers.add(threading.current_thread())
        add(self, frame)

    def tile_input(*args: Any) -> Any:
        tilers.add(threading.current_thread())
        return cut(*args)

    monkeypatch.setattr(ImageStream, "add", stream_add)
    monkeypatch.setattr(tile_frames, "tile_input", tile_input)
    request = _request(model, frames, out=tmp_path / "o")
    result = _engine(tmp_path).run(replace(request, tile=16))  # 3 x 3 tiles a frame
    assert result.ok and len(result.products) == 6
    assert 1 <= len(writers) <= 2  # the frame being made and the one handed over
    assert all(t.name.startswith("tessera-writer") for t in writers)
    side = {t for t in tilers if t is not threading.main_thread()}
    assert len(side) == 1 and next(iter(side)).name.startswith("tessera-tiles")


def test_the_peak_of_a_sequence_does_not_grow_with_its_frames(tmp_path: Path) -> None:
    # Fails before the fix: each band-written frame's rows stayed in a reference cycle (the
    # frame and its assemblers) until a garbage collection, so the peak grew with the frames.
    # With the write-behind, at most one frame is written behind the runs.
    data = run_case(
        """
        import shutil
        model = make_upscaler(w / "up2.onnx", scale=2)
        engine = Engine(EngineSettings(models_dir=w))
        def peak(count):
            frames = w / f"frames{count}"
            frames.mkdir()
            for i in range(count):
                photo(frames / f"f{i + 1:04d}.png", 480, 360, seed=i)
            r = engine.run(OperationRequest(Operation.UPSCALE, str(model), (frames,), output_dir=w / "o"))
            assert r.ok, r.failures
            shutil.rmtree(w / "o")
            return r.memory.rss_peak - r.memory.rss_after_load
        peak(2)  # the arena's first growth for this size is in neither figure
        print(json.dumps({"few": peak(3), "many": peak(12)}))
        """,
        tmp_path,
        env=LIVE_BYTES_ENV,
    )
    assert data["many"] <= data["few"] * 1.10 + 4 * MB, data
