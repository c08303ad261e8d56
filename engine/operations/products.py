"""Writing an operation's products: one rule for single frames, animations and sequences.

- one frame: one file per product, `<stem>-<suffix>.<ext>`;
- the main image in the output step's format (PNG, JPEG, WebP, 8/16-bit TIFF, EXR); asked for
  EXR, the float maps (depth, confidence) are also written as float EXR beside their TIFF,
  and an animation's EXR frames are numbered files (one EXR holds one image);
- one animated or multi-page file: one multi-frame file per product with the input's frame
  durations and loop count, in the input's container when it holds the product losslessly
  (APNG, lossless WebP, multi-page TIFF). GIF has a 256-colour palette and on/off
  transparency, so a GIF's products are APNG. 16-bit products are always PNG (APNG), float
  products always (multi-page) TIFF;
- a sequence (a folder, or several files run with `sequence`): one file per frame and product,
  numbered from 1, `<stem>-<suffix>-0001.<ext>`, where stem is the first frame's;
- products with no multi-frame form (PLY, JSON) are numbered per frame whenever there are
  several frames; a clip gets them only when asked (a point cloud per frame), in a folder
  beside its products, `<stem>-<suffix>/<stem>-<suffix>-0001.<ext>`.

Products are made frame by frame (`Products`): each frame is encoded into the product's hidden
temp file as soon as it exists, a band of rows at a time where it is computed band by band, so
memory does not grow with the number of frames (PNG/APNG and float TIFF; Pillow's animated WebP
and TIFF need all their frames at once). Everything is published together when the input is
done: a cancelled or failed input leaves none.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from engine.files import LIVE, partial_name, sweep_leftovers
from engine.io.exr import write_data
from engine.io.image import DecodedImage, ImageMeta
from engine.io.png import FrameLike
from engine.io.publish import PendingOutput, open_output, write_error
from engine.io.reading import load_image
from engine.io.resize import check_product_size, resize_frame
from engine.io.tiff import TiffWriter
from engine.io.writing import ImageStream
from engine.operations.base import RunContext, output_name
from engine.options import OutputFormat, OutputOptions, VideoCodec
from engine.requests import Product, ProductKind
from engine.settings import DEFAULT_MAX_PIXELS


def data_meta(image: DecodedImage) -> ImageMeta:
    """Meta for a data product (mask, depth, normals): the input's timing and dpi, but no colour
    profile or EXIF, which describe the photo's colours, not these values."""
    return replace(image.meta, icc_profile=None, exif=None)


def _animated_ext(image: DecodedImage) -> str:
    # GIF is left out on purpose: a 256-colour palette and on/off transparency lose data.
    return {"WEBP": ".webp", "TIFF": ".tif"}.get(image.meta.format, ".png")


class _Sink:
    """One product of an input: takes its frames one by one, publishes at the end."""

    def add(self, frame: Any) -> None:
        raise NotImplementedError

    def publish(self) -> list[Product]:
        raise NotImplementedError

    def discard(self) -> None:
        raise NotImplementedError

    def encodes_rows_as_read(self) -> bool:
        return False  # it needs the whole frame at once


