"""Video in, video out (issue #23): clips made with PyAV, run through the one engine path."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from engine.api import Engine
from engine.cancel import CancelToken
from engine.errors import Cancelled, ErrorKind
from engine.io.reading import load_image
from engine.io.video import load_video, poster_frame, probe_video, read_frame
from engine.options import GeometryOptions, OutputOptions, VideoCodec, VideoOptions
from engine.requests import Operation, OperationRequest, ProductKind, Progress, ProgressKind
from engine.runtime.providers import CUDA_EP
from engine.samples.background_models import make_u2net
from engine.samples.depth_models import make_da3
from engine.samples.geometry_models import make_moge
from engine.settings import EngineSettings
from tests.engine_helpers import Recorder, cuda_shrink
from tests.model_files import upscaler
from tests.video_clips import decoded, make_clip, picture, subtitles, times, with_subtitles

ROOT = Path(__file__).resolve().parents[1]
BT709 = {"colorspace": 1, "color_primaries": 1, "color_trc": 1, "color_range": 1}


MODELS = {"up2.onnx": upscaler(2)}


ENGINE_SETTINGS = {"overlap": 8}


def _run(
    module_engine: Engine,
    model: Path | str,
    inputs: list[Path],
    out: Path,
    operation: Operation = Operation.UPSCALE,
    **video: object,
) -> object:
    request = OperationRequest(
        operation,
        str(model),
        tuple(inputs),
        output_dir=out,
        output=OutputOptions(video=VideoOptions(**video)),  # type: ignore[arg-type]
    )
    return module_engine.run(request)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------------------------------------
# What a clip keeps


def test_h264_aac_mp4_keeps_frames_rate_timestamps_audio_tags_chapters(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    chapters = [
        {"id": 1, "start": 0, "end": 6, "time_base": Fraction(1, 25), "metadata": {"title": "A"}},
        {"id": 2, "start": 6, "end": 12, "time_base": Fraction(1, 25), "metadata": {"title": "B"}},
    ]
    clip = make_clip(tmp_path / "clip.mp4", 12, tags={"title": "Holiday"}, chapters=chapters)
    result = _run(module_engine, module_models / "up2.onnx", [clip], tmp_path / "o")
    assert result.ok, result.failures  # type: ignore[attr-defined]
    (product,) = result.products  # type: ignore[attr-defined]
    assert product.path.name == "clip-up2.mp4" and product.frames == 12
    arrays, frames, info = decoded(product.path)
    _, source_frames, source = decoded(clip)
    assert len(arrays) == 12 and arrays[0].shape == (96, 128, 3)
    assert info["codec"] == "h264" and info["rate"] == 25
    assert times(frames) == times(source_frames)
    # MP4 keeps chapters in a text track of their own: as many streams as the input has.
    assert info["streams"] == source["streams"] and info["audio_codecs"] == ["aac"]
    assert info["audio_s"][0] == pytest.approx(source["audio_s"][0], abs=0.03)
    assert info["tags"].get("title") == "Holiday"
    assert [c["metadata"].get("title") for c in info["chapters"]] == ["A", "B"]


def test_subtitles_are_copied_as_they_are(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "plain.mkv", 8, audio="aac")
    cues = [(0, 100, "Hello there"), (160, 300, "General Kenobi")]
    subbed = with_subtitles(clip, tmp_path / "film.mkv", cues)
    result = _run(module_engine, module_models / "up2.onnx", [subbed], tmp_path / "o")
    assert result.ok, result.failures  # type: ignore[attr-defined]
    product = result.products[0].path  # type: ignore[attr-defined]
    _, _, info = decoded(product)
    assert info["streams"] == ["video", "audio", "subtitle"]
    assert info["languages"][2] == "eng"  # the stream's own tags come along
    assert (
        subtitles(product) == subtitles(subbed) == [(0.0, "Hello there"), (0.16, "General Kenobi")]
    )


def test_vp9_webm_with_opus_stays_webm(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.webm", 6, codec="libvpx-vp9", audio="libopus")
    result = _run(module_engine, module_models / "up2.onnx", [clip], tmp_path / "o")
    (product,) = result.products  # type: ignore[attr-defined]
    assert product.path.suffix == ".webm"
    arrays, _, info = decoded(product.path)
    assert info["codec"] in ("vp9", "libvpx-vp9") and len(arrays) == 6
    assert info["audio_codecs"] == ["opus"]


def test_10bit_hevc_mkv_stays_10bit(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mkv", 5, codec="libx265", pix_fmt="yuv420p10le", audio=None)
    image = load_video(clip, 10**8)
    assert image.frames[0].dtype == np.uint16 and image.meta.video is not None
    assert image.meta.video.bit_depth == 10
    image.frames.close()  # type: ignore[attr-defined]
    out = tmp_path / "o"
    result = _run(module_engine, module_models / "up2.onnx", [clip], out)
    (product,) = result.products  # type: ignore[attr-defined]
    assert product.path.suffix == ".mkv"
    _, _, info = decoded(product.path, "rgb48le")
    assert info["codec"] == "hevc" and info["pix_fmt"] == "yuv420p10le"
    prores = _run(module_engine, module_models / "up2.onnx", [clip], out, codec=VideoCodec.PRORES)
    _, _, info = decoded(prores.products[0].path, "rgb48le")  # type: ignore[attr-defined]
    assert info["codec"] == "prores" and info["pix_fmt"] == "yuv422p10le"
    ffv1 = _run(module_engine, module_models / "up2.onnx", [clip], out, codec=VideoCodec.FFV1)
    _, _, info = decoded(ffv1.products[0].path, "rgb48le")  # type: ignore[attr-defined]
    assert info["codec"] == "ffv1" and info["pix_fmt"] == "gbrp16le"
    av1 = _run(module_engine, module_models / "up2.onnx", [clip], out, codec=VideoCodec.AV1)
    _, _, info = decoded(av1.products[0].path, "rgb48le")  # type: ignore[attr-defined]
    assert info["codec"] in ("av1", "libdav1d") and info["pix_fmt"] == "yuv420p10le"


def test_rotation_and_colour_metadata_kept(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "phone.mp4", 4, rotation=90, colour=BT709)
    image = load_video(clip, 10**8)
    assert image.size == (48, 64)  # upright, as the person sees it
    image.frames.close()  # type: ignore[attr-defined]
    result = _run(module_engine, module_models / "up2.onnx", [clip], tmp_path / "o")
    (product,) = result.products  # type: ignore[attr-defined]
    _, frames, _ = decoded(product.path)
    first = frames[0]
    assert (first.width, first.height) == (128, 96)  # stored as the input stores it …
    assert first.rotation == 90  # … with its rotation
    assert (first.colorspace, first.color_primaries, first.color_trc, first.color_range) == (
        1,
        1,
        1,
        1,
    )


def test_colours_go_through_the_clips_own_matrix(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    """BT.709 in, BT.709 out: decoded and encoded with the clip's matrix (BT.601 for either
    would shift the colours by twice as much as 4:2:0 and the model's blur do)."""
    clip = make_clip(tmp_path / "hd.mp4", 3, colour=BT709, audio=None)
    result = _run(module_engine, module_models / "up2.onnx", [clip], tmp_path / "o", crf=0)
    source, product = load_video(clip, 10**8), load_video(result.products[0].path, 10**8)  # type: ignore[attr-defined]
    before = source.frames[1].astype(np.float32)
    after = product.frames[1].astype(np.float32).reshape(48, 2, 64, 2, 3).mean(axis=(1, 3))
    source.frames.close()  # type: ignore[attr-defined]
    product.frames.close()  # type: ignore[attr-defined]
    assert np.abs(after - before).mean() < 4.5


