"""Reading clips with PyAV (its wheels bundle FFmpeg; no ffmpeg program is run).

Reading: `probe_video` checks a clip from its header before anything is decoded (no video
stream, a codec the bundled FFmpeg cannot decode, frames over the pixel limit), counts its
frames and their timestamps from the packets, and decodes the first frame only (rotation and
colour metadata live there). `load_video` gives the clip as a `DecodedImage` whose frames are
decoded one step ahead on a side thread (`VideoFrames`, a bounded queue): operations see a clip
as any other multi-frame input, frame by frame, upright, uint8 or uint16 (above 8 bits).
`read_frame` gives one frame (the GUI's poster and scrubber) by seeking to the keyframe before it.
Products are written by engine/io/video_writing.py.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import av.error
import numpy as np

from engine.errors import PIXEL_LIMIT_LEVER, BadInputError, PixelLimitError, ResourceError
from engine.io.clip_errors import damaged as _damaged
from engine.io.clip_errors import fmt_pixels as _fmt_pixels
from engine.io.clip_errors import open_clip as _open
from engine.io.clip_errors import too_large as _too_large
from engine.io.image import VIDEO_SUFFIXES, DecodedImage, ImageMeta, LazyFrames, VideoMeta, is_video

log = logging.getLogger(__name__)

__all__ = [
    "VIDEO_SUFFIXES",
    "VideoFrames",
    "is_video",
    "load_video",
    "poster_frame",
    "probe_video",
    "read_frame",
]

VIDEO_TEXT = "MP4, MOV, MKV, WebM, AVI, MPEG-TS, WMV, FLV, OGV, 3GP, MXF"
QUEUE_FRAMES = 3  # frames decoded ahead and waiting to be encoded: memory stays flat
_POLL_S = 0.1  # how often a side thread blocked on its queue looks for a stop


# ---------------------------------------------------------------------------------------------
# Reading


def _bit_depth(pix_fmt: str) -> int:
    try:
        fmt = av.VideoFormat(pix_fmt)
        return max(int(c.bits) for c in fmt.components)
    except (ValueError, TypeError, av.error.FFmpegError):
        return 8


def _has_alpha(pix_fmt: str) -> bool:
    try:
        return any(c.is_alpha for c in av.VideoFormat(pix_fmt).components) if pix_fmt else False
    except (ValueError, TypeError):
        return False


def _is_grey(pix_fmt: str) -> bool:
    return pix_fmt.startswith(("gray", "ya", "monow", "monob"))


def _rotation(frame: Any) -> int:
    """The display rotation of a decoded frame, as a multiple of 90 in 0…270 (other angles:
    0, the frame is kept as stored)."""
    try:
        angle = round(float(frame.rotation or 0))
    except (AttributeError, TypeError, ValueError):
        return 0
    return angle % 360 if angle % 90 == 0 else 0


def probe_video(path: Path, max_pixels: int, *, count_frames: bool = True) -> VideoMeta:
    """A clip's metadata and frame timestamps, checked before any frame but the first is
    decoded: BadInputError with a message a person can act on for every refusal.

    `count_frames=False` (a thumbnail, a scrubber) reads the header and the first frame only:
    the frame count comes from the header (or its duration × rate) and the timestamps are
    spread evenly at the average rate (`VideoMeta.exact` False); a job counts the packets."""
    path = Path(path)
    container = _open(path)
    with container:
        streams = list(container.streams.video)
        if not streams:
            kinds = sorted({s.type for s in container.streams})
            has = f" (it has only {', '.join(kinds)})" if kinds else ""
            raise BadInputError(f"{path.name}: the file has no video stream{has}.")
        stream = streams[0]
        ctx = stream.codec_context
        codec = ctx.name if ctx is not None else None
        if ctx is None or not codec or codec == "none":
            raise BadInputError(
                f"{path.name}: its video is in a codec the bundled FFmpeg cannot decode "
                f"({_codec_tag(stream)}). Convert it to H.264, HEVC, VP9 or AV1 first."
            )
        width, height = int(ctx.width or 0), int(ctx.height or 0)
        if width <= 0 or height <= 0:
            too_large = _too_large(path)  # FFmpeg drops a size it cannot hold
            if too_large is not None:
                raise too_large
            raise BadInputError(f"{path.name}: the video stream states no frame size; damaged?")
        if width * height > max_pixels:
            raise PixelLimitError(
                f"{path.name}: its frames are {width}×{height} pixels "
                f"({_fmt_pixels(width * height)}); the limit is {_fmt_pixels(max_pixels)} per "
                f"frame. Reduce the clip or {PIXEL_LIMIT_LEVER}.",
                width * height,
                max_pixels,
            )
        pts = _packet_times(path, container, stream) if count_frames else _even_times(stream)
        if not pts:
            raise BadInputError(f"{path.name}: the video stream has no frames.")
        first = _first_frame(path, stream.index)
        kept = [s for s in container.streams if s.type in ("audio", "subtitle")]
        copied = tuple(s.index for s in kept)
        codecs = tuple(s.codec_context.name for s in kept if s.codec_context is not None)
        time_base = stream.time_base or Fraction(1, 1000)
        rate = stream.average_rate or stream.guessed_rate or _rate_from(pts, time_base)
        pix_fmt = first.format.name
        duration = float((pts[-1] - pts[0]) * time_base + 1 / Fraction(rate)) if rate else 0.0
        return VideoMeta(
            container=container.format.name,
            codec=codec,
            stream_index=stream.index,
            stored_size=(width, height),
            pix_fmt=pix_fmt,
            bit_depth=_bit_depth(pix_fmt),
            time_base=Fraction(time_base),
            rate=Fraction(rate),
            pts=tuple(pts),
            rotation=_rotation(first),
            colorspace=int(first.colorspace or 0),
            color_primaries=int(first.color_primaries or 0),
            color_trc=int(first.color_trc or 0),
            color_range=int(first.color_range or 0),
            copied_streams=copied,
            copied_codecs=codecs,
            duration_s=duration,
            exact=count_frames,
            sample_aspect=_sample_aspect(stream),
        )


def _sample_aspect(stream: Any) -> Fraction | None:
    sar = stream.sample_aspect_ratio or getattr(stream.codec_context, "sample_aspect_ratio", None)
    if not sar or Fraction(sar) <= 0 or Fraction(sar) == 1:
        return None
    return Fraction(sar)


def _even_times(stream: Any) -> list[int]:
    """Timestamps at the average rate for the frame count the header states (or its duration
    × rate): what a thumbnail and a scrubber need without reading the whole file."""
    time_base = stream.time_base or Fraction(1, 1000)
    rate = stream.average_rate or stream.guessed_rate or Fraction(25)
    count = int(stream.frames or 0)
    start = int(stream.start_time or 0)
    if count <= 0 and stream.duration:
        count = max(1, round(float(stream.duration * time_base * rate)))
    step = 1 / (Fraction(rate) * Fraction(time_base))
    return [start + round(i * step) for i in range(count)]


def _codec_tag(stream: Any) -> str:
    try:
        tag = stream.codec_context.codec_tag if stream.codec_context is not None else ""
    except Exception:
        tag = ""
    return f"codec tag {tag!r}" if tag else "an unknown codec"


def _rate_from(pts: list[int], time_base: Fraction) -> Fraction:
    if len(pts) < 2:
        return Fraction(25)
    span = (pts[-1] - pts[0]) * time_base
    return Fraction(len(pts) - 1) / span if span > 0 else Fraction(25)


def _packet_times(path: Path, container: Any, stream: Any) -> list[int]:
    """Each frame's presentation time from the packets alone (no decoding), in display order;
    packets the demuxer marks to be discarded (edit lists) are not frames of the clip."""
    times: list[int] = []
    order = 0
    try:
        for packet in container.demux(stream):
            if packet.size == 0 or getattr(packet, "is_discard", False):
                continue
            t = packet.pts if packet.pts is not None else packet.dts
            times.append(order if t is None else int(t))
            order += 1
    except av.error.EOFError:
        pass  # no packets at all: a clip of zero frames, said by the caller
    except av.error.FFmpegError as e:
        if not times:
            raise _damaged(path, e) from e
        log.warning("%s: the packets end early (%s); %d frames kept", path.name, e, len(times))
    times.sort()
    return times


def _first_frame(path: Path, index: int) -> Any:
    with _open(path) as container:
        stream = container.streams[index]
        try:
            for frame in container.decode(stream):
                return frame
        except av.error.FFmpegError as e:
            raise _damaged(path, e) from e
    raise BadInputError(f"{path.name}: no frame of the video could be decoded.")


@dataclass(frozen=True)
class _Layout:
    """How decoded frames become arrays: PyAV's format, and the upright rotation."""

    fmt: str  # rgb24, rgb48le, rgba, rgba64le, gray, gray16le
    channels: int
    wide: bool
    rotation: int

    @staticmethod
    def of(meta: VideoMeta) -> _Layout:
        wide = meta.bit_depth > 8
        alpha, grey = _has_alpha(meta.pix_fmt), _is_grey(meta.pix_fmt)
        if grey and not alpha:
            return _Layout("gray16le" if wide else "gray", 1, wide, meta.rotation)
        if alpha:
            return _Layout("rgba64le" if wide else "rgba", 4, wide, meta.rotation)
        return _Layout("rgb48le" if wide else "rgb24", 3, wide, meta.rotation)

    def array(self, frame: Any) -> np.ndarray:
        arr = frame.to_ndarray(
            format=self.fmt,
            src_color_range=int(frame.color_range or 0) or None,
            dst_color_range="JPEG",
        )
        if arr.ndim == 2:
            arr = arr[..., None]
        if self.rotation:
            arr = np.rot90(arr, self.rotation // 90)
        out = np.ascontiguousarray(arr)
        out.setflags(write=False)
        return out


_END = object()


@dataclass(frozen=True)
class _Failure:
    error: BaseException


def _put(q: queue.Queue[Any], item: object, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _decode_ahead(
    path: Path,
    meta: VideoMeta,
    layout: _Layout,
    skip_broken: bool,
    q: queue.Queue[Any],
    stop: threading.Event,
) -> None:
    """The side thread of `VideoFrames`: decodes frames in order into `q` (bounded), ends
    with `_END`, or a `_Failure`; stops within `_POLL_S` of `stop`."""
    done = 0
    last: np.ndarray | None = None
    try:
        with _open(path) as container:
            stream = container.streams[meta.stream_index]
            stream.thread_type = "AUTO"
            for packet in container.demux(stream):
                if stop.is_set():
                    return
                try:
                    frames = packet.decode()
                except av.error.FFmpegError as e:
                    if packet.size == 0:
                        continue  # the flush at the end found nothing more to give
                    if not skip_broken:
                        error = BadInputError(
                            f"{path.name}: frame {done + 1} of {meta.frame_count} cannot be "
                            f"decoded ({e.strerror or e}); the file is damaged there. Run it "
                            "with --skip-broken-frames to use the frame before it instead."
                        )
                        error.__cause__ = e
                        _put(q, _Failure(error), stop)
                        return
                    log.warning("%s: frame %d is broken; the one before is used", path.name, done)
                    shape = (*_upright(meta), layout.channels)
                    stand_in = last if last is not None else _black(shape, layout.wide)
                    if not _put(q, stand_in, stop):
                        return
                    done += 1
                    continue
                for frame in frames:
                    _check_size(path, meta, frame, done + 1)
                    last = layout.array(frame)
                    if not _put(q, last, stop):
                        return
                    done += 1
    except BadInputError as e:
        _put(q, _Failure(e), stop)
        return
    except MemoryError as e:
        _put(q, _Failure(ResourceError(f"{path.name}: not enough memory to decode it.")), stop)
        del e
        return
    except Exception as e:  # a decoder complaint outside a packet: a damaged file
        _put(q, _Failure(_damaged(path, e)), stop)
        return
    _put(q, _END, stop)


def _check_size(path: Path, meta: VideoMeta, frame: Any, number: int) -> None:
    """Refuse a frame whose size is not the clip's before it is converted: a clip is checked
    and sized from its header, so a larger later frame would pass every limit, and a smaller
    one would be squeezed into the product's size."""
    size = (int(frame.width), int(frame.height))
    if size != meta.stored_size:
        width, height = meta.stored_size
        raise BadInputError(
            f"{path.name}: frame {number} is {size[0]}×{size[1]}, the clip is {width}×{height}; "
            "a clip whose frames change size cannot be run. Convert it to one frame size first."
        )


def _upright(meta: VideoMeta) -> tuple[int, int]:
    """(height, width) of the upright frames."""
    width, height = meta.stored_size
    return (width, height) if meta.rotation in (90, 270) else (height, width)


def _black(shape: tuple[int, int, int], wide: bool) -> np.ndarray:
    out = np.zeros(shape, np.uint16 if wide else np.uint8)
    if shape[2] == 4:
        out[..., 3] = 65535 if wide else 255
    out.setflags(write=False)
    return out


class VideoFrames(LazyFrames):
    """A clip's frames, decoded one step ahead on a side thread into a bounded queue.

    In order each frame costs one decode; going back (or skipping ahead) restarts the decoder.
    `close()` stops the side thread (it also ends by itself after the last frame)."""

    decodes_ahead = True

    def __init__(self, path: Path, meta: VideoMeta, skip_broken: bool = False) -> None:
        self.path, self.meta = path, meta
        self._layout = _Layout.of(meta)
        self.shape = (*_upright(meta), self._layout.channels)
        self.dtype = np.dtype(np.uint16 if self._layout.wide else np.uint8)
        self._skip = skip_broken
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_FRAMES)
        self._next = 0  # index of the frame the queue gives next
        self._cached: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.meta.frame_count

    def _start(self) -> None:
        self.close()
        self._stop = threading.Event()
        self._queue = queue.Queue(QUEUE_FRAMES)
        self._next = 0
        self._thread = threading.Thread(
            target=_decode_ahead,
            args=(self.path, self.meta, self._layout, self._skip, self._queue, self._stop),
            name="tessera-video-decode",
            daemon=True,
        )
        self._thread.start()

    def frame(self, index: int) -> np.ndarray:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1]
        if self._thread is None or index < self._next:
            self._start()
        while True:
            item = self._take()
            if isinstance(item, _Failure):
                self.close()
                raise item.error
            if item is _END:
                self.close()
                raise BadInputError(
                    f"{self.path.name}: the video ends at frame {self._next} although its "
                    f"packets announce {len(self)}; the file is truncated or damaged."
                )
            current = self._next
            self._next += 1
            if current == index:
                self._cached = (index, item)
                if index == len(self) - 1:
                    self.close()
                return item

    def _take(self) -> Any:
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if self._thread is not None and not self._thread.is_alive():
                    try:
                        return self._queue.get_nowait()
                    except queue.Empty:
                        return _END

    def close(self) -> None:
        """Stop the side thread and let its frames go."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            while thread.is_alive():
                try:
                    self._queue.get(timeout=_POLL_S)  # unblock a put
                except queue.Empty:
                    pass
            thread.join()
        self._queue = queue.Queue(QUEUE_FRAMES)

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()


def _durations_ms(meta: VideoMeta) -> tuple[int, ...]:
    """Each frame's duration in milliseconds (the last one a mean frame), for players."""
    times = [float(t * meta.time_base) for t in meta.pts]
    mean = 1.0 / float(meta.rate) if meta.rate else 0.04
    out = [max(1, round((b - a) * 1000)) for a, b in itertools.pairwise(times)]
    out.append(max(1, round(mean * 1000)))
    return tuple(out)


