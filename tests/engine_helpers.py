"""Helpers for engine tests: a session wrapper that reports a GPU provider, and image makers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from engine.runtime.providers import SHRINK_KEY
from engine.runtime.sessions import SessionKey


class BindingLog:
    """An IOBinding that keeps the inputs bound to it, so a proxy sees a bound run's feeds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.inputs: dict[str, np.ndarray] = {}

    def bind_cpu_input(self, name: str, value: np.ndarray) -> None:
        self.inputs[name] = value
        self.inner.bind_cpu_input(name, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SessionProxy:
    """Base of the tests' session wraps: `before_run` sees the feeds and the RunOptions of
    every run, whether its outputs come back from ORT (`run`) or go into the engine's own
    buffers (`run_with_iobinding`), and returns the RunOptions to run with."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def before_run(self, feeds: dict[str, np.ndarray], run_options: Any) -> Any:
        return run_options

    def run(self, outputs: Any, feeds: Any, run_options: Any = None) -> Any:
        return self._inner.run(outputs, feeds, self.before_run(dict(feeds), run_options))

    def io_binding(self) -> BindingLog:
        return BindingLog(self._inner.io_binding())

    def run_with_iobinding(self, binding: BindingLog, run_options: Any = None) -> Any:
        options = self.before_run(binding.inputs, run_options)
        return self._inner.run_with_iobinding(binding.inner, options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ReportingSession(SessionProxy):
    """A real CPU session seen through the session boundary as if it ran on `provider`.

    It records the arena-shrink entry of every run's RunOptions, then runs the real session
    without it (ORT on the CPU rejects `gpu:N`). This is how the memory contract is tested on a
    machine without a GPU: everything but the provider's name is real.
    """

    def __init__(self, inner: Any, provider: str, device_id: int, log: list[str | None]) -> None:
        super().__init__(inner)
        self._provider = provider
        self._device_id = device_id
        self.log = log

    def get_providers(self) -> list[str]:
        return [self._provider, "CPUExecutionProvider"]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {self._provider: {"device_id": str(self._device_id)}, "CPUExecutionProvider": {}}

    def before_run(self, feeds: dict[str, np.ndarray], run_options: Any) -> Any:
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
        return clean


def cuda_shrink(device: int = 0) -> str:
    """What a CUDA session's last run asks for: its GPU arena, and Tessera's shared CPU arena
    (M11), which its outputs come back through."""
    return f"cpu:0;gpu:{device}"


class Terminating:
    """RunOptions whose `terminate` turns true at its `at`-th look, as when a person cancels
    while the run is under way; `reads` counts the looks (the kernels look between steps)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.reads = 0

    @property
    def terminate(self) -> bool:
        self.reads += 1
        return self.reads >= self.at


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


def noise_png(path: Path, height: int, width: int, seed: int = 0) -> tuple[Path, np.ndarray]:
    """A picture of uniform random RGB noise, saved as PNG; returns its path and its pixels."""
    rgb = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(path)
    return path, rgb


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
