"""Decoded images as QImages for display, made on the task thread (QImage is thread-safe; QPixmap
is not), and the checkerboard drawn under transparent pixels.

A still picture is read at about the view's size (`engine.io.pyramid`: a PNG band by band, a
JPEG in draft mode), never whole: `DisplayImage.frames` holds that frame and `width`/`height`
the picture's own size, and the parts the view shows zoomed in are read as `Detail`s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QBrush, QColor, QImage, QPainter, QPixmap

from engine.io.image import VideoMeta, is_video
from engine.io.pyramid import picture_info, read_reduced, read_region
from engine.io.reading import image_size, load_image
from engine.io.sequences import list_sequence
from engine.previews import Region
from engine.settings import DEFAULT_MAX_PIXELS

MAX_VIEW_FRAMES = 300  # frames of an animated file decoded for the scrubber
FRAME_SIZE = (1920, 1200)  # a still's frame when the view's size is not known


@dataclass(frozen=True)
class DisplayImage:
    """What the viewer shows for one file (or folder of frames)."""

    path: Path
    frames: tuple[QImage, ...]
    width: int
    height: int
    bit_depth: int
    has_alpha: bool
    total_frames: int  # may exceed len(frames): a clip's, a frame folder's, a long animation's
    durations: tuple[int, ...] = ()  # milliseconds per frame of an animation
    clip: VideoMeta | None = None  # a clip: `frames` holds the shown one, the rest read on demand
    # A folder of frames (or several frame files): `frames` holds the first, the others are
    # read on demand like a clip's, so the bar scrubs all 1000 of them, holding one at a time.
    frame_files: tuple[Path, ...] = ()
    readable: bool = False  # a still read at the view's size: its parts are read as details

    @property
    def read_on_demand(self) -> bool:
        """Its frames are read one at a time as they are shown (a clip, a frame folder)."""
        return self.clip is not None or len(self.frame_files) > 1

    @property
    def size(self) -> QSize:
        return QSize(self.width, self.height)

    @property
    def reduced(self) -> bool:
        """The frame has fewer pixels than the picture."""
        return bool(self.frames) and self.frames[0].width() < self.width

    @property
    def nbytes(self) -> int:
        return sum(int(f.sizeInBytes()) for f in self.frames)


@dataclass(frozen=True)
class DetailRequest:
    """A part of a side's picture the view needs at more pixels than its frame has."""

    side: int  # 0 the left version, 1 the right
    path: Path
    box: Region  # in the picture's full-size pixels
    scale: float  # of those pixels (1: the file's own)
    generation: int


@dataclass(frozen=True)
class Detail:
    request: DetailRequest
    image: QImage


def read_detail(request: DetailRequest) -> Detail:
    """The requested part, read from the file (on the task thread)."""
    picture = read_region(request.path, request.box, request.scale, DEFAULT_MAX_PIXELS)
    return Detail(request, to_qimage(picture.pixels))


def read_full(image: DisplayImage) -> QImage:
    """The whole picture at its own size (Copy puts that on the clipboard)."""
    if not image.reduced:
        return image.frames[0]
    picture = read_reduced(image.path, image.width, image.height, DEFAULT_MAX_PIXELS)
    return to_qimage(picture.pixels)


def load_still(path: Path, frame_size: tuple[int, int]) -> DisplayImage | None:
    """A still picture at about `frame_size` (None: it has frames, or is not a file)."""
    if not path.is_file():
        return None
    info = picture_info(path, DEFAULT_MAX_PIXELS)
    if info.frames != 1:
        return None
    picture = read_reduced(path, *frame_size, DEFAULT_MAX_PIXELS)
    return DisplayImage(
        path,
        (to_qimage(picture.pixels),),
        info.width,
        info.height,
        info.bit_depth,
        info.has_alpha,
        1,
        readable=True,
    )


def to_qimage(frame: np.ndarray) -> QImage:
    """An H×W×C uint8/uint16 array (C = 1, 2, 3 or 4) as an 8-bit QImage that owns its pixels."""
    if frame.ndim == 2:
        frame = frame[..., None]
    if frame.dtype == np.uint16:
        frame = (frame >> 8).astype(np.uint8)  # for display only; the files keep 16 bits
    elif frame.dtype != np.uint8:
        frame = np.clip(frame, 0, 255).astype(np.uint8)
    h, w, c = frame.shape
    if c == 2:  # grey + alpha
        frame = np.concatenate([np.repeat(frame[..., :1], 3, axis=2), frame[..., 1:]], axis=2)
        c = 4
    fmt = {
        1: QImage.Format.Format_Grayscale8,
        3: QImage.Format.Format_RGB888,
        4: QImage.Format.Format_RGBA8888,
    }[c]
    data = np.ascontiguousarray(frame)
    image = QImage(data.data, w, h, w * c, fmt)
    return image.copy()  # detach from the numpy buffer


