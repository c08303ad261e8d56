"""Writing a clip's products with PyAV: codec, pixel format and container, and the encoder.

`plan_output` picks the codec, pixel format and container of one product (see `VideoCodec`
and README). `VideoWriter` encodes a product's frames on a side thread (a bounded queue) into
the hidden temp file of engine/io/publish.py, copies the input's audio and subtitle packets
beside them without re-encoding (interleaved by time), with the input's timestamps, rotation,
colour metadata, chapters and container tags, and publishes at the end; a cancel or a failure
leaves nothing.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import av
import av.error
import numpy as np

from engine.errors import BadInputError, ResourceError
from engine.io.image import VideoMeta
from engine.io.publish import EFBIG_OR_FULL, PendingOutput, open_output, write_error
from engine.options import VideoCodec, VideoOptions, check_crf

log = logging.getLogger(__name__)

QUEUE_FRAMES = 3  # frames waiting to be encoded: memory stays flat
_POLL_S = 0.1  # how often a thread blocked on the queue looks for a stop
_END = object()
LOOKAHEAD = 20  # frames x264/x265 look ahead (their presets: 10…60)

# ---------------------------------------------------------------------------------------------
# What a product is written as


@dataclass(frozen=True)
class OutputPlan:
    """A product clip's codec, pixel format, container and codec options."""

    encoder: str  # FFmpeg encoder: libx264, libx265, libvpx-vp9, libsvtav1, prores_ks, ffv1
    pix_fmt: str
    container: str  # FFmpeg muxer: mp4, mov, matroska, webm
    suffix: str
    options: Mapping[str, str]
    array_fmt: str  # the PyAV format of the frames handed in
    rgb: bool  # encoded as RGB (lossless FFV1): no colour matrix applies


_ENCODERS = {
    VideoCodec.H264: "libx264",
    VideoCodec.HEVC: "libx265",
    VideoCodec.VP9: "libvpx-vp9",
    VideoCodec.AV1: "libsvtav1",
    VideoCodec.PRORES: "prores_ks",
    VideoCodec.FFV1: "ffv1",
}
_FROM_DECODER = {
    "h264": VideoCodec.H264,
    "hevc": VideoCodec.HEVC,
    "vp9": VideoCodec.VP9,
    "libvpx-vp9": VideoCodec.VP9,
    "av1": VideoCodec.AV1,
    "libdav1d": VideoCodec.AV1,
    "prores": VideoCodec.PRORES,
    "ffv1": VideoCodec.FFV1,
}
_DEFAULT_CRF = {VideoCodec.H264: 18, VideoCodec.HEVC: 20, VideoCodec.VP9: 30, VideoCodec.AV1: 30}
_MUXERS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska", ".webm": "webm"}
_HOME = {
    VideoCodec.H264: ".mp4",
    VideoCodec.HEVC: ".mp4",
    VideoCodec.VP9: ".webm",
    VideoCodec.AV1: ".mp4",
    VideoCodec.PRORES: ".mov",
    VideoCodec.FFV1: ".mkv",
}
_TEN_BIT = frozenset({VideoCodec.HEVC, VideoCodec.PRORES, VideoCodec.AV1, VideoCodec.H264})


@cache
def _muxer_holds(muxer: str, codecs: tuple[str, ...]) -> bool:
    try:
        with av.open(io.BytesIO(), "w", format=muxer) as probe:
            supported = probe.supported_codecs
    except av.error.FFmpegError:
        return False
    return all(c in supported for c in codecs)


def _chroma(pix_fmt: str) -> str:
    for sub in ("444", "422", "420"):
        if sub in pix_fmt:
            return sub
    return "420"


def codec_for(meta: VideoMeta, options: VideoOptions) -> VideoCodec:
    """The codec a colour product is written with: the one asked for, else the input's where
    Tessera encodes it, else H.264."""
    if options.codec is not VideoCodec.AUTO:
        return options.codec
    return _FROM_DECODER.get(meta.codec, VideoCodec.H264)


