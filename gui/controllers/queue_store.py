"""The window's queue kept on disk, so a batch survives a crash, a kill or a reboot.

A journal of JSON lines in the app's data folder (`queue.jsonl`): one line per Run (the batch:
its settings and every job's inputs, written and synced at once), then one line per report of
jobs ending (a job, or all that Cancel all ended together: done with their products, failed,
cancelled). An ending is appended at once — a write to the system's cache, which a kill or a
crash of the app does not lose — and synced to the disk at most every SYNC_MS, for however many
ended meanwhile (only a power cut loses those). The file is never rewritten per job. When the
window has nothing left to do the journal is removed: only an interrupted batch leaves one. The
next start reads it and offers "Resume 612 of 1000 (Photo ×4)": the jobs that never ended, and
the done ones whose products are gone or not whole, queued again with the batch's settings. A
torn last line (killed mid-write) is passed over.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from engine.wire import from_json, to_json
from gui.inputs import classify_paths
from gui.jobs import JobSettings, JobState
from gui.messages import Notice, NoticeLevel, Topic
from gui.tasks import TaskOutcome, TaskThread

if TYPE_CHECKING:
    from gui.controllers.jobs import JobsController
    from gui.workspace import Workspace

log = logging.getLogger(__name__)

JOURNAL = "queue.jsonl"
SYNC_MS = 500  # job endings are synced to the disk within this (a power cut loses these)
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".gif", ".bmp"}


@dataclass(frozen=True)
class StoredJob:
    id: str
    inputs: tuple[Path, ...]


@dataclass(frozen=True)
class InterruptedBatch:
    label: str  # "Photo ×4"
    settings: JobSettings
    total: int
    todo: tuple[StoredJob, ...]

    @property
    def text(self) -> str:
        return f"{len(self.todo)} of {self.total} ({self.label})"


def resume_text(batches: Sequence[InterruptedBatch]) -> str:
    """`Resume 612 of 1000 (Photo ×4)`, several batches summed with their labels."""
    if len(batches) == 1:
        return f"Resume {batches[0].text}"
    todo = sum(len(b.todo) for b in batches)
    total = sum(b.total for b in batches)
    labels = ", ".join(dict.fromkeys(b.label for b in batches))
    return f"Resume {todo} of {total} ({labels})"


def is_whole(path: Path) -> bool:
    """A product is taken for done only when its file is there and reads to its end."""
    try:
        if path.stat().st_size <= 0:
            return False
    except OSError:
        return False
    if path.suffix.lower() not in _IMAGE_SUFFIXES:
        return True
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.verify()
        return True
    except Exception:  # any decoder error means not whole
        return False


def read_journal(path: Path, whole: Callable[[Path], bool] = is_whole) -> list[InterruptedBatch]:
    """The batches of `path` with work left, oldest first."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as e:
        log.warning("cannot read the queue journal %s: %s", path, e)
        return []
    batches: dict[str, tuple[str, JobSettings, list[StoredJob]]] = {}
    ended: dict[str, tuple[str, tuple[Path, ...]]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
            if record["t"] == "batch":
                settings = from_json(JobSettings, record["settings"])
                jobs = [StoredJob(j[0], tuple(Path(p) for p in j[1])) for j in record["jobs"]]
                batches[record["id"]] = (record["label"], settings, jobs)
            elif record["t"] == "end":
                for job_id, state, products in record["jobs"]:
                    ended[job_id] = (state, tuple(Path(p) for p in products))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            # A line torn by a kill mid-write, or an older format: the rest still counts.
            log.info("queue journal %s line %d passed over: %r", path, number, e)
    out = []
    for label, settings, jobs in batches.values():
        names = _product_names(jobs, ended, settings.output_dir)
        todo = []
        for job in jobs:
            end = ended.get(job.id)
            if end is None:
                made = _expected(job, names)
                if not made or not all(whole(p) for p in made):
                    todo.append(job)  # (made: it ended as the window was killed, unheard)
            elif end[0] == "done" and not all(whole(p) for p in end[1]):
                todo.append(job)  # its product is gone or half there: made again
        if todo:
            out.append(InterruptedBatch(label, settings, len(jobs), tuple(todo)))
    return out


# How a batch names its products, learnt from its own done jobs: the product's folder relative
# to the input's (or fixed, when the Run chose one) and what follows the input's stem.
_Name = tuple[Path | None, str, str]  # (fixed folder | None, folder relative to input's, tail)


def _product_names(
    jobs: Sequence[StoredJob],
    ended: dict[str, tuple[str, tuple[Path, ...]]],
    fixed_dir: Path | None,
) -> tuple[_Name, ...]:
    for job in jobs:
        end = ended.get(job.id)
        if end is None or end[0] != "done" or len(job.inputs) != 1 or not end[1]:
            continue
        source = job.inputs[0]
        names: list[_Name] = []
        for product in end[1]:
            if not product.name.startswith(source.stem):
                return ()  # not named after its input: no rule to learn
            tail = product.name[len(source.stem) :]
            if fixed_dir is not None:  # the Run chose the folder: every product goes there
                names.append((product.parent, "", tail))
                continue
            try:
                names.append((None, os.path.relpath(product.parent, source.parent), tail))
            except ValueError:  # another drive (Windows): a fixed folder
                names.append((product.parent, "", tail))
        return tuple(names)
    return ()


def _expected(job: StoredJob, names: tuple[_Name, ...]) -> list[Path]:
    """The products a job that never said it ended would have, by its batch's rule: a job
    killed in the instant between publishing them and the window hearing of it is done."""
    if len(job.inputs) != 1 or not names:
        return []
    source = job.inputs[0]
    return [
        (fixed if fixed is not None else source.parent / relative) / (source.stem + tail)
        for fixed, relative, tail in names
    ]


class QueueStore(QObject):
    """Follows the jobs controller's batches and the workspace's job endings into the journal,
    and offers an interrupted batch at the next start."""

    noticeRequested = Signal(object)  # Notice: the resume offer
    resumed = Signal(list)  # the job ids a resume queued
    journalRead = Signal(int)  # the interrupted batches found at start (0: none)

    def __init__(
        self,
        folder: Path,
        workspace: Workspace,
        jobs: JobsController,
        tasks: TaskThread,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.path = folder / JOURNAL
        self.workspace = workspace
        self.jobs = jobs
        self.tasks = tasks
        self.interrupted: list[InterruptedBatch] = []  # read by `offer`, off the GUI thread
        self._ours: set[str] = set()  # the job ids of batches recorded by this window
        self._unsynced = False  # endings written but not synced yet
        self._closed = False
        self._told_unwritable = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SYNC_MS)
        self._timer.timeout.connect(self.sync)
        jobs.batchQueued.connect(self.record_batch)
        workspace.jobEnded.connect(lambda job_id: self._on_ended([job_id]))
        workspace.jobsEnded.connect(self._on_ended)

    # -- the offer ----------------------------------------------------------------------------
    def offer(self) -> None:
        """Read the journal on the task thread (each done product is checked whole), then
        offer what was interrupted: a notice with a Resume button."""
        path = self.path
        self.tasks.submit(lambda: read_journal(path), self._on_read)

    def _on_read(self, outcome: TaskOutcome) -> None:
        if self._closed:
            return
        if outcome.error is not None:
            log.warning("cannot read the queue journal: %s", outcome.error)
            self.journalRead.emit(0)
            return
        batches: list[InterruptedBatch] = outcome.value
        # A batch run since start is this window's own, not an interrupted one.
        batches = [b for b in batches if not any(j.id in self._ours for j in b.todo)]
        self.interrupted = batches
        self.journalRead.emit(len(batches))
        if not batches:
            return
        todo = sum(len(b.todo) for b in batches)
        plural = "es were" if len(batches) > 1 else " was"
        self.noticeRequested.emit(
            Notice(
                f"The last batch{plural} interrupted before the end: {todo} "
                f"job{'s' if todo != 1 else ''} not done.",
                NoticeLevel.INFO,
                Topic.JOBS,
                action_label=resume_text(batches),
                action=self.resume,
            )
        )

    def resume(self) -> None:
        """Queue the interrupted batches' jobs that are not done and whole, with their own
        settings; inputs that are gone are said, the rest still run. Their headers are read
        on the task thread (a thousand take ~0.2 s), then they are queued as a Run is."""
        batches, self.interrupted = self.interrupted, []
        singles = [[j.inputs[0] for j in b.todo if len(j.inputs) == 1] for b in batches]
        self.tasks.submit(
            lambda: [classify_paths(paths) for paths in singles],
            lambda outcome: self._queue_resumed(batches, outcome),
        )

    def _queue_resumed(self, batches: list[InterruptedBatch], outcome: TaskOutcome) -> None:
        if self._closed:
            return
        if outcome.error is not None:
            self.interrupted = batches  # still there to resume
            self.noticeRequested.emit(
                Notice(
                    f"The interrupted batch could not be read again: {outcome.error}",
                    NoticeLevel.WARNING,
                    Topic.JOBS,
                )
            )
            return
        self._drop_journal()  # the resumed jobs are written again as a new batch
        ids: list[str] = []
        refused: list[str] = []
        for batch, found in zip(batches, outcome.value, strict=True):
            refused.extend(found.refused)
            sources = list(found.sources)
            for job in batch.todo:
                if len(job.inputs) > 1:  # a sequence of frames: one input again
                    merged = self.jobs.merge_as_sequence(job.inputs)
                    if merged is not None:
                        sources.append(merged)
            self.workspace.add_sources(sources)
            ids.extend(self.jobs.queue(sources, batch.settings))
        if refused:
            self.noticeRequested.emit(
                Notice(
                    f"{len(refused)} input{'s' if len(refused) != 1 else ''} of the interrupted "
                    f"batch could not be queued again: {refused[0]}",
                    NoticeLevel.WARNING,
                    Topic.JOBS,
                )
            )
        self.resumed.emit(ids)

    # -- the journal --------------------------------------------------------------------------
    def record_batch(self, settings: JobSettings, jobs: list[tuple[str, tuple[Path, ...]]]) -> None:
        """A Run: written and synced at once (one line however many jobs)."""
        if self._closed or not jobs:
            return
        self._ours.update(job_id for job_id, _ in jobs)
        record = {
            "t": "batch",
            "id": jobs[0][0],
            "label": settings.model_label,
            "settings": to_json(settings),
            "jobs": [[job_id, [str(p) for p in paths]] for job_id, paths in jobs],
        }
        self._append(record, sync=True)

    def _on_ended(self, job_ids: list[str]) -> None:
        if self._closed:
            return
        ends: list[list[Any]] = []
        for job_id in job_ids:
            job = self.workspace.jobs.get(job_id)
            if job is None or job_id not in self._ours:
                continue
            if job.state is JobState.FINISHED and job.result is not None:
                ends.append([job_id, "done", [str(p.path) for p in job.result.products]])
            else:
                ends.append([job_id, job.state.name.lower(), []])
        if self._idle():
            self._drop_journal()  # nothing left to resume: no journal at all
        elif ends:
            self._append({"t": "end", "jobs": ends}, sync=False)
            self._unsynced = True
            if not self._timer.isActive():
                self._timer.start()

    def _idle(self) -> bool:
        return bool(self._ours) and not self.jobs.waiting() and not self.workspace.active()

    def sync(self) -> None:
        """The endings written since the last sync reach the disk: one fsync for them all."""
        self._timer.stop()
        if not self._unsynced:
            return
        self._unsynced = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return  # removed meanwhile: nothing to keep
        try:
            os.fsync(fd)
        except OSError as e:
            log.warning("cannot sync the queue journal %s: %s", self.path, e)
        finally:
            os.close(fd)

    def _append(self, record: dict[str, Any], *, sync: bool) -> None:
        # One write of one whole line in append mode: a kill leaves it whole or torn at the end.
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:  # the batch runs on; only its resume is lost, and said once
            log.warning("cannot write the queue journal %s: %s", self.path, e)
            if not self._told_unwritable:
                self._told_unwritable = True
                self.noticeRequested.emit(
                    Notice(
                        f"This batch runs, but cannot be resumed after a crash: "
                        f"{self.path} cannot be written ({e.strerror or e}).",
                        NoticeLevel.WARNING,
                        Topic.FILES,  # not JOBS: queueing clears those as stale
                    )
                )

    def _drop_journal(self) -> None:
        self._timer.stop()
        self._unsynced = False
        self._ours.clear()
        if self.interrupted:
            # Not resumed yet: keep its batches (rewritten alone, atomically), drop ours.
            self._rewrite(self.interrupted)
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError as e:
            log.warning("cannot remove the queue journal %s: %s", self.path, e)

    def _rewrite(self, batches: list[InterruptedBatch]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        lines = [
            {
                "t": "batch",
                "id": f"kept-{n}",
                "label": b.label,
                "settings": to_json(b.settings),
                # The done ones count in the total: a placeholder with no inputs, ended.
                "jobs": [[j.id, [str(p) for p in j.inputs]] for j in b.todo]
                + [[f"kept-{n}-done-{k}", []] for k in range(b.total - len(b.todo))],
            }
            for n, b in enumerate(batches)
        ]
        done = [
            [f"kept-{n}-done-{k}", "done", []]
            for n, b in enumerate(batches)
            for k in range(b.total - len(b.todo))
        ]
        if done:
            lines.append({"t": "end", "jobs": done})
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("cannot rewrite the queue journal %s: %s", self.path, e)

    def close(self) -> None:
        """The window closes: what ended is synced; what did not stays to be resumed."""
        self.sync()
        self._closed = True
