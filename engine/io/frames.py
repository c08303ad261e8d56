"""Decoded Pillow frames as arrays: pixel modes to H×W×C uint8/uint16, upright, one layout."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageCms

from engine.errors import BadInputError
from engine.io.image import reshape_channels, to_16bit
from engine.io.png import key_alpha


def apply_orientation(frame: np.ndarray, orientation: int) -> np.ndarray:
    """What ImageOps.exif_transpose does, on an H×W×C array."""
    if orientation == 2:
        out = frame[:, ::-1]
    elif orientation == 3:
        out = frame[::-1, ::-1]
    elif orientation == 4:
        out = frame[::-1]
    elif orientation == 5:
        out = frame.transpose(1, 0, 2)
    elif orientation == 6:
        out = np.rot90(frame, -1)
    elif orientation == 7:
        out = frame[::-1, ::-1].transpose(1, 0, 2)
    elif orientation == 8:
        out = np.rot90(frame, 1)
    else:
        return frame
    return np.ascontiguousarray(out)


def cmyk_to_rgb(im: Image.Image) -> Image.Image:
    icc = im.info.get("icc_profile")
    if icc:
        try:
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            converted = ImageCms.profileToProfile(
                im, source, ImageCms.createProfile("sRGB"), outputMode="RGB"
            )
            if converted is not None:
                return converted
        except (ImageCms.PyCMSError, OSError, ValueError):
            pass  # an unusable profile: the plain conversion below is the best left
    return im.convert("RGB")


def banded_array(im: Image.Image) -> np.ndarray:
    """`np.asarray(im)`, a band of rows at a time for large images: numpy's conversion goes
    through `tobytes()`, which holds the pixels twice more (a list of chunks and their join)
    beside Pillow's own copy — 116 MB above the start for a 12 Mpx JPEG instead of 80."""
    width, height = im.size
    if width * height <= 1 << 22:
        return np.asarray(im)
    first = np.asarray(im.crop((0, 0, width, 1)))
    out = np.empty((height, *first.shape[1:]), first.dtype)
    step = max(1, (4 << 20) // max(1, first.nbytes))
    for start in range(0, height, step):
        stop = min(height, start + step)
        out[start:stop] = np.asarray(im.crop((0, start, width, stop)))
    return out


def frame_pixels(path: Path, im: Image.Image) -> np.ndarray:
    """The current frame of a loaded Pillow image as an H×W×C uint8/uint16 array."""
    mode = im.mode
    key = im.info.get("transparency")
    if mode == "1":
        return banded_array(im.convert("L"))[..., None]
    if mode in ("P", "PA"):
        has_alpha = mode == "PA" or key is not None
        converted = im.convert("RGBA" if has_alpha else "RGB")
        return banded_array(converted)
    if mode in ("La", "LA"):
        return banded_array(im.convert("LA"))
    if mode in ("RGBa", "RGBA"):
        return banded_array(im.convert("RGBA"))
    if mode == "RGBX":
        return banded_array(im.convert("RGB"))
    if mode == "CMYK":
        return banded_array(cmyk_to_rgb(im))
    if mode in ("YCbCr", "HSV", "LAB"):
        try:
            return banded_array(im.convert("RGB"))
        except ValueError as e:
            raise BadInputError(
                f"{path.name}: images in the {mode} colour space are not supported."
            ) from e
    if mode in ("L", "RGB"):
        pixels = banded_array(im)
        pixels = pixels[..., None] if pixels.ndim == 2 else pixels
    elif mode.startswith("I;16"):
        pixels = banded_array(im).astype(np.uint16)[..., None]
    elif mode == "I":
        values = banded_array(im)
        if values.size and values.max() > 65535:  # a true 32-bit image: keep its top 16 bits
            values = values >> 16
        pixels = np.clip(values, 0, 65535).astype(np.uint16)[..., None]
    elif mode == "F":
        values = np.nan_to_num(banded_array(im).astype(np.float32))
        scale = 65535.0 if values.size and values.max() <= 1.0 else 1.0  # 0…1 data, or counts
        pixels = np.rint(np.clip(values * scale, 0, 65535)).astype(np.uint16)[..., None]
    else:
        raise BadInputError(f"{path.name}: images of pixel mode {mode} are not supported.")
    if key is not None:
        alpha = key_alpha(pixels, key, 65535 if pixels.dtype == np.uint16 else 255)
        if alpha is not None:
            pixels = np.concatenate([pixels, alpha], axis=2)
    return pixels


def unify_frames(path: Path, frames: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Give every frame the same channel layout and dtype (GIF frames change mode, etc.)."""
    shapes = {f.shape[:2] for f in frames}
    if len(shapes) > 1:
        first = frames[0].shape
        for index, f in enumerate(frames):
            if f.shape[:2] != first[:2]:
                raise BadInputError(
                    f"{path.name}: frame {index + 1} is {f.shape[1]}×{f.shape[0]} pixels but "
                    f"frame 1 is {first[1]}×{first[0]}; all frames must have the same size."
                )
    wide = any(f.dtype == np.uint16 for f in frames)
    colour = any(f.shape[2] >= 3 for f in frames)
    alpha = any(f.shape[2] in (2, 4) for f in frames)
    out: list[np.ndarray] = []
    for f in frames:
        g = to_16bit(f) if wide else f
        out.append(reshape_channels(g, colour, alpha))
    return tuple(out)


def read_only(frames: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    # The GUI shows the decoded image as "before" while operations read it: nobody may
    # change it in place (some frames are views of Pillow's buffer and read-only anyway).
    for frame in frames:
        frame.setflags(write=False)
    return frames
