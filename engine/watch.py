"""A watched folder: the image files that arrive in it, each taken once, when whole.

A poll loop, not inotify/FSEvents/ReadDirectoryChangesW: it needs no dependency, behaves the
same on every platform and on network shares and removable disks (where change notification
is missing or unreliable), and "arrived" is not "finished" anyway — a notification comes at the
first byte of a copy, so a watcher must look again until the file stops changing. Here a file
is ready when its size and modification time are the same over `stable_polls` looks in a row,
it can be opened and read (on Windows a copy in progress holds the file shut), and it is whole
by its own format (engine/io/wholeness.py: a PNG has its IEND, a JPEG its EOI…) — so a copy
that stalls for longer than the looks (a slow network share) is still not taken half-way.

Products never re-enter the watch: only the folder's own top level is looked at (a default
output folder `Tessera/` inside it is never scanned), hidden and temp files are skipped, the
products the watch's jobs published are remembered (`add_products`), and a name that is a
taken file's stem followed by `-suffix` is taken for a product (as engine/io/sequences.py
does). The engine's part only: the command line (engine/watch_cli.py) and the window
(gui/controllers/watch.py) each run the files with their own engine.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.io.image import IMAGE_SUFFIXES
from engine.io.wholeness import is_whole

__all__ = ["STALLED_LOOKS", "Arrival", "FolderWatch"]

STALLED_LOOKS = 10  # unchanged but not whole over this many looks: said once (`stalled`)
_TRAILED = frozenset({".jpg", ".jpeg"})  # formats whose files may go on after their end
_PRODUCT_TAIL = re.compile(r"-.*[^\W\d_].*\.[^.]+$")  # `-suffix.ext` with a letter in it


@dataclass(frozen=True)
class Arrival:
    """A file that arrived and is whole."""

    path: Path
    size: int
    first_seen: float  # time.monotonic() of the first look that saw it
    last_change: float  # time.monotonic() of the look that last saw it change


@dataclass
class _Seen:
    signature: tuple[int, int]  # size, mtime_ns
    stable: int
    first_seen: float
    last_change: float


class FolderWatch:
    """Look at `folder` with `poll()`; each call returns the files that became ready since."""

    def __init__(self, folder: Path, *, stable_polls: int = 2) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise NotADirectoryError(f"{self.folder} is not a folder")
        self.stable_polls = max(1, stable_polls)
        self._seen: dict[str, _Seen] = {}
        self._taken: set[str] = set()
        self._products: set[str] = set()
        self._lock = threading.Lock()  # products are added from the thread that runs the jobs
        # Files unchanged over STALLED_LOOKS looks yet not whole (a copy that stopped, a damaged
        # file), new at the last poll: said once, and still taken should they become whole.
        self.stalled: list[Path] = []

    def add_products(self, paths: list[Path]) -> None:
        """Files the watch's jobs wrote: never taken as inputs, should they land here."""
        with self._lock:
            for path in paths:
                if Path(path).parent == self.folder:
                    self._products.add(Path(path).name)

    def taken(self) -> int:
        return len(self._taken)

    def poll(self) -> list[Arrival]:
        now = time.monotonic()
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return []  # the folder went away (an unplugged disk): nothing arrives
        present: set[str] = set()
        ready: list[Arrival] = []
        self.stalled = []
        stems = {Path(name).stem for name in self._taken}
        with self._lock:
            products = set(self._products)
        for entry in sorted(entries, key=lambda e: e.name):
            name = entry.name
            if not self._candidate(name, stems, products):
                continue
            try:
                if not entry.is_file():
                    continue
                info = entry.stat()
            except OSError:
                continue
            present.add(name)
            if name in self._taken:
                continue
            signature = (info.st_size, info.st_mtime_ns)
            seen = self._seen.get(name)
            if seen is None or seen.signature != signature:
                first = seen.first_seen if seen is not None else now
                self._seen[name] = _Seen(signature, 0, first, now)
                if self.stable_polls > 1:
                    continue
                seen = self._seen[name]
            else:
                seen.stable += 1
            if seen.stable + 1 < self.stable_polls or info.st_size == 0:
                continue
            if not _readable(self.folder / name):
                continue
            if not is_whole(self.folder / name):
                # A JPEG may carry data after its end marker (a phone's motion photo appends a
                # clip): after STALLED_LOOKS unchanged looks it is taken, the decoder judges.
                lenient = Path(name).suffix.lower() in _TRAILED
                if seen.stable + 1 == STALLED_LOOKS and not lenient:
                    self.stalled.append(self.folder / name)
                if not (lenient and seen.stable + 1 >= STALLED_LOOKS):
                    continue
            self._taken.add(name)
            del self._seen[name]
            ready.append(
                Arrival(self.folder / name, info.st_size, seen.first_seen, seen.last_change)
            )
        # A file that went away may come again (a new copy): it is taken again then.
        self._taken &= present
        for gone in set(self._seen) - present:
            del self._seen[gone]
        return ready

    def _candidate(self, name: str, stems: set[str], products: set[str]) -> bool:
        if name.startswith(".") or name in products:
            return False  # hidden, a temp file of ours (`.name.partial-…`), or our product
        if Path(name).suffix.lower() not in IMAGE_SUFFIXES:
            return False
        cuts = [i for i, ch in enumerate(name) if ch == "-" and name[:i] in stems]
        return not any(_PRODUCT_TAIL.match(name, i) for i in cuts)


def _readable(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return bool(file.read(1))
    except OSError:
        return False
