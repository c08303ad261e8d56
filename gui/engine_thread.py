"""The one engine thread, and the only door from the GUI into the engine.

`EngineThread` owns one QThread for the life of the app. A worker QObject moved into it owns
the `Engine`, and with it the session cache (M1, M6), so every model run, load, unload and
probe happens on that thread. Requests wait in a locked queue rather than as queued slot
calls: a queued job can then be taken out and cancelled before it starts, and the worker takes
one job per wake-up, so unload or probe commands queued meanwhile run between jobs. A running
job is cancelled through its `CancelToken` directly: the worker is busy inside `Engine.run`,
so a queued cancel slot would only run after the job (style rule 3).

Signals (all delivered on the GUI thread; payloads are frozen dataclasses):

- `operationStarted(OperationRequest)`: the worker took the job off the queue.
- `progressChanged(Progress)`: every progress event; `runFinished(Progress)` and
  `frameFinished(Progress)` additionally for those kinds.
- exactly one of `operationFinished(Result)`, `operationFailed(OperationFailure)` or
  `operationCancelled(OperationCancellation)` ends every submitted request, also one that is
  cancelled while still queued; nothing about that request follows it.
- `sessionsChanged(tuple[SessionInfo, ...])`: once a job's first run is done (its session
  is loaded), after every job (before its terminal signal), and after unload / unload-all.
- `runtimesProbed(tuple[RuntimeReport, ...])`: what each runtime really gives here (M7).
- `settingsApplied(str)`: new settings (Preferences) are in force between jobs; the text says
  what could not change before a restart, or is empty.

Previews (engine/previews.py) share the thread and the sessions but come after every job: one
waits in a slot of its own, taken only when no job is queued; a newer preview replaces the one
waiting and cancels the one running; a job submitted while a preview runs cancels it and runs
first, and the preview is put back to run after the jobs (as a new request, same generation).
Their signals mirror the jobs': `previewStarted(PreviewRequest)`, `previewProgressed(Progress)`,
`previewPatched(PreviewPatch)` (final pixels, as they come), and exactly one of
`previewFinished(PreviewResult)`, `previewFailed(OperationFailure)` or
`previewCancelled(OperationCancellation)` per preview request.

This module is behaviour only: the thread, the worker and their signals. Widgets import the
engine's Qt-free data modules (requests, catalog, inventory, memory…) directly; which engine
modules the GUI may import is checked by the import contracts in pyproject.toml.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import replace

from PySide6.QtCore import QObject, QThread, Signal, SignalInstance, Slot

from engine.api import Engine
from engine.cancel import CancelToken
from engine.errors import Cancelled, EngineError, ErrorKind
from engine.previews import PreviewRequest, PreviewResult
from engine.requests import (
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
    Result,
    new_request_id,
)
from engine.runtime.devices import RuntimeReport, probe
from engine.runtime.sessions import SessionKey, SessionWrap
from engine.settings import EngineSettings
from gui.thread_utils import forget_foreign_thread

log = logging.getLogger(__name__)


class _JobQueue:
    """Jobs waiting for the engine thread; shared by both threads, so every access locks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: deque[tuple[OperationRequest, CancelToken]] = deque()
        self._current: str | None = None
        # One preview at most waits; it runs only when no job is queued.
        self._preview: tuple[PreviewRequest, CancelToken] | None = None
        self._preview_current: str | None = None

    def put(self, request: OperationRequest, token: CancelToken) -> None:
        with self._lock:
            self._items.append((request, token))

    def take(self) -> tuple[OperationRequest, CancelToken] | None:
        with self._lock:
            if not self._items:
                return None
            item = self._items.popleft()
            self._current = item[0].id
            return item

    def finish(self) -> None:
        with self._lock:
            self._current = None

    def remove(self, request_id: str) -> bool:
        """Take a job out if it has not started; False once the worker has it."""
        with self._lock:
            for item in self._items:
                if item[0].id == request_id:
                    self._items.remove(item)
                    return True
            return False

    def drain(self) -> list[OperationRequest]:
        with self._lock:
            taken = [request for request, _ in self._items]
            self._items.clear()
            return taken

    def put_preview(
        self, request: PreviewRequest, token: CancelToken
    ) -> tuple[PreviewRequest, CancelToken] | None:
        """Wait in the preview slot; returns the preview it replaced, if one was waiting."""
        with self._lock:
            replaced, self._preview = self._preview, (request, token)
            return replaced

    def take_preview(self) -> tuple[PreviewRequest, CancelToken] | None:
        """The waiting preview, unless a job is queued (jobs first)."""
        with self._lock:
            if self._items or self._preview is None:
                return None
            item, self._preview = self._preview, None
            self._preview_current = item[0].id
            return item

    def finish_preview(self) -> None:
        with self._lock:
            self._preview_current = None

    def drop_preview(self) -> PreviewRequest | None:
        with self._lock:
            item, self._preview = self._preview, None
            return item[0] if item is not None else None

    @property
    def waiting_preview(self) -> str | None:
        with self._lock:
            return self._preview[0].id if self._preview is not None else None

    @property
    def preview_current(self) -> str | None:
        with self._lock:
            return self._preview_current

    @property
    def current(self) -> str | None:
        with self._lock:
            return self._current