def test_non_square_pixels_stay_non_square(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "dvd.mkv", 3, audio=None, sample_aspect=Fraction(32, 27))
    # H.264 and HEVC carry it in their own headers; the other encoders here do not.
    for codec in (VideoCodec.AUTO, VideoCodec.HEVC):
        result = _run(
            module_engine, module_models / "up2.onnx", [clip], tmp_path / "o", codec=codec
        )
        _, _, info = decoded(result.products[0].path)  # type: ignore[attr-defined]
        assert info["sample_aspect"] == Fraction(32, 27)


def test_variable_frame_rate_timestamps_kept(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    pts = [0, 40, 80, 200, 220, 400, 410, 600]  # milliseconds
    clip = make_clip(
        tmp_path / "vfr.mkv", len(pts), pts=pts, time_base=Fraction(1, 1000), audio=None
    )
    assert probe_video(clip, 10**8).pts == tuple(pts)
    result = _run(
        module_engine, module_models / "up2.onnx", [clip], tmp_path / "o", codec=VideoCodec.H264
    )
    _, frames, _ = decoded(result.products[0].path)  # type: ignore[attr-defined]
    assert times(frames) == pytest.approx([p / 1000 for p in pts], abs=1e-3)


def test_the_product_frames_equal_the_same_frames_run_as_images(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    """Bit for bit before encoding: the clip's product in FFV1 (lossless RGB) against the
    clip's own decoded frames written as PNG files and run as a sequence."""
    clip = make_clip(tmp_path / "phone.mp4", 5, rotation=90, audio=None)
    image = load_video(clip, 10**8)
    frames_dir = tmp_path / "frames"
    frames_dir.mkdir()
    from engine.io.writing import write_image

    for i, frame in enumerate(image.frames):
        write_image(frames_dir / f"f{i + 1:02d}.png", frame)
    image.frames.close()  # type: ignore[attr-defined]
    as_images = _run(module_engine, module_models / "up2.onnx", [frames_dir], tmp_path / "images")
    as_clip = _run(
        module_engine, module_models / "up2.onnx", [clip], tmp_path / "clip", codec=VideoCodec.FFV1
    )
    product = as_clip.products[0].path  # type: ignore[attr-defined]
    assert product.suffix == ".mkv"
    back = load_video(product, 10**8)  # upright again, through the same reader
    pngs = [load_image(p.path, 10**8).frames[0] for p in as_images.products]  # type: ignore[attr-defined]
    assert len(pngs) == len(back.frames) == 5
    for png, frame in zip(pngs, back.frames, strict=True):
        assert np.array_equal(png, frame)


def test_one_session_per_clip_and_the_shrink_only_at_its_last_run(
    module_models: Path, tmp_path: Path
) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=module_models, overlap=8), session_wrap=recorder)
    clip = make_clip(tmp_path / "clip.mp4", 3, size=(80, 48), audio=None)
    request = OperationRequest(
        Operation.UPSCALE,
        str(module_models / "up2.onnx"),
        (clip,),
        device="gpu:0",
        runtime="cuda",
        output_dir=tmp_path / "o",
        tile=32,
    )
    result = engine.run(request)
    assert result.ok and result.sessions_created == 1
    # 80×48 on 32-px tiles with overlap 8: 6 tiles a frame, 3 frames; only the very last shrinks.
    assert result.runs == 18
    assert recorder.log[-18:] == [None] * 17 + [cuda_shrink()]
    again = engine.run(request)
    assert again.sessions_created == 0 and again.sessions_reused == 1


