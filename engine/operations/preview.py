"""What the engine keeps between previews (`PreviewState`), on its own thread.

How an operation previews is its own (`OperationBase.preview`: the whole job by default; an
upscale runs only the tiles that reach the view, engine/operations/upscale.py).

`PreviewState` is what the engine keeps between previews: the decoded input of the one image
being previewed (decoding a 12 Mpx JPEG takes a good part of a second; a pan must not pay it
again), the tile cache, and the folder where the non-tiled families' previews are written.
All of it is handed back when the input or model changes, when a full job starts (the input)
or has used the tiles, and on Unload.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import BadInputError
from engine.io.png import encode_png
from engine.io.reading import load_image
from engine.requests import Product
from engine.tiling.cache import DEFAULT_LIMIT, TileCache, TileSource, file_version

# The decoded input is kept only up to this size (a 12 Mpx photo is 36 MB at 8 bits); a bigger
# one is decoded again for each preview rather than held.
KEEP_INPUT_BYTES = 192 << 20


@dataclass
class _Kept:
    path: Path
    version: Hashable
    frame: np.ndarray


@dataclass(frozen=True)
class WholePreview:
    """A non-tiled family's preview: the products of one run, and what they were made from."""

    key: Hashable
    products: tuple[Product, ...]


class PreviewState:
    """What the engine keeps between previews, on its own thread."""

    def __init__(self, tile_limit: int = DEFAULT_LIMIT) -> None:
        self.tiles = TileCache(tile_limit)
        self._kept: _Kept | None = None
        self._folder: Path | None = None
        self.whole: WholePreview | None = None
        self.running: str | None = None  # the preview request in progress

    @property
    def held_bytes(self) -> int:
        kept = self._kept.frame.nbytes if self._kept is not None else 0
        return kept + self.tiles.nbytes

    def frame(
        self, path: Path, max_pixels: int, check: Callable[[], None] | None
    ) -> tuple[np.ndarray, float]:
        """The first frame of `path` as the full job decodes it, kept for the next preview.
        Returns it with the seconds spent decoding now (0 when it was kept)."""
        try:
            version = file_version(path)
        except OSError as e:
            raise BadInputError(f"{path.name}: the file cannot be read ({e.strerror}).") from e
        if self._kept is not None and self._kept.version == version:
            return self._kept.frame, 0.0
        self.release_input()
        start = time.perf_counter()
        image = load_image(path, max_pixels, check, stream=True)
        frame = np.asarray(image.frames[0])
        del image
        seconds = time.perf_counter() - start
        if frame.nbytes <= KEEP_INPUT_BYTES:
            self._kept = _Kept(Path(path).resolve(), version, frame)
        return frame, seconds

    def clip_frame(self, path: Path, index: int, max_pixels: int) -> Path:
        """Frame `index` of the clip `path` as a lossless PNG in the preview folder, so a
        preview of a clip is a preview of that frame like any image (and its tiles are cached
        per frame). Kept while the clip and the frame stay the same."""
        from engine.io.video import read_frame  # PyAV loads only when a clip is previewed

        try:
            version = file_version(path)
        except OSError as e:
            raise BadInputError(f"{path.name}: the file cannot be read ({e.strerror}).") from e
        tag = abs(hash((str(Path(path).resolve()), version))) % (1 << 40)
        out = self.folder() / f"{Path(path).stem}-{tag:010x}-frame{index + 1}.png"
        if not out.exists():
            for old in self.folder().glob(f"{Path(path).stem}-*-frame*.png"):
                old.unlink(missing_ok=True)  # one clip frame on disk at a time
            try:
                pixels = read_frame(path, index, max_pixels)
            except IndexError as e:
                raise BadInputError(f"{path.name}: the clip has no frame {index + 1}.") from e
            part = out.with_suffix(".part")
            encode_png(part, [pixels], durations=[0])
            part.replace(out)
        return out

    def release_input(self) -> None:
        self._kept = None

    def job_started(self, request_id: str, inputs: tuple[Path, ...]) -> None:
        """A full job of the image being previewed: its kept pixels go (the job decodes its
        own, streaming). Jobs of other images (a batch, a speed measurement) leave them."""
        kept = self._kept
        if request_id == self.running or kept is None:
            return
        if any(Path(p).resolve() == kept.path for p in inputs):
            self.release_input()

    def folder(self) -> Path:
        if self._folder is None or not self._folder.is_dir():
            self._folder = Path(tempfile.mkdtemp(prefix="tessera-preview-"))
        return self._folder

    def drop_whole(self) -> None:
        if self.whole is not None:
            for product in self.whole.products:
                product.path.unlink(missing_ok=True)
        self.whole = None

    def clear(self) -> None:
        """Unload: everything a preview kept goes, the preview folder too."""
        self.release_input()
        self.tiles.clear()
        self.drop_whole()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def tile_source(state: PreviewState, source: Path, model: Hashable) -> TileSource | None:
    """The tile cache as a full job's input sees it; None where the file cannot be stat'ed
    (the job's own reading says why)."""
    try:
        return TileSource(state.tiles, file_version(source), model)
    except OSError:
        return None
