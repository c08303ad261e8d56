"""What a request may set for each operation: one typed, frozen options object per operation.

A request carries the options of its operation (`UpscaleOptions`, `BackgroundOptions`,
`DepthOptions`, `GeometryOptions`). A field left None takes the model's default (its catalog
entry), then Tessera's own; `settle()` does that once, at the start of an operation, and gives
the operation its `…Config`, where every field is set. Code writes options as typed objects, so
a misspelled option cannot be written; the command line parses `KEY=VALUE` text with
`parse_options`, which refuses an unknown key or a bad value with one line naming what is
accepted (exit 2).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar, get_type_hints, overload

from engine.errors import UsageError

# A request's tile edge in input pixels: the command line's --tile (run and watch), and a
# request joined from the command line, checked again on the app's side.
TILE_RANGE = (16, 65536)


def tile_problem(given: object) -> str:
    """What is wrong with `given` as a tile edge, in the command line's words."""
    low, high = TILE_RANGE
    return f"--tile takes a whole number of pixels from {low} to {high}, or auto; not {given!r}"


def parse_tile(text: str) -> int | None:
    """`--tile`'s value: a whole number of pixels in TILE_RANGE, or auto (None)."""
    if text.strip().lower() == "auto":
        return None
    low, high = TILE_RANGE
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not low <= value <= high:
        raise UsageError(tile_problem(text))
    return value


class Normalization(StrEnum):
    IMAGENET = "imagenet"  # (x − mean) / std with ImageNet's mean and std, x in 0…1
    ZERO_ONE = "zero_one"  # x in 0…1, nothing else


def _range(low: int, high: int, help: str) -> dict[str, Any]:
    return {"range": (low, high), "help": help}


@dataclass(frozen=True)
class UpscaleOptions:
    max_tile: int | None = field(
        default=None, metadata=_range(16, 8192, "largest tile `auto` may choose, in input pixels")
    )
    auto_start: int | None = field(
        default=None, metadata=_range(16, 8192, "start `auto` from this tile instead of estimating")
    )


@dataclass(frozen=True)
class BackgroundOptions:
    normalization: Normalization | None = field(
        default=None, metadata={"help": "how pixels are scaled for the model"}
    )
    input_size: int | None = field(
        default=None, metadata=_range(32, 4096, "side fed to a model whose input size is dynamic")
    )
    refine_foreground: bool | None = field(
        default=None, metadata={"help": "refine edge colours (blur fusion), off by default"}
    )


@dataclass(frozen=True)
class DepthOptions:
    normalization: Normalization | None = field(
        default=None, metadata={"help": "how pixels are scaled for the model"}
    )
    process_res: int | None = field(
        default=None, metadata=_range(14, 4096, "longest side fed to a dynamic model")
    )


@dataclass(frozen=True)
class GeometryOptions:
    # MoGe-2's resolution levels 0…9 span 1200…3600 tokens.
    num_tokens: int | None = field(
        default=None, metadata=_range(1200, 3600, "image tokens MoGe-2 works at")
    )
    process_res: int | None = field(
        default=None, metadata=_range(56, 16384, "longest side fed to the model")
    )
    # A clip's point clouds are one PLY per frame (megabytes each): only when asked for.
    point_clouds: bool | None = field(
        default=None,
        metadata={
            "help": "a clip: one PLY point cloud per frame, in a folder beside its products "
            "(off; a still always gets its PLY)"
        },
    )


OperationOptions = UpscaleOptions | BackgroundOptions | DepthOptions | GeometryOptions
Opts = TypeVar("Opts", UpscaleOptions, BackgroundOptions, DepthOptions, GeometryOptions)


# What an operation works with: every option settled.


@dataclass(frozen=True)
class UpscaleConfig:
    max_tile: int
    auto_start: int | None  # None: estimate the starting tile from the memory budget


@dataclass(frozen=True)
class BackgroundConfig:
    normalization: Normalization
    input_size: int
    refine_foreground: bool


@dataclass(frozen=True)
class DepthConfig:
    normalization: Normalization
    process_res: int


@dataclass(frozen=True)
class GeometryConfig:
    num_tokens: int
    process_res: int
    point_clouds: bool  # a clip's PLY per frame


