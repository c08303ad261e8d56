"""The engine thread's one queue (gui/engine_thread.py `WorkQueue`): jobs in order before any
preview, at most one preview waiting (a newer one replaces it), a queued request taken out
before it starts, and what runs of each kind."""

from __future__ import annotations

from pathlib import Path

from engine.cancel import CancelToken
from engine.previews import PreviewRequest
from engine.requests import Operation, OperationRequest
from gui.engine_queue import RequestKind, WorkQueue


def job() -> OperationRequest:
    return OperationRequest(Operation.UPSCALE, "up2", (Path("a.png"),))


def preview(generation: int) -> PreviewRequest:
    return PreviewRequest(job(), None, generation)


def test_jobs_first_in_order_then_the_newest_preview() -> None:
    queue = WorkQueue()
    first_preview, second_preview = preview(1), preview(2)
    assert queue.put(first_preview, CancelToken()) is None
    a, b = job(), job()
    queue.put(a, CancelToken())
    replaced = queue.put(second_preview, CancelToken())
    assert replaced is not None and replaced[0] is first_preview  # cancelled by the caller
    queue.put(b, CancelToken())
    assert queue.waiting_preview == second_preview.id
    taken = queue.take()
    assert taken is not None and taken[0] is a and queue.running(RequestKind.JOB) == a.id
    queue.finish(a)
    assert queue.running(RequestKind.JOB) is None
    assert queue.remove(b.id) is b  # not started: taken out
    assert queue.remove(b.id) is None
    taken = queue.take()
    assert taken is not None and taken[0] is second_preview
    assert queue.running(RequestKind.PREVIEW) == second_preview.id
    assert queue.take() is None
    assert queue.drain_jobs() == []