class EngineSignals(QObject):
    """The events both ends carry: the worker emits them in the engine thread, the handle
    re-emits them in the GUI thread (queued connections cross the threads)."""

    operationStarted = Signal(object)
    progressChanged = Signal(object)
    runFinished = Signal(object)
    frameFinished = Signal(object)
    operationFinished = Signal(object)
    operationFailed = Signal(object)
    operationCancelled = Signal(object)
    sessionsChanged = Signal(object)
    runtimesProbed = Signal(object)
    settingsApplied = Signal(str)
    previewStarted = Signal(object)
    previewProgressed = Signal(object)
    previewPatched = Signal(object)
    previewFinished = Signal(object)
    previewFailed = Signal(object)
    previewCancelled = Signal(object)


class EngineWorker(EngineSignals):
    """Lives in the engine thread; every slot runs there. Owns the Engine once it is needed."""

    def __init__(
        self, settings: EngineSettings, queue: _JobQueue, session_wrap: SessionWrap | None
    ) -> None:
        super().__init__()
        self._settings = settings
        self._queue = queue
        self._wrap = session_wrap
        self._engine: Engine | None = None
        self._sessions_told = False  # whether this job's loaded session was announced yet
        self._cpu_limit_in_force: int | None = None  # ORT registers it once per process

    def _get_engine(self) -> Engine:
        # Created here, on the engine thread, so the cache's owner is this thread and
        # importing onnxruntime never delays the window.
        if self._engine is None:
            self._engine = Engine(self._settings, session_wrap=self._wrap)
            if self._cpu_limit_in_force is None:
                self._cpu_limit_in_force = self._settings.cpu_mem_limit
        return self._engine

    @Slot()
    def run_next(self) -> None:
        item = self._queue.take()
        if item is None:
            # No job: the waiting preview, if any (a job cancelled while queued has its
            # signal out already; its wake-up may serve a preview).
            preview = self._queue.take_preview()
            if preview is not None:
                try:
                    self._preview(*preview)
                finally:
                    self._queue.finish_preview()
            return
        request, token = item
        try:
            self._run(request, token)
        finally:
            self._queue.finish()

    def _preview(self, request: PreviewRequest, token: CancelToken) -> None:
        if token.cancelled:
            self.previewCancelled.emit(OperationCancellation(request.id, started=False))
            return
        self.previewStarted.emit(request)
        try:
            result = self._get_engine().preview(
                request, self.previewProgressed.emit, token, self.previewPatched.emit
            )
        except Cancelled:
            self._end(self.previewCancelled, OperationCancellation(request.id, started=True))
        except EngineError as e:
            self._end(self.previewFailed, OperationFailure(request.id, e.kind, str(e)))
        except Exception as e:  # a bug must not take the engine thread down
            log.exception("preview %s failed unexpectedly", request.id)
            message = f"Unexpected error: {e}. The details are in the log file."
            self._end(self.previewFailed, OperationFailure(request.id, ErrorKind.INTERNAL, message))
        else:
            self._end(self.previewFinished, result)

    def _run(self, request: OperationRequest, token: CancelToken) -> None:
        if token.cancelled:
            self.operationCancelled.emit(OperationCancellation(request.id, started=False))
            return
        self.operationStarted.emit(request)
        self._sessions_told = False
        try:
            result = self._get_engine().run(request, self._progress, token)
        except Cancelled:
            self._end(self.operationCancelled, OperationCancellation(request.id, started=True))
        except EngineError as e:
            self._end(self.operationFailed, OperationFailure(request.id, e.kind, str(e)))
        except Exception as e:  # a bug must not take the engine thread down
            log.exception("job %s failed unexpectedly", request.id)
            message = f"Unexpected error: {e}. The details are in the log file."
            self._end(
                self.operationFailed, OperationFailure(request.id, ErrorKind.INTERNAL, message)
            )
        else:
            self._end(self.operationFinished, result)

    def _end(self, signal: SignalInstance, payload: object) -> None:
        # Sessions first, so a slot reacting to the terminal signal sees the cache after the job.
        self._emit_sessions()
        signal.emit(payload)

    def _progress(self, event: Progress) -> None:
        self.progressChanged.emit(event)
        if event.kind is ProgressKind.RUN_FINISHED:
            if not self._sessions_told:
                # The job's session is loaded by now; the memory panel need not wait for the end.
                self._sessions_told = True
                self._emit_sessions()
            self.runFinished.emit(event)
        elif event.kind is ProgressKind.FRAME_FINISHED:
            self.frameFinished.emit(event)

    def _emit_sessions(self) -> None:
        self.sessionsChanged.emit(self._engine.loaded() if self._engine is not None else ())

    @Slot(object)
    def unload(self, key: SessionKey) -> None:
        if self._engine is not None:
            self._engine.unload(key)
        self._emit_sessions()

    @Slot()
    def unload_all(self) -> None:
        if self._engine is not None:
            self._engine.unload_all()
        self._emit_sessions()

    @Slot(object)
    def apply_settings(self, settings: EngineSettings) -> None:
        """Preferences, between jobs: a new models folder applies to the next job; new memory
        limits unload the models so they load again under the limits."""
        old, self._settings = self._settings, settings
        note = ""
        limits = (old.gpu_mem_limit, old.cpu_mem_limit) != (
            settings.gpu_mem_limit,
            settings.cpu_mem_limit,
        )
        if self._engine is not None and limits:
            self._engine.unload_all()
            self._engine = None  # made again, with the new limits, by the next job
        elif self._engine is not None:
            self._engine.settings = settings
        if (
            self._cpu_limit_in_force is not None
            and settings.cpu_mem_limit != self._cpu_limit_in_force
        ):
            note = (
                "The CPU memory limit stays as it was until Tessera starts again: ONNX Runtime "
                "sets it once per process."
            )
        self._emit_sessions()
        self.settingsApplied.emit(note)

    @Slot()
    def release_previews(self) -> None:
        """Preview is off: what previews kept (decoded image, tiles) is handed back."""
        if self._engine is not None:
            self._engine.previews.clear()

    @Slot()
    def report_sessions(self) -> None:
        self._emit_sessions()

    @Slot()
    def probe_runtimes(self) -> None:
        try:
            reports = tuple(probe())
        except Exception as e:  # onnxruntime itself may fail to import
            log.exception("runtime probe failed")
            reports = (RuntimeReport("cpu", "cpu", False, None, f"ONNX Runtime failed: {e}"),)
        self.runtimesProbed.emit(reports)

    @Slot()
    def shutdown(self) -> None:
        if self._engine is not None:
            try:
                self._engine.unload_all()  # on the owning thread, so ORT frees it here
            except Exception:
                log.exception("unloading the models at shutdown failed")
            self._engine = None
        forget_foreign_thread()
        thread = self.thread()
        if thread is not None:
            thread.quit()