# Tessera's own defaults, used where neither the request nor the model's catalog entry says.
_BUILTIN: Mapping[type[Any], Any] = {
    UpscaleOptions: UpscaleConfig(max_tile=512, auto_start=None),
    BackgroundOptions: BackgroundConfig(
        normalization=Normalization.IMAGENET, input_size=1024, refine_foreground=False
    ),
    DepthOptions: DepthConfig(normalization=Normalization.IMAGENET, process_res=504),
    # 1280: over twice the token grid of 3600 tokens at 4:3, and the 2:1 grid's longest side.
    GeometryOptions: GeometryConfig(num_tokens=1800, process_res=1280, point_clouds=False),
}


@overload
def settle(options: UpscaleOptions, model: UpscaleOptions | None) -> UpscaleConfig: ...
@overload
def settle(options: BackgroundOptions, model: BackgroundOptions | None) -> BackgroundConfig: ...
@overload
def settle(options: DepthOptions, model: DepthOptions | None) -> DepthConfig: ...
@overload
def settle(options: GeometryOptions, model: GeometryOptions | None) -> GeometryConfig: ...
def settle(options: Any, model: Any) -> Any:
    """Every option set: the request's value, else the model's default, else Tessera's."""
    builtin = _BUILTIN[type(options)]
    values: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if value is None and model is not None:
            value = getattr(model, f.name)
        values[f.name] = getattr(builtin, f.name) if value is None else value
    return type(builtin)(**values)


def of_type(options: object, cls: type[Opts]) -> Opts | None:
    """`options` when it is a `cls` (a model's defaults may be another family's), else None."""
    return options if isinstance(options, cls) else None


def keys(cls: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def describe_keys(cls: type[Any]) -> str:
    """`name (what it takes)` for every option of `cls`, for messages and --help."""
    hints = get_type_hints(cls)
    parts = []
    for f in dataclasses.fields(cls):
        parts.append(f"{f.name} ({_accepted(hints[f.name], f.metadata)})")
    return ", ".join(parts)


def _accepted(hint: Any, metadata: Mapping[str, Any]) -> str:
    if "range" in metadata:
        low, high = metadata["range"]
        return f"a whole number from {low} to {high}"
    if hint == Normalization | None:
        return " or ".join(n.value for n in Normalization)
    return "true or false"


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _parse_value(name: str, hint: Any, meta: Mapping[str, Any], raw: object) -> Any:
    what = _accepted(hint, meta)
    label = f"option {name}"
    if "range" in meta:
        low, high = meta["range"]
        value: Any = raw
        if isinstance(raw, str):
            try:
                value = int(raw.strip())
            except ValueError:
                raise UsageError(f"{label} takes {what}, not {raw!r}.") from None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{label} takes {what}, not {raw!r}.")
        if not low <= value <= high:
            raise UsageError(f"{label} takes {what}, not {value}.")
        return value
    if hint == Normalization | None:
        try:
            return Normalization(str(raw).strip().lower())
        except ValueError:
            raise UsageError(f"{label} takes {what}, not {raw!r}.") from None
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UsageError(f"{label} takes {what}, not {raw!r}.")


def parse_options(cls: type[Opts], given: Mapping[str, object], operation: str) -> Opts:
    """Options of `cls` from text or plain values; UsageError names the accepted keys or range."""
    hints = get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, raw in given.items():
        f = by_name.get(key.strip())
        if f is None:
            raise UsageError(
                f"{operation} has no option {key!r}; its options are: {describe_keys(cls)}."
            )
        values[f.name] = (
            None if raw is None else _parse_value(f.name, hints[f.name], f.metadata, raw)
        )
    return cls(**values)


def check_options(options: OperationOptions, operation: str) -> None:
    """Refuse a typed options object whose values are out of range (built by code, not parsed)."""
    given = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    cls: type[Any] = type(options)
    parse_options(cls, {k: v for k, v in given.items() if v is not None}, operation)


# What the main image product is written as (the upscaled image, the cut-out). Data products
# (masks, depth, normals) keep their own formats whatever this says.


class OutputFormat(StrEnum):
    PNG = "png"
    JPEG = "jpeg"
    WEBP = "webp"
    TIFF = "tiff"  # 8- or 16-bit as the product's pixels (engine/io/tiff.py)
    EXR = "exr"  # linear half/float, premultiplied alpha; float maps beside (engine/io/exr.py)

    @property
    def suffix(self) -> str:
        return {"png": ".png", "jpeg": ".jpg", "webp": ".webp", "tiff": ".tif", "exr": ".exr"}[
            self.value
        ]

    @property
    def label(self) -> str:
        return {"png": "PNG", "jpeg": "JPEG", "webp": "WebP", "tiff": "TIFF", "exr": "EXR"}[
            self.value
        ]

    @property
    def has_alpha(self) -> bool:
        return self is not OutputFormat.JPEG

    @property
    def lossy(self) -> bool:
        """Whether `quality` matters (WebP at quality 100 is lossless)."""
        return self in (OutputFormat.JPEG, OutputFormat.WEBP)


class VideoCodec(StrEnum):
    """What a clip's products are encoded as; AUTO keeps the input's codec where Tessera can
    encode it (H.264 otherwise). PNG writes a numbered PNG sequence instead of a clip."""

    AUTO = "auto"
    H264 = "h264"
    HEVC = "hevc"
    VP9 = "vp9"
    AV1 = "av1"
    PRORES = "prores"
    FFV1 = "ffv1"
    PNG = "png"


CRF_RANGE = (0, 63)
# x264 and x265 stop at 51 (a higher CRF was taken without a word); libvpx and SVT-AV1 at 63.
CRF_HIGHEST = {"h264": 51, "hevc": 51, "vp9": 63, "av1": 63}


def check_crf(crf: int | None, codec: str) -> None:
    """UsageError (exit 2) when `crf` is past what the encoder of `codec` takes."""
    high = CRF_HIGHEST.get(codec)
    if crf is not None and high is not None and crf > high:
        ranges = "; ".join(f"{name} 0 to {top}" for name, top in CRF_HIGHEST.items())
        raise UsageError(f"--crf {crf} is past what {codec} takes ({ranges}).")


# x264/x265 preset names; SVT-AV1 and libvpx take a number (0 slowest … 13 / 8 fastest).
VIDEO_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
)


