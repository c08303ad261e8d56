"""What the app remembers between runs (QSettings): device, runtime, folders, tile size, limits,
the output step, recent files and the measured speed of each model."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths

from engine.options import OutputFormat, OutputOptions, VideoCodec, VideoOptions
from engine.settings import DEFAULT_MAX_PIXELS, EngineSettings
from gui.jobs import SaveTo

ORGANIZATION = "Tessera"
APPLICATION = "Tessera"
MB = 1024 * 1024
RECENT_MAX = 10
MODELS_ENV = "TESSERA_MODELS_DIR"
PIXEL_LIMIT = "Largest image"  # the pixel limit's name in Preferences (File ▸ Preferences…)


def pictures_dir() -> Path:
    """Where a person looks for pictures (~/Pictures), for pasted images and their results."""
    found = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
    return Path(found) if found else Path.home() / "Pictures"


def default_open_dir() -> Path:
    """Pictures where it exists, else home."""
    pictures = pictures_dir()
    return pictures if pictures.is_dir() else Path.home()


def default_model_dir() -> Path:
    found = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DownloadLocation)
    downloads = Path(found) if found else Path.home() / "Downloads"
    return downloads if downloads.is_dir() else Path.home()


class AppSettings:
    """Typed access to QSettings; the keys live here and nowhere else."""

    def __init__(self, store: QSettings | None = None) -> None:
        self.store = store if store is not None else QSettings(ORGANIZATION, APPLICATION)

    def _str(self, key: str, default: str = "") -> str:
        value = self.store.value(key, default)
        return str(value) if value is not None else default

    def _int(self, key: str, default: int = 0) -> int:
        try:
            return int(str(self.store.value(key, default)))
        except ValueError:
            return default

    def _bool(self, key: str, default: bool) -> bool:
        value = self.store.value(key, default)
        if isinstance(value, str):
            return value.lower() in ("1", "true", "yes")
        return bool(value)

    # -- engine choices -------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return self._str("engine/device", "cpu")

    @device.setter
    def device(self, value: str) -> None:
        self.store.setValue("engine/device", value)

    @property
    def runtime(self) -> str:
        return self._str("engine/runtime", "auto")

    @runtime.setter
    def runtime(self, value: str) -> None:
        self.store.setValue("engine/runtime", value)

    @property
    def tile(self) -> int:
        """Tile edge in input pixels; 0 means automatic."""
        return max(0, self._int("engine/tile", 0))

    @tile.setter
    def tile(self, value: int) -> None:
        self.store.setValue("engine/tile", int(value))

    @property
    def gpu_mem_limit_mb(self) -> int:
        return max(0, self._int("engine/gpu_mem_limit_mb", 0))

    @gpu_mem_limit_mb.setter
    def gpu_mem_limit_mb(self, value: int) -> None:
        self.store.setValue("engine/gpu_mem_limit_mb", int(value))

    @property
    def cpu_mem_limit_mb(self) -> int:
        return max(0, self._int("engine/cpu_mem_limit_mb", 0))

    @cpu_mem_limit_mb.setter
    def cpu_mem_limit_mb(self, value: int) -> None:
        self.store.setValue("engine/cpu_mem_limit_mb", int(value))

    @property
    def max_megapixels(self) -> int:
        """The largest input, in megapixels (all frames together): larger ones are refused."""
        default = DEFAULT_MAX_PIXELS // 1_000_000
        return max(1, self._int("engine/max_megapixels", default))

    @max_megapixels.setter
    def max_megapixels(self, value: int) -> None:
        self.store.setValue("engine/max_megapixels", int(value))

    @property
    def keep_cpu_arena(self) -> bool:
        """Keep the CPU arena warm between operations instead of handing it back (M11)."""
        return self._bool("engine/keep_cpu_arena", False)

    @keep_cpu_arena.setter
    def keep_cpu_arena(self, value: bool) -> None:
        self.store.setValue("engine/keep_cpu_arena", bool(value))

    # -- folders --------------------------------------------------------------------------------
    @property
    def models_dir(self) -> str:
        return self._str("folders/models", "")

    @models_dir.setter
    def models_dir(self, value: str) -> None:
        self.store.setValue("folders/models", value)

    @property
    def output_dir(self) -> str:
        """The folder chosen for results (kept while another choice is made); empty: none."""
        return self._str("folders/output", "")

    @output_dir.setter
    def output_dir(self, value: str) -> None:
        self.store.setValue("folders/output", value)

    @property
    def save_to(self) -> SaveTo:
        """Where results go; a `Tessera` folder beside each image unless the person chose."""
        raw = self.store.value("folders/save_to")
        try:
            return SaveTo(str(raw))
        except ValueError:
            pass
        # Before issue #21 only the folder was kept, and an empty one meant next to each image:
        # what a person saved then keeps working.
        if self.store.contains("folders/output"):
            return SaveTo.FOLDER if self.output_dir else SaveTo.BESIDE
        return SaveTo.TESSERA

    @save_to.setter
    def save_to(self, value: SaveTo) -> None:
        self.store.setValue("folders/save_to", value.value)

    @property
    def open_dir(self) -> Path:
        """Where Open and Add… start: the folder last opened from, while it exists; else the
        Pictures folder (or home). Never the current directory, which for a start from a
        terminal is the checkout or wherever the shell happened to be."""
        return self._existing_dir("folders/last_open") or default_open_dir()

    @open_dir.setter
    def open_dir(self, value: Path | str) -> None:
        self.store.setValue("folders/last_open", str(value))

    def open_dir_note(self) -> str:
        """Why Open starts where it does, when that may surprise: home, for want of a Pictures
        folder (empty otherwise)."""
        if self._existing_dir("folders/last_open") is not None or pictures_dir().is_dir():
            return ""
        return "starting in your home folder: there is no Pictures folder"

    @property
    def model_open_dir(self) -> Path:
        """Where "Add a model file…" starts: the folder a model was last added from, else
        Downloads (where a downloaded model lands), else home."""
        return self._existing_dir("folders/last_model") or default_model_dir()

    @model_open_dir.setter
    def model_open_dir(self, value: Path | str) -> None:
        self.store.setValue("folders/last_model", str(value))

    def _existing_dir(self, key: str) -> Path | None:
        text = self._str(key, "")
        folder = Path(text).expanduser() if text else None
        return folder if folder is not None and folder.is_absolute() and folder.is_dir() else None

    # -- the operation panel --------------------------------------------------------------------
    @property
    def operation(self) -> str:
        return self._str("panel/operation", "upscale")

    @operation.setter
    def operation(self, value: str) -> None:
        self.store.setValue("panel/operation", value)

    def model_for(self, operation: str) -> str:
        return self._str(f"panel/model/{operation}", "")

    def set_model_for(self, operation: str, model: str) -> None:
        self.store.setValue(f"panel/model/{operation}", model)

    @property
    def catalogue_url(self) -> str:
        """Where the model browser refreshes OpenModelDB's catalogue from (its API)."""
        from engine.models.openmodeldb import DEFAULT_REFRESH_URL

        return self._str("models/catalogue_url", DEFAULT_REFRESH_URL) or DEFAULT_REFRESH_URL

    @catalogue_url.setter
    def catalogue_url(self, value: str) -> None:
        self.store.setValue("models/catalogue_url", value.strip())

    @property
    def run_on_drop(self) -> bool:
        # Off until the person turns it on: a drop must not write files they did not ask for.
        return self._bool("panel/run_on_drop", False)

    @run_on_drop.setter
    def run_on_drop(self, value: bool) -> None:
        self.store.setValue("panel/run_on_drop", bool(value))

    @property
    def pasted_dir(self) -> Path:
        """Pasted images (and, unless an output folder is set, their results) go here."""
        text = self._str("folders/pasted", "")
        return Path(text).expanduser() if text else pictures_dir() / "Tessera"

    @pasted_dir.setter
    def pasted_dir(self, value: Path | str) -> None:
        self.store.setValue("folders/pasted", str(value))

    # -- the output step ------------------------------------------------------------------------
    @property
    def output_options(self) -> OutputOptions:
        try:
            fmt = OutputFormat(self._str("output/format", "png"))
        except ValueError:
            fmt = OutputFormat.PNG
        quality = min(100, max(1, self._int("output/quality", 90)))
        factor_text = self._str("output/factor", "")
        width = self._int("output/width", 0)
        try:
            factor = float(factor_text) if factor_text else None
        except ValueError:
            factor = None
        try:
            codec = VideoCodec(self._str("output/video_codec", "auto"))
        except ValueError:
            codec = VideoCodec.AUTO
        crf = self._int("output/crf", -1)
        video = VideoOptions(codec, crf if crf >= 0 else None)
        options = OutputOptions(
            fmt, quality, factor, width or None if factor is None else None, video=video
        )
        try:
            options.check()
        except Exception:  # a hand-edited settings file: fall back to the default
            return OutputOptions()
        return options

    @output_options.setter
    def output_options(self, value: OutputOptions) -> None:
        self.store.setValue("output/format", value.format.value)
        self.store.setValue("output/quality", value.quality)
        self.store.setValue("output/factor", "" if value.factor is None else f"{value.factor:g}")
        self.store.setValue("output/width", value.width or 0)
        self.store.setValue("output/video_codec", value.video.codec.value)
        self.store.setValue("output/crf", -1 if value.video.crf is None else value.video.crf)

    # -- recent files and speeds ----------------------------------------------------------------
    def recent_files(self) -> list[str]:
        value = self.store.value("recent/files", [])
        items: list[object] = [value] if isinstance(value, str) else list(value or [])  # type: ignore[call-overload]
        return [str(v) for v in items if str(v)]

    def add_recent(self, paths: list[str]) -> None:
        recent = [p for p in self.recent_files() if p not in paths]
        self.store.setValue("recent/files", (list(reversed(paths)) + recent)[:RECENT_MAX])

    def clear_recent(self) -> None:
        self.store.setValue("recent/files", [])

    def speed_for(self, key: str) -> str:
        return self._str("speed/" + key.replace("/", "|").replace("\\", "|"), "")

    def set_speed_for(self, key: str, value: str) -> None:
        self.store.setValue("speed/" + key.replace("/", "|").replace("\\", "|"), value)

    # -- window ---------------------------------------------------------------------------------
    def geometry(self) -> QByteArray | None:
        value = self.store.value("window/geometry")
        return value if isinstance(value, QByteArray) else None

    def window_state(self) -> QByteArray | None:
        value = self.store.value("window/state")
        return value if isinstance(value, QByteArray) else None

    def save_window(self, geometry: QByteArray, state: QByteArray) -> None:
        self.store.setValue("window/geometry", geometry)
        self.store.setValue("window/state", state)

    def sync(self) -> None:
        self.store.sync()

    # -- for the engine -------------------------------------------------------------------------
    @staticmethod
    def models_env() -> str:
        """TESSERA_MODELS_DIR when set: it wins over the remembered folder (Preferences say so)."""
        return os.environ.get(MODELS_ENV, "")

    def engine_settings(self) -> EngineSettings:
        models = None
        if not self.models_env() and self.models_dir:
            models = Path(self.models_dir).expanduser()
        return EngineSettings(
            models_dir=models,
            gpu_mem_limit=self.gpu_mem_limit_mb * MB or None,
            cpu_mem_limit=self.cpu_mem_limit_mb * MB or None,
            keep_cpu_arena=self.keep_cpu_arena,
            max_pixels=self.max_megapixels * 1_000_000,
        )