def plan_output(
    meta: VideoMeta,
    options: VideoOptions,
    channels: int,
    wide: bool,
    lossless: bool,
    copied: tuple[str, ...],
    odd: bool = False,
) -> OutputPlan:
    """How one product clip is written.

    - `lossless` (masks, depth, normals): FFV1 in Matroska, as RGB or grey, 16-bit where the
      frames are, so the values come back bit for bit.
    - A product with alpha (a cut-out): VP9 with alpha in WebM (Matroska where the copied
      streams do not fit WebM), or ProRes 4444 in MOV when ProRes is asked, or FFV1 when asked.
    - Otherwise the codec asked for (or the input's), 10-bit where the codec has it and the
      frames are above 8 bits, with the input's chroma subsampling; the input's container
      where it holds the codec and the copied streams, else the codec's own (MP4, WebM, MOV,
      MKV), else Matroska.
    """
    codec = VideoCodec.FFV1 if lossless else codec_for(meta, options)
    alpha = channels in (2, 4)
    if alpha and codec not in (VideoCodec.PRORES, VideoCodec.FFV1):
        codec = VideoCodec.VP9
    encoder = _ENCODERS[codec]
    check_crf(options.crf, codec.value)  # the input's codec (auto) or VP9 (alpha) is known here
    grey = channels in (1, 2)
    opts: dict[str, str] = {}
    rgb = False
    if codec is VideoCodec.FFV1:
        rgb = not grey
        if grey:
            pix_fmt = "gray16le" if wide else "gray"
            array_fmt = pix_fmt
            if alpha:
                pix_fmt, array_fmt = ("gbrap16le", "rgba64le") if wide else ("bgra", "rgba")
                rgb = True
        elif alpha:
            pix_fmt, array_fmt = ("gbrap16le", "rgba64le") if wide else ("bgra", "rgba")
        else:
            pix_fmt, array_fmt = ("gbrp16le", "rgb48le") if wide else ("bgr0", "rgb24")
        opts.update(level="3", slicecrc="1", g="1")
    else:
        array_fmt = ("rgba64le" if wide else "rgba") if alpha else ("rgb48le" if wide else "rgb24")
        if codec is VideoCodec.PRORES:
            pix_fmt = "yuva444p10le" if alpha else "yuv422p10le"
            opts["profile"] = "4" if alpha else "3"  # 4444, or 422 HQ
        elif codec is VideoCodec.VP9:
            pix_fmt = "yuva420p" if alpha else "yuv420p"
            crf = options.crf if options.crf is not None else _DEFAULT_CRF[codec]
            opts.update({"crf": str(crf), "b:v": "0", "row-mt": "1"})
            opts["deadline"] = "good"
            opts["cpu-used"] = _vpx_speed(options.preset)
        else:
            ten = wide and codec in _TEN_BIT
            sub = "420" if codec is VideoCodec.AV1 else _chroma(meta.pix_fmt)
            if odd and sub != "444" and codec is not VideoCodec.AV1:
                sub = "444"  # 4:2:0 and 4:2:2 need even sides
            pix_fmt = f"yuv{sub}p10le" if ten else f"yuv{sub}p"
            crf = options.crf if options.crf is not None else _DEFAULT_CRF[codec]
            opts["crf"] = str(crf)
            if codec is VideoCodec.AV1:
                opts["preset"] = (
                    options.preset if options.preset and options.preset.isdigit() else "8"
                )
            else:
                opts["preset"] = options.preset if options.preset in _X26_PRESETS else "medium"
                # The encoder's look-ahead holds that many frames (40 at x264's medium: 500 MB
                # of 4K frames); 20 keeps a clip's memory flat from its 20th frame on.
                if codec is VideoCodec.HEVC:
                    opts["x265-params"] = f"log-level=error:rc-lookahead={LOOKAHEAD}"
                else:
                    opts["rc-lookahead"] = str(LOOKAHEAD)
    suffix, muxer = _container(meta, codec, copied, alpha)
    return OutputPlan(encoder, pix_fmt, muxer, suffix, opts, array_fmt, rgb)


