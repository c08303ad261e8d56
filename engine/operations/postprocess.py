"""Pre- and post-processing shared by the background, depth and geometry families.

Numpy and Pillow only. Model inputs are resized with Pillow (antialiased, as the reference
pipelines do with PIL); model outputs are resized back with `resize_bilinear`, PyTorch's
`F.interpolate(mode="bilinear", align_corners=False)` without antialias, as the references do.

Multi-frame products follow one rule for every family (`write_frames`):
- one frame: one file per product, `<stem>-<suffix>.<ext>`;
- one animated or multi-page file: one multi-frame file per product with the input's frame
  durations and loop count, in the input's container when it holds the product losslessly
  (APNG, lossless WebP, multi-page TIFF). GIF has a 256-colour palette and on/off
  transparency, so a GIF's products are APNG. 16-bit products are always PNG (APNG), float
  products always (multi-page) TIFF;
- a sequence (a folder, or several files run with `sequence`): one file per frame and product,
  numbered from 1, `<stem>-<suffix>-0001.<ext>`, where stem is the first frame's;
- products with no multi-frame form (PLY, JSON) are numbered per frame whenever there are
  several frames.
Products are written only after every frame ran, so a cancelled or failed input leaves none.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
from PIL import Image

from engine.errors import UsageError
from engine.imaging import DecodedImage, ImageMeta, write_image
from engine.operations.base import RunContext, output_name
from engine.publish import atomic_output, write_bytes
from engine.requests import Product, ProductKind

P = ParamSpec("P")
R = TypeVar("R")

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
NORMALIZATIONS = ("imagenet", "zero_one")
DEPTH_TEXT_KEY = "tessera"  # PNG tEXt keyword of the 16-bit depth encoding

# ---------------------------------------------------------------------------------------------
# Options


def flag(value: object) -> bool:
    """A boolean option that may arrive as a bool or as text (`--option refine_foreground=yes`)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def normalization(ctx: RunContext) -> str:
    value = str(ctx.option("normalization", "imagenet")).lower()
    if value not in NORMALIZATIONS:
        raise UsageError(
            f"normalization must be one of {', '.join(NORMALIZATIONS)}, not {value!r}."
        )
    return value


# ---------------------------------------------------------------------------------------------
# Pixels in


def top_value(frame: np.ndarray) -> float:
    return 65535.0 if frame.dtype == np.uint16 else 255.0


def rgb_float(frame: np.ndarray) -> np.ndarray:
    """H×W×3 float32 in 0…1 from any decoded frame: grey is repeated, alpha dropped (as PIL's
    convert("RGB") does in the references)."""
    colour = frame[..., :3] if frame.shape[2] >= 3 else np.repeat(frame[..., :1], 3, axis=2)
    return colour.astype(np.float32) / np.float32(top_value(frame))


def alpha_float(frame: np.ndarray) -> np.ndarray | None:
    if frame.shape[2] not in (2, 4):
        return None
    return frame[..., -1].astype(np.float32) / np.float32(top_value(frame))


def resize_image(
    rgb: np.ndarray, height: int, width: int, resample: Image.Resampling
) -> np.ndarray:
    """Resize an H×W×C float image with Pillow's filter (antialiased when shrinking)."""
    if rgb.shape[:2] == (height, width):
        return rgb
    planes = [
        np.asarray(
            Image.fromarray(np.ascontiguousarray(rgb[..., c], dtype=np.float32)).resize(
                (width, height), resample
            )
        )
        for c in range(rgb.shape[2])
    ]
    return np.stack(planes, axis=2).astype(np.float32, copy=False)


def normalise(rgb: np.ndarray, mode: str) -> np.ndarray:
    if mode == "imagenet":
        return (rgb - IMAGENET_MEAN) / IMAGENET_STD
    return rgb


def to_nchw(rgb: np.ndarray, dtype: np.dtype[Any] | type = np.float32) -> np.ndarray:
    return np.ascontiguousarray(rgb.transpose(2, 0, 1)[None], dtype=dtype)


def input_dtype(type_name: str) -> type:
    """The numpy dtype to feed an ORT input declared as `type_name` (tensor(float16) …)."""
    return np.float16 if "float16" in type_name else np.float32


# ---------------------------------------------------------------------------------------------
# Model outputs back


def plane(output: Any) -> np.ndarray:
    """A 2-D float32 map from a model output with leading unit (or view) axes: the first one."""
    arr = np.asarray(output)
    while arr.ndim > 2:
        arr = arr[0]
    return arr.astype(np.float32, copy=False)


