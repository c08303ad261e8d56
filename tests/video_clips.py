"""Tiny clips made with PyAV for the video tests (64×48, a few frames: the machine is small)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np


def picture(index: int, width: int = 64, height: int = 48) -> np.ndarray:
    """Frame `index`: a smooth gradient that moves, with a bright square (texture to upscale)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = (x / max(width - 1, 1)) * 200 + index * 3
    g = (y / max(height - 1, 1)) * 200
    b = 128 + 100 * np.sin(x / 4 + y / 6 + index / 2)
    rgb = np.clip(np.stack([r, g, b], axis=2), 0, 255).astype(np.uint8)
    s = 4 + index % 8
    rgb[s : s + 8, s : s + 8] = 250
    return rgb


def make_clip(
    path: Path,
    frames: int = 10,
    *,
    size: tuple[int, int] = (64, 48),
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    rate: int = 25,
    audio: str | None = "aac",
    rotation: int = 0,
    colour: Mapping[str, int] | None = None,
    pts: Sequence[int] | None = None,
    time_base: Fraction | None = None,
    tags: Mapping[str, str] | None = None,
    chapters: Sequence[dict[str, Any]] | None = None,
    container: str | None = None,
    sample_aspect: Fraction | None = None,
) -> Path:
    """A clip of `frames` frames; `pts` (in `time_base`) makes a variable frame rate."""
    width, height = size
    out: Any = av.open(str(path), "w", format=container)
    options = {"preset": "ultrafast"} if codec in ("libx264", "libx265") else {}
    if codec == "libx265":
        options["x265-params"] = "log-level=error"
    video: Any = out.add_stream(codec, rate=rate, options=options)
    video.width, video.height, video.pix_fmt = width, height, pix_fmt
    if time_base is not None:
        video.time_base = time_base
        video.codec_context.time_base = time_base
    if colour:
        for key, value in colour.items():
            setattr(video.codec_context, key, value)
    if rotation:
        video.set_display_rotation(rotation)
    if sample_aspect is not None:
        video.codec_context.sample_aspect_ratio = sample_aspect
    if tags:
        out.metadata.update(tags)
    if chapters:
        out.set_chapters(list(chapters))
    sound: Any = out.add_stream(audio, rate=48000) if audio else None
    wide = "10" in pix_fmt or "16" in pix_fmt
    for i in range(frames):
        rgb = picture(i, width, height)
        if wide:
            frame = av.VideoFrame.from_ndarray(rgb.astype(np.uint16) * 257, format="rgb48le")
        else:
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        kwargs: dict[str, Any] = {"format": pix_fmt}
        if colour and "colorspace" in colour:
            kwargs.update(dst_colorspace=colour["colorspace"], dst_color_range="MPEG")
        frame = frame.reformat(**kwargs)
        frame.pts = pts[i] if pts is not None else i
        if time_base is not None:
            frame.time_base = time_base
        for packet in video.encode(frame):
            out.mux(packet)
    for packet in video.encode():
        out.mux(packet)
    if sound is not None:
        step = time_base if time_base is not None else Fraction(1, rate)
        seconds = frames / rate if pts is None else float((pts[-1] + 1) * step)
        chunk = 960 if audio == "libopus" else 1024
        count = max(1, round(seconds * 48000 / chunk))
        for i in range(count):
            t = (np.arange(chunk) + i * chunk) / 48000
            samples = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
            fmt = "flt" if audio == "libopus" else "fltp"
            samples_in = samples if fmt == "fltp" else samples.reshape(1, -1)
            piece = av.AudioFrame.from_ndarray(samples_in, format=fmt, layout="mono")
            piece.sample_rate = 48000
            piece.pts = i * chunk
            for packet in sound.encode(piece):
                out.mux(packet)
        for packet in sound.encode():
            out.mux(packet)
    out.close()
    return path


