"""The video rows (issue #23): memory flat over a clip's length, and what decoding and encoding
a clip cost beside the model's runs.

- Peak RSS above loaded of an upscale of a 300-frame clip against a 30-frame one (goal: within
  10 %): frames are decoded ahead and encoded behind through bounded queues, so a clip's
  length must not show in the peak.
- The model's runs as a share of the whole request, on animevideov3 ×2 (goal ≥ 90 %), for a
  clip (H.264 in, H.264 out, decoded and encoded on side threads) and for the same frames as
  PNG files; and the time per frame beside the runs of each.

`measure_video(table, settings, work, quick)` adds the rows; nothing is asserted.
"""

from __future__ import annotations

import gc
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import av
import numpy as np

from engine.api import Engine
from engine.bench.table import Row, Table, find_model
from engine.io.video import load_video
from engine.io.writing import write_image
from engine.requests import Operation, OperationRequest, Result
from engine.samples.synthetic import synthetic_upscaler
from engine.settings import EngineSettings

MIB = 1 << 20


def make_clip(path: Path, frames: int, size: tuple[int, int], rate: int = 24) -> Path:
    """An H.264 clip with AAC sound of moving, textured frames (x264 ultrafast: quick to make)."""
    width, height = size
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    rng = np.random.default_rng(0)
    grain = rng.integers(-12, 12, (height, width, 3))
    out: Any = av.open(str(path), "w")
    video: Any = out.add_stream("libx264", rate=rate, options={"preset": "ultrafast", "crf": "20"})
    video.width, video.height, video.pix_fmt = width, height, "yuv420p"
    sound: Any = out.add_stream("aac", rate=48000)
    for i in range(frames):
        base = np.stack(
            [
                (x + 3 * i) % width / width * 255,
                (y + 2 * i) % height / height * 255,
                127 + 100 * np.sin((x + y + 4 * i) / 9),
            ],
            axis=2,
        )
        rgb = np.clip(base + grain, 0, 255).astype(np.uint8)
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        frame.pts = i
        for packet in video.encode(frame):
            out.mux(packet)
    for packet in video.encode():
        out.mux(packet)
    chunks = max(1, round(frames / rate * 48000 / 1024))
    for i in range(chunks):
        piece = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), "fltp", "mono")
        piece.sample_rate, piece.pts = 48000, i * 1024
        for packet in sound.encode(piece):
            out.mux(packet)
    for packet in sound.encode():
        out.mux(packet)
    out.close()
    return path


class _RunClock:
    """A session wrap that adds up the time of every model run (bound or not)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, session: Any, _key: object) -> Any:
        clock = self

        class Timed:
            def __init__(self, inner: Any) -> None:
                self._inner = inner

            def run(self, outputs: Any, feeds: Any, run_options: Any = None) -> Any:
                start = time.perf_counter()
                try:
                    return self._inner.run(outputs, feeds, run_options)
                finally:
                    clock.seconds += time.perf_counter() - start

            def run_with_iobinding(self, binding: Any, run_options: Any = None) -> Any:
                start = time.perf_counter()
                try:
                    return self._inner.run_with_iobinding(binding, run_options)
                finally:
                    clock.seconds += time.perf_counter() - start

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

        return Timed(session)


def _request(model: Path, source: Path, out: Path) -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, str(model), (source,), output_dir=out)


def _clean(result: Result) -> None:
    for product in result.products:
        product.path.unlink(missing_ok=True)


def clip_peak(engine: Engine, model: Path, clip: Path, work: Path) -> int:
    """Peak RSS above loaded of one upscale of `clip` (the session already warm)."""
    gc.collect()
    result = engine.run(_request(model, clip, work / "peak"))
    assert result.ok and result.memory is not None, result.failures
    _clean(result)
    return result.memory.rss_peak - result.memory.rss_after_load


def measure_video(table: Table, settings: EngineSettings, work: Path, quick: bool) -> None:
    models_dir = settings.resolved_models_dir()
    model = find_model(models_dir, "realesrgan-animevideov3-x2")
    label = "animevideov3 ×2"
    if model is None:
        model = synthetic_upscaler(work / "video-synthetic-x2.onnx", scale=2)
        label = "synthetic ×2"
    folder = work / "video"
    folder.mkdir(exist_ok=True)
    engine = Engine(replace(settings, models_dir=models_dir))
    warm = make_clip(folder / "warm.mp4", 2, (64, 48))
    _clean(engine.run(_request(model, warm, folder / "warm")))  # load, probe, optimise

    # Memory: a clip ten times as long.
    # Both past x264's look-ahead (20 frames, held by the encoder): a shorter clip peaks lower.
    few, many = (30, 300) if not quick else (25, 75)
    size = (160, 120) if not quick else (128, 96)
    # A first clip of this size: the arena's first growth for its tiles is in neither figure.
    clip_peak(engine, model, make_clip(folder / "warm-size.mp4", 5, size), folder)
    peaks = {
        n: clip_peak(engine, model, make_clip(folder / f"c{n}.mp4", n, size), folder)
        for n in (few, many)
    }
    growth = peaks[many] / max(peaks[few], 1) - 1
    table.add(
        Row(
            f"peak RSS of a {many}-frame clip vs a {few}-frame clip (upscale)",
            growth * 100,
            "%",
            "within 10 %",
            growth <= 0.10,
            f"+{peaks[many] / MIB:.0f} MiB vs +{peaks[few] / MIB:.0f} MiB above loaded; "
            f"{label}, {size[0]}×{size[1]} H.264 + AAC → H.264",
        )
    )

    # Time: the same frames as a clip and as PNG files, the model's runs timed alone.
    count = 6 if quick else 24
    size = (320, 240) if not quick else (192, 144)
    clip = make_clip(folder / "time.mp4", count, size)
    frames_dir = folder / "time-frames"
    frames_dir.mkdir(exist_ok=True)
    decoded = load_video(clip, settings.max_pixels)
    for index, frame in enumerate(decoded.frames):
        write_image(frames_dir / f"f{index + 1:04d}.png", frame)
    del decoded
    share: dict[str, tuple[float, float]] = {}
    for name, source in (("clip", clip), ("png", frames_dir)):
        clock = _RunClock()
        timed = Engine(replace(settings, models_dir=models_dir), session_wrap=clock)
        _clean(timed.run(_request(model, warm, folder / "warm")))
        clock.seconds = 0.0
        start = time.perf_counter()
        result = timed.run(_request(model, source, folder / name))
        total = time.perf_counter() - start
        assert result.ok, result.failures
        _clean(result)
        share[name] = (clock.seconds, total)
        timed.unload_all()
    runs, total = share["clip"]
    png_runs, png_total = share["png"]
    per_frame = (total - runs) / count * 1000
    png_per_frame = (png_total - png_runs) / count * 1000
    table.add(
        Row(
            f"model runs ÷ request, a {count}-frame clip ({label})",
            runs / total * 100,
            "%",
            ">= 90 %",
            runs / total >= 0.90,
            f"{per_frame:.0f} ms a frame beside the runs (decode + encode + engine), "
            f"{size[0]}×{size[1]} H.264 + AAC → H.264 CRF 18",
        )
    )
    table.add(
        Row(
            f"model runs ÷ request, the same {count} frames as PNG files ({label})",
            png_runs / png_total * 100,
            "%",
            ">= 90 %",
            png_runs / png_total >= 0.90,
            f"{png_per_frame:.0f} ms a frame beside the runs; the clip costs "
            f"{per_frame - png_per_frame:+.0f} ms a frame against PNG files",
        )
    )
    engine.unload_all()
    shutil.rmtree(folder, ignore_errors=True)
