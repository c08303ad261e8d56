"""A sequence's frames decoded one ahead of the runs.

A folder of frames (or a multi-page file) decodes each frame when it is used: on the engine
thread, between the runs of the frame before and the frame's own, the model waiting. Here a
side thread decodes frame i + 1 while the engine runs frame i. One decoded frame more is held
at most; a frame that fails to decode raises its error when the loop reaches it, as before;
nothing is decoded past the `with` (a cancel or a failure waits for the one decode in flight).
Frames already decoded ahead by their source (a clip's, engine/io/video.py) or held in memory
come as they are.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from engine.io.image import LazyFrames


class FramesAhead:
    """`for frame in FramesAhead(frames)`, inside `with`: the frames in order, the next one
    decoding on a side thread while the caller works on the current one."""

    def __init__(self, frames: Sequence[np.ndarray]) -> None:
        self._frames = frames
        ahead = isinstance(frames, LazyFrames) and not frames.decodes_ahead and len(frames) > 1
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="tessera-frames")
            if ahead
            else None
        )

    def __enter__(self) -> FramesAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __iter__(self) -> Iterator[np.ndarray]:
        frames, pool = self._frames, self._pool
        if pool is None:
            yield from frames
            return
        count = len(frames)
        pending: Future[np.ndarray] | None = pool.submit(frames.__getitem__, 0)
        for index in range(count):
            assert pending is not None
            frame = pending.result()  # its decoding error, if any, is raised here
            pending = pool.submit(frames.__getitem__, index + 1) if index + 1 < count else None
            yield frame
            del frame  # not held while the next one is awaited: one frame ahead, not two
