"""What waits for the engine thread, and how each request ended: one queue with priorities
(jobs in the order they came, then at most one preview, the newest), shared by the GUI and
the engine thread under one lock, and the record of an ending that crosses back (`Ended`)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from engine.cancel import CancelToken
from engine.previews import PreviewRequest
from engine.requests import OperationRequest

Request = OperationRequest | PreviewRequest


class RequestKind(Enum):
    JOB = "job"
    PREVIEW = "preview"


class Outcome(Enum):
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Ended:
    """How a request ended, as it crosses from the worker to the GUI thread."""

    kind: RequestKind
    outcome: Outcome
    request_id: str
    payload: object  # Result / PreviewResult, OperationFailure or OperationCancellation


def request_kind(request: Request) -> RequestKind:
    return RequestKind.PREVIEW if isinstance(request, PreviewRequest) else RequestKind.JOB


class WorkQueue:
    """What waits for the engine thread; shared by both threads, so every access locks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: deque[tuple[OperationRequest, CancelToken]] = deque()
        self._preview: tuple[PreviewRequest, CancelToken] | None = None  # one at most
        self._running: dict[RequestKind, str | None] = dict.fromkeys(RequestKind)

    def put_jobs(self, items: Sequence[tuple[OperationRequest, CancelToken]]) -> None:
        """Queue many jobs in one lock (Run of 1000)."""
        with self._lock:
            self._jobs.extend(items)

    def has_work(self) -> bool:
        with self._lock:
            return bool(self._jobs) or self._preview is not None

    def put(self, request: Request, token: CancelToken) -> tuple[Request, CancelToken] | None:
        """Queue a request; returns the preview it replaced, if one was waiting."""
        with self._lock:
            if isinstance(request, PreviewRequest):
                replaced, self._preview = self._preview, (request, token)
                return replaced
            self._jobs.append((request, token))
            return None

    def take(self) -> tuple[Request, CancelToken] | None:
        """The next request: the oldest job, else the waiting preview."""
        with self._lock:
            item: tuple[Request, CancelToken] | None
            if self._jobs:
                item = self._jobs.popleft()
            elif self._preview is not None:
                item, self._preview = self._preview, None
            else:
                return None
            self._running[request_kind(item[0])] = item[0].id
            return item

    def finish(self, request: Request) -> None:
        with self._lock:
            self._running[request_kind(request)] = None

    def remove(self, request_id: str) -> Request | None:
        """Take a request out if it has not started; None once the worker has it."""
        with self._lock:
            if self._preview is not None and self._preview[0].id == request_id:
                item, self._preview = self._preview, None
                return item[0]
            for job in self._jobs:
                if job[0].id == request_id:
                    self._jobs.remove(job)
                    return job[0]
            return None

    def remove_many(self, request_ids: set[str]) -> list[OperationRequest]:
        """Take out every queued job of `request_ids` in one pass (Cancel all of 1000)."""
        with self._lock:
            taken = [request for request, _ in self._jobs if request.id in request_ids]
            self._jobs = deque(job for job in self._jobs if job[0].id not in request_ids)
            return taken

    def drain_jobs(self) -> list[OperationRequest]:
        with self._lock:
            taken = [request for request, _ in self._jobs]
            self._jobs.clear()
            return taken

    def running(self, kind: RequestKind) -> str | None:
        with self._lock:
            return self._running[kind]

    @property
    def waiting_preview(self) -> str | None:
        with self._lock:
            return self._preview[0].id if self._preview is not None else None
