"""What the window tells a person: a notice with its level, its topic and an optional action.

Controllers emit these; the window shows them over its content. A notice's topic lets a later
success take back a warning it made stale ("the clipboard holds no image" after a paste that
worked). Qt-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class NoticeLevel(Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Topic(Enum):
    INPUTS = "inputs"  # drops, opens, pastes
    MODELS = "models"  # installs, downloads, the model list
    JOBS = "jobs"
    FILES = "files"  # open, show in folder, save as, copy
    SETTINGS = "settings"


@dataclass(frozen=True)
class Notice:
    text: str
    level: NoticeLevel = NoticeLevel.INFO
    topic: Topic = Topic.INPUTS
    action_label: str = ""  # a button on the notice, e.g. "Process as one sequence"
    action: Callable[[], object] | None = None
