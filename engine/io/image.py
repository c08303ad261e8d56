"""A decoded image and its samples: frames as numpy arrays, the file's metadata, 8/16-bit ↔ float.

Every decoded frame is a numpy array H×W×C (C = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA) of
uint8 or uint16, upright, with every frame of an animation composited to the full canvas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, overload

import numpy as np

# Formats Tessera reads; Pillow knows more (EPS, PSD, ...) but those are refused by name.
READ_FORMATS = (
    "PNG",
    "JPEG",  # also yields MPO (camera JPEGs with extra pictures)
    "GIF",
    "WEBP",
    "TIFF",
    "BMP",
    "AVIF",
    "JPEG2000",
    "TGA",
    "PPM",
    "ICO",
    "QOI",
)
SUPPORTED_TEXT = "PNG, JPEG, GIF, WebP, TIFF, BMP, AVIF, JPEG 2000, TGA, PPM, ICO, QOI"
IMAGE_SUFFIXES = frozenset(
    {
        ".png",
        ".apng",
        ".jpg",
        ".jpeg",
        ".jpe",
        ".jfif",
        ".gif",
        ".webp",
        ".tif",
        ".tiff",
        ".bmp",
        ".avif",
        ".jp2",
        ".j2k",
        ".tga",
        ".ppm",
        ".pgm",
        ".pbm",
        ".pnm",
        ".ico",
        ".qoi",
    }
)
# Clips (engine/io/video.py, which imports PyAV only when a clip is opened).
VIDEO_SUFFIXES = frozenset(
    {
        ".mp4",
        ".m4v",
        ".mov",
        ".mkv",
        ".webm",
        ".avi",
        ".mpg",
        ".mpeg",
        ".ts",
        ".m2ts",
        ".mts",
        ".wmv",
        ".flv",
        ".ogv",
        ".3gp",
        ".mxf",
    }
)


def is_video(path: Path) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


WRITE_FORMATS = {
    ".png": "PNG",
    ".apng": "PNG",
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".gif": "GIF",
    ".webp": "WEBP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".bmp": "BMP",
    ".avif": "AVIF",
}
ANIMATED_FORMATS = frozenset({"PNG", "GIF", "WEBP", "AVIF"})
MULTI_FRAME_WRITE = frozenset({"PNG", "GIF", "WEBP", "TIFF", "AVIF"})
DEFAULT_DURATION_MS = 100


@dataclass(frozen=True)
class VideoMeta:
    """What a clip's products keep from it (engine/io/video.py reads it from the header, its
    packets and its first frame; the products' encoder writes it back)."""

    container: (
        str  # FFmpeg's name of the input's format: "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"
    )
    codec: str  # the video stream's codec: h264, hevc, vp9, av1, prores, ffv1, …
    stream_index: int  # the video stream decoded
    stored_size: tuple[int, int]  # (width, height) as stored, before the display rotation
    pix_fmt: str  # the decoder's pixel format: yuv420p, yuv420p10le, yuva420p, …
    bit_depth: int  # bits per sample of the stream (8, 10, 12, 16)
    time_base: Fraction  # of the timestamps below
    rate: Fraction  # the average frame rate (frames per second)
    pts: tuple[int, ...]  # presentation time of each frame, in time_base (variable rate kept)
    rotation: int  # degrees counter-clockwise the player turns the stored frames (0/90/180/270)
    colorspace: int  # FFmpeg's AVColorSpace, AVColorPrimaries, AVColorTransferCharacteristic
    color_primaries: int
    color_trc: int
    color_range: int  # 1 limited (MPEG), 2 full (JPEG), 0 unspecified
    copied_streams: tuple[int, ...] = ()  # audio and subtitle streams copied into the products
    copied_codecs: tuple[str, ...] = ()  # their codecs (which containers can hold them)
    duration_s: float = 0.0
    exact: bool = True  # pts counted from the packets; False: from the header (probe_video)
    sample_aspect: Fraction | None = None  # a pixel's width ÷ height (anamorphic DVDs); None: 1

    @property
    def frame_count(self) -> int:
        return len(self.pts)


@dataclass(frozen=True)
class ImageMeta:
    format: str  # "PNG", "JPEG", "GIF", "WEBP", "TIFF", ...
    mode: str  # the PIL mode of the file, before any conversion
    bit_depth: int  # 8 or 16
    has_alpha: bool
    icc_profile: bytes | None  # None: sRGB (also after a CMYK file was converted to sRGB)
    exif: bytes | None  # "Exif\0\0" + TIFF data, Orientation reset to 1 (pixels are upright)
    durations: tuple[int, ...] = ()  # ms per frame of an animation; () for stills
    loop: int | None = None  # 0 = forever; None = not stated by the file
    dpi: tuple[float, float] | None = None
    video: VideoMeta | None = None  # a clip's own metadata (frames upright, as for images)


