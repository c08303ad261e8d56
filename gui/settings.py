"""What the app remembers between runs (QSettings): device, runtime, folders, tile size, limits."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

from engine.settings import EngineSettings

ORGANIZATION = "Tessera"
APPLICATION = "Tessera"
MB = 1024 * 1024


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

    # -- folders --------------------------------------------------------------------------------
    @property
    def models_dir(self) -> str:
        return self._str("folders/models", "")

    @models_dir.setter
    def models_dir(self, value: str) -> None:
        self.store.setValue("folders/models", value)

    @property
    def output_dir(self) -> str:
        """Empty: next to each input."""
        return self._str("folders/output", "")

    @output_dir.setter
    def output_dir(self, value: str) -> None:
        self.store.setValue("folders/output", value)

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
    def run_on_drop(self) -> bool:
        return self._bool("panel/run_on_drop", True)

    @run_on_drop.setter
    def run_on_drop(self, value: bool) -> None:
        self.store.setValue("panel/run_on_drop", bool(value))

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
    def engine_settings(self) -> EngineSettings:
        # TESSERA_MODELS_DIR (tests, scripts) wins over the remembered folder.
        models = None
        if not os.environ.get("TESSERA_MODELS_DIR") and self.models_dir:
            models = Path(self.models_dir).expanduser()
        return EngineSettings(
            models_dir=models,
            gpu_mem_limit=self.gpu_mem_limit_mb * MB or None,
            cpu_mem_limit=self.cpu_mem_limit_mb * MB or None,
        )