@dataclass(frozen=True)
class VideoOptions:
    """The video choices of the output step: codec, quality (CRF) and speed preset, and what a
    frame that cannot be decoded does (fail with its number, or be skipped: the frame before
    it is used in its place, so the clip keeps its length and timing)."""

    codec: VideoCodec = VideoCodec.AUTO
    crf: int | None = None  # None: the codec's default in engine/io/video.py
    preset: str | None = None
    skip_broken_frames: bool = False

    def check(self) -> None:
        if not isinstance(self.codec, VideoCodec):
            raise UsageError(f"the video codec must be one of {_codecs()}, not {self.codec!r}.")
        low, high = CRF_RANGE
        if self.crf is not None and (
            isinstance(self.crf, bool)
            or not isinstance(self.crf, int)
            or not low <= self.crf <= high
        ):
            raise UsageError(f"--crf takes a whole number from {low} to {high}, not {self.crf!r}.")
        check_crf(self.crf, self.codec.value)
        if self.preset is not None and not (
            self.preset in VIDEO_PRESETS or (self.preset.isdigit() and int(self.preset) <= 13)
        ):
            raise UsageError(
                f"--video-preset takes {', '.join(VIDEO_PRESETS)} or a number from 0 to 13, "
                f"not {self.preset!r}."
            )


def _codecs() -> str:
    return ", ".join(c.value for c in VideoCodec)


def parse_video_options(
    codec: str | None = None,
    crf: str | int | None = None,
    preset: str | None = None,
    skip_broken_frames: bool = False,
) -> VideoOptions:
    """VideoOptions from command-line text; UsageError (exit 2) says what is accepted."""
    values: dict[str, Any] = {"skip_broken_frames": bool(skip_broken_frames)}
    if codec is not None:
        name = codec.strip().lower()
        name = {"h265": "hevc", "x264": "h264", "x265": "hevc", "avc": "h264"}.get(name, name)
        try:
            values["codec"] = VideoCodec(name)
        except ValueError:
            raise UsageError(f"--video-codec takes {_codecs()}, not {codec!r}.") from None
    if crf is not None:
        try:
            values["crf"] = int(str(crf).strip())
        except ValueError:
            low, high = CRF_RANGE
            raise UsageError(
                f"--crf takes a whole number from {low} to {high}, not {crf!r}."
            ) from None
    if preset is not None:
        values["preset"] = preset.strip().lower()
    options = VideoOptions(**values)
    options.check()
    return options


QUALITY_RANGE = (1, 100)
MAX_FACTOR = 16.0
MAX_WIDTH = 65_535


