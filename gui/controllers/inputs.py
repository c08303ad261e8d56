"""What comes into the window: dropped, opened, pasted and handed-over files and pictures.

`InputsController` turns a drop (its MIME data), a file list or a pasted picture into inputs
of the workspace (through the jobs controller), installs dropped `.onnx` models, asks for each
new input's thumbnail off the GUI thread (an input whose thumbnail cannot be decoded is marked
unreadable with the reason, and Run leaves it out), remembers recent files, queues jobs when
"Start jobs for dropped files" is on, and says why anything was refused. It also empties the
list (Clear, at once, whatever its length) and brings it back (Undo). No widgets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QMimeData, QObject, Signal

from engine.errors import BadInputError
from engine.io.image import is_video
from engine.requests import Operation
from engine.settings import DEFAULT_MAX_PIXELS
from gui.controllers.jobs import AddOutcome, JobsController
from gui.controllers.models import ModelsController
from gui.inputs import Classified, InputSource, classify_paths, count_words
from gui.messages import Notice, NoticeLevel, Topic, for_window
from gui.settings import AppSettings
from gui.tasks import TaskOutcome, TaskThread

if TYPE_CHECKING:  # QtGui is loaded only when a picture is pasted (controllers load no QtGui)
    from PySide6.QtGui import QImage

Thumbnailer = Callable[[Path], object]  # an image file → its thumbnail (on the task thread)


@dataclass(frozen=True)
class DropOutcome:
    """What one drop (or open, or paste) did."""

    sources: tuple[InputSource, ...]
    jobs: tuple[str, ...]  # request ids queued
    models: tuple[Path, ...]  # .onnx files sent to installation
    refused: tuple[str, ...]  # the reasons, one per refused path
    sequence_offer: tuple[Path, ...] = ()


def local_paths(mime: QMimeData) -> tuple[list[Path], list[str]]:
    paths: list[Path] = []
    remote: list[str] = []
    for url in mime.urls():
        if url.isLocalFile():
            paths.append(Path(url.toLocalFile()))
        else:
            remote.append(url.toString())
    return paths, remote


def drop_words(mime: QMimeData) -> str:
    """What the drop overlay says while something is dragged over the window."""
    paths, remote = local_paths(mime)
    if paths:
        count = len(paths)
        return f"Drop to add {count} file{'s' if count != 1 else ''}"
    if mime.hasImage():
        return "Drop to add this picture"
    return "Only files on this computer can be dropped" if remote else "Drop to add"


log = logging.getLogger(__name__)


class InputsController(QObject):
    statusRequested = Signal(str)
    noticeRequested = Signal(object)  # Notice
    noticeCleared = Signal(object)  # Topic: an earlier notice of it is stale
    thumbnailReady = Signal(str, object)  # input key, its thumbnail (None: cannot be read)
    selectRequested = Signal(list)  # input keys the inputs panel should select (Undo of Clear)

    def __init__(
        self,
        jobs: JobsController,
        models: ModelsController,
        tasks: TaskThread,
        settings: AppSettings,
        thumbnailer: Thumbnailer,
        run_on_drop: Callable[[], bool],
        operation: Callable[[], Operation],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.jobs = jobs
        self.models = models
        self.tasks = tasks
        self.settings = settings
        self.thumbnailer = thumbnailer
        self.run_on_drop = run_on_drop
        self.operation = operation
        self.closed = False
        self._run_later: bool | None = None  # how the rest of a large drop is run as it comes
        jobs.addedLater.connect(lambda found: self._take(found, self._run_later, first=False))
        jobs.reader = self._read_headers

    def _read_headers(
        self, paths: Sequence[Path], done: Callable[[Classified | None], None]
    ) -> None:
        """The headers of a large add's later part, read on the task thread (on this one they
        cost ~1 ms per 10 images, and 1000 stalled the window, issue #21)."""
        part = list(paths)

        def read(outcome: TaskOutcome) -> None:
            if self.closed:
                return
            if outcome.error is not None:  # classify_paths says why per path; this is a bug
                log.warning("reading the headers of %d paths failed: %s", len(part), outcome.error)
            done(outcome.value if outcome.error is None else None)

        self.tasks.submit(lambda: classify_paths(part), read, urgent=True)

    def _warn(self, text: str) -> None:
        self.noticeRequested.emit(Notice(text, NoticeLevel.WARNING, Topic.INPUTS))

    def accept_mime(self, mime: QMimeData) -> DropOutcome | None:
        if mime.hasUrls():
            paths, remote = local_paths(mime)
            if remote and not paths:
                self._warn(
                    "Only files on this computer can be dropped; download "
                    f"{remote[0]} first. Nothing was added."
                )
                return None
            outcome = self.accept_paths(paths)
            if remote:
                self._warn("Skipped what is not a local file: " + ", ".join(remote[:3]))
            return outcome
        if mime.hasImage():
            from PySide6.QtGui import QImage

            image = mime.imageData()
            if isinstance(image, QImage) and not image.isNull():
                return self.accept_image(image)
        self._warn(
            "Only image files, clips, folders of frames and .onnx models can be dropped here. "
            "Nothing was added."
        )
        return None

    def accept_paths(self, paths: Sequence[Path | str], *, run: bool | None = None) -> DropOutcome:
        """Add images and folders as inputs (each image its own input) and show the first;
        queue jobs when run-on-drop is on; install .onnx files; say why anything was refused.

        Clips are read on the task thread (a clip's header and first frame: a slow disk or a
        network share must not freeze the window) and join the inputs when that is done; the
        outcome returned is of the other paths."""
        given = [Path(p) for p in paths]  # once: 1000 paths made thrice cost a frame
        clips = [p for p in given if is_video(p) and p.is_file()]
        if clips:
            self._read_clips(clips, run)
        read_apart = set(clips)
        others = [p for p in given if p not in read_apart] if clips else given
        if not others and clips:
            return DropOutcome((), (), (), ())
        return self._take(self.jobs.add_paths(others), run)

    def _read_clips(self, clips: list[Path], run: bool | None) -> None:
        names = ", ".join(p.name for p in clips[:3]) + (" …" if len(clips) > 3 else "")
        self.statusRequested.emit(f"Reading {names}…")

        def done(outcome: TaskOutcome) -> None:
            if self.closed:
                return
            if outcome.error is not None:  # classify_paths says why per path; this is a bug
                self._warn(f"{names}: could not be read ({outcome.error}).")
                return
            self._take(self.jobs.add_found(outcome.value), run)

        self.tasks.submit(lambda: classify_paths(clips), done, urgent=True)

    def _take(self, found: AddOutcome, run: bool | None, first: bool = True) -> DropOutcome:
        """What follows an add: all of it, or one part of a large drop (`first` False for the
        parts after the first, which the jobs controller adds a part per turn)."""
        if first:
            self._run_later = run
        for model in found.models:
            self.statusRequested.emit(f"Checking {model.name}…")
            self.models.install(model)
        for source in found.sources:
            self.request_thumbnail(source)
        if found.sources:
            self.settings.add_recent([str(s.paths[0]) for s in found.sources])
        if found.refused:
            tail = "" if found.sources or found.models else " Nothing was added."
            self._warn(for_window("\n".join(found.refused)) + tail)
        elif found.sources and first:
            self.noticeCleared.emit(Topic.INPUTS)  # an earlier refusal is stale now
        run = self.run_on_drop() if run is None else run
        jobs: list[str] = []
        if found.sources and run:
            if self.models.inventory is None:
                self.jobs.defer(found.sources)
                self.statusRequested.emit(
                    "Looking for the installed models; the jobs start in a moment."
                )
            else:
                jobs = self.jobs.queue_jobs(list(found.sources), self.operation())
        elif found.sources and first:
            # What was added, counted as Run counts (an image and a clip are "1 image and 1
            # clip"); what Run will run is the button's to say: a file found broken later
            # makes a count here stale ("Press Run 4 images" beside "Run 3 images").
            what = count_words(found.sources)
            if found.more:  # the rest of a large drop comes a part per turn
                what = f"{len(found.sources) + found.more} images"
            self.statusRequested.emit(f"Added {what}. Press Run (Ctrl+Return) when ready.")
        if found.sequence_offer and not found.refused:
            offer = found.sequence_offer
            self.noticeRequested.emit(
                Notice(
                    f"These {len(offer)} numbered images are the same size. Each is processed on "
                    "its own; if they are the frames of one animation, process them as one "
                    "sequence instead.",
                    NoticeLevel.INFO,
                    Topic.INPUTS,
                    "Process as one sequence",
                    lambda: self.merge_as_sequence(offer),
                )
            )
        return DropOutcome(
            found.sources, tuple(jobs), found.models, found.refused, found.sequence_offer
        )

    def merge_as_sequence(self, paths: Sequence[Path]) -> InputSource | None:
        sequence = self.jobs.merge_as_sequence(paths)
        if sequence is not None:
            self.request_thumbnail(sequence)
            self.statusRequested.emit(f"{sequence.name}: one sequence of {sequence.frames} frames.")
        return sequence

    def accept_image(self, image: QImage) -> DropOutcome | None:
        """A pasted or dragged-in picture: saved as a PNG in the pasted-images folder (Pictures/
        Tessera unless Preferences say otherwise, so it and its results can be found), then an
        input like any other."""
        folder = self.settings.pasted_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._warn(f"Cannot save the pasted image in {folder}: {e.strerror or e}.")
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = folder / f"pasted-{stamp}.png"
        n = 1
        while path.exists():
            path = folder / f"pasted-{stamp}-{n}.png"
            n += 1
        if not image.save(str(path)):  # the .png suffix picks the format
            self._warn(f"Cannot save the pasted image as {path}.")
            return None
        outcome = self.accept_paths([path])
        self.noticeRequested.emit(
            Notice(f"Pasted image saved as {path}.", NoticeLevel.INFO, Topic.INPUTS)
        )
        return outcome

    def paste(self) -> None:
        from PySide6.QtGui import QGuiApplication

        clipboard = QGuiApplication.clipboard()
        mime = clipboard.mimeData()
        if mime is not None and mime.hasUrls():
            self.accept_mime(mime)
            return
        image = clipboard.image()
        if image.isNull():
            self._warn("The clipboard holds no image or files to add.")
            return
        self.accept_image(image)

    def request_thumbnail(self, source: InputSource) -> None:
        path, make = source.paths[0], self.thumbnailer

        def done(outcome: TaskOutcome) -> None:
            if self.closed:
                return
            image = outcome.value if outcome.error is None else None
            self.thumbnailReady.emit(source.key, image)
            reason = unreadable(source, outcome.error)
            if reason:
                self.jobs.mark_unreadable(source.key, reason)

        self.tasks.submit(lambda: make(path), done)

    # -- clear and undo -----------------------------------------------------------------------
    def clear(self) -> int:
        """Empty the list at once; a notice offers Undo (and Ctrl+Z brings it back)."""
        cleared = self.jobs.clear()
        count = len(cleared.sources)
        if count:
            self.noticeRequested.emit(
                Notice(
                    f"Cleared {count} image{'s' if count != 1 else ''} from the list "
                    "(the files stay).",
                    NoticeLevel.INFO,
                    Topic.INPUTS,
                    "Undo",
                    self.undo_clear,
                )
            )
        return count

    def undo_clear(self) -> int:
        """The list as Clear found it: its inputs in order, their results and marks, the
        selection and the image in view. Returns how many came back."""
        cleared = self.jobs.undo_clear()
        if cleared is None:
            self.statusRequested.emit("Nothing to undo.")
            return 0
        self.noticeCleared.emit(Topic.INPUTS)
        for source in cleared.sources.values():
            self.request_thumbnail(source)
        key, version = cleared.viewing
        if key is not None and key in cleared.sources:
            self.jobs.show(key, version or "")
        if cleared.selected:
            self.selectRequested.emit(list(cleared.selected))
        count = len(cleared.sources)
        self.statusRequested.emit(f"Brought back {count} image{'s' if count != 1 else ''}.")
        return count


def unreadable(source: InputSource, error: BaseException | None) -> str:
    """Why the input cannot be read, from its thumbnail's failure; empty when it can be, or
    when the failure is no fault of the file (memory, or the thumbnail's own pixel limit)."""
    if not isinstance(error, BadInputError):
        return ""
    if source.width * source.height * max(source.frames, 1) > DEFAULT_MAX_PIXELS:
        return ""  # too large for a thumbnail; the job's own limit decides
    return str(error)
