"""Soak: 200 jobs mixing all four families and cancels through one EngineThread.

Every job must end with exactly one terminal signal, the session cache must hold one session
per (model, device, runtime) key and create each only once, and RSS after warm-up is reported
(only a generous sanity bound is asserted: figures are for the bench, not for tests).
"""

from __future__ import annotations

import gc
import itertools
import threading
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

from engine.requests import (
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    ProgressKind,
    Result,
)
from engine.runtime import memory
from engine.runtime.sessions import SessionInfo, SessionKey
from engine.samples.background_models import make_u2net
from engine.samples.depth_models import make_da3
from engine.samples.geometry_models import make_moge
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings
from gui.engine_thread import EngineThread
from tests.engine_helpers import gif3, photo
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.slow_models import make_slow_upscaler

JOBS = 200
ROUND = 20
TIMEOUT_MS = 120_000
MB = 1 << 20


class CreationCounter:
    """Session wrap that counts every session the cache creates, per key (the session is
    returned untouched: a real CPU session)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.created: Counter[SessionKey] = Counter()

    def __call__(self, session: Any, key: SessionKey) -> Any:
        with self.lock:
            self.created[key] += 1
        return session


def test_soak_200_jobs_mixing_families_and_cancels(
    qtbot: QtBot, models_dir: Path, tmp_path: Path
) -> None:
    models = Path(models_dir)
    make_upscaler(models / "up2.onnx", scale=2)
    make_u2net(models / "u2netp.onnx")
    make_da3(models / "da3.onnx", fixed=False)
    make_moge(models / "moge.onnx")
    make_slow_upscaler(models / "slow.onnx", layers=150)
    images = [photo(tmp_path / f"in{i}.png", 40 + 4 * i, 30 + 2 * i, seed=i) for i in range(4)]
    images.append(gif3(tmp_path / "anim.gif"))
    medium = photo(tmp_path / "medium.png", 96, 64)
    kinds = [
        (Operation.UPSCALE, "up2", {}),
        (Operation.REMOVE_BACKGROUND, "u2netp", {}),
        (Operation.DEPTH, "da3", {"process_res": 112}),
        (Operation.GEOMETRY, "moge", {}),
    ]

    counter = CreationCounter()
    engine = EngineThread(EngineSettings(models_dir=models), session_wrap=counter)
    terminals: dict[str, list[Result | OperationFailure | OperationCancellation]] = defaultdict(
        list
    )

    def on_end(payload: Result | OperationFailure | OperationCancellation) -> None:
        terminals[payload.request_id].append(payload)

    def all_ended(batch: list[str]) -> bool:
        return all(terminals[r] for r in batch)

    for sig in (engine.operationFinished, engine.operationFailed, engine.operationCancelled):
        sig.connect(on_end)
    latest_sessions: list[tuple[SessionInfo, ...]] = []
    engine.sessionsChanged.connect(latest_sessions.append)
    cancel_at_start: set[str] = set()

    def on_progress(progress: Progress) -> None:
        # Cancel once the session is ready, not at start: a cancel that wins the race with
        # the load would end the job before the slow model is ever created (seen on 2 cores).
        if progress.kind is ProgressKind.LOADED and progress.request_id in cancel_at_start:
            engine.cancel(progress.request_id)

    engine.progressChanged.connect(on_progress)
    engine.start(probe_runtimes=False)
    ids: list[str] = []
    expected_ok: set[str] = set()
    rss: dict[str, int] = {}
    image_cycle = itertools.cycle(images)
    try:
        for round_no in range(JOBS // ROUND):
            out = tmp_path / f"out{round_no}"
            batch: list[str] = []
            for i in range(ROUND):
                n = round_no * ROUND + i
                if n % 10 == 9:
                    # A slow job cancelled once loaded: exercises terminate inside a run.
                    req = OperationRequest(
                        Operation.UPSCALE, "slow", (medium,), output_dir=out, tile=64
                    )
                    cancel_at_start.add(req.id)
                    batch.append(engine.submit(req))
                    continue
                op, model, options = kinds[n % len(kinds)]
                req = OperationRequest(
                    op, model, (next(image_cycle),), output_dir=out, tile=64, options=options
                )
                batch.append(engine.submit(req))
                if n % 10 == 4:
                    engine.cancel(req.id)  # queued or just started: ends once either way
                else:
                    expected_ok.add(req.id)
            ids += batch
            qtbot.waitUntil(partial(all_ended, batch), timeout=TIMEOUT_MS)
            if round_no == 0:  # warm-up: every model loaded, every arena grown once
                gc.collect()
                rss["after_warmup"] = memory.process_rss()
        qtbot.wait(200)  # a duplicate terminal signal would have arrived by now
        gc.collect()
        rss["end"] = memory.process_rss()
        engine.refresh_sessions()
        qtbot.waitUntil(lambda: bool(latest_sessions), timeout=TIMEOUT_MS)
        final = len(latest_sessions[-1])
    finally:
        engine.stop()
    assert not engine.qthread.isRunning()

    ends = {rid: terminals[rid] for rid in ids}
    assert len(ids) == JOBS
    assert all(len(v) == 1 for v in ends.values()), {k: v for k, v in ends.items() if len(v) != 1}
    kinds_seen = Counter(type(v[0]).__name__ for v in ends.values())
    failed = [v[0] for v in ends.values() if isinstance(v[0], OperationFailure)]
    assert not failed, failed
    results = {rid: v[0] for rid, v in ends.items() if isinstance(v[0], Result)}
    not_ok = [rid for rid in expected_ok if rid not in results or not results[rid].ok]
    assert not not_ok, [ends[r][0] for r in not_ok]

    distinct = 5  # up2, u2netp, da3, moge, slow — all on the CPU runtime
    assert len(counter.created) == distinct
    assert all(count == 1 for count in counter.created.values()), counter.created
    assert final <= distinct

    growth = (rss["end"] - rss["after_warmup"]) / MB
    print(
        f"\nsoak: {len(ids)} jobs, {sum(len(v) for v in ends.values())} terminal signals "
        f"({kinds_seen['Result']} finished, {kinds_seen['OperationCancellation']} cancelled, "
        f"{kinds_seen['OperationFailure']} failed); sessions created "
        f"{sum(counter.created.values())} for {distinct} keys, {final} loaded at the end; "
        f"RSS after warm-up {rss['after_warmup'] / MB:.0f} MB, at the end {rss['end'] / MB:.0f} MB "
        f"({growth:+.1f} MB)"
    )
    assert growth < 200, f"RSS grew {growth:.0f} MB over {JOBS} jobs after warm-up"  # sanity only
