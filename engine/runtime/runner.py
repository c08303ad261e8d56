"""One model run: fresh RunOptions, the arena shrink only on the last run, cancel, error mapping."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.cancel import CancelToken
from engine.errors import Cancelled, map_error
from engine.runtime.providers import SHRINK_KEY

if TYPE_CHECKING:
    from engine.runtime.sessions import SessionEntry

log = logging.getLogger(__name__)


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