class _ImageSink(_Sink):
    def __init__(
        self,
        products: Products,
        suffix: str,
        kind: ProductKind,
        meta: ImageMeta,
        text: Mapping[str, str] | None,
    ) -> None:
        self.p, self.suffix, self.kind, self.meta, self.text = products, suffix, kind, meta, text
        self.streams: list[ImageStream] = []
        self.published: list[Product] = []
        # The request's output step (format, quality, size) is for the main image product only;
        # masks, depth and normals keep their lossless formats.
        request = products.ctx.request
        self.output = request.output if kind is ProductKind.IMAGE else OutputOptions()
        self.target = self.output.target_size(*products.image.size)
        if self.target is not None:
            self.suffix = f"{suffix}-{self.output.size_tag()}"  # photo-realesrgan-x4plus-x2.jpg
        self.quality = self.output.quality if self.output.format.lossy else None
        self.numbered = products.several_files  # one file per frame (a clip as PNG frames too)
        self.numbered |= self.output.format is OutputFormat.EXR  # one image per EXR file

    def _path(self, index: int, ext: str) -> Path:
        name = self.suffix if index < 0 else f"{self.suffix}-{index + 1:04d}"
        return self.p.ctx.out_dir / output_name(self.p.image.source, name, ext)

    def _sized(self, frame: FrameLike) -> FrameLike:
        if self.target is None:
            return frame
        whole = frame if isinstance(frame, np.ndarray) else frame[0 : frame.shape[0]]
        return resize_frame(whole, *self.target)

    def add(self, frame: FrameLike) -> None:
        frame = self._sized(frame)
        shape = (int(frame.shape[0]), int(frame.shape[1]), int(frame.shape[2]))
        count = self.p.count
        if count == 1 or self.numbered:
            index = -1 if count == 1 else len(self.streams)
            stream = ImageStream(
                self._path(index, self.output.format.suffix),
                shape=shape,
                dtype=frame.dtype,
                meta=self.meta,
                text=self.text,
                check=self.p.check,
                quality=self.quality,
            )
            stream.add(frame)  # a failed add has removed its own temp file
            self.streams.append(stream)
            return
        if not self.streams:
            sixteen = np.dtype(frame.dtype) == np.uint16
            ext = ".png" if sixteen or self.text else _animated_ext(self.p.image)
            if self.output.format is OutputFormat.WEBP and not self.text:
                ext = ".webp"  # JPEG holds one frame: an animation asked as JPEG stays lossless
            elif self.output.format is OutputFormat.TIFF and not self.text:
                ext = ".tif"  # multi-page, 16-bit where the frames are
            self.streams.append(
                ImageStream(
                    self._path(-1, ext),
                    shape=shape,
                    dtype=frame.dtype,
                    frames=count,
                    meta=self.meta,
                    text=self.text,
                    check=self.p.check,
                    quality=self.quality if ext == ".webp" else None,
                )
            )
        self.streams[0].add(frame)

    def encodes_rows_as_read(self) -> bool:
        """Whether a frame added here is encoded as its rows are read — a PNG file of its own
        at the model's size — so it may be added before it is finished (`GrowingFrame`)."""
        return (
            self.target is None
            and self.output.format is OutputFormat.PNG
            and (self.p.count == 1 or self.numbered)
        )

    def publish(self) -> list[Product]:
        frames = 1 if self.p.count == 1 or self.numbered else self.p.count
        for stream in self.streams:
            self.published.append(Product(stream.publish(), self.kind, self.p.image.source, frames))
        return self.published

    def discard(self) -> None:
        for stream in self.streams[len(self.published) :]:
            stream.discard()


# Products of a clip kept bit for bit (FFV1): data, not pictures.
_LOSSLESS_KINDS = frozenset(
    {ProductKind.MASK, ProductKind.DEPTH16, ProductKind.NORMAL, ProductKind.SKY}
)


class _VideoSink(_Sink):
    """One product of a clip: a clip itself (engine/io/video.py), encoded as its frames come.

    The main image product (and the depth preview) is written with the request's video
    choices; masks, depth and normals losslessly (FFV1 in Matroska). Asked for PNG, a clip's
    products are numbered PNG frames instead (16-bit where the frames are)."""

    def __init__(
        self,
        products: Products,
        suffix: str,
        kind: ProductKind,
        meta: ImageMeta,
        text: Mapping[str, str] | None,
    ) -> None:
        self.p, self.suffix, self.kind, self.text = products, suffix, kind, text
        assert meta.video is not None
        self.meta = meta.video
        request = products.ctx.request
        self.options = request.output.video
        output = request.output if kind is ProductKind.IMAGE else OutputOptions()
        self.target = output.target_size(*products.image.size)
        if self.target is not None:
            self.suffix = f"{suffix}-{output.size_tag()}"
        self.writer: Any = None  # engine.io.video_writing.VideoWriter once the first frame came
        self.published: list[Product] = []

    def add(self, frame: FrameLike) -> None:
        whole = frame if isinstance(frame, np.ndarray) else frame[0 : frame.shape[0]]
        if self.target is not None:
            whole = resize_frame(whole, *self.target)
        if self.writer is None:
            from engine.io.video_writing import VideoWriter, plan_output  # PyAV, for clips only

            height, width = whole.shape[:2]
            if self.meta.rotation in (90, 270):
                width, height = height, width
            copied = _copied_codecs(self.p.image)
            plan = plan_output(
                self.meta,
                self.options,
                channels=int(whole.shape[2]),
                wide=whole.dtype == np.uint16,
                lossless=self.kind in _LOSSLESS_KINDS,
                copied=copied,
                odd=bool(width % 2 or height % 2),
            )
            self.writer = VideoWriter(
                self.p.ctx.out_dir / output_name(self.p.image.source, self.suffix, plan.suffix),
                self.p.image.source,
                self.meta,
                plan,
                (width, height),
                tags=self.text,
                check=self.p.check,
            )
        self.writer.add(whole)

    def publish(self) -> list[Product]:
        if self.writer is not None and not self.published:
            path = self.writer.publish()
            self.published.append(Product(path, self.kind, self.p.image.source, self.p.count))
        return self.published

    def discard(self) -> None:
        if self.writer is not None and not self.published:
            self.writer.discard()


