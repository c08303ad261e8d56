"""Why a clip cannot be read, in words a person can act on: a missing or empty file, a
truncated one, frames too large for FFmpeg, a damaged one (used by engine/io/video.py)."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import av
import av.error
import av.logging

from engine.errors import BadInputError

_INVALID_SIZE = re.compile(r"Picture size (\d+)x(\d+) is invalid")


def refused_size(path: Path) -> tuple[int, int] | None:
    """The frame size FFmpeg refused while opening `path` (frames it cannot hold: about 260
    megapixels and up). FFmpeg says so only in its log, so the file is opened again with the
    log captured; only on a failure, as the log level is the whole process's."""
    previous = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture() as logs:
            try:
                with av.open(str(path), metadata_errors="replace") as container:
                    for stream in container.streams.video[:1]:
                        for _ in container.decode(stream):
                            break
            except (av.error.FFmpegError, OSError, ValueError):
                pass
    finally:
        av.logging.set_level(previous)
    for _level, _name, text in logs:
        match = _INVALID_SIZE.search(text)
        if match:
            return int(match[1]), int(match[2])
    return None


def too_large(path: Path) -> BadInputError | None:
    size = refused_size(path)
    if size is None:
        return None
    width, height = size
    return BadInputError(
        f"{path.name}: its frames are {width}×{height} pixels ({fmt_pixels(width * height)}), "
        "larger than FFmpeg can decode (about 260 megapixels a frame); the file is not "
        "necessarily damaged. Scale the clip down with another tool first."
    )


def damaged(path: Path, exc: BaseException) -> BadInputError:
    refusal = too_large(path)
    if refusal is not None:
        return refusal
    detail = str(getattr(exc, "strerror", None) or exc).strip()
    if isinstance(exc, EOFError) or "End of file" in detail:
        return BadInputError(
            f"{path.name}: the file ends before its first frame: the clip has no frames, or it "
            "is truncated (not copied or downloaded completely)."
        )
    if "moov atom not found" in detail:
        return BadInputError(
            f"{path.name}: the video file is truncated (it ends before its data does); it may "
            "not have been copied or downloaded completely."
        )
    return BadInputError(
        f"{path.name}: this is not a video FFmpeg can read, or the file is damaged"
        + (f" ({detail})." if detail else ".")
    )


def check_file(path: Path) -> None:
    try:
        info = path.stat()
    except FileNotFoundError as e:
        raise BadInputError(
            f"{path.name}: the file does not exist (looked in {path.parent})."
        ) from e
    except PermissionError as e:
        raise BadInputError(f"{path.name}: permission denied; Tessera may not read it.") from e
    except OSError as e:
        raise BadInputError(f"{path.name}: the file cannot be read ({e.strerror or e}).") from e
    if stat.S_ISDIR(info.st_mode):
        raise BadInputError(f"{path.name}: this is a folder, not a video file.")
    if info.st_size == 0:
        raise BadInputError(f"{path.name}: the file is empty (0 bytes).")


def open_clip(path: Path) -> Any:
    """The clip opened by PyAV, or BadInputError saying why it cannot be."""
    check_file(path)
    try:
        return av.open(str(path), metadata_errors="replace")
    except av.error.FFmpegError as e:
        raise damaged(path, e) from e
    except OSError as e:
        raise BadInputError(f"{path.name}: the file cannot be read ({e.strerror or e}).") from e


def fmt_pixels(count: int) -> str:
    return f"{count / 1e6:.1f} megapixels" if count >= 1_000_000 else f"{count} pixels"