_X26_PRESETS = frozenset(
    {"ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"}
)


def _vpx_speed(preset: str | None) -> str:
    if preset and preset.isdigit():
        return str(min(int(preset), 8))
    order = ["veryslow", "slower", "slow", "medium", "fast", "faster", "veryfast", "superfast"]
    return str(order.index(preset) + 1) if preset in order else "4"


def _container(
    meta: VideoMeta, codec: VideoCodec, copied: tuple[str, ...], alpha: bool
) -> tuple[str, str]:
    codec_name = {VideoCodec.PRORES: "prores", VideoCodec.FFV1: "ffv1"}.get(codec, codec.value)
    own = _suffix_of(meta)
    # FFV1 lives in Matroska (MP4 and MOV would take it, but players do not); a VP9 cut-out
    # goes to WebM/Matroska, whose block additions carry its alpha.
    keep_own = codec is not VideoCodec.FFV1 and not (alpha and codec is VideoCodec.VP9)
    candidates = [own] if keep_own else []
    candidates += [_HOME[codec], ".mkv"]
    for suffix in candidates:
        muxer = _MUXERS.get(suffix)
        if muxer and _muxer_holds(muxer, (codec_name, *copied)):
            return suffix, muxer
    return ".mkv", "matroska"


def _suffix_of(meta: VideoMeta) -> str:
    names = meta.container.split(",")
    if "mp4" in names or "mov" in names:
        return ".mov" if meta.codec == "prores" else ".mp4"
    if "matroska" in names or "webm" in names:
        return ".webm" if meta.codec in ("vp8", "vp9", "av1") else ".mkv"
    return ""


# ---------------------------------------------------------------------------------------------
# Writing


_SKIP_TAGS = frozenset(
    {"encoder", "major_brand", "minor_version", "compatible_brands", "duration", "handler_name"}
)


def _tags(source: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in source.items()
        if k.lower() not in _SKIP_TAGS and not k.upper().startswith("_STATISTICS")
    }