class EngineThread(EngineSignals):
    """The GUI thread's handle on the engine thread. Use it from the GUI thread only."""

    _runRequested = Signal()
    _unloadRequested = Signal(object)
    _unloadAllRequested = Signal()
    _sessionsRequested = Signal()
    _releasePreviewsRequested = Signal()
    _probeRequested = Signal()
    _settingsRequested = Signal(object)
    _shutdownRequested = Signal()

    def __init__(
        self,
        settings: EngineSettings | None = None,
        parent: QObject | None = None,
        *,
        session_wrap: SessionWrap | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings = settings or EngineSettings()
        self._queue = _JobQueue()
        self._tokens: dict[str, CancelToken] = {}
        self._requests: dict[str, OperationRequest] = {}
        self._preview_tokens: dict[str, CancelToken] = {}
        self._previews: dict[str, PreviewRequest] = {}
        self._thread = QThread()
        self._thread.setObjectName("tessera-engine")
        self.worker = EngineWorker(self.settings, self._queue, session_wrap)
        self.worker.moveToThread(self._thread)
        w = self.worker
        self._runRequested.connect(w.run_next)
        self._unloadRequested.connect(w.unload)
        self._unloadAllRequested.connect(w.unload_all)
        self._sessionsRequested.connect(w.report_sessions)
        self._releasePreviewsRequested.connect(w.release_previews)
        self._probeRequested.connect(w.probe_runtimes)
        self._settingsRequested.connect(w.apply_settings)
        self._shutdownRequested.connect(w.shutdown)
        # Worker signals cross to this (GUI-thread) object as queued signal-to-signal relays.
        w.operationStarted.connect(self.operationStarted)
        w.progressChanged.connect(self.progressChanged)
        w.runFinished.connect(self.runFinished)
        w.frameFinished.connect(self.frameFinished)
        w.sessionsChanged.connect(self.sessionsChanged)
        w.runtimesProbed.connect(self.runtimesProbed)
        w.settingsApplied.connect(self.settingsApplied)
        w.operationFinished.connect(self._relay_finished)
        w.operationFailed.connect(self._relay_failed)
        w.operationCancelled.connect(self._relay_cancelled)
        w.previewStarted.connect(self.previewStarted)
        w.previewProgressed.connect(self.previewProgressed)
        w.previewPatched.connect(self.previewPatched)
        w.previewFinished.connect(self._relay_preview_finished)
        w.previewFailed.connect(self._relay_preview_failed)
        w.previewCancelled.connect(self._relay_preview_cancelled)

    @property
    def qthread(self) -> QThread:
        return self._thread

    def start(self, *, probe_runtimes: bool = True) -> None:
        if self._thread.isRunning():
            return
        self._thread.start()
        if probe_runtimes:
            self._probeRequested.emit()

    def is_running(self) -> bool:
        return self._thread.isRunning()

    # -- jobs ---------------------------------------------------------------------------------
    def submit(self, request: OperationRequest) -> str:
        if not self._thread.isRunning():
            raise RuntimeError("the engine thread is not running")
        token = CancelToken()
        self._tokens[request.id] = token
        self._requests[request.id] = request
        self._queue.put(request, token)
        self._runRequested.emit()  # one wake-up per job: the worker takes one job each time
        self._displace_preview()
        return request.id

    def _displace_preview(self) -> None:
        """A job goes before a running preview: cancel it (its tiles done so far stay in the
        engine's cache) and put it back to run after the jobs, unless a newer one waits."""
        running = self._queue.preview_current
        token = self._preview_tokens.get(running) if running is not None else None
        if running is None or token is None or token.cancelled:
            return
        token.cancel()
        request = self._previews.get(running)
        if request is not None and self._queue.waiting_preview is None:
            again = replace(request, job=replace(request.job, id=new_request_id()))
            self.submit_preview(again)

    # -- previews -----------------------------------------------------------------------------
    def submit_preview(self, request: PreviewRequest) -> str:
        """Preview after every job; replaces the preview waiting and cancels the running one."""
        if not self._thread.isRunning():
            raise RuntimeError("the engine thread is not running")
        token = CancelToken()
        self._preview_tokens[request.id] = token
        self._previews[request.id] = request
        replaced = self._queue.put_preview(request, token)
        if replaced is not None:
            self._relay_preview_cancelled(OperationCancellation(replaced[0].id, started=False))
        self._cancel_running_preview(but=request.id)
        self._runRequested.emit()
        return request.id

    def release_previews(self) -> None:
        """Hand back what previews keep, once the preview in flight has stopped."""
        self._releasePreviewsRequested.emit()

    def cancel_previews(self) -> None:
        """Cancel the waiting and the running preview (the person's ✕, Preview off)."""
        waiting = self._queue.drop_preview()
        if waiting is not None:
            self._relay_preview_cancelled(OperationCancellation(waiting.id, started=False))
        self._cancel_running_preview()

    def _cancel_running_preview(self, but: str | None = None) -> None:
        running = self._queue.preview_current
        if running is not None and running != but:
            token = self._preview_tokens.get(running)
            if token is not None:
                token.cancel()  # directly: terminates the run in flight (M8)

    @property
    def preview_running(self) -> str | None:
        """The preview the worker is running (read from any thread)."""
        return self._queue.preview_current

    @property
    def preview_waiting(self) -> str | None:
        """The preview waiting for the worker (read from any thread)."""
        return self._queue.waiting_preview

    def previews_open(self) -> list[str]:
        """Previews whose terminal signal has not reached the GUI yet."""
        return list(self._preview_tokens)

    def cancel(self, request_id: str) -> bool:
        """Cancel a queued or running job; False when it has already ended."""
        if self._queue.remove(request_id):
            self._relay_cancelled(OperationCancellation(request_id, started=False))
            return True
        token = self._tokens.get(request_id)
        if token is None:
            return False
        token.cancel()  # directly: terminates the run in flight (M8)
        return True

    def cancel_running(self) -> bool:
        current = self._queue.current
        return self.cancel(current) if current is not None else False

    def cancel_all(self) -> int:
        count = 0
        for request in self._queue.drain():
            self._relay_cancelled(OperationCancellation(request.id, started=False))
            count += 1
        for token in list(self._tokens.values()):
            token.cancel()
            count += 1
        self.cancel_previews()
        return count

    @property
    def running_id(self) -> str | None:
        return self._queue.current

    def open_requests(self) -> list[str]:
        """Jobs whose terminal signal has not reached the GUI yet."""
        return list(self._tokens)

    def is_busy(self) -> bool:
        return bool(self._tokens)

    def request(self, request_id: str) -> OperationRequest | None:
        return self._requests.get(request_id)

    # -- sessions and runtimes ----------------------------------------------------------------
    def unload(self, key: SessionKey) -> None:
        self._unloadRequested.emit(key)

    def unload_all(self) -> None:
        self._unloadAllRequested.emit()

    def refresh_sessions(self) -> None:
        self._sessionsRequested.emit()

    def probe_runtimes(self) -> None:
        self._probeRequested.emit()

    def apply_settings(self, settings: EngineSettings) -> None:
        """New settings for the jobs after the running one (settingsApplied follows)."""
        self.settings = settings
        self._settingsRequested.emit(settings)

    # -- shutdown -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel everything, let the engine finish its current run and end the thread.

        Blocks until the thread has ended: cancel is checked before every run and interrupts a
        run in flight (M8), so this is short unless a model is being loaded.
        """
        if not self._thread.isRunning():
            return
        self.cancel_all()
        self._shutdownRequested.emit()
        self._thread.wait()

    # -- terminal signals ---------------------------------------------------------------------
    def _forget(self, request_id: str) -> bool:
        """True the first time: guarantees one terminal signal per request."""
        known = self._tokens.pop(request_id, None) is not None
        self._requests.pop(request_id, None)
        return known

    @Slot(object)
    def _relay_finished(self, result: Result) -> None:
        if self._forget(result.request_id):
            self.operationFinished.emit(result)

    @Slot(object)
    def _relay_failed(self, failure: OperationFailure) -> None:
        if self._forget(failure.request_id):
            self.operationFailed.emit(failure)

    @Slot(object)
    def _relay_cancelled(self, cancellation: OperationCancellation) -> None:
        if self._forget(cancellation.request_id):
            self.operationCancelled.emit(cancellation)

    def _forget_preview(self, request_id: str) -> bool:
        known = self._preview_tokens.pop(request_id, None) is not None
        self._previews.pop(request_id, None)
        return known

    @Slot(object)
    def _relay_preview_finished(self, result: PreviewResult) -> None:
        if self._forget_preview(result.request_id):
            self.previewFinished.emit(result)

    @Slot(object)
    def _relay_preview_failed(self, failure: OperationFailure) -> None:
        if self._forget_preview(failure.request_id):
            self.previewFailed.emit(failure)

    @Slot(object)
    def _relay_preview_cancelled(self, cancellation: OperationCancellation) -> None:
        if self._forget_preview(cancellation.request_id):
            self.previewCancelled.emit(cancellation)
