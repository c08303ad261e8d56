"""Geometry with MoGe-2 (official ONNX): metric depth, normals, camera intrinsics, point cloud.

Input: `image` B×3×H×W float32 RGB in 0…1 at the image's own size (the graph normalises and
resizes to its token grid) and `num_tokens` int64 with the rank the session declares (scalar or
[1]); the `num_tokens` option, default 1800, is clamped to 1200…3600.

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
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from engine.io.image import DecodedImage
from engine.models.contracts import Contract, ModelSpec
from engine.operations.base import OperationBase, RunContext
from engine.operations.depth_codec import depth_range, depth_text, encode_depth16
from engine.operations.pixels import input_dtype, rgb_float, to_nchw
from engine.operations.products import data_meta, write_float_tiff, write_frames, write_per_frame
from engine.options import (
    GeometryConfig,
    GeometryOptions,
    OperationOptions,
    of_type,
    settle,
)
from engine.requests import Operation, Product, ProductKind, ProgressKind

DEFAULT_TOKENS = 1800
TOKEN_RANGE = (1200, 3600)  # MoGe-2's resolution levels 0…9
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
    """The reference infer() after the network, for one image (H×W×3, H×W×3, H×W)."""
    h, w = mask.shape
    valid = mask > 0.5
    focal, shift = recover_focal_shift(points, valid)
    depth = points[..., 2].astype(np.float32) + np.float32(shift)
    valid &= depth > 0
    depth = np.where(valid, depth * np.float32(metric_scale), np.float32(np.nan)).astype(np.float32)
    intrinsics = Intrinsics.from_focal(w, h, focal, shift, metric_scale)
    return FrameGeometry(depth, normal.astype(np.float32, copy=False), intrinsics)


def points_from_depth(depth: np.ndarray, k: Intrinsics) -> np.ndarray:
    """Force projection: each pixel centre back-projected at its depth."""
    h, w = depth.shape
    x = ((np.arange(w, dtype=np.float32) + 0.5) / w - 0.5) / np.float32(k.fx)
    y = ((np.arange(h, dtype=np.float32) + 0.5) / h - 0.5) / np.float32(k.fy)
    return np.stack([x[None, :] * depth, y[:, None] * depth, depth], axis=-1)


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


def ply_bytes(points: np.ndarray, normals: np.ndarray, colours: np.ndarray) -> bytes:
    vertices = np.empty(len(points), PLY_VERTEX)
    for i, name in enumerate(("x", "y", "z")):
        vertices[name] = points[:, i]
    for i, name in enumerate(("nx", "ny", "nz")):
        vertices[name] = normals[:, i]
    for i, name in enumerate(("red", "green", "blue")):
        vertices[name] = colours[:, i]
    header = (
        "ply\nformat binary_little_endian 1.0\n"
        "comment Tessera geometry (MoGe-2): OpenCV camera frame, x right, y down, z forward; metres\n"
        f"element vertex {len(points)}\n"
        "property float x\nproperty float y\nproperty float z\n"
        "property float nx\nproperty float ny\nproperty float nz\n"
        "property uchar red\nproperty uchar green\nproperty uchar blue\n"
        "end_header\n"
    )
    return header.encode("ascii") + vertices.tobytes()


def _normal_map(geo: FrameGeometry) -> np.ndarray:
    rgb = np.rint((np.clip(geo.normal, -1.0, 1.0) + 1.0) * 127.5).astype(np.uint8)
    rgb[np.isnan(geo.depth)] = 0
    return rgb


def _point_cloud(geo: FrameGeometry, frame: np.ndarray) -> bytes:
    keep = ~np.isnan(geo.depth)
    keep &= ~depth_edge(geo.depth)
    points = points_from_depth(geo.depth, geo.intrinsics)[keep]
    colours = np.rint(rgb_float(frame)[keep] * 255).astype(np.uint8)
    return ply_bytes(points, geo.normal[keep], colours)


class Geometry(OperationBase):
    operation: ClassVar[Operation] = Operation.GEOMETRY
    products: ClassVar[tuple[str, ...]] = (
        "geometry-depth.tif",
        "geometry-depth.png",
        "normal.png",
        "geometry-mask.png",
        "intrinsics.json",
        "points.ply",
    )
    config = GeometryConfig(1800)

    def configure(self, options: OperationOptions, spec: ModelSpec) -> None:
        given = of_type(options, GeometryOptions) or GeometryOptions()
        self.config = settle(given, of_type(spec.defaults, GeometryOptions))

    def minimal_feeds(self, spec: ModelSpec) -> dict[str, np.ndarray] | None:
        side = 14 * math.isqrt(MINIMAL_TOKENS)
        return _feeds(spec.contract, np.zeros((3, side, side), np.float32), MINIMAL_TOKENS)

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        frames: list[FrameGeometry] = []
        n = len(image.frames)
        for index, frame in enumerate(image.frames):
            ctx.start_frame(index, n, 1)
            chw = to_nchw(rgb_float(frame))[0]
            feeds = _feeds(c, chw, self.config.num_tokens)
            points, normal, mask, metric = ctx.run(feeds, outputs=list(OUTPUTS))
            scale = float(np.asarray(metric, np.float32).reshape(-1)[0])
            frames.append(
                infer(np.asarray(points)[0], np.asarray(normal)[0], np.asarray(mask)[0], scale)
            )
            ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
        depths = [g.depth for g in frames]
        lo, hi = depth_range(depths)
        meta = data_meta(image)
        masks = [np.where(np.isnan(d), 0, 255).astype(np.uint8) for d in depths]
        return [
            # "geometry-" names keep these apart from the depth and cut-out products of the
            # same photo in the same folder.
            *write_float_tiff(ctx, image, "geometry-depth", depths, ProductKind.DEPTH_FLOAT),
            *write_frames(
                ctx,
                image,
                "geometry-depth",
                [encode_depth16(d, lo, hi) for d in depths],
                ProductKind.DEPTH16,
                meta,
                text=depth_text(lo, hi, "m"),
            ),
            *write_frames(
                ctx, image, "normal", [_normal_map(g) for g in frames], ProductKind.NORMAL, meta
            ),
            *write_frames(ctx, image, "geometry-mask", masks, ProductKind.MASK, meta),
            *write_per_frame(
                ctx,
                image,
                "intrinsics",
                ".json",
                lambda i: frames[i].intrinsics.as_json().encode(),
                ProductKind.INTRINSICS,
            ),
            *write_per_frame(
                ctx,
                image,
                "points",
                ".ply",
                lambda i: _point_cloud(frames[i], image.frames[i]),
                ProductKind.POINT_CLOUD,
            ),
        ]