def _copied_codecs(image: DecodedImage) -> tuple[str, ...]:
    """The codecs of the clip's audio and subtitle streams (which containers hold them)."""
    video = image.meta.video
    return video.copied_codecs if video is not None else ()


class _NullSink(_Sink):
    """A product a clip does not get (float TIFF pages, per-frame PLY/JSON of every frame)."""

    def add(self, frame: Any) -> None:
        pass

    def publish(self) -> list[Product]:
        return []

    def discard(self) -> None:
        pass


class _FloatSink(_Sink):
    """Float32 grey TIFF: one multi-page file, or one file per frame of a sequence."""

    def __init__(self, products: Products, suffix: str, kind: ProductKind) -> None:
        self.p, self.suffix, self.kind = products, suffix, kind
        self.files: list[tuple[Any, PendingOutput, TiffWriter]] = []
        self.published: list[Product] = []

    def add(self, page: FrameLike) -> None:
        numbered = self.p.several_files and self.p.count > 1
        if not self.files or numbered:
            name = f"{self.suffix}-{len(self.files) + 1:04d}" if numbered else self.suffix
            output = open_output(
                self.p.ctx.out_dir / output_name(self.p.image.source, name, ".tif")
            )
            pending = output.__enter__()
            self.files.append((output, pending, TiffWriter(pending.file)))
        output, pending, writer = self.files[-1]
        try:
            writer.add_page(page)
        except OSError as e:  # a full disk: said like every writer says it (exit 3)
            raise write_error(pending.path, e) from e
        if self.p.check is not None:
            self.p.check()

    def publish(self) -> list[Product]:
        pages = 1 if self.p.several_files else self.p.count
        for output, pending, _writer in self.files[len(self.published) :]:
            self.published.append(Product(pending.publish(), self.kind, self.p.image.source, pages))
            output.__exit__(None, None, None)
        return self.published

    def discard(self) -> None:
        for output, _pending, _writer in self.files[len(self.published) :]:
            output.__exit__(None, None, None)


class _FloatWithExr(_Sink):
    """A float map written twice: the float TIFF of every run, and a float EXR beside it (one
    file per frame, channel Z) when the output step asks for EXR."""

    def __init__(self, tiff: _FloatSink, exr: _BytesSink) -> None:
        self.tiff, self.exr = tiff, exr

    def add(self, page: FrameLike) -> None:
        self.tiff.add(page)
        self.exr.add(lambda file: write_data(file, page))

    def publish(self) -> list[Product]:
        return self.tiff.publish() + self.exr.publish()

    def discard(self) -> None:
        self.tiff.discard()
        self.exr.discard()


class _ExrSink(_Sink):
    """A float map that only the output step's EXR asks for (normals): one EXR per frame."""

    def __init__(self, files: _BytesSink, names: tuple[str, ...]) -> None:
        self.files, self.names = files, names

    def add(self, frame: FrameLike) -> None:
        self.files.add(lambda file: write_data(file, frame, self.names))

    def publish(self) -> list[Product]:
        return self.files.publish()

    def discard(self) -> None:
        self.files.discard()


class _BytesSink(_Sink):
    """Products with no multi-frame form (PLY, JSON): numbered whenever there are several."""

    def __init__(self, products: Products, suffix: str, ext: str, kind: ProductKind) -> None:
        self.p, self.suffix, self.ext, self.kind = products, suffix, ext, kind
        self.files: list[tuple[Any, PendingOutput]] = []
        self.published: list[Product] = []

    def add(self, write: Callable[[BinaryIO], None]) -> None:
        """`write(file)` writes this frame's payload (in pieces, if it likes)."""
        index = len(self.files)
        name = self.suffix if self.p.count == 1 else f"{self.suffix}-{index + 1:04d}"
        output = open_output(self.p.ctx.out_dir / output_name(self.p.image.source, name, self.ext))
        pending = output.__enter__()
        self.files.append((output, pending))
        try:
            write(pending.file)
        except OSError as e:
            raise write_error(pending.path, e) from e

    def publish(self) -> list[Product]:
        for output, pending in self.files[len(self.published) :]:
            self.published.append(Product(pending.publish(), self.kind, self.p.image.source))
            output.__exit__(None, None, None)
        return self.published

    def discard(self) -> None:
        for output, _pending in self.files[len(self.published) :]:
            output.__exit__(None, None, None)


