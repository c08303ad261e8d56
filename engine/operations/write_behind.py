"""Frames written behind the next frame's runs (docs/batch-pipeline.md).

A frame's product is encoded on a side thread (`BackgroundWrite`) as its tiles finish. Without
this, the engine thread waited for that write after the frame's last run, so the PNG deflate of
the frame's last rows and the file's publishing left the CPU's model work idle. Here the engine
thread hands the write over and starts the next frame's runs at once.

- Order: each write starts only once the write before it has ended, so products are written
  (and numbered) in the frames' order and never two at a time.
- Bounded: at most `depth` handed writes are waited on later; handing one more first waits for
  the oldest. A frame's finished rows are held until written, so the peak holds `depth` frames
  more than without it, whatever the number of frames (DESIGN §8).
- Errors: a write's error stops the next write and is raised on the engine thread by the next
  frame's `check()`, or by `hand`/`finish`; `abandon` gives every write up (a cancel, a failure)
  and waits for them, each removing its own temp file: nothing is left half written.
- Threads: the writes run on `depth + 1` threads kept for the whole sequence (the frame being
  made and the handed ones), not a thread a frame: starting one cost the engine thread
  2–3 ms a frame on a busy 2-core machine. `finish` and `abandon` let them go.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from engine.io.writing import BackgroundWrite, GrowingFrame


class WriteBehind:
    """The frame writes of one product sequence still going on behind the engine thread."""

    def __init__(self, depth: int = 1) -> None:
        self.depth = depth
        self._pending: deque[BackgroundWrite] = deque()
        self._pool: ThreadPoolExecutor | None = None

    def start(self, write: Callable[[], None], frame: GrowingFrame) -> BackgroundWrite:
        """`write` of `frame` begun on the sequence's writer threads, once the last handed
        write has ended (its error stops `write`); `hand` it over when the frame's runs end."""
        if self._pool is None:
            # A write waits on the one before it: one thread more than the handed writes.
            self._pool = ThreadPoolExecutor(self.depth + 1, thread_name_prefix="tessera-writer")
        previous = self._pending[-1] if self._pending else None
        if previous is None:
            return BackgroundWrite(write, frame, self._pool)

        def chained() -> None:
            previous.result()  # raises the earlier frame's error: this one is not written
            write()

        return BackgroundWrite(chained, frame, self._pool)

    def hand(self, writer: BackgroundWrite) -> None:
        """Leaves `writer` going on; waits for the oldest writes beyond `depth`."""
        self._pending.append(writer)
        while len(self._pending) > self.depth:
            self._pending.popleft().result()

    def finish(self) -> None:
        """Waits for every handed write; raises the first error."""
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._close()

    def abandon(self) -> None:
        """Gives up every write not yet finished and waits for their threads to end."""
        try:
            while self._pending:
                self._pending.popleft().abandon()  # the oldest first: a newer one waits on it
        finally:
            self._close()

    def _close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


@contextmanager
def abandoned_on_error(behind: WriteBehind | None) -> Iterator[None]:
    """Frame writes still going on are given up when the frames end by an error or a cancel,
    before the product's temp files are discarded."""
    try:
        yield
    except BaseException:
        if behind is not None:
            behind.abandon()
        raise