class VideoWriter:
    """One product clip, written frame by frame into its hidden temp file by a side thread.

    `add(frame)` hands an upright frame (H×W×C uint8/uint16) to the encoder through a bounded
    queue, so frames never pile up; `publish()` finishes the clip (the rest of the copied
    streams, the trailer) and gives it its final name; `discard()` stops and removes it.
    """

    def __init__(
        self,
        path: Path,
        source: Path,
        meta: VideoMeta,
        plan: OutputPlan,
        size: tuple[int, int],
        tags: Mapping[str, str] | None = None,
        check: Callable[[], None] | None = None,
    ) -> None:
        self.path = path.with_suffix(plan.suffix)
        self.source, self.meta, self.plan = source, meta, plan
        self.size = size  # (width, height) as stored (after turning back)
        self._tags = dict(tags or {})
        self._check = check
        self._count = 0
        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_FRAMES)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._output = open_output(self.path)
        self._pending: PendingOutput = self._output.__enter__()
        self._thread = threading.Thread(
            target=self._encode_behind, name="tessera-video-encode", daemon=True
        )
        log.info("encoding %s (%s %s)", self.path.name, plan.encoder, plan.pix_fmt)
        self._thread.start()

    # -- the engine thread's side -------------------------------------------------------
    def add(self, frame: np.ndarray) -> None:
        if self.meta.rotation:  # back to the orientation the clip stores, with its rotation
            frame = np.rot90(frame, -(self.meta.rotation // 90))
        if self._count >= self.meta.frame_count:
            raise ValueError("more frames than the clip has")
        self._count += 1
        while True:
            self._raise_failure()
            if not self._thread.is_alive():
                raise BadInputError(f"{self.path.name}: the encoder stopped early.")
            try:
                self._queue.put(np.ascontiguousarray(frame), timeout=_POLL_S)
                return
            except queue.Full:
                if self._check is not None:
                    self._check()

    def _raise_failure(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self.discard()
            raise error

    def publish(self) -> Path:
        try:
            while self._thread.is_alive():
                try:
                    self._queue.put(_END, timeout=_POLL_S)
                    break
                except queue.Full:
                    if self._check is not None:
                        self._check()
            while self._thread.is_alive():
                self._thread.join(_POLL_S)
                if self._check is not None:
                    self._check()
            self._raise_failure()
            if self._check is not None:
                self._check()
            path = self._pending.publish()
        except BaseException as e:
            self.discard(e)
            raise
        self._closed = True
        self._output.__exit__(None, None, None)
        return path

    def discard(self, error: BaseException | None = None) -> None:
        if self._closed:
            return  # a failure already discarded it (the products discard again on the way out)
        self._closed = True
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                pass
        self._thread.join()
        if error is None:
            self._output.__exit__(None, None, None)
        else:
            self._output.__exit__(type(error), error, error.__traceback__)

    # -- the side thread ------------------------------------------------------------------
    def _encode_behind(self) -> None:
        try:
            self._encode()
        except BaseException as e:  # handed to the engine thread at its next add or publish
            log.info("encoding %s failed: %s", self.path.name, e)
            if isinstance(e, OSError) and e.errno in EFBIG_OR_FULL:
                # PyAV's writes into the temp file raise the file's own OSError (a full disk
                # through an FFmpeg error keeps its errno): said as the disk it is.
                error: BaseException = write_error(self.path, e)
                error.__cause__ = e
            elif isinstance(e, av.error.FFmpegError):
                error = _encode_error(self.path, e)
                error.__cause__ = e
            elif isinstance(e, MemoryError):
                error = ResourceError(f"{self.path.name}: not enough memory to encode the clip.")
            else:
                error = e
            self._error = error

    def _encode(self) -> None:
        meta, plan = self.meta, self.plan
        # SVT-AV1 prints its banner to stderr unless told otherwise: errors only.
        os.environ.setdefault("SVT_LOG", "1")
        out: Any = av.open(self._pending.file, mode="w", format=plan.container)
        source: Any = av.open(str(self.source), metadata_errors="replace")
        try:
            out.metadata.update(_tags(source.metadata))
            out.metadata.update(self._tags)
            video: Any = out.add_stream(plan.encoder, rate=meta.rate, options=dict(plan.options))
            video.width, video.height = self.size
            video.pix_fmt = plan.pix_fmt
            video.time_base = meta.time_base
            video.codec_context.time_base = meta.time_base
            if not plan.rgb:
                cc = video.codec_context
                cc.colorspace = meta.colorspace or 2
                cc.color_primaries = meta.color_primaries or 2
                cc.color_trc = meta.color_trc or 2
                cc.color_range = meta.color_range or 1
            if meta.sample_aspect is not None:  # non-square pixels stay as wide (any scale)
                video.codec_context.sample_aspect_ratio = meta.sample_aspect
            if meta.rotation:
                video.set_display_rotation(meta.rotation)
            in_video = source.streams[meta.stream_index]
            video.metadata.update(_tags(in_video.metadata))
            copies = {}
            holds = out.supported_codecs
            for index in meta.copied_streams:
                context = source.streams[index].codec_context
                name = context.name if context is not None else "unknown"
                if name not in holds:  # e.g. MP4's mov_text in Matroska
                    log.warning("%s: its %s stream is left out", self.path.name, name)
                    continue
                try:
                    copies[index] = out.add_stream_from_template(source.streams[index])
                except (av.error.FFmpegError, ValueError) as e:
                    log.warning("%s: stream %d is left out (%s)", self.path.name, index, e)
                    continue
                # The template brings the codec only: the language and title come along here.
                copies[index].metadata.update(_tags(source.streams[index].metadata))
            try:
                out.set_chapters(source.chapters())
            except (av.error.FFmpegError, ValueError, AttributeError) as e:
                log.warning("%s: the chapters are left out (%s)", self.path.name, e)
            others = _copied_packets(source, list(copies))
            pending: Any = next(others, None)
            index = 0
            while True:
                item = self._get()
                if item is None:
                    return  # stopped: the temp file goes, nothing is finished
                if item is _END:
                    break
                frame = self._video_frame(item, index)
                index += 1
                for packet in video.encode(frame):
                    out.mux(packet)
                    pending = self._mux_copies(out, copies, others, pending, packet)
                if self._stop.is_set():
                    return
            for packet in video.encode():
                out.mux(packet)
                pending = self._mux_copies(out, copies, others, pending, packet)
            while pending is not None:
                pending = self._mux_copies(out, copies, others, pending, None)
            out.close()
        finally:
            source.close()
            try:
                out.close()  # a second close is a no-op; after a failure it may complain
            except (av.error.FFmpegError, ValueError, OSError):
                pass

    def _get(self) -> Any:
        while not self._stop.is_set():
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        return None

    def _video_frame(self, array: np.ndarray, index: int) -> Any:
        meta, plan = self.meta, self.plan
        if array.shape[2] == 1 and plan.array_fmt.startswith("gray"):
            frame = av.VideoFrame.from_ndarray(array[..., 0], format=plan.array_fmt)
        else:
            if array.shape[2] == 1:
                array = np.repeat(array, 3, axis=2)
            if array.shape[2] == 2:
                array = np.concatenate([np.repeat(array[..., :1], 3, axis=2), array[..., 1:]], 2)
            if array.shape[2] == 3 and plan.array_fmt.startswith("rgba"):
                top = 65535 if array.dtype == np.uint16 else 255
                array = np.concatenate([array, np.full((*array.shape[:2], 1), top, array.dtype)], 2)
            if array.shape[2] == 4 and not plan.array_fmt.startswith("rgba"):
                array = np.ascontiguousarray(array[..., :3])
            wide = plan.array_fmt in ("rgb48le", "rgba64le", "gray16le")
            if wide and array.dtype != np.uint16:
                array = array.astype(np.uint16) * np.uint16(257)
            elif not wide and array.dtype == np.uint16:
                array = ((array.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(array, format=plan.array_fmt)
        if plan.rgb:
            out = frame.reformat(format=plan.pix_fmt)
        else:
            out = frame.reformat(
                format=plan.pix_fmt,
                dst_colorspace=meta.colorspace or None,
                src_color_range="JPEG",
                dst_color_range=meta.color_range or "MPEG",
            )
            out.colorspace = meta.colorspace or 2
            out.color_range = meta.color_range or 1
        out.pts = meta.pts[index]
        out.time_base = meta.time_base
        return out

    def _mux_copies(
        self,
        out: Any,
        copies: Mapping[int, Any],
        others: Iterator[Any],
        pending: Any,
        upto: Any,
    ) -> Any:
        """Mux the copied streams' packets up to the time of the video packet `upto` (all of
        them when None); returns the first packet not muxed yet."""
        limit = None
        if upto is not None and upto.pts is not None and upto.time_base is not None:
            limit = float(upto.pts * upto.time_base)
        while pending is not None:
            t = pending.dts if pending.dts is not None else pending.pts
            if limit is not None and t is not None and float(t * pending.time_base) > limit:
                return pending
            pending.stream = copies[pending.stream.index]
            out.mux(pending)
            pending = next(others, None)
        return None


def _copied_packets(source: Any, indices: list[int]) -> Iterator[Any]:
    if not indices:
        return
    streams = [source.streams[i] for i in indices]
    for packet in source.demux(*streams):
        if packet.dts is None and packet.pts is None:
            continue  # the demuxer's flush packet
        yield packet


def _encode_error(path: Path, e: av.error.FFmpegError) -> Exception:
    text = str(e.strerror or e)
    if "No space" in text or "too large" in text:
        return write_error(path, OSError(errno.ENOSPC if "No space" in text else errno.EFBIG, text))
    return BadInputError(f"{path.name}: the clip could not be encoded ({text}).")