class _FolderSink(_Sink):
    """A clip's files with no clip form, asked for (a point cloud per frame): one numbered
    file per frame in a folder beside the products.

    Each frame's file is written and closed at once as a hidden temp file in the output folder
    (a long clip would otherwise hold a descriptor per frame); the folder is made when the clip
    is published, so a cancel or a failure leaves neither."""

    def __init__(self, products: Products, suffix: str, ext: str, kind: ProductKind) -> None:
        self.p, self.suffix, self.ext, self.kind = products, suffix, ext, kind
        self.files: list[tuple[Path, str, tuple[int, int] | None]] = []  # temp, name, identity
        self.published: list[Product] = []

    def add(self, write: Callable[[BinaryIO], None]) -> None:
        folder = self.p.ctx.out_dir
        name = output_name(
            self.p.image.source, f"{self.suffix}-{len(self.files) + 1:04d}", self.ext
        )
        sweep_leftovers(folder)
        temp = folder / partial_name(name)
        try:
            descriptor = LIVE.create(temp)
        except OSError as e:
            raise write_error(folder / name, e) from e
        self.files.append((temp, name, None))  # registered first: a failure below removes it
        try:
            with os.fdopen(descriptor, "w+b") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
                info = os.fstat(file.fileno())
        except OSError as e:
            raise write_error(folder / name, e) from e
        self.files[-1] = (temp, name, (info.st_dev, info.st_ino))

    def _folder(self) -> Path:
        base = self.p.ctx.out_dir / output_name(self.p.image.source, self.suffix, "")
        for number in range(100_000):
            folder = base if number == 0 else base.with_name(f"{base.name}-{number}")
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            except OSError as e:
                raise write_error(folder, e) from e
            return folder
        raise write_error(base, FileExistsError(f"too many numbered copies of {base.name}"))

    def publish(self) -> list[Product]:
        if not self.files or self.published:
            return self.published
        folder = self._folder()
        for temp, name, identity in self.files:
            try:
                LIVE.place(temp, folder / name, identity)
            except OSError as e:
                raise write_error(folder / name, e) from e
            self.published.append(Product(folder / name, self.kind, self.p.image.source))
        return self.published

    def discard(self) -> None:
        for temp, _name, _identity in self.files[len(self.published) :]:
            LIVE.discard(temp)


