"""One model run: fresh RunOptions, the arena shrink only on the last run, cancel, error mapping."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.cancel import CancelToken
from engine.errors import Cancelled, InferenceError, ResourceError
from engine.providers import SHRINK_KEY

if TYPE_CHECKING:
    from engine.sessions import SessionEntry

log = logging.getLogger(__name__)

# ORT reports allocation failures only in its message text (DESIGN §3, reference/ort.md §4).
OOM_MARKERS = (
    "failed to allocate memory",
    "available memory of",
    "out of memory",
    "bad_alloc",
    "bad allocation",
    "alloc_failed",
    "cudaerrormemoryallocation",
    "failed to create engine",
    "insufficient workspace",
)
TERMINATE_MARKER = "exiting due to terminate flag"


def is_out_of_memory(text: str) -> bool:
    low = text.lower()
    return any(marker in low for marker in OOM_MARKERS)


def map_error(error: BaseException, model: str, device: str) -> Exception:
    """Turn an ORT exception into an engine error with a message for a person."""
    text = str(error)
    if TERMINATE_MARKER in text.lower():
        return Cancelled()
    if is_out_of_memory(text):
        return ResourceError(
            f"Out of memory on {device} while running {model}. Use a smaller tile size "
            "(or automatic tiling), lower the image size, or close other programs using the device."
        )
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return InferenceError(f"{model} failed on {device}: {first[:400]}")


class Runner:
    """Counts runs and shrinks; one instance per engine."""

    def __init__(self) -> None:
        self.runs = 0
        self.shrinks = 0
        self.first_start: float | None = None  # perf_counter of the first run since reset

    def run(
        self,
        entry: SessionEntry,
        feeds: Mapping[str, np.ndarray],
        *,
        last: bool,
        cancel: CancelToken | None = None,
        outputs: Sequence[str] | None = None,
    ) -> list[Any]:
        if cancel is not None:
            cancel.check()
        if self.first_start is None:
            self.first_start = time.perf_counter()
        import onnxruntime as ort

        # A fresh RunOptions per run: `terminate` stays latched once set.
        options = ort.RunOptions()
        shrink = entry.shrink_target if last else None
        if shrink is not None:
            options.add_run_config_entry(SHRINK_KEY, shrink)
        if cancel is not None:
            cancel.attach(options)
        try:
            result = entry.session.run(list(outputs) if outputs else None, dict(feeds), options)
        except Exception as e:  # ORT's exceptions do not derive from RuntimeError
            if cancel is not None and cancel.cancelled:
                raise Cancelled() from e
            mapped = map_error(e, entry.key.model.name, str(entry.key.device))
            log.warning("run failed: %s", e)
            raise mapped from e
        finally:
            if cancel is not None:
                cancel.detach()
        entry.runs += 1
        self.runs += 1
        if shrink is not None:
            entry.shrinks += 1
            self.shrinks += 1
        return list(result)