# ---------------------------------------------------------------------------------------------
# The other families


def test_a_cut_out_clip_has_alpha_and_a_matte_clip(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    model = make_u2net(folder / "u2netp.onnx", size=32)
    engine = Engine(EngineSettings(models_dir=folder))
    clip = make_clip(tmp_path / "clip.mp4", 4)
    result = _run(engine, model, [clip], tmp_path / "o", Operation.REMOVE_BACKGROUND)
    assert result.ok, result.failures  # type: ignore[attr-defined]
    by_kind = {p.kind: p.path for p in result.products}  # type: ignore[attr-defined]
    cutout, matte = by_kind[ProductKind.IMAGE], by_kind[ProductKind.MASK]
    # VP9 with alpha; AAC cannot go into WebM, so Matroska keeps the sound.
    assert cutout.name == "clip-cutout.mkv"
    with av.open(str(cutout)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "vp9"
        assert [s.type for s in container.streams] == ["video", "audio"]
        decoder = av.CodecContext.create("libvpx-vp9", "r")
        frames = [f for p in container.demux(stream) for f in decoder.decode(p)]
    assert len(frames) == 4 and frames[0].format.name == "yuva420p"
    alpha = frames[0].to_ndarray(format="rgba")[..., 3]
    assert alpha.min() < 64 and alpha.max() > 192  # a real matte, not an opaque plane
    mattes, _, info = decoded(matte, "gray")
    assert info["codec"] == "ffv1" and info["pix_fmt"] == "gray" and len(mattes) == 4
    prores = _run(
        engine, model, [clip], tmp_path / "p", Operation.REMOVE_BACKGROUND, codec=VideoCodec.PRORES
    )
    cut = next(p.path for p in prores.products if p.kind is ProductKind.IMAGE)  # type: ignore[attr-defined]
    _, frames_p, info = decoded(cut, "rgba")
    # ProRes 4444 (FFmpeg's decoder reads it as 12-bit 4:4:4 with alpha)
    assert cut.suffix == ".mov" and info["pix_fmt"].startswith("yuva444p")
    assert frames_p[0].to_ndarray(format="rgba")[..., 3].min() < 64
    # Without sound that WebM cannot hold, the VP9 cut-out is a WebM.
    quiet = make_clip(tmp_path / "quiet.mp4", 2, audio=None)
    webm = _run(engine, model, [quiet], tmp_path / "w", Operation.REMOVE_BACKGROUND)
    names = sorted(p.path.name for p in webm.products)  # type: ignore[attr-defined]
    assert names == ["quiet-cutout.webm", "quiet-mask.mkv"]


def test_depth_clip_is_a_preview_and_a_lossless_16bit_clip(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    model = make_da3(folder / "da3.onnx", size=(28, 42), with_conf=False)
    engine = Engine(EngineSettings(models_dir=folder))
    clip = make_clip(tmp_path / "clip.mp4", 4, audio=None)
    result = _run(engine, model, [clip], tmp_path / "o", Operation.DEPTH)
    assert result.ok, result.failures  # type: ignore[attr-defined]
    by_kind = {p.kind: p.path for p in result.products}  # type: ignore[attr-defined]
    assert set(by_kind) == {ProductKind.DEPTH16, ProductKind.DEPTH_PREVIEW}  # no TIFF per frame
    depth, _, info = decoded(by_kind[ProductKind.DEPTH16], "gray16le")
    assert info["codec"] == "ffv1" and info["pix_fmt"] == "gray16le" and len(depth) == 4
    assert "TESSERA" in {
        k.upper() for k in info["tags"]
    }  # the range of the whole clip, to decode metres back
    # One range for the whole clip (the second pass): some frame reaches each end.
    assert min(d.min() for d in depth) == 1 and max(d.max() for d in depth) == 65535
    preview, _, info = decoded(by_kind[ProductKind.DEPTH_PREVIEW])
    assert info["codec"] == "h264" and len(preview) == 4
    as_png = _run(engine, model, [clip], tmp_path / "png", Operation.DEPTH, codec=VideoCodec.PNG)
    names = sorted(p.path.name for p in as_png.products)  # type: ignore[attr-defined]
    assert "clip-depth-0001.png" in names and "clip-depth-0004.png" in names
    assert load_image(tmp_path / "png" / "clip-depth-0001.png", 10**6).meta.bit_depth == 16


def test_geometry_clip_is_depth_and_normal_clips(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    model = make_moge(folder / "moge.onnx")
    engine = Engine(EngineSettings(models_dir=folder))
    clip = make_clip(tmp_path / "clip.mp4", 3, audio=None)
    result = _run(engine, model, [clip], tmp_path / "o", Operation.GEOMETRY)
    assert result.ok, result.failures  # type: ignore[attr-defined]
    kinds = sorted(p.kind.value for p in result.products)  # type: ignore[attr-defined]
    assert kinds == ["depth16", "mask", "normal"]
    for product in result.products:  # type: ignore[attr-defined]
        assert product.path.suffix == ".mkv" and product.frames == 3


def test_a_clips_point_clouds_only_on_request_one_ply_per_frame_in_a_folder(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    model = make_moge(folder / "moge.onnx")
    engine = Engine(EngineSettings(models_dir=folder))
    clip = make_clip(tmp_path / "clip.mp4", 3, audio=None)
    out = tmp_path / "o"
    asked = OperationRequest(
        Operation.GEOMETRY,
        str(model),
        (clip,),
        output_dir=out,
        options=GeometryOptions(point_clouds=True),
    )
    result = engine.run(asked)
    assert result.ok, result.failures
    clouds = [p.path for p in result.products if p.kind is ProductKind.POINT_CLOUD]
    assert [p.relative_to(out).as_posix() for p in clouds] == [
        f"clip-points/clip-points-{i:04d}.ply" for i in (1, 2, 3)
    ]
    for cloud in clouds:
        head = cloud.read_bytes()[:400]
        assert head.startswith(b"ply\nformat binary_little_endian 1.0\n")
        count = int(head.split(b"element vertex ")[1].split(b"\n")[0])
        body = len(cloud.read_bytes()) - (head.index(b"end_header\n") + len(b"end_header\n"))
        assert count > 0 and body == count * 27  # 6 floats and 3 bytes a point
    # The clips are as without the option; a second run's folder gets a number, as files do.
    assert sorted(p.kind.value for p in result.products if p.path.parent == out) == [
        "depth16",
        "mask",
        "normal",
    ]
    again = engine.run(asked)
    assert {p.path.parent.name for p in again.products if p.path.suffix == ".ply"} == {
        "clip-points-1"
    }
    # Cancelled in the middle: neither the folder nor a hidden file is left.
    token = CancelToken()

    def progress(p: Progress) -> None:
        if p.kind is ProgressKind.FRAME_FINISHED and p.frame == 1:
            token.cancel()

    stopped = tmp_path / "stopped"
    with pytest.raises(Cancelled):
        engine.run(
            OperationRequest(
                Operation.GEOMETRY,
                str(model),
                (clip,),
                output_dir=stopped,
                options=GeometryOptions(point_clouds=True),
            ),
            progress,
            token,
        )
    assert _files(stopped) == []


def test_the_point_cloud_option_on_the_command_line(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    model = make_moge(folder / "moge.onnx")
    clip = make_clip(tmp_path / "clip.mp4", 2, audio=None)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "engine", "run", "geometry", str(clip), "--quiet"]
    command += ["--model", str(model), "--out", str(tmp_path / "o")]
    command += ["--option", "point_clouds=true"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _files(tmp_path / "o" / "clip-points") == [
        "clip-points-0001.ply",
        "clip-points-0002.ply",
    ]


# ---------------------------------------------------------------------------------------------
# Stopping and bad input


def test_a_cancel_leaves_nothing_and_no_thread(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 20)
    token = CancelToken()

    def progress(p: Progress) -> None:
        if p.kind is ProgressKind.FRAME_FINISHED and p.frame == 4:
            token.cancel()

    out = tmp_path / "o"
    request = OperationRequest(
        Operation.UPSCALE, str(module_models / "up2.onnx"), (clip,), output_dir=out
    )
    with pytest.raises(Cancelled):
        module_engine.run(request, progress, token)
    assert _files(out) == []  # no product, no hidden partial file
    assert not [t for t in threading.enumerate() if t.name.startswith("tessera-video")]


def test_a_broken_frame_fails_with_its_number_or_is_skipped_when_asked(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "mj.mkv", 6, codec="mjpeg", pix_fmt="yuvj420p", audio=None)
    broken = tmp_path / "broken.mkv"
    with av.open(str(clip)) as source, av.open(str(broken), "w") as out:
        stream = out.add_stream_from_template(source.streams.video[0])
        for i, packet in enumerate(source.demux(source.streams.video[0])):
            if packet.size == 0:
                continue
            if i == 3:
                packet = _garbage_like(packet)
            packet.stream = stream
            out.mux(packet)
    result = _run(module_engine, module_models / "up2.onnx", [broken], tmp_path / "o")
    (failure,) = result.failures  # type: ignore[attr-defined]
    assert failure.kind is ErrorKind.BAD_INPUT and "frame 4 of 6" in failure.message
    assert _files(tmp_path / "o") == []
    skipped = _run(
        module_engine, module_models / "up2.onnx", [broken], tmp_path / "s", skip_broken_frames=True
    )
    assert skipped.ok  # type: ignore[attr-defined]
    arrays, _, _ = decoded(skipped.products[0].path)  # type: ignore[attr-defined]
    assert len(arrays) == 6


def _garbage_like(packet: av.Packet) -> av.Packet:
    garbage = av.Packet(b"\xff\xd8\xff" + bytes(range(256)) * 4)
    garbage.pts, garbage.dts, garbage.time_base = packet.pts, packet.dts, packet.time_base
    garbage.duration = packet.duration
    return garbage


def test_each_bad_clip_is_refused_with_a_reason_and_the_batch_goes_on(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    good = make_clip(tmp_path / "good.mp4", 3)
    data = good.read_bytes()
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(data[: len(data) // 2])
    unknown = tmp_path / "unknown.mp4"
    unknown.write_bytes(data.replace(b"avc1", b"zzz1"))
    text = tmp_path / "notes.mp4"
    text.write_text("not a video at all\n")
    sound = tmp_path / "sound.mp4"
    with av.open(str(sound), "w") as out:
        a = out.add_stream("aac", rate=48000)
        piece = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), "fltp", "mono")
        piece.sample_rate, piece.pts = 48000, 0
        for packet in [*a.encode(piece), *a.encode()]:
            out.mux(packet)
    empty = tmp_path / "zero.mkv"  # a video stream without a frame, beside some sound
    with av.open(str(empty), "w") as out:
        v = out.add_stream("ffv1", rate=25)
        v.width, v.height, v.pix_fmt = 64, 48, "bgr0"
        a = out.add_stream("aac", rate=48000)
        for packet in [*a.encode(piece), *a.encode()]:
            out.mux(packet)
    inputs = [truncated, unknown, text, sound, empty, good]
    result = _run(module_engine, module_models / "up2.onnx", inputs, tmp_path / "o")
    messages = {f.source.name: f.message for f in result.failures}  # type: ignore[attr-defined]
    assert {f.kind for f in result.failures} == {ErrorKind.BAD_INPUT}  # type: ignore[attr-defined]
    assert "truncated" in messages["truncated.mp4"]
    assert "cannot decode" in messages["unknown.mp4"]
    assert "not a video" in messages["notes.mp4"]
    assert "no video stream" in messages["sound.mp4"] and "audio" in messages["sound.mp4"]
    assert "no frames" in messages["zero.mkv"]
    assert [p.path.name for p in result.products] == ["good-up2.mp4"]  # type: ignore[attr-defined]


def test_frames_over_the_pixel_limit_are_refused_from_the_header(
    module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "big.mp4", 3, audio=None)
    engine = Engine(EngineSettings(models_dir=module_models, max_pixels=64 * 48 - 1))
    result = _run(engine, module_models / "up2.onnx", [clip], tmp_path / "o")
    (failure,) = result.failures  # type: ignore[attr-defined]
    assert "64×48" in failure.message and "limit" in failure.message
    assert result.runs == 0  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# What the GUI reads cheaply, and the command line


def test_poster_and_frame_n_without_decoding_the_clip(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 30, audio=None)
    poster, meta = poster_frame(clip, 10**8)  # from the header and the first frame
    assert poster.shape == (48, 64, 3) and meta.frame_count == 30 and meta.rate == 25
    assert meta.pts == probe_video(clip, 10**8).pts  # the packets say the same here
    twentieth = read_frame(clip, 19, 10**8, meta)
    assert np.abs(twentieth.astype(int) - picture(19).astype(int)).mean() < 8
    assert np.abs(twentieth.astype(int) - picture(5).astype(int)).mean() > 8


def test_command_line_runs_a_clip_with_video_choices(module_models: Path, tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 3)
    bad = tmp_path / "bad.mp4"
    bad.write_text("nope")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "engine", "run", "upscale", str(clip), str(bad)]
    command += ["--model", str(module_models / "up2.onnx"), "--out", str(tmp_path / "o"), "--json"]
    command += ["--video-codec", "hevc", "--crf", "28"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 4, done.stderr  # the bad clip; the good one is still made
    assert (tmp_path / "o" / "clip-up2.mp4").exists()
    _, _, info = decoded(tmp_path / "o" / "clip-up2.mp4")
    assert info["codec"] == "hevc"
    usage = subprocess.run(
        [*command[:-4], "--crf", "99"], capture_output=True, text=True, env=env, timeout=120
    )
    assert usage.returncode == 2 and "--crf" in usage.stderr


def test_the_size_rule_applies_to_a_clip(
    module_engine: Engine, module_models: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", 3, audio=None)
    request = OperationRequest(
        Operation.UPSCALE,
        str(module_models / "up2.onnx"),
        (clip,),
        output_dir=tmp_path / "o",
        output=OutputOptions(width=101),
    )
    (product,) = module_engine.run(request).products
    assert product.path.name == "clip-up2-101w.mp4"
    arrays, _, info = decoded(product.path)
    # An odd side: 4:4:4, which H.264 takes at any size (4:2:0 needs even sides).
    assert arrays[0].shape == (76, 101, 3) and info["pix_fmt"] == "yuv444p"


ENCODED_BYTES = 4096  # a partial clip's header and a few frames


def _partial_bytes(folder: Path) -> int:
    if not folder.exists():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*.partial-*") if p.is_file())


def test_sigterm_while_a_clip_is_encoded_leaves_no_partial_file(
    module_models: Path, tmp_path: Path
) -> None:
    import signal
    import time

    clip = make_clip(tmp_path / "long.mp4", 400, size=(128, 96))
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "engine", "run", "upscale", str(clip), "--quiet"]
    command += ["--model", str(module_models / "up2.onnx"), "--out", str(out), "--tile", "64"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(".partial-" in name for name in _files(out)):
            time.sleep(0.05)
        assert any(".partial-" in name for name in _files(out)), "the clip never started"
        # Some frames into the encoder: the partial clip holds more than its header.
        while time.monotonic() < deadline and _partial_bytes(out) < ENCODED_BYTES:
            time.sleep(0.05)
        assert _partial_bytes(out) >= ENCODED_BYTES, "no frame reached the encoder"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, stderr
    assert _files(out) == []


def test_progress_says_frame_tile_and_time_left(capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import ProgressBar

    bar = ProgressBar(True)
    bar._started -= 60  # a minute in
    bar(Progress("job", ProgressKind.RUN_FINISHED, frame=119, frame_count=1800, run=3, run_count=8))
    line = capsys.readouterr().err
    # 119 + 3/8 of 1800 frames in a minute: about 14 minutes to go
    assert "frame 120/1800 · tile 3/8" in line and "14 min left" in line


def test_importing_the_engine_does_not_load_pyav() -> None:
    """PyAV and its FFmpeg (100 MB of libraries) load when a clip comes, not at start-up."""
    code = "import sys, engine.api, engine.cli; print('av' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.stdout.strip() == "False", done.stderr


def test_video_choices_travel_to_the_running_app() -> None:
    """A command line that joins the app's engine (engine/wire.py) sends its video choices."""
    from engine import wire

    choices = VideoOptions(codec=VideoCodec.HEVC, crf=22, preset="fast", skip_broken_frames=True)
    request = OperationRequest(
        Operation.UPSCALE, "m", (Path("/clips/a.mp4"),), output=OutputOptions(video=choices)
    )
    back = wire.decode(wire.encode(request)[wire.HEADER.size :])
    assert isinstance(back, OperationRequest) and back.output.video == choices
    clouds = OperationRequest(
        Operation.GEOMETRY, "m", (Path("/clips/a.mp4"),), options=GeometryOptions(point_clouds=True)
    )
    back = wire.decode(wire.encode(clouds)[wire.HEADER.size :])
    assert isinstance(back, OperationRequest) and back.options == clouds.options