class Products:
    """The products of one input, made frame by frame and published together at the end.

    Use as a context manager: leaving it by an exception discards every temp file.
    """

    def __init__(self, ctx: RunContext, image: DecodedImage) -> None:
        self.ctx = ctx
        self.image = image
        self.count = len(image.frames)
        self.several_files = ctx.sequence  # frames from several files: numbered products
        self.video = image.meta.video is not None and not ctx.sequence  # a clip in, clips out
        # What a writer calls between blocks of rows: the request's cancel check.
        self.check = ctx.cancel.check if ctx.cancel is not None else None
        self._sinks: list[_Sink] = []
        self._by_name: dict[str, _Sink] = {}

    def image_product(
        self,
        suffix: str,
        kind: ProductKind,
        meta: ImageMeta,
        text: Mapping[str, str] | None = None,
    ) -> _ImageSink | _VideoSink:
        return self._sink(suffix, lambda: self._image_sink(suffix, kind, meta, text))

    def _image_sink(
        self, suffix: str, kind: ProductKind, meta: ImageMeta, text: Mapping[str, str] | None
    ) -> _ImageSink | _VideoSink:
        if self.video and self.ctx.request.output.video.codec is not VideoCodec.PNG:
            return _VideoSink(self, suffix, kind, meta, text)
        sink = _ImageSink(self, suffix, kind, meta, text)
        sink.numbered = sink.numbered or self.video  # a clip as PNG: one file per frame
        return sink

    def float_product(
        self, suffix: str, kind: ProductKind
    ) -> _FloatSink | _FloatWithExr | _NullSink:
        if self.video:  # a clip's lossless depth is its 16-bit FFV1 (or PNG) product
            return self._sink(f"{suffix}.tif", _NullSink)
        if self.ctx.request.output.format is OutputFormat.EXR:
            return self._sink(
                f"{suffix}.tif",
                lambda: _FloatWithExr(
                    _FloatSink(self, suffix, kind), _BytesSink(self, suffix, ".exr", kind)
                ),
            )
        return self._sink(f"{suffix}.tif", lambda: _FloatSink(self, suffix, kind))

    def exr_product(
        self, suffix: str, kind: ProductKind, names: tuple[str, ...]
    ) -> _ExrSink | _NullSink:
        """A float map written only when the output step asks for EXR (a still's or a
        sequence's frames; a clip gets none): float32 channels `names`."""
        if self.video or self.ctx.request.output.format is not OutputFormat.EXR:
            return self._sink(f"{suffix}.exr", _NullSink)
        return self._sink(
            f"{suffix}.exr",
            lambda: _ExrSink(_BytesSink(self, suffix, ".exr", kind), names),
        )

    def bytes_product(
        self, suffix: str, ext: str, kind: ProductKind, *, clip_folder: bool = False
    ) -> _BytesSink | _FolderSink | _NullSink:
        """A file per frame; a clip's only with `clip_folder` (asked for), in a folder."""
        if self.video and clip_folder:
            return self._sink(f"{suffix}{ext}", lambda: _FolderSink(self, suffix, ext, kind))
        if self.video:  # no point cloud and intrinsics file for every frame of a clip
            return self._sink(f"{suffix}{ext}", _NullSink)
        return self._sink(f"{suffix}{ext}", lambda: _BytesSink(self, suffix, ext, kind))

    def _sink(self, name: str, make: Callable[[], Any]) -> Any:
        sink = self._by_name.get(name)
        if sink is None:
            sink = make()
            self._by_name[name] = sink
            self._sinks.append(sink)
        return sink

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Count the time inside the block as the request's file I/O (decoding and writing)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.ctx.io_seconds += time.perf_counter() - start

    def add(self, sink: _Sink, frame: Any) -> None:
        with self.timed():
            sink.add(frame)

    def publish(self) -> list[Product]:
        if self.check is not None:
            self.check()  # a cancel before publishing leaves nothing
        products: list[Product] = []
        with self.timed():
            for sink in self._sinks:
                products.extend(sink.publish())
        return products

    def discard(self) -> None:
        for sink in self._sinks:
            sink.discard()

    def __enter__(self) -> Products:
        return self

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        if error is not None:
            self.discard()
        # The sinks point back here: break the cycle, so the input's frames go as soon as the
        # operation lets go of them, not at the next garbage collection.
        self._sinks.clear()
        self._by_name.clear()
        close = getattr(self.image.frames, "close", None)
        if close is not None:
            close()  # a clip's decoding thread ends here, also after a cancel or a failure


def export_product(
    source: Path,
    target: Path,
    options: OutputOptions,
    input_size: tuple[int, int],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS * 4,
) -> Path:
    """Save as: the finished product `source` written again through a job's output step —
    `options`' format and quality, and its size taken relative to the job's input
    (`input_size`, (0, 0) when unknown: the product's own size) — with the encoder the job's
    products use. Never half-written; an existing `target` is replaced as a whole (the person
    confirmed it). Returns the path written."""
    size = options.target_size(*input_size) if all(input_size) else None
    if size is not None:  # refused before the product is even decoded (issue #20)
        check_product_size(target.name, *size, DEFAULT_MAX_PIXELS)
    decoded = load_image(source, max_pixels)
    # JPEG and EXR (single-part) hold one image: an animation saved as either keeps its first.
    single = options.format in (OutputFormat.JPEG, OutputFormat.EXR)
    frames = decoded.frames[:1] if single else decoded.frames
    target = target if target.suffix else target.with_suffix(options.format.suffix)
    sized = [resize_frame(f, *size) if size else f for f in frames]
    first = sized[0]
    stream = ImageStream(
        target,
        shape=(int(first.shape[0]), int(first.shape[1]), int(first.shape[2])),
        dtype=first.dtype,
        frames=len(sized),
        meta=decoded.meta,
        format=options.format.value,
        quality=options.quality if options.format.lossy else None,
    )
    try:
        for frame in sized:
            stream.add(frame)
        written = stream.publish()
    except BaseException:
        stream.discard()
        raise
    if written != target and target.exists():
        os.replace(written, target)
        return target
    return written
