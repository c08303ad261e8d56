"""Geometry with MoGe-2 (official ONNX): metric depth, normals, camera intrinsics, point cloud.

Input: `image` B×3×H×W float32 RGB in 0…1 (the graph normalises and resizes to its token
grid) and `num_tokens` int64 with the rank the session declares (scalar or [1]); options
`num_tokens` (1200…3600, default 1800) and `process_res` (default 1280). The model is fed the
image at its own size, or shrunk (area filter) so its longest side is `process_res`: the
graph works at its token grid (under 1000 px at 3600 tokens) whatever it is fed, while its
input and its three full-size outputs at 12 Mpx would take about 600 MB. The outputs are
brought back to the image's size bilinearly (normals made unit again), a band of rows at a
time, for every product.

Post-processing re-implements the reference `MoGeModel.infer()` (microsoft/MoGe v2):
1. valid = mask > 0.5;
2. focal (relative to half the image diagonal) and z-shift from the point map by least squares
   on a 64×64 nearest-neighbour sample of the valid points (`recover_focal_shift`; the
   reference uses scipy's Levenberg-Marquardt, here a 1-D Levenberg-Marquardt over the shift
   with the focal solved in closed form, as the reference's residual does);
3. fx = focal/2·√(1+a²)/a, fy = focal/2·√(1+a²) (normalised by width and height, a = W/H),
   cx = cy = 0.5;
4. depth = z + shift, valid &= depth > 0;
5. points rebuilt from depth and K (force projection);
6. × metric_scale: metres. Invalid pixels have no depth.

Products (camera frame: OpenCV, x right, y down, z forward; metres):
- `<stem>-depth.tif` float32 metres, NaN where invalid; `<stem>-depth.png` 16-bit grey, near
  is bright, encoded as in engine/operations/depth.py (0 = invalid, range in the `tessera`
  chunk);
- `<stem>-normal.png`: RGB = (n + 1) / 2 of the model's unit normals, 8-bit, black if invalid;
- `<stem>-mask.png`: 255 where valid;
- `<stem>-intrinsics.json`: fx, fy, cx, cy in pixels (the top-left pixel's corner is (0, 0),
  its centre (0.5, 0.5)) and normalised, width, height, metric_scale, units "m";
- `<stem>-points.ply`: binary little-endian point cloud, x y z float, nx ny nz float, red
  green blue uchar, of the valid points off depth edges (relative jump over a 3×3 window
  > 0.04, like the reference's `depth_edge(rtol=0.04)`).

A clip's depth, normals and mask are clips (engine/operations/products.py); its point clouds
only with the option `point_clouds`, one PLY per frame in `<stem>-points/`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, ClassVar

import numpy as np
from PIL import Image

from engine.io.image import DecodedImage, Rows
from engine.io.spill import FrameSpill
from engine.models.contracts import Contract, ModelSpec
from engine.operations.base import OperationBase, RunContext
from engine.operations.depth_codec import depth_text, encode_depth16
from engine.operations.frames_ahead import FramesAhead
from engine.operations.pixels import Bilinear, input_dtype, resize_planes, rgb_float
from engine.operations.products import Products, data_meta
from engine.options import (
    GeometryConfig,
    GeometryOptions,
    OperationOptions,
    of_type,
    settle,
)
from engine.requests import Operation, Product, ProductKind, ProgressKind

OUTPUTS = ("points", "normal", "mask", "metric_scale")
SAMPLE = 64  # side of the point-map sample the focal and shift are fitted on
EDGE_RTOL = 0.04
MINIMAL_TOKENS = 16  # the M10 shrink run: a 4×4 token grid on a 56×56 image


def _feeds(c: Contract, chw: np.ndarray, tokens: int) -> dict[str, np.ndarray]:
    count = np.array(tokens if c.tokens_rank == 0 else [tokens], np.int64)
    return {
        c.image_input: np.ascontiguousarray(chw[None], dtype=input_dtype(c)),
        "num_tokens": count,
    }


# ---------------------------------------------------------------------------------------------
# Focal and shift


def solve_focal_shift(uv: np.ndarray, xyz: np.ndarray) -> tuple[float, float]:
    """min over (focal, shift) of |focal · xy / (z + shift) − uv|².

    For a given shift the best focal is closed-form, so this is a 1-D least-squares problem in
    the shift, solved by Levenberg-Marquardt from shift 0 with the analytic derivative, keeping
    z + shift > 0 for every point.
    """
    uv = uv.reshape(-1, 2).astype(np.float64)
    xy = xyz[..., :2].reshape(-1, 2).astype(np.float64)
    z = xyz[..., 2].reshape(-1).astype(np.float64)

    def evaluate(shift: float) -> tuple[np.ndarray, np.ndarray, float]:
        d = (z + shift)[:, None]
        proj = xy / d
        dproj = -proj / d
        a, b = float((proj * uv).sum()), float((proj * proj).sum())
        if b <= 0.0:
            return uv.ravel() * 0.0, uv.ravel() * 0.0, 1.0
        focal = a / b
        dfocal = (float((dproj * uv).sum()) * b - a * 2.0 * float((proj * dproj).sum())) / (b * b)
        residual = (focal * proj - uv).ravel()
        jacobian = (dfocal * proj + focal * dproj).ravel()
        return residual, jacobian, focal

    z_min = float(z.min())
    # From shift 0 as the reference, unless that leaves points behind the camera.
    shift = 0.0 if z_min > 0 else -z_min + max(1e-3, 0.1 * float(np.ptp(z)))
    damping = 1e-3
    residual, jacobian, focal = evaluate(shift)
    cost = float(residual @ residual)
    for _ in range(200):
        curvature = float(jacobian @ jacobian)
        if curvature == 0.0:
            break
        step = -float(jacobian @ residual) / (curvature * (1.0 + damping))
        candidate = shift + step
        if z_min + candidate <= 1e-9:  # behind the camera: take a shorter step
            damping *= 10.0
            continue
        r2, j2, f2 = evaluate(candidate)
        c2 = float(r2 @ r2)
        if c2 <= cost:
            done = abs(step) <= 1e-12 * (1.0 + abs(shift)) or cost - c2 <= 1e-15 * max(cost, 1e-300)
            shift, residual, jacobian, focal, cost = candidate, r2, j2, f2, c2
            damping = max(damping / 10.0, 1e-12)
            if done:
                break
        else:
            damping *= 10.0
            if damping > 1e12:
                break
    return focal, shift


def recover_focal_shift(points: np.ndarray, valid: np.ndarray) -> tuple[float, float]:
    """Focal (relative to half the diagonal) and z-shift of an H×W×3 affine point map, fitted on
    its 64×64 nearest sample as the reference `recover_focal_shift` does."""
    h, w = valid.shape
    rows = (np.arange(SAMPLE) * h) // SAMPLE
    cols = (np.arange(SAMPLE) * w) // SAMPLE
    keep = valid[rows][:, cols]
    if int(keep.sum()) < 2:
        return 1.0, 0.0
    half_diagonal = math.hypot(w, h) / 2
    u = (cols + 0.5 - w / 2) / half_diagonal
    v = (rows + 0.5 - h / 2) / half_diagonal
    uv = np.stack(np.meshgrid(u, v, indexing="xy"), axis=-1)
    return solve_focal_shift(uv[keep], points[rows][:, cols][keep])


# ---------------------------------------------------------------------------------------------
# One frame


@dataclass(frozen=True)
class Intrinsics:
    width: int
    height: int
    fx: float  # normalised by the width
    fy: float  # normalised by the height
    focal: float  # relative to half the diagonal
    shift: float
    metric_scale: float

    @classmethod
    def from_focal(
        cls, width: int, height: int, focal: float, shift: float, metric_scale: float
    ) -> Intrinsics:
        aspect = width / height
        fx = focal / 2 * math.sqrt(1 + aspect * aspect) / aspect
        fy = focal / 2 * math.sqrt(1 + aspect * aspect)
        return cls(width, height, fx, fy, focal, shift, metric_scale)

    def as_json(self) -> str:
        return json.dumps(
            {
                "width": self.width,
                "height": self.height,
                "fx": self.fx * self.width,
                "fy": self.fy * self.height,
                "cx": 0.5 * self.width,
                "cy": 0.5 * self.height,
                "normalized": {"fx": self.fx, "fy": self.fy, "cx": 0.5, "cy": 0.5},
                "metric_scale": self.metric_scale,
                "units": "m",
                "focal_relative_to_half_diagonal": self.focal,
                "shift": self.shift,
                "camera": "OpenCV: x right, y down, z forward; pixel (0, 0)'s top-left corner is (0, 0)",
            },
            indent=2,
        )


@dataclass(frozen=True)
class FrameGeometry:
    depth: np.ndarray  # H×W float32 metres, NaN where invalid
    normal: np.ndarray  # H×W×3 float32 unit normals (OpenCV frame)
    intrinsics: Intrinsics


def infer(
    points: np.ndarray, normal: np.ndarray, mask: np.ndarray, metric_scale: float
) -> FrameGeometry:
    """The reference infer() after the network, for one image (H×W×3, H×W×3, H×W), at the
    model's own size: what the operation makes band by band."""
    h, w = mask.shape
    maps = _model_maps(points, normal, mask, metric_scale, h, w)
    full = _FullSize(maps, h, w)
    return FrameGeometry(full.depth(0, h), full.normal(0, h), maps.intrinsics)


