"""What happens to a finished result besides viewing it: Save as (written again in another
format and size, on the task thread), and the words when the desktop cannot open it. Qt-free
but for the notice's action."""

from __future__ import annotations

import os
from pathlib import Path

from engine.io.reading import load_image
from engine.io.resize import check_product_size, resize_frame
from engine.io.writing import write_image
from engine.options import OutputFormat, OutputOptions
from engine.settings import DEFAULT_MAX_PIXELS


def export_result(
    source: Path, target: Path, options: OutputOptions, input_size: tuple[int, int]
) -> Path:
    """Write `source` (a finished product) to `target` in the chosen format and size: the size
    is taken relative to the input (`input_size`), as a job's output step does. Returns the
    path written; never leaves a half-written file, replaces `target` only as a whole."""
    size = options.target_size(*input_size) if all(input_size) else None
    if size is not None:  # refused before the product is even decoded
        check_product_size(target.name, *size, DEFAULT_MAX_PIXELS)
    decoded = load_image(source, DEFAULT_MAX_PIXELS * 4)
    frames = [resize_frame(f, *size) if size else f for f in decoded.frames]
    if options.format is OutputFormat.JPEG:
        frames = frames[:1]  # JPEG holds one frame
    quality = options.quality if options.format.lossy else None
    target = target if target.suffix else target.with_suffix(options.format.suffix)
    written = write_image(
        target, frames, decoded.meta, format=options.format.value, quality=quality
    )
    if written != target and target.exists():
        os.replace(written, target)  # the person confirmed replacing it
        return target
    return written


def cannot_open(target: Path, file: Path) -> str:
    """What to say when no program opens `target` (a file, or the folder holding `file`)."""
    what = "folders" if target.is_dir() else f"{target.suffix or 'such'} files"
    return (
        f"Could not open {target.name}: no program is set to open {what} on this computer. "
        f"The file is {file}."
    )
