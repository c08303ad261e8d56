"""Rows of a run's output that are final before the run ends.

Tessera's kernel writes an SRVGG chain's product (its last convolution, the pixel shuffle and
the image's sum) top to bottom into the caller's buffer. An operation that writes the product
as it grows (an upscale's single tile, docs/cpu-kernel.md) listens for how many rows are
final, so their 8-bit conversion and PNG encoding go on behind the rest of the run instead of
after it. ORT's sessions never report: the whole output is final when the run returns.

The listener is a context variable, set around one run on the thread that makes it: the
sessions' `run` methods keep their ORT signatures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

RowsListener = Callable[[int], None]

_LISTENER: ContextVar[RowsListener | None] = ContextVar("tessera_finished_rows", default=None)


@contextmanager
def reported_to(listener: RowsListener | None) -> Iterator[None]:
    """Runs made inside report their output's final rows to `listener` (rows [0, n) of the
    output's height, called from the running thread, n growing)."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def listener() -> RowsListener | None:
    """Who hears the final rows of the run being made, if anyone."""
    return _LISTENER.get()
