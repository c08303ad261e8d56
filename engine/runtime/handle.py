"""Where a run is made: a request's handle on its model's session.

A request holds its model's session through one `SessionHandle`, the single owner of that
session's life during the request: it loads the session on first use, makes every run (a
fresh RunOptions, the arena shrink only when asked for the last run, cancel, ORT's errors
mapped to the engine's), releases the session when the device ran out of memory or faulted
(M5) and renews it, and counts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from engine.cancel import CancelToken
from engine.errors import (
    Cancelled,
    DeviceFault,
    EngineError,
    InferenceError,
    ResourceError,
    map_error,
)
from engine.runtime.providers import SHRINK_KEY
from engine.runtime.sessions import SessionCache, SessionEntry, SessionKey

log = logging.getLogger(__name__)


class SessionHandle:
    """One request's hold on one model's session: loads, runs, releases, renews and counts.

    Counts are this request's: sessions created and reused, runs made and attempted, shrinks.
    Every run also counts on the session's entry (its life) and on the cache (its totals).
    """

    def __init__(self, cache: SessionCache, key: SessionKey) -> None:
        self.cache = cache
        self.key = key
        self._entry: SessionEntry | None = None
        self.created = 0
        self.reused = 0
        self.runs = 0  # runs that completed
        self.attempted = 0  # runs started, including failed and cancelled ones
        self.shrinks = 0
        self.runs_reused = 0  # runs not made: a preview had made their tiles (upscale)
        self.load_seconds = 0.0
        # Spent on the engine's once-per-model measurement (the tile overlap's probe): not the
        # request's own work, so what learns a speed from the request leaves it out.
        self.probe_seconds = 0.0
        self.first_run_at: float | None = None  # perf_counter at the start of the first run
        self._retried = False  # a failed run on a kept copy was retried on the original
        self.tiled = True  # the operation runs in tiles (what an out-of-memory message offers)
        # What ran this request's CPU convolutions (SessionEntry.cpu_kernel), once a run is made.
        self.cpu_kernel: str | None = None

    @property
    def loaded(self) -> bool:
        return self._entry is not None and self._entry.session is not None

    def entry(self) -> SessionEntry:
        """The session, loaded on first use (and again after a release)."""
        if self._entry is None or self._entry.session is None:
            entry, created = self.cache.get(self.key)
            if created:
                self.created += 1
                self.load_seconds += entry.load_seconds
            else:
                self.reused += 1
            self._entry = entry
        return self._entry

    @property
    def shrink_target(self) -> str | None:
        return self.entry().shrink_target

    @property
    def file_size(self) -> int:
        return self.entry().file_size

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        last: bool,
        cancel: CancelToken | None = None,
        outputs: Sequence[str] | None = None,
        into: Mapping[str, np.ndarray] | None = None,
    ) -> list[Any]:
        """One model run. `last` asks for the arena shrink (M2); the session's providers decide
        whether there is one to ask for (M3). On out-of-memory the session is released (M5).

        `into` gives the outputs' buffers (by name, in the caller's memory): ORT writes there
        instead of into its arena, so no output pins an arena region when the last run shrinks
        it, and a tiled operation reuses one buffer for every tile. The result is then those
        buffers, in the order of `outputs`."""
        import onnxruntime as ort

        if cancel is not None:
            cancel.check()
        entry = self.entry()
        # A fresh RunOptions per run: `terminate` stays latched once set.
        options = ort.RunOptions()
        options.log_severity_level = 4  # a failed run is our message, not ORT's coloured line
        shrink = entry.shrink_target if last else None
        if shrink is not None:
            options.add_run_config_entry(SHRINK_KEY, shrink)
        started = time.perf_counter()
        if self.first_run_at is None:
            self.first_run_at = started
        self.cache.last_run_started = started
        self.attempted += 1
        failure: EngineError | None = None
        if cancel is not None:
            cancel.attach(options)
        try:
            if into:
                result = self._run_bound(entry, feeds, outputs or list(into), into, options)
            else:
                result = entry.session.run(list(outputs) if outputs else None, dict(feeds), options)
        except Exception as e:  # ORT's exceptions do not derive from RuntimeError
            failure = self._failure(e, cancel)
        finally:
            if cancel is not None:
                cancel.detach()
        if failure is not None:
            kept = entry.kept_copy
            # Tessera's kernel made NaN of a finite image (chain.KernelDisagreed): ORT's turn.
            disagreed = bool(getattr(failure.__cause__, "retry_on_original", False))
            if (
                isinstance(failure, InferenceError)
                and (kept is not None or disagreed)
                and not self._retried
            ):
                # A kept copy is known by its name: one that fails to run (x4's copy under
                # x2's name, a model rewritten in place) goes, and the run is made once more
                # on a session of the original.
                log.warning(
                    "%s failed on %s; retrying on the original",
                    self.key.model.name,
                    f"its kept copy {kept.name}" if kept is not None else "Tessera's CPU kernel",
                )
                self._retried = True
                self.cache.distrust_copy(entry)
                del entry
                self.release()
                return self.run(feeds, last=last, cancel=cancel, outputs=outputs, into=into)
            del entry  # this frame must not keep the session alive (its traceback outlives it)
            if isinstance(failure, (ResourceError, DeviceFault)):
                # M5: destroyed with its arena here, before anyone can create the next one (and
                # a session hit by a sticky device error is poisoned for good).
                self.release()
            raise failure
        if not into:
            entry.output_shapes.setdefault(
                _signature(feeds, outputs),
                {
                    name: (tuple(np.shape(value)), np.asarray(value).dtype)
                    for name, value in zip(
                        outputs or self._output_names(entry), result, strict=False
                    )
                },
            )
        self.runs += 1
        self.cpu_kernel = entry.cpu_kernel
        entry.runs += 1
        # "Last used" is when the work ended, not when the job took the session: a job of
        # minutes read "5 min ago" 35 s after it ended (the last run's end is the job's end).
        entry.last_used = time.time()
        self.cache.runs += 1
        if shrink is not None:
            self.shrinks += 1
            entry.shrinks += 1
            self.cache.shrinks += 1
        return list(result)

    def buffers_for(
        self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray] | None:
        """Fresh buffers for the outputs of a run with these inputs, where an earlier run with
        the same input shapes showed their shapes; None where none has yet."""
        entry = self._entry
        if entry is None:
            return None
        known = entry.output_shapes.get(_signature(feeds, outputs))
        if known is None:
            return None
        return {name: np.empty(shape, dtype) for name, (shape, dtype) in known.items()}

    @staticmethod
    def _output_names(entry: SessionEntry) -> list[str]:
        return [o.name for o in entry.session.get_outputs()]

    @staticmethod
    def _run_bound(
        entry: SessionEntry,
        feeds: Mapping[str, np.ndarray],
        outputs: Sequence[str],
        into: Mapping[str, np.ndarray],
        options: Any,
    ) -> list[np.ndarray]:
        binding = entry.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name in outputs:
            buffer = into[name]
            if not buffer.flags.c_contiguous or not buffer.flags.writeable:
                raise ValueError(f"the buffer for {name} must be C-contiguous and writeable")
            binding.bind_output(name, "cpu", 0, buffer.dtype, buffer.shape, buffer.ctypes.data)
        entry.session.run_with_iobinding(binding, options)
        return [into[name] for name in outputs]

    def _failure(self, error: Exception, cancel: CancelToken | None) -> EngineError:
        """The engine error for an ORT failure, its cause kept without its traceback: the
        traceback holds onnxruntime's `Session.run` frame, and with it the session."""
        error.__traceback__ = None
        mapped: EngineError
        if cancel is not None and cancel.cancelled:
            # A stop the person asked for, not a fault: the log keeps it quietly, and the
            # console shows only the one "Stopped by …" line.
            log.debug("run stopped: %s", error)
            mapped = Cancelled()
        else:
            log.warning("run failed: %s", error)
            mapped = map_error(error, self.key.model.name, str(self.key.device), self.tiled)
        mapped.__cause__ = error
        return mapped

    def release(self) -> None:
        """Drop the session from the cache and destroy it (M5); the next use loads a new one."""
        self._entry = None
        self.cache.release(self.key)

    def renew(self) -> SessionEntry:
        """A fresh session in place of this one (the failed one is destroyed first)."""
        self.release()
        return self.entry()


def _signature(feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None) -> tuple[Any, ...]:
    """What decides a run's output shapes: its inputs' names, shapes and dtypes, and which
    outputs were asked for."""
    ins = tuple(
        sorted((name, tuple(np.shape(v)), np.asarray(v).dtype.str) for name, v in feeds.items())
    )
    return (ins, tuple(outputs) if outputs else None)