def with_subtitles(clip: Path, path: Path, cues: Sequence[tuple[int, int, str]]) -> Path:
    """`clip` remuxed into `path` with a SubRip subtitle stream of `cues` (start and end in
    milliseconds, text), in English; FFmpeg's SubRip reader makes the stream from a .srt."""

    def stamp(ms: int) -> str:
        return f"00:00:{ms // 1000:02d},{ms % 1000:03d}"

    srt = path.with_suffix(".srt")
    srt.write_text(
        "\n".join(
            f"{i + 1}\n{stamp(a)} --> {stamp(b)}\n{text}\n" for i, (a, b, text) in enumerate(cues)
        )
    )
    with av.open(str(clip)) as source, av.open(str(srt)) as subs, av.open(str(path), "w") as out:
        copies = {s.index: out.add_stream_from_template(s) for s in source.streams}
        sub = out.add_stream_from_template(subs.streams[0])
        sub.metadata["language"] = "eng"
        for packet in source.demux():
            if packet.dts is None:
                continue
            packet.stream = copies[packet.stream.index]
            out.mux(packet)
        for packet in subs.demux():
            if packet.dts is None:
                continue
            packet.stream = sub
            out.mux(packet)
    srt.unlink()
    return path


def subtitles(path: Path) -> list[tuple[float, str]]:
    """(start in seconds, text) of every cue of a clip's first subtitle stream."""
    with av.open(str(path)) as container:
        stream = container.streams.subtitles[0]
        return [
            (float(p.pts * p.time_base), bytes(p).decode())
            for p in container.demux(stream)
            if p.pts is not None
        ]


def decoded(path: Path, fmt: str = "rgb24") -> tuple[list[np.ndarray], list[Any], Any]:
    """Every frame of a product clip as arrays (as stored), the frames, and the container."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        arrays = [f.to_ndarray(format=fmt) for f in frames]
        info = {
            "format": container.format.name,
            "codec": stream.codec_context.name,
            "pix_fmt": stream.codec_context.pix_fmt,
            "rate": stream.average_rate,
            "sample_aspect": stream.sample_aspect_ratio,
            "tags": dict(container.metadata),
            "chapters": container.chapters(),
            "streams": [s.type for s in container.streams],
            "languages": [s.metadata.get("language") for s in container.streams],
            "audio_codecs": [s.codec_context.name for s in container.streams.audio],
            "audio_s": [
                float(s.duration * s.time_base) if s.duration and s.time_base else None
                for s in container.streams.audio
            ],
        }
    return arrays, frames, info


def times(frames: Sequence[Any]) -> list[float]:
    return [float(f.pts * f.time_base) for f in frames]


def make_resizing_clip(path: Path, sizes: Sequence[tuple[int, int]], rate: int = 25) -> Path:
    """An MJPEG Matroska clip whose frames have the given sizes: each frame is encoded on its
    own (an encoder keeps one size) and muxed into the one stream the header sizes as the first."""
    out: Any = av.open(str(path), "w", format="matroska")
    video: Any = out.add_stream("mjpeg", rate=rate)
    video.width, video.height, video.pix_fmt = *sizes[0], "yuvj420p"
    step = Fraction(1, rate)
    for i, (width, height) in enumerate(sizes):
        encoder: Any = av.CodecContext.create("mjpeg", "w")
        encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuvj420p"
        encoder.time_base = step
        frame = av.VideoFrame.from_ndarray(picture(i, width, height), format="rgb24")
        frame = frame.reformat(format="yuvj420p")
        frame.pts, frame.time_base = i, step
        for packet in [*encoder.encode(frame), *encoder.encode(None)]:
            packet.stream, packet.pts, packet.dts, packet.time_base = video, i, i, step
            out.mux(packet)
    out.close()
    return path


def with_stated_size(clip: Path, path: Path, side: int) -> Path:
    """`clip` (an FFV1 Matroska clip of 256×256 frames) with its header stating side×side:
    what a clip too large for FFmpeg looks like, with no need to encode one (EBML PixelWidth
    0xB0 and PixelHeight 0xBA, two bytes each)."""
    data = clip.read_bytes()
    value = side.to_bytes(2, "big")
    for element in (b"\xb0", b"\xba"):
        old = element + b"\x82\x01\x00"
        assert data.count(old) == 1, "the clip must be 256×256"
        data = data.replace(old, element + b"\x82" + value)
    path.write_bytes(data)
    return path
