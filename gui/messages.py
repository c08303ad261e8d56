"""What the window tells a person: a notice with its level, its topic and an optional action.

Controllers emit these; the window shows them over its content. A notice's topic lets a later
success take back a warning it made stale ("the clipboard holds no image" after a paste that
worked). Qt-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from engine.errors import PIXEL_LIMIT_LEVER

# The pixel limit's lever in the window (the engine names the command line's, --max-megapixels).
WINDOW_PIXEL_LIMIT_LEVER = "raise “Largest image” in File ▸ Preferences…"


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


def for_window(text: str) -> str:
    """An engine message as the window says it: the levers it names are the window's (the
    pixel limit is Preferences' “Largest image”, not a command-line option)."""
    return text.replace(PIXEL_LIMIT_LEVER, WINDOW_PIXEL_LIMIT_LEVER)
