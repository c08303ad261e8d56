"""Writing image products: PNG (8/16-bit, APNG) through our encoder, other formats through Pillow.

Every output goes through `engine.io.publish.open_output`: never overwritten, never half written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from PIL import Image, PngImagePlugin

from engine.errors import ResourceError
from engine.io.exr import write_picture
from engine.io.image import (
    ANIMATED_FORMATS,
    DEFAULT_DURATION_MS,
    MULTI_FRAME_WRITE,
    WRITE_FORMATS,
    ImageMeta,
    reshape_channels,
    sample_top,
    to_8bit,
)
from engine.io.png import FrameLike, PngWriter, encode_png
from engine.io.publish import open_output
from engine.io.tiff import TiffWriter

log = logging.getLogger(__name__)


def _prepare_frames(frames: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    items = [frames] if isinstance(frames, np.ndarray) else list(frames)
    if not items:
        raise ValueError("write_image needs at least one frame")
    out: list[np.ndarray] = []
    for f in items:
        arr = np.asarray(f)
        if arr.ndim == 2:
            arr = arr[..., None]
        if arr.ndim != 3 or arr.shape[2] not in (1, 2, 3, 4):
            raise ValueError(f"a frame must be H×W×C with C in 1…4, got shape {arr.shape}")
        if arr.dtype not in (np.uint8, np.uint16):
            raise ValueError(f"frames must be uint8 or uint16, got {arr.dtype}")
        out.append(np.ascontiguousarray(arr))
    first = out[0]
    if any(f.shape != first.shape or f.dtype != first.dtype for f in out):
        raise ValueError("all frames must have the same shape and dtype")
    return out


def _icc_fits(icc: bytes | None, channels: int) -> bytes | None:
    """The profile if its colour space matches the pixels written (ICC header bytes 16-20)."""
    if not icc or len(icc) < 20:
        return None
    space = icc[16:20]
    grey = channels in (1, 2)
    if (grey and space == b"GRAY") or (not grey and space == b"RGB "):
        return icc
    return None


def _durations(meta: ImageMeta | None, count: int) -> list[int]:
    if meta is not None and len(meta.durations) == count:
        return [int(d) for d in meta.durations]
    return [DEFAULT_DURATION_MS] * count


def _pil_image(frame: np.ndarray) -> Image.Image:
    frame = to_8bit(frame) if frame.shape[2] > 1 else frame
    return Image.fromarray(frame[..., 0] if frame.shape[2] == 1 else frame)


def _flatten_alpha(frame: np.ndarray) -> np.ndarray:
    """Composite on white for formats without alpha (JPEG)."""
    if frame.shape[2] not in (2, 4):
        return frame
    top = sample_top(frame)
    alpha = frame[..., -1:].astype(np.float32) / top
    colour = frame[..., :-1].astype(np.float32) * alpha + top * (1.0 - alpha)
    return np.rint(colour).astype(frame.dtype)


def _encode_pillow(
    out: BinaryIO,
    fmt: str,
    frames: list[np.ndarray],
    meta: ImageMeta | None,
    text: Mapping[str, str] | None = None,
    quality: int | None = None,
) -> None:
    channels = frames[0].shape[2]
    options: dict[str, object] = {}
    if fmt != "TIFF" or channels > 1:  # only TIFF holds 16-bit grey through Pillow
        frames = [to_8bit(f) for f in frames]
    if fmt == "JPEG":
        frames = [_flatten_alpha(f) for f in frames]
        options.update(quality=quality or 95, subsampling=0 if (quality or 95) >= 90 else 2)
    elif fmt in ("WEBP", "AVIF") and channels in (1, 2):
        frames = [reshape_channels(f, colour=True, alpha=channels == 2) for f in frames]
    elif fmt in ("BMP", "GIF") and channels == 2:
        frames = [reshape_channels(f, colour=True, alpha=True) for f in frames]
    if fmt == "WEBP" and quality is not None and quality < 100:
        options.update(quality=quality, method=4)
    elif fmt == "WEBP":
        options.update(lossless=True, quality=100, exact=True)  # exact: keep colour under alpha 0
    elif fmt == "AVIF":
        options.update(quality=90)
    elif fmt == "TIFF":
        options.update(compression="tiff_adobe_deflate")
    images = [_pil_image(f) for f in frames]
    if meta is not None and fmt != "GIF":
        icc = _icc_fits(meta.icc_profile, frames[0].shape[2])
        if icc:
            options["icc_profile"] = icc
        if meta.exif and fmt in ("PNG", "JPEG", "WEBP", "TIFF", "AVIF"):
            options["exif"] = meta.exif
        if meta.dpi and fmt in ("PNG", "JPEG", "TIFF", "BMP"):
            options["dpi"] = meta.dpi
    if len(images) > 1:
        options.update(save_all=True, append_images=images[1:])
        if fmt in ANIMATED_FORMATS:
            options["duration"] = _durations(meta, len(images))
            loop = meta.loop if meta is not None else 0
            if loop is not None:
                options["loop"] = loop
            elif fmt != "GIF":  # GIF without a loop count plays once; the others need a number
                options["loop"] = 0
        if fmt == "GIF" and frames[0].shape[2] in (2, 4):
            options["disposal"] = 2  # full frames with holes: clear before drawing the next
    if text and fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        for key, value in text.items():
            info.add_text(key, value)
        options["pnginfo"] = info
    images[0].save(out, format=fmt, **options)


def _encode_png(
    out: BinaryIO,
    frames: list[np.ndarray],
    meta: ImageMeta | None,
    text: Mapping[str, str] | None = None,
    check: Callable[[], None] | None = None,
) -> None:
    encode_png(
        out,
        frames,
        durations=_durations(meta, len(frames)),
        loop=meta.loop if meta is not None and meta.loop is not None else 0,
        icc=_icc_fits(meta.icc_profile, frames[0].shape[2]) if meta is not None else None,
        dpi=meta.dpi if meta is not None else None,
        exif=meta.exif if meta is not None else None,
        text=text,
        check=check,
    )


def write_image(
    path: Path,
    frames: np.ndarray | Sequence[np.ndarray],
    meta: ImageMeta | None = None,
    *,
    format: str | None = None,
    text: Mapping[str, str] | None = None,
    check: Callable[[], None] | None = None,
    quality: int | None = None,
) -> Path:
    """Encode `frames` atomically to `path` or a numbered variant; returns the final path.

    PNG keeps 8 or 16 bits, ICC, EXIF and dpi from `meta`; several frames become an animated
    PNG/GIF/WebP (meta.durations, meta.loop) or a multi-page TIFF. Formats without 16-bit
    colour get 8 bits; JPEG gets alpha flattened on white. `text`: PNG tEXt/iTXt entries.
    """
    path = Path(path)
    fmt = (format or WRITE_FORMATS.get(path.suffix.lower(), "")).upper()
    if fmt == "JPG":
        fmt = "JPEG"
    if fmt not in WRITE_FORMATS.values():
        raise ValueError(f"cannot tell which image format to write for {path.name!r}")
    prepared = _prepare_frames(frames)
    if len(prepared) > 1 and fmt not in MULTI_FRAME_WRITE:
        raise ValueError(f"{fmt} holds one frame; got {len(prepared)}")
    log.info("encoding %s", path.name)
    with open_output(path) as pending:
        try:
            # Our own streaming PNG encoder: Pillow drops 16-bit colour to 8 bits, first copies
            # a frame into its own 4-byte-per-pixel image (doubling the peak), and merges
            # identical animation frames (a 3-frame input must give a 3-frame product).
            if fmt == "PNG":
                _encode_png(pending.file, prepared, meta, text, check)
            else:
                _encode_pillow(pending.file, fmt, prepared, meta, text, quality)
        except MemoryError as e:
            raise ResourceError(f"{path.name}: not enough memory to encode the image.") from e
        if check is not None:
            check()
        return pending.publish()


class ImageStream:
    """One image file written frame by frame into its hidden temp, published by `publish()`.

    PNG (and APNG) frames are encoded as they come, a band of rows at a time, so neither the
    frames nor a whole frame need be in memory; a frame may be a `Rows` source. Pillow's
    formats (WebP, TIFF, GIF…) write all frames at once: those are kept until `publish()`.
    `discard()` (or leaving a `with` block by an exception) removes the temp file.
    """

    def __init__(
        self,
        path: Path,
        *,
        shape: tuple[int, int, int],
        dtype: np.dtype[Any],
        frames: int = 1,
        meta: ImageMeta | None = None,
        text: Mapping[str, str] | None = None,
        format: str | None = None,
        check: Callable[[], None] | None = None,
        quality: int | None = None,
    ) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        fmt = (format or WRITE_FORMATS.get(suffix, "EXR" if suffix == ".exr" else "")).upper()
        fmt = {"JPG": "JPEG", "TIF": "TIFF"}.get(fmt, fmt)
        if fmt not in (*WRITE_FORMATS.values(), "EXR"):
            raise ValueError(f"cannot tell which image format to write for {self.path.name!r}")
        if frames > 1 and fmt not in MULTI_FRAME_WRITE:
            raise ValueError(f"{fmt} holds one frame; got {frames}")
        # EXR and 16-bit TIFF are written by our own encoders, a frame as it comes (Pillow
        # writes neither 16-bit colour TIFF nor EXR).
        self._own = fmt == "EXR" or (fmt == "TIFF" and np.dtype(dtype) == np.uint16)
        self._fmt, self._meta, self._text, self._quality = fmt, meta, text, quality
        self._count, self._added = frames, 0
        self._durations = _durations(meta, frames)
        self._held: list[np.ndarray] = []
        self._check = check
        log.info("encoding %s", self.path.name)
        self._output = open_output(self.path)
        self._pending = self._output.__enter__()
        self._png: PngWriter | None = None
        self._tiff = TiffWriter(self._pending.file) if self._own and fmt == "TIFF" else None
        if fmt == "PNG":
            self._png = PngWriter(
                self._pending.file,
                shape=shape,
                dtype=np.dtype(dtype),
                frames=frames,
                loop=meta.loop if meta is not None and meta.loop is not None else 0,
                icc=_icc_fits(meta.icc_profile, shape[2]) if meta is not None else None,
                dpi=meta.dpi if meta is not None else None,
                exif=meta.exif if meta is not None else None,
                text=text,
                check=check,
            )

    def add(self, frame: FrameLike) -> None:
        try:
            if self._png is not None:
                self._png.add(frame, self._durations[self._added])
            elif self._tiff is not None:
                icc = self._meta.icc_profile if self._meta is not None else None
                self._tiff.add_picture(frame, _icc_fits(icc, int(frame.shape[2])))
            elif self._fmt == "EXR":
                write_picture(self._pending.file, frame, self._check)
            else:
                whole = frame if isinstance(frame, np.ndarray) else frame[0 : frame.shape[0]]
                self._held.append(np.ascontiguousarray(whole))
        except MemoryError as e:
            self.discard()
            raise ResourceError(f"{self.path.name}: not enough memory to encode the image.") from e
        except BaseException as e:
            self.discard(e)  # an OSError (a full disk) comes back as a sentence of its own
            raise
        self._added += 1

    def publish(self) -> Path:
        """Finish the file and give it its final name (or a numbered one); returns that."""
        try:
            if self._png is not None:
                self._png.close()
            elif self._own:
                pass  # written frame by frame
            else:
                _encode_pillow(
                    self._pending.file, self._fmt, self._held, self._meta, self._text, self._quality
                )
                self._held.clear()
            if self._check is not None:
                self._check()
            path = self._pending.publish()
        except BaseException as e:
            self.discard(e)
            raise
        self._output.__exit__(None, None, None)
        return path

    def discard(self, error: BaseException | None = None) -> None:
        self._held.clear()
        if error is None:
            self._output.__exit__(None, None, None)
        else:
            self._output.__exit__(type(error), error, error.__traceback__)


class Abandoned(Exception):
    """The rows of a `GrowingFrame` will never all come: the frame was given up (a cancel, a
    failure, an out-of-memory retry at another tile); its writer stops and removes its temp."""


class GrowingFrame:
    """A frame finished top to bottom by another thread, handed to a writer before it is done:
    reading rows waits until they are final (`advance`), so the product is encoded band by band
    behind the runs instead of after the last one. Rows are read from the producer's own
    output (`read(start, stop)`), never queued as copies: writing adds no frame-sized memory;
    and the rows the reader is done with go back (`release(stop)`: rows [0, stop)), so the
    frame is never all in memory."""

    def __init__(
        self,
        shape: tuple[int, int, int],
        dtype: np.dtype[Any],
        read: Callable[[int, int], np.ndarray],
        release: Callable[[int], None] | None = None,
    ) -> None:
        self._shape = shape
        self._release = release
        self._last_start = 0
        self._dtype = np.dtype(dtype)
        self._read = read
        self._final = 0
        self._abandoned = False
        self._changed = threading.Condition()

    @property
    def shape(self) -> tuple[int, int, int]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    def advance(self, rows: int) -> None:
        """Rows [0, rows) are final (called by the producer)."""
        with self._changed:
            self._final = max(self._final, rows)
            self._changed.notify_all()

    def abandon(self) -> None:
        with self._changed:
            self._abandoned = True
            self._changed.notify_all()

    def __getitem__(self, rows: slice, /) -> np.ndarray:
        start, stop, _ = rows.indices(self._shape[0])
        with self._changed:
            while self._final < stop and not self._abandoned:
                self._changed.wait()
            if self._abandoned:
                raise Abandoned("the frame was given up before its rows were finished")
        if self._release is not None and start > self._last_start:
            # The reader (the PNG encoder) reads bands top to bottom and, while it reads one,
            # still filters the band before with the row above that: the rest is done with.
            self._release(self._last_start - 1)
        self._last_start = start
        return self._read(start, stop)


class BackgroundWrite:
    """`write()` on a side thread (it writes a `GrowingFrame`), joined by `result()` or
    `abandon()`; an error of the writer is raised by `check()` as soon as it happened, so the
    producer stops at once when, say, the disk is full."""

    def __init__(
        self, write: Callable[[], None], frame: GrowingFrame, on: Executor | None = None
    ) -> None:
        """`on`: the executor of a sequence's writes (engine/operations/write_behind.py), whose
        threads outlive a frame; else a thread of its own."""
        self._frame = frame
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._future: Future[None] | None = None
        if on is not None:
            self._future = on.submit(self._work, write)
            return
        self._thread = threading.Thread(
            target=self._work, args=(write,), name="tessera-writer", daemon=True
        )
        self._thread.start()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
        elif self._future is not None:
            self._future.result()  # _work keeps its error: this only waits

    def _work(self, write: Callable[[], None]) -> None:
        try:
            write()
        except BaseException as e:  # raised on the producer's thread by check() and result()
            self._error = e

    def check(self) -> None:
        error = self._error
        if error is not None and not isinstance(error, Abandoned):
            raise error

    def result(self) -> None:
        """Waits for the writer to finish; raises what stopped it."""
        self._join()
        self.check()

    def abandon(self) -> None:
        """Gives the frame up and waits for the writer to end (it discards its temp file)."""
        self._frame.abandon()
        self._join()