def depth_edge(depth: np.ndarray, rtol: float = EDGE_RTOL) -> np.ndarray:
    """Pixels whose 3×3 neighbourhood spans more than rtol of their depth; a neighbour without
    depth counts as infinitely far, as in the reference (where masked depth is inf)."""
    far = 1e30  # finite stand-in for inf: no inf − inf, no overflow in float64
    d = np.where(np.isnan(depth), far, depth).astype(np.float64)
    padded = np.pad(d, 1, mode="edge")
    h, w = d.shape
    windows = [padded[dy : dy + h, dx : dx + w] for dy in range(3) for dx in range(3)]
    spread = np.maximum.reduce(windows) - np.minimum.reduce(windows)
    return spread > rtol * d


PLY_VERTEX = np.dtype(
    [
        ("x", "<f4"),
        ("y", "<f4"),
        ("z", "<f4"),
        ("nx", "<f4"),
        ("ny", "<f4"),
        ("nz", "<f4"),
        ("red", "u1"),
        ("green", "u1"),
        ("blue", "u1"),
    ]
)


PLY_HEADER = (
    "ply\nformat binary_little_endian 1.0\n"
    "comment Tessera geometry (MoGe-2): OpenCV camera frame, x right, y down, z forward; metres\n"
    "element vertex {count}\n"
    "property float x\nproperty float y\nproperty float z\n"
    "property float nx\nproperty float ny\nproperty float nz\n"
    "property uchar red\nproperty uchar green\nproperty uchar blue\n"
    "end_header\n"
)
BAND = 64  # rows of a full-size product made at once