@dataclass(frozen=True)
class DecodedImage:
    source: Path
    # Each H×W×C, uint8/uint16, same shape and dtype; read-only. A tuple, or for a streamed
    # multi-frame file a sequence that decodes each frame when it is used.
    frames: Sequence[np.ndarray]
    meta: ImageMeta

    @property
    def is_animated(self) -> bool:
        return len(self.frames) > 1

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of every frame."""
        shape = getattr(self.frames, "shape", None) or self.frames[0].shape
        return int(shape[1]), int(shape[0])


# ---------------------------------------------------------------------------------------------
# Conversions


def fmt_pixels(count: int) -> str:
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f} gigapixels"
    if count >= 1_000_000:
        value = count / 1e6
        return f"{value:.1f} megapixels" if value < 10 else f"{value:.0f} megapixels"
    return f"{count} pixels"


def to_float(frame: np.ndarray) -> np.ndarray:
    """uint8 / uint16 → float32 in 0…1."""
    if frame.dtype == np.uint8:
        return frame.astype(np.float32) / np.float32(255.0)
    if frame.dtype == np.uint16:
        return frame.astype(np.float32) / np.float32(65535.0)
    raise ValueError(f"to_float expects uint8 or uint16, got {frame.dtype}")


def from_float(frame: np.ndarray, bit_depth: int) -> np.ndarray:
    """Float 0…1 → uint8 (bit_depth 8) or uint16 (16): clipped and rounded; NaN becomes 0."""
    dtype: type[np.unsignedinteger]
    if bit_depth == 8:
        top, dtype = 255.0, np.uint8
    elif bit_depth == 16:
        top, dtype = 65535.0, np.uint16
    else:
        raise ValueError(f"bit_depth must be 8 or 16, got {bit_depth}")
    values = np.nan_to_num(np.asarray(frame, dtype=np.float32), nan=0.0, posinf=1.0, neginf=0.0)
    return np.rint(np.clip(values, 0.0, 1.0) * np.float32(top)).astype(dtype)


def to_8bit(frame: np.ndarray) -> np.ndarray:
    if frame.dtype == np.uint8:
        return frame
    # Exact rounding of v * 255 / 65535 in integers.
    return ((frame.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


def to_16bit(frame: np.ndarray) -> np.ndarray:
    if frame.dtype == np.uint16:
        return frame
    return frame.astype(np.uint16) * np.uint16(257)


def reshape_channels(frame: np.ndarray, colour: bool, alpha: bool) -> np.ndarray:
    channels = frame.shape[2]
    has_alpha = channels in (2, 4)
    base = frame[..., :-1] if has_alpha else frame
    if colour and base.shape[2] == 1:
        base = np.repeat(base, 3, axis=2)
    if not alpha:
        return np.ascontiguousarray(base)
    a = (
        frame[..., -1:]
        if has_alpha
        else np.full((*base.shape[:2], 1), sample_top(frame), frame.dtype)
    )
    return np.concatenate([base, a], axis=2)


def sample_top(frame: np.ndarray) -> int:
    return 65535 if frame.dtype == np.uint16 else 255


@dataclass(frozen=True)
class Rows:
    """A frame made band by band: `make(start, stop)` gives rows start…stop as an array of
    `shape[1:]` and `dtype`. Writers take a band at a time, so a product computed from a
    smaller map (a mask, a depth map) never exists whole at full size in memory."""

    shape: tuple[int, int, int]
    dtype: np.dtype[Any]
    make: Callable[[int, int], np.ndarray]

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, step = rows.indices(self.shape[0])
        if step != 1:
            raise ValueError("Rows gives contiguous bands only")
        band = self.make(start, stop)
        if band.shape != (stop - start, *self.shape[1:]) or band.dtype != self.dtype:
            raise ValueError(f"a band of {band.shape} {band.dtype} for a {self.shape} frame")
        return band


class LazyFrames(Sequence[np.ndarray]):
    """Frames decoded only when used; `shape` and `dtype` (the same for every frame) are known
    up front. Subclasses make frame `index` in `frame()`; indexing and slicing are here."""

    shape: tuple[int, int, int]
    dtype: np.dtype[Any]
    # Whether the source already decodes its next frame while the current one is used (a
    # clip's side thread); otherwise the operations do (engine/operations/frames_ahead.py).
    decodes_ahead: bool = False

    def frame(self, index: int) -> np.ndarray:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[np.ndarray]: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.frame(index)
