"""Clips that go wrong while they run: frames that change size, a full disk, limits of codecs."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.api import Engine
from engine.errors import ErrorKind
from engine.io.video import read_frame
from engine.options import OutputOptions, VideoOptions, parse_video_options
from engine.requests import Operation, OperationRequest
from engine.settings import EngineSettings
from tests.model_files import upscaler
from tests.video_clips import make_clip, make_resizing_clip, with_stated_size

ROOT = Path(__file__).resolve().parents[1]


MODELS = {"up2.onnx": upscaler(2)}


def _engine_run(module_models: Path, inputs: list[Path], out: Path, **video: object) -> object:
    engine = Engine(EngineSettings(models_dir=module_models, overlap=8))
    request = OperationRequest(
        Operation.UPSCALE,
        str(module_models / "up2.onnx"),
        tuple(inputs),
        output_dir=out,
        output=OutputOptions(video=VideoOptions(**video)),  # type: ignore[arg-type]
    )
    return engine.run(request)


def _cli(*args: str, limit: int = 120, **popen: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "engine", "run", *args]
    return subprocess.run(  # type: ignore[call-overload]
        command, capture_output=True, text=True, env=env, timeout=limit, **popen
    )


def test_a_frame_of_another_size_fails_the_clip_with_its_number_and_sizes(
    module_models: Path, tmp_path: Path
) -> None:
    clip = make_resizing_clip(tmp_path / "grows.mkv", [(64, 48), (64, 48), (200, 150), (64, 48)])
    result = _engine_run(module_models, [clip], tmp_path / "o")
    (failure,) = result.failures  # type: ignore[attr-defined]
    assert failure.kind is ErrorKind.BAD_INPUT
    assert "frame 3 is 200×150, the clip is 64×48" in failure.message
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []
    with pytest.raises(Exception, match="frame 3 is 200×150"):
        read_frame(clip, 2, 10**8)
    done = _cli(
        "upscale",
        str(clip),
        "--model",
        str(module_models / "up2.onnx"),
        "--out",
        str(tmp_path / "c"),
    )
    assert done.returncode == 4, done.stderr
    assert "frame 3 is 200×150, the clip is 64×48" in done.stderr
    assert "Traceback" not in done.stderr


def _file_size_limit(limit: int) -> Callable[[], None]:
    """For a child process: writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored), as
    the engine's real write path meets a full disk, with no disk to fill or mount."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("codec", ["ffv1", "png"])
def test_a_full_disk_while_a_clip_is_encoded_is_exit_3_and_leaves_nothing(
    module_models: Path, tmp_path: Path, codec: str
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 6, size=(320, 240), audio=None)
    out = tmp_path / "o"
    done = _cli(
        "upscale",
        str(clip),
        "--model",
        str(module_models / "up2.onnx"),
        "--out",
        str(out),
        "--video-codec",
        codec,
        preexec_fn=_file_size_limit(20_000),
    )
    assert done.returncode == 3, done.stderr
    assert f"the disk holding {out} is full" in done.stderr
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr
    assert "out of memory" not in done.stderr  # no retry at a smaller tile
    assert not out.exists() or list(out.iterdir()) == []  # nothing half written


def test_a_crf_past_what_the_codec_takes_is_refused_naming_the_range(
    module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 2, audio=None)
    model = str(module_models / "up2.onnx")
    done = _cli("upscale", str(clip), "--model", model, "--video-codec", "h264", "--crf", "63")
    assert done.returncode == 2, done.stderr
    assert "--crf 63" in done.stderr and "h264 0 to 51" in done.stderr
    assert parse_video_options("vp9", "63").crf == 63  # libvpx goes to 63
    # Left to the input's codec (H.264 here), the same refusal, before anything is written.
    result = _engine_run(module_models, [clip], tmp_path / "o", crf=63)
    (failure,) = result.failures  # type: ignore[attr-defined]
    assert failure.kind is ErrorKind.USAGE and "h264 0 to 51" in failure.message
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []


def test_a_frame_too_large_for_ffmpeg_is_refused_for_its_size_not_as_damaged(
    module_models: Path, tmp_path: Path
) -> None:
    small = make_clip(tmp_path / "s.mkv", 2, size=(256, 256), codec="ffv1", audio=None)
    huge = with_stated_size(small, tmp_path / "huge.mkv", 17000)
    result = _engine_run(module_models, [huge], tmp_path / "o")
    (failure,) = result.failures  # type: ignore[attr-defined]
    assert failure.kind is ErrorKind.BAD_INPUT
    assert "17000×17000 pixels" in failure.message and "larger than FFmpeg" in failure.message
    assert "damaged?" not in failure.message