def _axis_weights(src: int, dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pos = (np.arange(dst, dtype=np.float64) + 0.5) * (src / dst) - 0.5
    pos = np.maximum(pos, 0.0)
    i0 = np.minimum(pos.astype(np.int64), src - 1)
    i1 = np.minimum(i0 + 1, src - 1)
    return i0, i1, (pos - i0).astype(np.float32)


def resize_bilinear(arr: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of a 2-D (or H×W×C) float map with half-pixel centres and no antialias,
    like torch F.interpolate(mode="bilinear", align_corners=False). Separable, so the largest
    temporary is one output-sized array."""
    src = np.asarray(arr, dtype=np.float32)
    if src.shape[:2] == (height, width):
        return src.copy()
    r0, r1, ry = _axis_weights(src.shape[0], height)
    c0, c1, cx = _axis_weights(src.shape[1], width)
    extra = (None,) * (src.ndim - 2)
    ry_b = ry[(slice(None), None, *extra)]
    rows = src[r0] * (1 - ry_b) + src[r1] * ry_b
    cx_b = cx[(None, slice(None), *extra)]
    return rows[:, c0] * (1 - cx_b) + rows[:, c1] * cx_b


def min_max(values: np.ndarray) -> np.ndarray:
    """(x − min) / (max − min) as the BEN2 and rembg references do; a flat map stays as it is,
    clipped to 0…1, rather than dividing by zero."""
    lo, hi = float(values.min()), float(values.max())
    if hi - lo <= 1e-12:
        return np.clip(values, 0.0, 1.0).astype(np.float32)
    return ((values - lo) / (hi - lo)).astype(np.float32)


def quantise(values: np.ndarray, bits: int) -> np.ndarray:
    """0…1 → uint8/uint16 by truncation, as the references' `(x * 255).astype(uint8)`."""
    top, dtype = (255.0, np.uint8) if bits == 8 else (65535.0, np.uint16)
    return (np.clip(values, 0.0, 1.0) * np.float32(top)).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Foreground colour (blur fusion)


def box_blur(values: np.ndarray, r: int) -> np.ndarray:
    """cv2.blur(values, (r, r)): the mean over an r×r window (anchor r//2) with reflect-101
    borders, by cumulative sums along each axis in float64 (exact enough for 16 bits)."""
    out = np.asarray(values, dtype=np.float32)
    for axis in (0, 1):
        out = _box_axis(out, r, axis)
    return out


def _box_axis(values: np.ndarray, r: int, axis: int) -> np.ndarray:
    before, after = r // 2, r - 1 - r // 2
    pad = [(0, 0)] * values.ndim
    pad[axis] = (before, after)
    out = np.empty_like(values)
    # Bands keep the float64 temporaries to a few MB on large photos.
    other = 1 - axis
    step = max(1, (1 << 21) // max(1, values.shape[axis] * int(np.prod(values.shape[2:]))))
    for start in range(0, values.shape[other], step):
        index = [slice(None)] * values.ndim
        index[other] = slice(start, start + step)
        band = np.pad(values[tuple(index)].astype(np.float64), pad, mode="reflect")
        sums = np.cumsum(band, axis=axis)
        zero_shape = list(sums.shape)
        zero_shape[axis] = 1
        sums = np.concatenate([np.zeros(zero_shape), sums], axis=axis)
        n = values.shape[axis]
        upper = np.take(sums, np.arange(r, r + n), axis=axis)
        lower = np.take(sums, np.arange(0, n), axis=axis)
        out[tuple(index)] = (upper - lower) / r
    return out


def _blur_fusion(
    image: np.ndarray, fg: np.ndarray, bg: np.ndarray, alpha: np.ndarray, r: int
) -> tuple[np.ndarray, np.ndarray]:
    a = alpha[..., None]
    blurred_a = box_blur(alpha, r)[..., None]
    blurred_f = box_blur(fg * a, r) / (blurred_a + 1e-5)
    blurred_b = box_blur(bg * (1 - a), r) / ((1 - blurred_a) + 1e-5)
    f = blurred_f + a * (image - a * blurred_f - (1 - a) * blurred_b)
    return np.clip(f, 0.0, 1.0), blurred_b


def estimate_foreground(image: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Foreground colours without the background's halo: Photoroom's fast blur-fusion
    estimator as BEN2 uses it, two passes (r = 90, then r = 6)."""
    fg, blurred_b = _blur_fusion(image, image, image, alpha, 90)
    return _blur_fusion(image, fg, blurred_b, alpha, 6)[0]


# ---------------------------------------------------------------------------------------------
# Depth encodings


# Google's Turbo colormap (Mikhailov 2019, Apache-2.0), every 8th entry of its 256-entry
# table plus the last; linear interpolation between them stays within 2.2/255 of the table.
_TURBO_KNOTS = np.array(
    [
        (48, 18, 59), (57, 42, 115), (64, 64, 162), (68, 86, 199), (70, 107, 227), (70, 128, 246),
        (66, 148, 255), (55, 168, 250), (40, 188, 235), (28, 205, 216), (24, 221, 194),
        (31, 233, 175), (50, 242, 152), (78, 249, 125), (109, 254, 98), (139, 255, 75),
        (164, 252, 60), (185, 246, 53), (205, 236, 52), (223, 223, 55), (238, 207, 58),
        (248, 190, 57), (253, 172, 52), (254, 150, 43), (251, 126, 33), (244, 102, 23),
        (235, 80, 14), (223, 63, 8), (208, 47, 5), (190, 33, 2), (169, 22, 1), (146, 11, 1),
        (122, 4, 3),
    ],
    np.float32,
)  # fmt: skip
_TURBO_AT = np.array([*range(0, 256, 8), 255], np.float32) / 255


def turbo(t: np.ndarray) -> np.ndarray:
    """H×W values in 0…1 → H×W×3 uint8 Turbo colours (0 dark blue … 1 dark red); NaN → black."""
    x = np.asarray(t, dtype=np.float32)
    known = ~np.isnan(x)
    clipped = np.clip(np.where(known, x, 0), 0.0, 1.0)
    rgb = np.stack([np.interp(clipped, _TURBO_AT, _TURBO_KNOTS[:, c]) for c in range(3)], axis=-1)
    return np.where(known[..., None], np.rint(rgb), 0).astype(np.uint8)


def nearness(depth: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """1 at the nearest depth `lo`, 0 at the farthest `hi`; NaN where depth is NaN."""
    span = hi - lo
    if span <= 0:
        return np.where(np.isnan(depth), np.nan, 1.0).astype(np.float32)
    return ((hi - depth) / span).astype(np.float32)


def encode_depth16(depth: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Depth → uint16, near is bright: v = 1 + round((hi − d) / (hi − lo) · 65534); v = 0 is
    reserved for "no depth" (NaN). Inverse: d = hi − (v − 1) / 65534 · (hi − lo)."""
    valid = ~np.isnan(depth)
    v = np.zeros(depth.shape, np.uint16)
    span = hi - lo
    # float64: float32 rounding alone would cost up to a step on wide ranges.
    near = (hi - depth[valid].astype(np.float64)) / span if span > 0 else np.ones(int(valid.sum()))
    v[valid] = (1 + np.rint(np.clip(near, 0.0, 1.0) * 65534)).astype(np.uint16)
    return v


def decode_depth16(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    d = hi - (v.astype(np.float64) - 1) / 65534 * (hi - lo)
    return np.where(v == 0, np.nan, d).astype(np.float32)


def depth_range(maps: Sequence[np.ndarray]) -> tuple[float, float]:
    """(min, max) over the finite values of all maps; (0, 0) when there is none."""
    los, his = [], []
    for m in maps:
        finite = m[np.isfinite(m)]
        if finite.size:
            los.append(float(finite.min()))
            his.append(float(finite.max()))
    return (min(los), max(his)) if los else (0.0, 0.0)


def depth_text(lo: float, hi: float, units: str) -> dict[str, str]:
    """The PNG text chunk that says how a 16-bit depth PNG decodes."""
    value = json.dumps(
        {
            "quantity": "depth",
            "units": units,
            "min": lo,
            "max": hi,
            "encoding": "near is bright: v = 1 + round((max - d) / (max - min) * 65534); v = 0: no depth",
            "decode": "d = max - (v - 1) / 65534 * (max - min)",
        },
        separators=(",", ":"),
    )
    return {DEPTH_TEXT_KEY: value}


def read_depth_text(path: Path) -> dict[str, Any]:
    """The encoding of a 16-bit depth PNG written by Tessera (min, max, units)."""
    with Image.open(path) as im:
        text = getattr(im, "text", {}).get(DEPTH_TEXT_KEY)
    if text is None:
        raise ValueError(f"{Path(path).name} has no {DEPTH_TEXT_KEY} text chunk")
    parsed: dict[str, Any] = json.loads(text)
    return parsed


# ---------------------------------------------------------------------------------------------
# Writing products


def from_several_files(ctx: RunContext) -> bool:
    """True when this input's frames come from several files (a folder or a `sequence`),
    rather than from one animated or multi-page file."""
    return ctx.sequence


def data_meta(image: DecodedImage) -> ImageMeta:
    """Meta for a data product (mask, depth, normals): the input's timing and dpi, but no colour
    profile or EXIF, which describe the photo's colours, not these values."""
    return replace(image.meta, icc_profile=None, exif=None)


def _animated_ext(image: DecodedImage) -> str:
    # GIF is left out on purpose: a 256-colour palette and on/off transparency lose data.
    return {"WEBP": ".webp", "TIFF": ".tif"}.get(image.meta.format, ".png")


def _timed_io(func: Callable[P, R]) -> Callable[P, R]:
    """Count a writer's time in `ctx.io_seconds` (its first argument is the RunContext)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        ctx = args[0]
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            if isinstance(ctx, RunContext):
                ctx.io_seconds += time.perf_counter() - start

    return wrapper


@_timed_io
def write_frames(
    ctx: RunContext,
    image: DecodedImage,
    suffix: str,
    frames: Sequence[np.ndarray],
    kind: ProductKind,
    meta: ImageMeta,
    text: Mapping[str, str] | None = None,
) -> list[Product]:
    """Write an image product (uint8/uint16 frames) by the module's multi-frame rule; `text`
    goes into PNG text chunks."""
    if len(frames) == 1:
        path = write_image(
            ctx.out_dir / output_name(image.source, suffix, ".png"), frames[0], meta, text=text
        )
        return [Product(path, kind, image.source)]
    if from_several_files(ctx):
        return [
            Product(
                write_image(
                    ctx.out_dir / output_name(image.source, f"{suffix}-{i + 1:04d}", ".png"),
                    frame,
                    meta,
                    text=text,
                ),
                kind,
                image.source,
            )
            for i, frame in enumerate(frames)
        ]
    sixteen = frames[0].dtype == np.uint16
    ext = ".png" if sixteen or text else _animated_ext(image)
    path = write_image(
        ctx.out_dir / output_name(image.source, suffix, ext), list(frames), meta, text=text
    )
    return [Product(path, kind, image.source, frames=len(frames))]


def _write_tiff(path: Path, frames: Sequence[np.ndarray]) -> Path:
    pages = [Image.fromarray(np.ascontiguousarray(f, dtype=np.float32)) for f in frames]
    options: dict[str, Any] = {"compression": "tiff_adobe_deflate"}
    if len(pages) > 1:
        options.update(save_all=True, append_images=pages[1:])
    with atomic_output(path) as (temp, publish):
        pages[0].save(temp, format="TIFF", **options)
        return publish()


@_timed_io
def write_float_tiff(
    ctx: RunContext,
    image: DecodedImage,
    suffix: str,
    frames: Sequence[np.ndarray],
    kind: ProductKind,
) -> list[Product]:
    """Float32 grey TIFF(s) with the raw values (multi-page for an animated input)."""
    if len(frames) == 1 or not from_several_files(ctx):
        path = _write_tiff(ctx.out_dir / output_name(image.source, suffix, ".tif"), frames)
        return [Product(path, kind, image.source, frames=len(frames))]
    return [
        Product(
            _write_tiff(
                ctx.out_dir / output_name(image.source, f"{suffix}-{i + 1:04d}", ".tif"), [f]
            ),
            kind,
            image.source,
        )
        for i, f in enumerate(frames)
    ]


@_timed_io
def write_per_frame(
    ctx: RunContext,
    image: DecodedImage,
    suffix: str,
    ext: str,
    payload: Callable[[int], bytes],
    kind: ProductKind,
) -> list[Product]:
    """Products with no multi-frame form (PLY, JSON), made one frame at a time by `payload`
    so only one is held in memory; numbered whenever there are several frames."""
    count = len(image.frames)
    products = []
    for i in range(count):
        name = suffix if count == 1 else f"{suffix}-{i + 1:04d}"
        path = write_bytes(ctx.out_dir / output_name(image.source, name, ext), payload(i))
        products.append(Product(path, kind, image.source))
    return products
