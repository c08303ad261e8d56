"""Helpers for engine tests: a session wrapper that reports a GPU provider, and image makers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from engine.runtime.providers import SHRINK_KEY
from engine.runtime.sessions import SessionKey


class ReportingSession:
    """A real CPU session seen through the session boundary as if it ran on `provider`.

    It records the arena-shrink entry of every run's RunOptions, then runs the real session
    without it (ORT on the CPU rejects `gpu:N`). This is how the memory contract is tested on a
    machine without a GPU: everything but the provider's name is real.
    """

    def __init__(self, inner: Any, provider: str, device_id: int, log: list[str | None]) -> None:
        self._inner = inner
        self._provider = provider
        self._device_id = device_id
        self.log = log

    def get_providers(self) -> list[str]:
        return [self._provider, "CPUExecutionProvider"]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {self._provider: {"device_id": str(self._device_id)}, "CPUExecutionProvider": {}}

    def run(self, outputs: Any, feeds: Any, run_options: Any = None) -> Any:
        import onnxruntime as ort

        value: str | None = None
        if run_options is not None:
            try:
                value = run_options.get_run_config_entry(SHRINK_KEY)
            except RuntimeError:  # ORT raises for a key that is not set
                value = None
        self.log.append(value)
        clean = ort.RunOptions()
        if run_options is not None and run_options.terminate:
            clean.terminate = True
        return self._inner.run(outputs, feeds, clean)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Recorder:
    """Session wrap for Engine(session_wrap=...): every created session reports `provider`."""

    def __init__(self, provider: str = "CUDAExecutionProvider") -> None:
        self.provider = provider
        self.log: list[str | None] = []
        self.sessions: list[ReportingSession] = []

    def __call__(self, session: Any, key: SessionKey) -> ReportingSession:
        wrapped = ReportingSession(session, self.provider, key.device.index, self.log)
        self.sessions.append(wrapped)
        return wrapped


def photo(path: Path, width: int = 40, height: int = 30, mode: str = "RGB", seed: int = 0) -> Path:
    """A smooth test picture with some detail, saved with Pillow."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [x / max(width - 1, 1), y / max(height - 1, 1), 0.5 + 0.5 * np.sin(x / 3 + y / 5)], axis=2
    )
    noise = rng.uniform(-0.05, 0.05, base.shape).astype(np.float32)
    rgb = np.clip((base + noise) * 255, 0, 255).astype(np.uint8)
    if mode == "RGBA":
        alpha = np.clip(255 * (x / max(width - 1, 1)), 0, 255).astype(np.uint8)[..., None]
        Image.fromarray(np.concatenate([rgb, alpha], axis=2), "RGBA").save(path)
    elif mode == "L":
        Image.fromarray(rgb[..., 0], "L").save(path)
    else:
        Image.fromarray(rgb, "RGB").save(path)
    return path


def gif3(
    path: Path, width: int = 24, height: int = 16, durations: tuple[int, ...] = (80, 120, 200)
) -> Path:
    frames = []
    for i, _ in enumerate(durations):
        arr = np.zeros((height, width, 3), np.uint8)
        arr[..., i % 3] = 60 + 60 * i
        arr[: height // 2, : width // 2] = 255
        frames.append(Image.fromarray(arr, "RGB"))
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=list(durations), loop=0)
    return path
