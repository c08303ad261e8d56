"""Where the learnt speeds are kept: a small JSON file in the app's data folder.

One file, `speeds.json`, of text values by key (a model and device's speed, its last jobs, the
models known on a device), written whole (to a temporary file, then renamed) after every
finished job, so what 240 jobs taught survives a restart, a crash or a kill (issue #35: after
a restart every model was "The first job measures…" again). Values kept in QSettings by
earlier versions are read where the file has none.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from gui.settings import AppSettings

log = logging.getLogger(__name__)

FILE_NAME = "speeds.json"


class SpeedStore:
    """Text values by key, kept in `path` (None: in the settings only, as tests may want)."""

    def __init__(self, path: Path | None, settings: AppSettings) -> None:
        self.path = path
        self.settings = settings
        self._values: dict[str, str] = self._read() if path is not None else {}

    def _read(self) -> dict[str, str]:
        assert self.path is not None
        try:
            raw = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("the learnt speeds in %s could not be read: %s", self.path, e)
            return {}
        if not isinstance(raw, dict):
            return {}
        return {str(k): str(v) for k, v in raw.items()}

    def get(self, key: str) -> str:
        if key in self._values:
            return self._values[key]
        return self.settings.speed_for(key)

    def set(self, key: str, value: str) -> None:
        if self.path is None:
            self.settings.set_speed_for(key, value)
            return
        self._values[key] = value
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            spare = self.path.with_name(self.path.name + ".part")
            spare.write_text(json.dumps(self._values, indent=0, sort_keys=True), "utf-8")
            os.replace(spare, self.path)
        except OSError as e:  # an estimate is not worth a failed job: said in the log
            log.warning("the learnt speeds could not be kept in %s: %s", self.path, e)