@dataclass(frozen=True)
class OutputOptions:
    """The main product's format, quality and size.

    `factor` is the size as a multiple of the input (×2 of a ×4 model: factor 2); `width` a
    width in pixels (the height keeps the aspect). At most one of them; neither means the
    model's own size. The default is today's product: PNG at the model's scale.
    """

    format: OutputFormat = OutputFormat.PNG
    quality: int = 90  # JPEG and WebP; WebP at 100 is lossless
    factor: float | None = None
    width: int | None = None
    video: VideoOptions = VideoOptions()  # for clips: codec, CRF, preset, broken frames

    def check(self) -> None:
        """UsageError naming what is accepted, for options built by code."""
        if not isinstance(self.video, VideoOptions):
            raise UsageError(f"video options must be VideoOptions, not {self.video!r}.")
        self.video.check()
        if not isinstance(self.format, OutputFormat):
            raise UsageError(f"output format must be one of {_formats()}, not {self.format!r}.")
        low, high = QUALITY_RANGE
        if isinstance(self.quality, bool) or not isinstance(self.quality, int):
            raise UsageError(f"quality takes a whole number from {low} to {high}.")
        if not low <= self.quality <= high:
            raise UsageError(
                f"quality takes a whole number from {low} to {high}, not {self.quality}."
            )
        if self.factor is not None and self.width is not None:
            raise UsageError("give the output size as a factor or as a width, not both.")
        if self.factor is not None and not (
            isinstance(self.factor, int | float)
            and math.isfinite(self.factor)
            and 0 < self.factor <= MAX_FACTOR
        ):
            raise UsageError(f"the size factor must be above 0 and at most {MAX_FACTOR:g}.")
        if self.width is not None and (
            isinstance(self.width, bool)
            or not isinstance(self.width, int)
            or not 1 <= self.width <= MAX_WIDTH
        ):
            raise UsageError(f"the output width must be from 1 to {MAX_WIDTH} pixels.")

    @property
    def resized(self) -> bool:
        return self.factor is not None or self.width is not None

    def target_size(self, width: int, height: int) -> tuple[int, int] | None:
        """The product's (width, height) for an input of width × height; None: as produced."""
        if self.factor is not None:
            return max(1, round(width * self.factor)), max(1, round(height * self.factor))
        if self.width is not None:
            return self.width, max(1, round(height * self.width / max(width, 1)))
        return None

    def size_tag(self) -> str:
        """What a resized product's name says about its size: `x2`, `x1.5` or `1920w`."""
        if self.factor is not None:
            return f"x{self.factor:g}"
        if self.width is not None:
            return f"{self.width}w"
        return ""

    def describe(self) -> str:
        """`JPEG 90 · ×2 of the input`, for a person."""
        text = self.format.label
        if self.format is OutputFormat.JPEG or (
            self.format is OutputFormat.WEBP and self.quality < 100
        ):
            text += f" {self.quality}"
        elif self.format is OutputFormat.WEBP:
            text += " lossless"
        if self.factor is not None:
            text += f" · ×{self.factor:g} of the input"
        elif self.width is not None:
            text += f" · {self.width} px wide"
        return text


def _formats() -> str:
    return ", ".join(f.value for f in OutputFormat)


def parse_size(text: str) -> tuple[float | None, int | None]:
    """`x2`, `2x`, `×2` or `1.5x` → a factor; `1920`, `1920px` or `1920w` → a width."""
    raw = text.strip().lower().replace("×", "x")
    try:
        for unit in ("px", "w"):
            if raw.endswith(unit):
                return None, int(raw.removesuffix(unit).strip())
        if raw.startswith("x") or raw.endswith("x"):
            return float(raw.strip("x").strip()), None
        return None, int(raw)
    except ValueError:
        raise UsageError(
            f"--size takes a factor of the input (x2, 1.5x) or a width in pixels (1920), "
            f"not {text!r}."
        ) from None


def parse_output_options(
    format: str | None = None,
    quality: str | int | None = None,
    size: str | None = None,
    video: VideoOptions | None = None,
) -> OutputOptions:
    """OutputOptions from command-line text; UsageError (exit 2) says what is accepted."""
    values: dict[str, Any] = {}
    if video is not None:
        values["video"] = video
    if format is not None:
        name = format.strip().lower()
        name = {"jpg": "jpeg", "tif": "tiff"}.get(name, name)
        try:
            values["format"] = OutputFormat(name)
        except ValueError:
            raise UsageError(f"--format takes {_formats()}, not {format!r}.") from None
    if quality is not None:
        try:
            values["quality"] = int(str(quality).strip())
        except ValueError:
            low, high = QUALITY_RANGE
            raise UsageError(
                f"--quality takes a whole number from {low} to {high}, not {quality!r}."
            ) from None
    if size is not None:
        values["factor"], values["width"] = parse_size(size)
    options = OutputOptions(**values)
    options.check()
    return options