def load_display(
    path: Path, max_frames: int = MAX_VIEW_FRAMES, frame_size: tuple[int, int] = FRAME_SIZE
) -> DisplayImage:
    """Decode `path` (a file, or a folder of frames) for the viewer; a still at about
    `frame_size`. Raises EngineError."""
    if is_video(path):
        return load_clip(path)
    still = load_still(path, frame_size)
    if still is not None:
        return still
    if path.is_dir():
        files = list_sequence(path)
        if not files:
            from engine.errors import EngineError

            raise EngineError(f"{path.name}: the folder holds no image files.")
        return _frame_files(path, tuple(files))
    decoded = load_image(path, DEFAULT_MAX_PIXELS)
    images = tuple(to_qimage(fr) for fr in decoded.frames[:max_frames])
    return DisplayImage(
        path,
        images,
        decoded.size[0],
        decoded.size[1],
        decoded.meta.bit_depth,
        decoded.meta.has_alpha,
        len(decoded.frames),
        tuple(int(d) for d in decoded.meta.durations[:max_frames]),
    )


def load_clip(path: Path) -> DisplayImage:
    """A clip for the viewer: its timestamps (from the packets, no decoding) and its first
    frame; the clip bar reads the others one at a time (`read_clip_frame`)."""
    from engine.io.video import probe_video, read_frame

    meta = probe_video(path, DEFAULT_MAX_PIXELS)
    first = read_frame(path, 0, DEFAULT_MAX_PIXELS, meta)
    height, width = first.shape[:2]
    step = round(1000 / float(meta.rate)) if meta.rate else 40
    return DisplayImage(
        path,
        (to_qimage(first),),
        width,
        height,
        meta.bit_depth,
        first.ndim == 3 and first.shape[2] in (2, 4),
        meta.frame_count,
        (step,),
        meta,
    )


def read_clip_frame(image: DisplayImage, index: int) -> QImage:
    """Frame `index` of a clip or frame folder shown in the viewer (on the task thread): one
    seek and decode, the clip is never held; past its end, its last frame (a product shorter
    than its input)."""
    from engine.io.video import read_frame

    files = image.frame_files
    if len(files) > 1:  # a frame folder: one file decoded, nothing else kept
        index = min(max(index, 0), len(files) - 1)
        return to_qimage(load_image(files[index], DEFAULT_MAX_PIXELS).frames[0])
    meta = image.clip
    if meta is None:
        return image.frames[min(index, len(image.frames) - 1)]
    index = min(max(index, 0), meta.frame_count - 1)
    return to_qimage(read_frame(image.path, index, DEFAULT_MAX_PIXELS, meta))


@dataclass(frozen=True)
class Thumbnail:
    path: Path
    image: QImage
    width: int
    height: int
    frames: int  # frames of an animated file, or files in a folder


def make_thumbnail(path: Path, edge: int) -> Thumbnail:
    """A small picture of `path` (the first frame; a folder's first file)."""
    source = path
    count = 1
    if is_video(path):
        from engine.io.video import poster_frame

        poster, meta = poster_frame(path, DEFAULT_MAX_PIXELS)
        picture = to_qimage(poster).scaled(
            edge,
            edge,
            Qt.AspectRatioMode.KeepAspectRatio,
            Qt.TransformationMode.SmoothTransformation,
        )
        return Thumbnail(path, picture, poster.shape[1], poster.shape[0], meta.frame_count)
    if path.is_dir():
        files = list_sequence(path)
        if not files:
            from engine.errors import EngineError

            raise EngineError(f"{path.name}: the folder holds no image files.")
        source, count = files[0], len(files)
    else:
        count = image_size(path)[2]
    if count == 1:  # read at about the thumbnail's size, never whole
        still = load_still(source, (edge * 2, edge * 2))
        if still is not None:
            small = still.frames[0].scaled(
                edge,
                edge,
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
            return Thumbnail(path, small, still.width, still.height, count)
    decoded = load_image(source, DEFAULT_MAX_PIXELS)
    image = to_qimage(decoded.frames[0])
    small = image.scaled(
        edge,
        edge,
        Qt.AspectRatioMode.KeepAspectRatio,
        Qt.TransformationMode.SmoothTransformation,
    )
    return Thumbnail(path, small, decoded.size[0], decoded.size[1], count)


def checker_brush(cell: int = 8) -> QBrush:
    """The usual grey checkerboard, so transparent pixels read as transparent."""
    tile = QPixmap(cell * 2, cell * 2)
    tile.fill(QColor(204, 204, 204))
    painter = QPainter(tile)
    painter.fillRect(0, 0, cell, cell, QColor(153, 153, 153))
    painter.fillRect(cell, cell, cell, cell, QColor(153, 153, 153))
    painter.end()
    return QBrush(tile)


def load_display_paths(
    paths: tuple[Path, ...], frame_size: tuple[int, int] = FRAME_SIZE
) -> DisplayImage:
    """A file, a folder of frames, or several frame files, as one DisplayImage."""
    if len(paths) == 1:
        return load_display(paths[0], frame_size=frame_size)
    return _frame_files(paths[0], paths)


def _frame_files(path: Path, files: tuple[Path, ...]) -> DisplayImage:
    """The frames `files` (a folder's, or several files) for the viewer: the first decoded,
    the others read when the bar shows them (`read_clip_frame`)."""
    first = load_image(files[0], DEFAULT_MAX_PIXELS)
    return DisplayImage(
        path,
        (to_qimage(first.frames[0]),),
        first.size[0],
        first.size[1],
        first.meta.bit_depth,
        first.meta.has_alpha,
        len(files),
        frame_files=files,
    )