def load_video(path: Path, max_pixels: int, *, skip_broken: bool = False) -> DecodedImage:
    """A clip as a multi-frame input: checked from its header, its frames streamed upright."""
    path = Path(path)
    log.info("opening the clip %s", path.name)
    meta = probe_video(path, max_pixels)
    frames = VideoFrames(path, meta, skip_broken)
    image_meta = ImageMeta(
        format="VIDEO",
        mode=meta.pix_fmt,
        bit_depth=16 if frames.dtype == np.uint16 else 8,
        has_alpha=frames.shape[2] == 4,
        icc_profile=None,
        exif=None,
        durations=_durations_ms(meta),
        loop=None,
        video=meta,
    )
    return DecodedImage(source=path, frames=frames, meta=image_meta)


def read_frame(
    path: Path, index: int, max_pixels: int, meta: VideoMeta | None = None
) -> np.ndarray:
    """Frame `index` of a clip, upright (the GUI's poster and scrubber): a seek to the keyframe
    before it and a decode forward, not the whole clip. `meta` from `probe_video` saves the
    packet count."""
    path = Path(path)
    meta = meta or probe_video(path, max_pixels)
    if not 0 <= index < meta.frame_count:
        raise IndexError(index)
    layout = _Layout.of(meta)
    target = meta.pts[index]
    with _open(path) as container:
        stream = container.streams[meta.stream_index]
        try:
            container.seek(target, stream=stream, backward=True, any_frame=False)
            best = None
            for frame in container.decode(stream):
                if frame.pts is None or frame.pts <= target:
                    best = frame
                if frame.pts is not None and frame.pts >= target:
                    break
        except av.error.FFmpegError as e:
            raise _damaged(path, e) from e
        if best is None:
            raise BadInputError(f"{path.name}: frame {index + 1} cannot be decoded.")
        _check_size(path, meta, best, index + 1)
        return layout.array(best)


def poster_frame(path: Path, max_pixels: int) -> tuple[np.ndarray, VideoMeta]:
    """The clip's first frame, upright, and its metadata from the header (no pass over the
    packets): what a thumbnail needs."""
    meta = probe_video(path, max_pixels, count_frames=False)
    return read_frame(path, 0, max_pixels, meta), meta