@dataclass(frozen=True)
class _ModelMaps:
    """One frame as the model saw it (its input size) and what infer() found there."""

    z: np.ndarray  # points' z + shift, float32: depth before the metric scale
    mask: np.ndarray  # the model's mask, a probability
    normal: np.ndarray  # unit normals, H×W×3
    intrinsics: Intrinsics  # of the image at its own size
    metric_scale: float


class _FullSize:
    """One frame's geometry at the image's size, made a band of rows at a time from the
    model's maps: depth in metres (NaN where invalid), normals, validity."""

    def __init__(self, maps: _ModelMaps, height: int, width: int) -> None:
        self.maps, self.height, self.width = maps, height, width
        self.z = Bilinear(maps.z, height, width)
        self.mask = Bilinear(maps.mask, height, width)
        self.normals = Bilinear(maps.normal, height, width)

    def depth(self, start: int, stop: int) -> np.ndarray:
        z = self.z.rows(start, stop)
        valid = (self.mask.rows(start, stop) > 0.5) & (z > 0)
        metric = np.float32(self.maps.metric_scale)
        return np.where(valid, z * metric, np.float32(np.nan)).astype(np.float32)

    def normal(self, start: int, stop: int) -> np.ndarray:
        n = self.normals.rows(start, stop)
        if not self.normals.same:  # interpolated unit vectors are shorter: make them unit again
            n = n / np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), np.float32(1e-12))
        return n.astype(np.float32, copy=False)

    def exact_normal(self, start: int, stop: int) -> np.ndarray:
        """The unit normals as float (the EXR product); zero where the depth is invalid, as
        the PNG's black."""
        n = self.normal(start, stop).copy()
        n[np.isnan(self.depth(start, stop))] = 0
        return n

    def normal_map(self, start: int, stop: int) -> np.ndarray:
        rgb = np.rint((np.clip(self.normal(start, stop), -1.0, 1.0) + 1.0) * 127.5)
        rgb = rgb.astype(np.uint8)
        rgb[np.isnan(self.depth(start, stop))] = 0
        return rgb

    def mask_map(self, start: int, stop: int) -> np.ndarray:
        return np.where(np.isnan(self.depth(start, stop)), 0, 255).astype(np.uint8)[..., None]

    def kept(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(depth, points kept for the cloud) of rows start…stop: valid and off depth edges.
        The edge test looks one row beyond the band, so bands join without a seam."""
        lo, hi = max(0, start - 1), min(self.height, stop + 1)
        around = self.depth(lo, hi)
        depth = around[start - lo : start - lo + stop - start]
        keep = ~np.isnan(depth) & ~depth_edge(around)[start - lo : start - lo + stop - start]
        return depth, keep

    def range(self) -> tuple[float, float]:
        lo, hi = np.inf, -np.inf
        for start in range(0, self.height, BAND):
            values = self.depth(start, min(self.height, start + BAND))
            finite = values[np.isfinite(values)]
            if finite.size:
                lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
        return lo, hi


def _write_cloud(full: _FullSize, frame: np.ndarray) -> Callable[[BinaryIO], None]:
    """The binary PLY of the frame's points, written band by band (counted first: the header
    states the number of vertices)."""
    k = full.maps.intrinsics
    height, width = full.height, full.width
    x = ((np.arange(width, dtype=np.float32) + 0.5) / width - 0.5) / np.float32(k.fx)

    def write(out: BinaryIO) -> None:
        count = sum(
            int(full.kept(s, min(height, s + BAND))[1].sum()) for s in range(0, height, BAND)
        )
        out.write(PLY_HEADER.format(count=count).encode("ascii"))
        for start in range(0, height, BAND):
            stop = min(height, start + BAND)
            depth, keep = full.kept(start, stop)
            rows = np.arange(start, stop, dtype=np.float32)
            y = ((rows + 0.5) / height - 0.5) / np.float32(k.fy)
            vertices = np.empty(int(keep.sum()), PLY_VERTEX)
            vertices["x"] = (x[None, :] * depth)[keep]
            vertices["y"] = (y[:, None] * depth)[keep]
            vertices["z"] = depth[keep]
            normals = full.normal(start, stop)[keep]
            for i, name in enumerate(("nx", "ny", "nz")):
                vertices[name] = normals[:, i]
            colours = np.rint(rgb_float(frame[start:stop])[keep] * 255).astype(np.uint8)
            for i, name in enumerate(("red", "green", "blue")):
                vertices[name] = colours[:, i]
            out.write(vertices.tobytes())

    return write


class Geometry(OperationBase):
    operation: ClassVar[Operation] = Operation.GEOMETRY
    config = GeometryConfig(1800, 1280, False)

    def configure(self, options: OperationOptions, spec: ModelSpec) -> None:
        given = of_type(options, GeometryOptions) or GeometryOptions()
        self.config = settle(given, of_type(spec.defaults, GeometryOptions))

    def minimal_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        side = 14 * math.isqrt(MINIMAL_TOKENS)
        return _feeds(spec.contract, np.zeros((3, side, side), np.float32), MINIMAL_TOKENS)

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        width, height = image.size
        model_hw = _fit(height, width, self.config.process_res)
        n = len(image.frames)
        meta = data_meta(image)
        one = (height, width, 1)
        with (
            Products(ctx, image) as products,
            FrameSpill() as spilled,
            FramesAhead(image.frames) as frames,
        ):
            # "geometry-" names keep these apart from the depth and cut-out products of the
            # same photo in the same folder. Made in this order, published in this order.
            floats = products.float_product("geometry-depth", ProductKind.DEPTH_FLOAT)
            encoded = products.image_product("geometry-depth", ProductKind.DEPTH16, meta, text={})
            normals = products.image_product("normal", ProductKind.NORMAL, meta)
            exact_normals = products.exr_product("normal", ProductKind.NORMAL, ("R", "G", "B"))
            masks = products.image_product("geometry-mask", ProductKind.MASK, meta)
            cameras = products.bytes_product("intrinsics", ".json", ProductKind.INTRINSICS)
            clouds = products.bytes_product(
                "points", ".ply", ProductKind.POINT_CLOUD, clip_folder=self.config.point_clouds
            )
            lo, hi = np.inf, -np.inf
            metrics: list[float] = []
            for index, frame in enumerate(frames):
                ctx.start_frame(index, n, 1)
                chw = resize_planes(frame, *model_hw, Image.Resampling.BOX).transpose(2, 0, 1)
                feeds = _feeds(c, chw, self.config.num_tokens)
                points, normal, mask, metric = ctx.run(feeds, outputs=list(OUTPUTS))
                maps = _model_maps(
                    np.asarray(points)[0],
                    np.asarray(normal)[0],
                    np.asarray(mask)[0],
                    float(np.asarray(metric, np.float32).reshape(-1)[0]),
                    height,
                    width,
                )
                full = _FullSize(maps, height, width)
                products.add(floats, Rows(one, _F32, _depth_rows(full)))
                products.add(normals, Rows((height, width, 3), _U8, full.normal_map))
                products.add(exact_normals, Rows((height, width, 3), _F32, full.exact_normal))
                products.add(masks, Rows(one, _U8, full.mask_map))
                products.add(cameras, _write_bytes(maps.intrinsics.as_json().encode()))
                products.add(clouds, _write_cloud(full, frame))
                frame_lo, frame_hi = full.range()
                lo, hi = min(lo, frame_lo), max(hi, frame_hi)
                spilled.append(np.stack([maps.z, maps.mask]))
                metrics.append(maps.metric_scale)
                ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
            if lo > hi:  # no valid depth anywhere
                lo = hi = 0.0
            encoded.text = depth_text(lo, hi, "m")
            for zm, metric_scale in zip(spilled, metrics, strict=True):
                stand_in = _ModelMaps(
                    zm[0], zm[1], np.zeros((1, 1, 3), np.float32), _NO_K, metric_scale
                )
                full = _FullSize(stand_in, height, width)
                products.add(encoded, Rows(one, _U16, _encoded(full, lo, hi)))
            return products.publish()


_F32, _U16, _U8 = np.dtype(np.float32), np.dtype(np.uint16), np.dtype(np.uint8)
_NO_K = Intrinsics(1, 1, 1.0, 1.0, 1.0, 0.0, 1.0)  # the second pass needs no camera


def _depth_rows(full: _FullSize) -> Callable[[int, int], np.ndarray]:
    return lambda start, stop: full.depth(start, stop)[..., None]


def _encoded(full: _FullSize, lo: float, hi: float) -> Callable[[int, int], np.ndarray]:
    return lambda start, stop: encode_depth16(full.depth(start, stop), lo, hi)[..., None]


def _write_bytes(data: bytes) -> Callable[[BinaryIO], None]:
    def write(out: BinaryIO) -> None:
        out.write(data)

    return write


def _fit(height: int, width: int, longest: int) -> tuple[int, int]:
    """The size the model is fed: the image's own, or shrunk so its longest side is `longest`."""
    if max(height, width) <= longest:
        return height, width
    scale = longest / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def _model_maps(
    points: np.ndarray,
    normal: np.ndarray,
    mask: np.ndarray,
    metric_scale: float,
    height: int,
    width: int,
) -> _ModelMaps:
    """infer()'s focal and shift on the model's maps; the camera of the image's own size."""
    valid = mask > 0.5
    focal, shift = recover_focal_shift(points, valid)
    z = points[..., 2].astype(np.float32) + np.float32(shift)
    intrinsics = Intrinsics.from_focal(width, height, focal, shift, metric_scale)
    return _ModelMaps(
        z, mask.astype(np.float32), normal.astype(np.float32, copy=False), intrinsics, metric_scale
    )
