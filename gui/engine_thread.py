"""The one engine thread: where a job is run and a preview is answered.

`EngineThread` owns one QThread for the life of the app. A worker QObject moved into it owns
the `Engine`, and with it the session cache (M1, M6), so every model run, load, unload and
probe happens on that thread. Jobs and previews are one pipeline:

- **one queue with priorities** (`WorkQueue`): jobs in the order they came, then at most one
  preview, which runs only when no job waits; a newer preview replaces the one waiting. A
  queued request can be taken out and cancelled before it starts, and the worker takes one
  request per wake-up, so unload or probe commands queued meanwhile run between them;
- **one run path** (`EngineWorker._run`): started, the engine call, and one ending;
- **one relay** (`EngineThread._relay`) and **one terminal-signal rule**: every submitted
  request ends with exactly one terminal signal, also one cancelled while still queued, and
  nothing about that request follows it — `operationFinished(Result)`,
  `operationFailed(OperationFailure)` or `operationCancelled(OperationCancellation)` for a
  job; `previewFinished(PreviewResult)`, `previewFailed(OperationFailure)` or
  `previewCancelled(OperationCancellation)` for a preview.

A job submitted while a preview runs cancels it and runs first; the preview is put back to
run after the jobs (a new request, the same generation), unless a newer one waits. A running
request is cancelled through its `CancelToken` directly: the worker is busy inside the engine,
so a queued cancel slot would only run after it (style rule 3).

Other signals (all delivered on the GUI thread; payloads are frozen dataclasses):
`operationStarted(OperationRequest)`, `progressChanged(Progress)` with `runFinished` and
`frameFinished` for those kinds; `previewStarted(PreviewRequest)`, `previewProgressed`,
`previewPatched(PreviewPatch)` (final pixels, as they come); `sessionsChanged(tuple[
SessionInfo, ...])` once a job's first run is done, after every request (before its terminal
signal) and after unload / unload-all; `runtimesProbed(tuple[RuntimeReport, ...])` (M7);
`settingsApplied(str)` when new settings are in force between requests (the text says what
could not change before a restart, or is empty).

The GUI imports the engine's public, Qt-free modules beside this one (requests, catalog,
inventory, memory…); which ones is the allow-list checked by the import contracts in
pyproject.toml.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QThread, Signal, SignalInstance, Slot

from engine.cancel import CancelToken
from engine.errors import Cancelled, EngineError, ErrorKind
from engine.files import LIVE
from engine.previews import PreviewRequest
from engine.requests import (
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
    new_request_id,
)
from engine.runtime.sessions import SessionKey, SessionWrap
from engine.settings import EngineSettings

if TYPE_CHECKING:
    from engine.api import Engine

from gui.engine_queue import Ended, Outcome, Request, RequestKind, WorkQueue, request_kind

log = logging.getLogger(__name__)


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

    requestEnded = Signal(object)  # Ended: the one way an ending leaves this thread
    _again = Signal()  # more waits: the next request, after the commands queued meanwhile

    def __init__(
        self, settings: EngineSettings, queue: WorkQueue, session_wrap: SessionWrap | None
    ) -> None:
        super().__init__()
        self._settings = settings
        self._queue = queue
        self._wrap = session_wrap
        self._engine: Engine | None = None
        self._sessions_told = False  # whether this job's loaded session was announced yet
        self._cpu_limit_in_force: int | None = None  # ORT registers it once per process

    def _get_engine(self) -> Engine:
        # Created here, on the engine thread, so the cache's owner is this thread, and imported
        # here, so loading onnxruntime and onnx never delays the window.
        if self._engine is None:
            from engine.api import Engine

            self._engine = Engine(self._settings, session_wrap=self._wrap)
            if self._cpu_limit_in_force is None:
                self._cpu_limit_in_force = self._settings.cpu_mem_limit
        return self._engine

    @Slot()
    def run_next(self) -> None:
        item = self._queue.take()
        if item is None:
            return  # taken out and cancelled while queued: its ending is out already
        request, token = item
        try:
            self._run(request, token)
        finally:
            self._queue.finish(request)
        if self._queue.has_work():
            # Jobs queued together share one wake-up (`submit_many`): the worker wakes itself
            # for the next, behind whatever was queued meanwhile (unload, probe, settings).
            self._again.emit()

    def _run(self, request: Request, token: CancelToken) -> None:
        kind = request_kind(request)
        rid = request.id
        if token.cancelled:
            self._end(kind, Outcome.CANCELLED, rid, OperationCancellation(rid, started=False))
            return
        # The files a job placed before a cancel or failure stay, and its ending names them
        # (a command line that joined the app reports them, as a standalone run does).
        with LIVE.watching() as placed:
            try:
                if isinstance(request, PreviewRequest):
                    self.previewStarted.emit(request)
                    result: object = self._get_engine().preview(
                        request, self.previewProgressed.emit, token, self.previewPatched.emit
                    )
                else:
                    self.operationStarted.emit(request)
                    self._sessions_told = False
                    result = self._get_engine().run(request, self._progress, token)
            except Cancelled:
                done = tuple(LIVE.snapshot(placed))
                cancellation = OperationCancellation(rid, started=True, products=done)
                self._end(kind, Outcome.CANCELLED, rid, cancellation)
            except EngineError as e:
                failure = OperationFailure(rid, e.kind, str(e), tuple(LIVE.snapshot(placed)))
                self._end(kind, Outcome.FAILED, rid, failure)
            except Exception as e:  # a bug must not take the engine thread down
                log.exception("%s %s failed unexpectedly", kind.value, request.id)
                message = f"Unexpected error: {e}. The details are in the log file."
                failure = OperationFailure(
                    rid, ErrorKind.INTERNAL, message, tuple(LIVE.snapshot(placed))
                )
                self._end(kind, Outcome.FAILED, rid, failure)
            else:
                self._end(kind, Outcome.FINISHED, rid, result)

    def _end(self, kind: RequestKind, outcome: Outcome, request_id: str, payload: object) -> None:
        # Sessions first, so a slot reacting to the terminal signal sees the cache after it
        # (a request cancelled before it started touched no session).
        if not isinstance(payload, OperationCancellation) or payload.started:
            self._emit_sessions()
        self.requestEnded.emit(Ended(kind, outcome, request_id, payload))

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
        """Preferences, between requests: a new models folder applies to the next job; new
        memory limits unload the models so they load again under the limits."""
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
        from engine.runtime.devices import RuntimeReport, probe  # onnx: on this thread, later

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
        self._queue = WorkQueue()
        # Every request whose terminal signal has not reached the GUI yet, with its token.
        self._open: dict[str, tuple[Request, CancelToken]] = {}
        self._terminal: dict[tuple[RequestKind, Outcome], SignalInstance] = {
            (RequestKind.JOB, Outcome.FINISHED): self.operationFinished,
            (RequestKind.JOB, Outcome.FAILED): self.operationFailed,
            (RequestKind.JOB, Outcome.CANCELLED): self.operationCancelled,
            (RequestKind.PREVIEW, Outcome.FINISHED): self.previewFinished,
            (RequestKind.PREVIEW, Outcome.FAILED): self.previewFailed,
            (RequestKind.PREVIEW, Outcome.CANCELLED): self.previewCancelled,
        }
        self._thread = QThread()
        self._thread.setObjectName("tessera-engine")
        self.worker = w = EngineWorker(self.settings, self._queue, session_wrap)
        w.moveToThread(self._thread)
        w._again.connect(w.run_next, Qt.ConnectionType.QueuedConnection)
        self._runRequested.connect(w.run_next)
        self._unloadRequested.connect(w.unload)
        self._unloadAllRequested.connect(w.unload_all)
        self._sessionsRequested.connect(w.report_sessions)
        self._releasePreviewsRequested.connect(w.release_previews)
        self._probeRequested.connect(w.probe_runtimes)
        self._settingsRequested.connect(w.apply_settings)
        self._shutdownRequested.connect(w.shutdown)
        # Worker signals cross to this (GUI-thread) object as queued signal-to-signal relays;
        # endings go through `_relay`, which keeps the one-terminal-signal rule.
        for name in (
            "operationStarted",
            "progressChanged",
            "runFinished",
            "frameFinished",
            "sessionsChanged",
            "runtimesProbed",
            "settingsApplied",
            "previewStarted",
            "previewProgressed",
            "previewPatched",
        ):
            getattr(w, name).connect(getattr(self, name))
        w.requestEnded.connect(self._relay)

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

    # -- submitting ---------------------------------------------------------------------------
    def _put(self, request: Request) -> str:
        if not self._thread.isRunning():
            raise RuntimeError("the engine thread is not running")
        token = CancelToken()
        self._open[request.id] = (request, token)
        replaced = self._queue.put(request, token)
        if replaced is not None:
            self._cancelled_unstarted(replaced[0])
        self._runRequested.emit()  # one wake-up per request: the worker takes one each time
        return request.id

    def submit(self, request: OperationRequest) -> str:
        """A job: after the jobs before it, before every preview."""
        self._put(request)
        self._displace_preview()
        return request.id

    def submit_many(self, requests: Sequence[OperationRequest]) -> list[str]:
        """Many jobs in one call (Run of 1000 images): one lock, one wake-up, in order, after
        the jobs before them and before every preview."""
        if not requests:
            return []
        if not self._thread.isRunning():
            raise RuntimeError("the engine thread is not running")
        items = [(request, CancelToken()) for request in requests]
        for request, token in items:
            self._open[request.id] = (request, token)
        self._queue.put_jobs(items)
        self._runRequested.emit()
        self._displace_preview()
        return [request.id for request in requests]

    def submit_preview(self, request: PreviewRequest) -> str:
        """A preview, after every job; replaces the preview waiting, cancels the running one."""
        self._put(request)
        self._cancel_running_preview(but=request.id)
        return request.id

    def _displace_preview(self) -> None:
        """A job goes before a running preview: cancel it (its tiles done so far stay in the
        engine's cache) and put it back to run after the jobs, unless a newer one waits."""
        token = self._running_token(RequestKind.PREVIEW)
        running = self._queue.running(RequestKind.PREVIEW)
        if running is None or token is None or token.cancelled:
            return
        token.cancel()
        request = self._open[running][0]
        if isinstance(request, PreviewRequest) and self._queue.waiting_preview is None:
            self.submit_preview(replace(request, job=replace(request.job, id=new_request_id())))

    def _running_token(self, kind: RequestKind) -> CancelToken | None:
        running = self._queue.running(kind)
        entry = self._open.get(running) if running is not None else None
        return entry[1] if entry is not None else None

    # -- cancelling ---------------------------------------------------------------------------
    def _cancelled_unstarted(self, request: Request) -> None:
        cancellation = OperationCancellation(request.id, started=False)
        self._relay(Ended(request_kind(request), Outcome.CANCELLED, request.id, cancellation))

    def cancel(self, request_id: str) -> bool:
        """Cancel a queued or running request; False when it has already ended."""
        taken = self._queue.remove(request_id)
        if taken is not None:
            self._cancelled_unstarted(taken)
            return True
        entry = self._open.get(request_id)
        if entry is None:
            return False
        entry[1].cancel()  # directly: terminates the run in flight (M8)
        return True

    def cancel_many(self, request_ids: Sequence[str]) -> int:
        """Cancel these jobs in one call: the queued ones end now (in the queue's order), the
        running one is told to stop; the waiting previews are left alone."""
        wanted = set(request_ids)
        taken = self._queue.remove_many(wanted)
        for request in taken:
            self._cancelled_unstarted(request)
        running = self._queue.running(RequestKind.JOB)
        if running in wanted and running in self._open:
            self._open[running][1].cancel()  # directly: terminates the run in flight (M8)
            return len(taken) + 1
        return len(taken)

    def cancel_running(self) -> bool:
        current = self._queue.running(RequestKind.JOB)
        return self.cancel(current) if current is not None else False

    def cancel_all(self) -> int:
        count = 0
        for request in self._queue.drain_jobs():
            self._cancelled_unstarted(request)
            count += 1
        for open_request, token in list(self._open.values()):
            if request_kind(open_request) is RequestKind.JOB:
                token.cancel()
                count += 1
        self.cancel_previews()
        return count

    def cancel_previews(self) -> None:
        """Cancel the waiting and the running preview (the person's ✕, Preview off)."""
        waiting = self._queue.waiting_preview
        if waiting is not None:
            self.cancel(waiting)
        self._cancel_running_preview()

    def _cancel_running_preview(self, but: str | None = None) -> None:
        running = self._queue.running(RequestKind.PREVIEW)
        token = self._running_token(RequestKind.PREVIEW)
        if running is not None and running != but and token is not None:
            token.cancel()  # directly: terminates the run in flight (M8)

    def release_previews(self) -> None:
        """Hand back what previews keep, once the preview in flight has stopped."""
        self._releasePreviewsRequested.emit()

    # -- what is open -------------------------------------------------------------------------
    @property
    def running_id(self) -> str | None:
        return self._queue.running(RequestKind.JOB)

    @property
    def preview_running(self) -> str | None:
        """The preview the worker is running (read from any thread)."""
        return self._queue.running(RequestKind.PREVIEW)

    @property
    def preview_waiting(self) -> str | None:
        """The preview waiting for the worker (read from any thread)."""
        return self._queue.waiting_preview

    def _open_of(self, kind: RequestKind) -> list[str]:
        return [rid for rid, (request, _) in self._open.items() if request_kind(request) is kind]

    def open_requests(self) -> list[str]:
        """Jobs whose terminal signal has not reached the GUI yet."""
        return self._open_of(RequestKind.JOB)

    def is_busy(self) -> bool:
        # The first open job answers: no list of a thousand is made for a yes.
        return any(request_kind(request) is RequestKind.JOB for request, _ in self._open.values())

    def request(self, request_id: str) -> OperationRequest | None:
        entry = self._open.get(request_id)
        return entry[0] if entry is not None and isinstance(entry[0], OperationRequest) else None

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
        """New settings for the requests after the running one (settingsApplied follows)."""
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

    # -- the one relay ------------------------------------------------------------------------
    @Slot(object)
    def _relay(self, ended: Ended) -> None:
        """The terminal signal of a request, the first time only: a request cancelled while
        queued may still be taken by a wake-up, and its second ending is dropped here."""
        if self._open.pop(ended.request_id, None) is not None:
            self._terminal[(ended.kind, ended.outcome)].emit(ended.payload)
