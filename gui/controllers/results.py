"""What happens to a finished result besides viewing it: Save as (written again in another
format and size through the engine's own output step, `engine.operations.products`, on the
task thread), opening it with the desktop, and the words when the
desktop cannot open it. QtCore only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.options import OutputOptions
from gui.inputs import InputSource
from gui.jobs import Version
from gui.messages import Notice, NoticeLevel, Topic, for_window
from gui.tasks import TaskOutcome, TaskThread
from gui.workspace import Workspace


def cannot_open(target: Path, file: Path) -> str:
    """What to say when no program opens `target` (a file, or the folder holding `file`)."""
    what = "folders" if target.is_dir() else f"{target.suffix or 'such'} files"
    return (
        f"Could not open {target.name}: no program is set to open {what} on this computer. "
        f"The file is {file}."
    )


class ResultsController(QObject):
    """Save as (on the task thread), and opening results and folders with the desktop."""

    statusRequested = Signal(str)
    noticeRequested = Signal(object)  # Notice

    def __init__(
        self,
        workspace: Workspace,
        tasks: TaskThread,
        open_url: Callable[[Path], bool],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.workspace = workspace
        self.tasks = tasks
        self.open_url = open_url  # the desktop's "open this"; tests replace it
        self.closed = False

    def saveable(self, version_id: str = "") -> Version | None:
        """The result Save as writes (the one shown on the right by default), or None with a
        line in the status bar saying why there is none."""
        version = self.workspace.viewed(version_id)
        if version is None or not version.viewable or version.is_original:
            self.statusRequested.emit("Nothing to save yet: run a job, then save its result.")
            return None
        return version

    def export(
        self,
        product: Path,
        target: Path,
        options: OutputOptions,
        source: InputSource | None,
        done: Callable[[Path | None], None] | None = None,
    ) -> None:
        size = (source.width, source.height) if source is not None else (0, 0)
        self.statusRequested.emit(f"Saving {target.name}…")

        def finished(outcome: TaskOutcome) -> None:
            if self.closed:
                return
            if outcome.error is not None:
                self.noticeRequested.emit(
                    Notice(
                        f"{target.name} was not saved: {for_window(str(outcome.error))}",
                        NoticeLevel.WARNING,
                        Topic.FILES,
                    )
                )
                if done is not None:
                    done(None)
                return
            written: Path = outcome.value
            self.noticeRequested.emit(
                Notice(
                    f"Saved {written.name} ({options.describe()}) in {written.parent}.",
                    NoticeLevel.INFO,
                    Topic.FILES,
                    "Show in folder",
                    lambda: self.open(written.parent, written),
                )
            )
            if done is not None:
                done(written)

        self.tasks.submit(lambda: _export(product, target, options, size), finished)

    def open_version(self, version_id: str, *, reveal: bool) -> None:
        version = self.workspace.viewed(version_id)
        if version is not None and version.path is not None:
            self.open(version.path.parent if reveal else version.path, version.path)

    def open_job(self, job_id: str, *, reveal: bool) -> None:
        job = self.workspace.jobs.get(job_id)
        if job is None or job.result is None or not job.result.products:
            return
        viewable = job.viewable()
        path = (viewable[0] if viewable else job.result.products[0]).path
        self.open(path.parent if reveal else path, path)

    def open(self, target: Path, file: Path) -> bool:
        """Open a file or folder with the desktop's program, or say why not and where it is."""
        if self.open_url(target):
            return True
        self.noticeRequested.emit(
            Notice(
                cannot_open(target, file),
                NoticeLevel.WARNING,
                Topic.FILES,
                "Copy the path",
                lambda: _copy_text(str(file)),
            )
        )
        return False


def _export(product: Path, target: Path, options: OutputOptions, size: tuple[int, int]) -> Path:
    # The engine's output step, imported on the task thread when first used (it brings the
    # operations and onnx with it, which the window need not load to show itself).
    from engine.operations.products import export_product

    return export_product(product, target, options, size)


def _copy_text(text: str) -> None:
    from PySide6.QtGui import QGuiApplication  # loaded when the person asks, not by controllers

    QGuiApplication.clipboard().setText(text)
