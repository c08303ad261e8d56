"""A small fake of the engine thread's interface, for controller and model tests without an
engine: it takes requests, and the test says how each one goes (`start`, `progress`,
`finish`, `fail`) — the signals are the real EngineThread's, delivered at once on the GUI
thread, one terminal signal per request as the real thread promises."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from engine.errors import ErrorKind
from engine.previews import PreviewRequest, PreviewResult
from engine.requests import (
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Product,
    ProductKind,
    Progress,
    ProgressKind,
    Result,
)
from engine.runtime.sessions import SessionKey
from engine.settings import EngineSettings
from gui.engine_thread import EngineSignals, EngineThread


class FakeEngine(EngineSignals):
    def __init__(self) -> None:
        super().__init__()
        self.settings = EngineSettings()
        self.jobs: dict[str, OperationRequest] = {}  # submitted, not ended
        self.previews: dict[str, PreviewRequest] = {}
        self.submitted: list[OperationRequest] = []
        self.preview_requests: list[PreviewRequest] = []
        self.running_id: str | None = None
        self.previews_cancelled = 0
        self.released = 0

    def handle(self) -> EngineThread:
        """This fake where a controller wants the engine thread (the same interface)."""
        return cast(EngineThread, self)

    # -- the interface the controllers use ----------------------------------------------------
    def is_running(self) -> bool:
        return True

    def is_busy(self) -> bool:
        return bool(self.jobs)

    def submit(self, request: OperationRequest) -> str:
        self.jobs[request.id] = request
        self.submitted.append(request)
        return request.id

    def submit_many(self, requests: list[OperationRequest]) -> list[str]:
        return [self.submit(request) for request in requests]

    def submit_preview(self, request: PreviewRequest) -> str:
        for waiting in list(self.previews.values()):  # the newer replaces the one waiting
            self._end_preview_cancelled(waiting.id)
        self.previews[request.id] = request
        self.preview_requests.append(request)
        return request.id

    def cancel(self, request_id: str) -> bool:
        if request_id not in self.jobs:
            return False
        started = request_id == self.running_id
        del self.jobs[request_id]
        self.operationCancelled.emit(OperationCancellation(request_id, started=started))
        return True

    def cancel_many(self, request_ids: list[str]) -> int:
        return sum(self.cancel(request_id) for request_id in request_ids)

    def cancel_previews(self) -> None:
        self.previews_cancelled += 1
        for request_id in list(self.previews):
            self._end_preview_cancelled(request_id)

    def release_previews(self) -> None:
        self.released += 1

    def refresh_sessions(self) -> None:
        self.sessionsChanged.emit(())

    def unload(self, key: SessionKey) -> None:
        self.sessionsChanged.emit(())

    def unload_all(self) -> None:
        self.sessionsChanged.emit(())

    # -- what the test says happens -----------------------------------------------------------
    def start(self, request_id: str) -> None:
        self.running_id = request_id
        self.operationStarted.emit(self.jobs[request_id])

    def progress(self, request_id: str, run: int, runs: int) -> None:
        self.progressChanged.emit(
            Progress(request_id, ProgressKind.RUN_FINISHED, run=run, run_count=runs)
        )

    def finish(self, request_id: str, *products: Path) -> Result:
        request = self.jobs.pop(request_id)
        made = tuple(Product(p, ProductKind.IMAGE, request.inputs[0]) for p in products)
        result = Result(request_id, made, (), len(made), 0, 0, 1, {"total_s": 0.01})
        self.running_id = None
        self.operationFinished.emit(result)
        return result

    def fail(self, request_id: str, message: str) -> None:
        del self.jobs[request_id]
        self.running_id = None
        self.operationFailed.emit(OperationFailure(request_id, ErrorKind.BAD_INPUT, message))

    def finish_preview(self, request_id: str, *products: Path) -> None:
        request = self.previews.pop(request_id)
        made = tuple(Product(p, ProductKind.IMAGE, request.source) for p in products)
        self.previewFinished.emit(PreviewResult(request_id, request.generation, products=made))

    def _end_preview_cancelled(self, request_id: str) -> None:
        del self.previews[request_id]
        self.previewCancelled.emit(OperationCancellation(request_id, started=False))
