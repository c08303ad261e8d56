"""Reading input images: the one entry point, `load_image`, over the opening checks
(`opening`), Pillow's decoding (`pillow_decoding`, `streamed`, `frames`) and the 16-bit PNG
decoder (`png16`: Pillow decodes 16-bit colour PNGs only to 8 bits).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from engine.errors import EngineError, ResourceError
from engine.io.gif import gif_frame_sizes
from engine.io.image import DecodedImage
from engine.io.opening import (
    check_limit,
    check_same_size,
    damaged,
    frame_count,
    image_size,
    opened,
    read_error,
)
from engine.io.pillow_decoding import decode_pillow
from engine.io.png import png_header
from engine.io.png16 import decode_png16

__all__ = ["image_size", "load_image"]

log = logging.getLogger(__name__)


def load_image(
    path: Path,
    max_pixels: int,
    check: Callable[[], None] | None = None,
    *,
    stream: bool = False,
) -> DecodedImage:
    """Decode every frame of `path`, upright; refuses images over `max_pixels` before decoding.

    `check` is called between frames and may raise to stop (a cancel). `stream`: a multi-frame
    file's frames are decoded as they are used (`StreamedFrames`) instead of all at once, so
    memory does not grow with their number."""
    path = Path(path)
    log.info("decoding %s", path.name)
    with opened(path) as (im, fp):
        width, height = im.size
        check_limit(path, width, height, 1, max_pixels)
        count = frame_count(path, im)
        check_limit(path, width, height, count, max_pixels)
        if im.format == "GIF":
            # Pillow allocates a grown canvas while seeking: refuse it from the blocks first.
            position = fp.tell()
            sizes = gif_frame_sizes(fp)
            fp.seek(position)
            for number, size in enumerate(sizes, 1):
                check_same_size(path, number, size, sizes[0])
            if sizes:
                check_limit(path, *sizes[0], count, max_pixels)
        try:
            if im.format == "PNG":
                fp.seek(0)
                header = png_header(fp.read(26))
                if header is not None and header[0] == 16 and header[1] in (2, 4, 6):
                    fp.seek(0)
                    return decode_png16(path, fp.read(), max_pixels)
            return decode_pillow(path, im, count, check, stream)
        except EngineError:  # refused, cancelled, or out of memory: already said
            raise
        except MemoryError as e:
            raise ResourceError(
                f"{path.name}: not enough memory to decode the image ({width}×{height} pixels)."
            ) from e
        except OSError as e:
            if e.errno is not None:
                raise read_error(path, e) from e
            raise damaged(path, e) from e
        except Exception as e:  # any decoder complaint is a damaged file
            raise damaged(path, e) from e
