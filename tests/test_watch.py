"""Watched folders: files copied in slowly are taken once each, when whole; products never
re-enter the watch; Ctrl+C stops the command cleanly."""

from __future__ import annotations

import io
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import numpy as np
import pytest
from PIL import Image

from engine.samples.upscaler_models import make_upscaler
from engine.watch import STALLED_LOOKS, FolderWatch
from tests.test_cli import ROOT

INTERVAL = 0.05


def _png_bytes(seed: int, width: int = 40, height: int = 30) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _pieces(data: bytes, count: int) -> list[bytes]:
    step = -(-len(data) // count)
    return [data[i : i + step] for i in range(0, len(data), step)]


def test_a_file_is_taken_once_when_unchanged_over_two_looks_and_whole(tmp_path: Path) -> None:
    watch = FolderWatch(tmp_path)
    data = _png_bytes(0)
    target = tmp_path / "a.png"
    first, rest = data[:100], data[100:]
    target.write_bytes(first)
    assert watch.poll() == [] and watch.poll() == [] and watch.poll() == []  # stable, not whole
    for _ in range(STALLED_LOOKS - 3):
        assert watch.poll() == []
    assert watch.stalled == [target]  # said once
    assert watch.poll() == [] and watch.stalled == []
    with open(target, "ab") as file:
        file.write(rest)
    assert watch.poll() == []  # changed since the last look
    (taken,) = watch.poll()
    assert taken.path == target and taken.size == len(data)
    assert watch.poll() == [] and watch.poll() == []  # once


def test_a_jpeg_with_data_after_its_end_is_taken_once_it_stays_unchanged(tmp_path: Path) -> None:
    watch = FolderWatch(tmp_path)
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, format="JPEG")
    (tmp_path / "motion.jpg").write_bytes(buffer.getvalue() + b"\0\0\0\x18ftypmp42" + bytes(64))
    for _ in range(STALLED_LOOKS - 1):
        assert watch.poll() == []
    assert [a.path.name for a in watch.poll()] == ["motion.jpg"]
    assert watch.stalled == []


def test_products_hidden_files_and_the_output_folder_never_enter(tmp_path: Path) -> None:
    watch = FolderWatch(tmp_path)
    (tmp_path / "photo.png").write_bytes(_png_bytes(1))
    watch.poll()
    assert [a.path.name for a in watch.poll()] == ["photo.png"]
    (tmp_path / "photo-up2.png").write_bytes(_png_bytes(2))  # the product of photo.png
    (tmp_path / ".photo-up2.png.partial-123-abcd").write_bytes(b"x")  # a temp file
    (tmp_path / "notes.txt").write_text("not an image")
    out = tmp_path / "Tessera"
    out.mkdir()
    (out / "other.png").write_bytes(_png_bytes(3))
    (tmp_path / "mine.png").write_bytes(_png_bytes(4))
    watch.add_products([tmp_path / "mine.png"])  # a product the watch's job published here
    (tmp_path / "photo-2.png").write_bytes(_png_bytes(5))  # a numbered frame, not a product
    watch.poll()
    assert [a.path.name for a in watch.poll()] == ["photo-2.png"]


def test_a_file_removed_and_copied_again_is_taken_again(tmp_path: Path) -> None:
    watch = FolderWatch(tmp_path)
    target = tmp_path / "b.png"
    target.write_bytes(_png_bytes(6))
    watch.poll()
    assert len(watch.poll()) == 1
    target.unlink()
    assert watch.poll() == []
    target.write_bytes(_png_bytes(7))
    watch.poll()
    assert len(watch.poll()) == 1


def _watch_command(folder: Path, model: Path) -> list[str]:
    engine = [sys.executable, "-m", "engine"]
    return [*engine, "watch", str(folder), "--model", str(model), "--interval", str(INTERVAL)]


def _end(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


class _Lines:
    """The lines a process prints, read on a thread; `wait_for` waits on them with a timeout."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[tuple[float, str]] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self.lines.put((time.monotonic(), line.rstrip("\n")))
        except (ValueError, OSError):
            pass  # the test closed the pipe

    def wait_for(self, text: str, timeout: float = 60) -> float:
        deadline = time.monotonic() + timeout
        for at, line in self.seen:
            if text in line:
                return at
        while (left := deadline - time.monotonic()) > 0:
            try:
                at, line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append((at, line))
            if text in line:
                return at
        raise AssertionError(f"no line with {text!r}; got {[line for _, line in self.seen]}")


def test_files_copied_slowly_are_taken_once_each_when_whole(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    folder = tmp_path / "hot"
    folder.mkdir()
    process = subprocess.Popen(
        [*_watch_command(folder, model), "--format", "tiff"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = _Lines(process.stdout)
        lines.wait_for("Watching")
        finished: dict[str, float] = {}
        datas = {f"slow{i}.png": _png_bytes(10 + i) for i in range(3)}
        for name, data in datas.items():
            with open(folder / name, "wb") as file:
                for index, piece in enumerate(_pieces(data, 4)):
                    if index:  # a stalled copy: longer than two looks at the folder
                        time.sleep(INTERVAL * 4)
                    file.write(piece)
                    file.flush()
                finished[name] = time.monotonic()
        for name in datas:
            queued = lines.wait_for(f"{name}: queued")
            assert queued > finished[name]  # never before the last piece was written
            lines.wait_for(f"{name}: done")
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 130
        assert process.stderr is not None
        assert "Stopped watching: 3 done, 0 failed." in process.stderr.read()
        while not lines.lines.empty():
            lines.seen.append(lines.lines.get())
    finally:
        _end(process)
    queued_lines = [line for _, line in lines.seen if "queued" in line]
    assert len(queued_lines) == 3  # once each
    assert all(f"slow{i}.png: queued" in line for i, line in enumerate(sorted(queued_lines)))
    products = sorted(os.listdir(folder / "Tessera"))
    assert products == [f"slow{i}-up2.tif" for i in range(3)]
    for i in range(3):  # made from the whole file: twice its size
        with Image.open(folder / "Tessera" / f"slow{i}-up2.tif") as image:
            assert image.size == (80, 60)


def test_a_watch_started_again_does_not_redo_what_is_done(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    folder = tmp_path / "hot"
    folder.mkdir()
    (folder / "old.png").write_bytes(_png_bytes(20))
    command = _watch_command(folder, model)
    for expected in ("old.png: done", "old.png: already done"):
        process = subprocess.Popen(
            command,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert process.stdout is not None
            _Lines(process.stdout).wait_for(expected)
            process.send_signal(signal.SIGINT)
            assert process.wait(30) == 130
        finally:
            _end(process)
    assert os.listdir(folder / "Tessera") == ["old-up2.png"]


@pytest.mark.parametrize("folder", ["missing", "file.png"])
def test_watching_something_that_is_not_a_folder_is_a_usage_error(
    folder: str, tmp_path: Path
) -> None:
    (tmp_path / "file.png").write_bytes(b"x")
    from tests.test_cli import engine_cli

    done = engine_cli("watch", tmp_path / folder, "--model", "whatever")
    assert done.returncode == 2 and "is not a folder" in done.stderr


def test_a_tile_out_of_range_is_refused_before_watching(tmp_path: Path) -> None:
    from tests.test_cli import engine_cli

    done = engine_cli("watch", tmp_path, "--model", "whatever", "--tile", "5")
    assert done.returncode == 2 and "--tile takes a whole number" in done.stderr
