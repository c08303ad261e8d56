"""The job list: one line when idle ("3 done · 1 failed"), the batch ("137/1000 · about 3 min
left") and its rows while jobs run, the running one kept in view. A row shows progress ("frame 2/5 · tile 14/36"), elapsed time and the
time left (from this model's measured speed until the job's own pace is known), Cancel while it
waits or runs, Open / Show in folder when done, and "Failed" in red with the reason."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QMouseEvent, QPalette, QWheelEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollBar,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.jobs import Job, JobState, fmt_duration, fmt_estimate, progress_text
from gui.widgets.batch_pace import BatchPace
from gui.widgets.elided_label import ElidedLabel

FAILED_STYLE = "color: #c0392b;"
ROWS_SHOWN = 3  # rows visible while jobs run; the rest scroll
FOLLOW_AFTER_S = 8.0  # after the person scrolls the list, it follows the running job again
FRAME_MS = 16  # the batch line and the rows in view redraw at most once a frame


class JobRow(QFrame):
    cancelRequested = Signal(str)
    showRequested = Signal(str)
    openRequested = Signal(str)
    revealRequested = Signal(str)

    def __init__(self, job: Job, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.job = job  # rebound as the list scrolls (`bind`)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.title = ElidedLabel()
        # Who asked ("— from the command line (pid 123)"), never elided: a long file name in
        # the title must not hide which terminal a row belongs to.
        self.origin_label = QLabel()
        self.origin_label.hide()
        self.state_label = QLabel()
        self.time_label = QLabel()
        self.time_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(True)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.message.hide()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Cancel this job")
        self.cancel_button.clicked.connect(lambda: self.cancelRequested.emit(self.job.id))
        self.open_button = QPushButton("Open")
        self.open_button.setToolTip("Open the result in the system's image viewer")
        self.open_button.clicked.connect(lambda: self.openRequested.emit(self.job.id))
        self.reveal_button = QPushButton("Show in folder")
        self.reveal_button.setToolTip("Open the folder that holds the result")
        self.reveal_button.clicked.connect(lambda: self.revealRequested.emit(self.job.id))

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(8)  # "Queued (a few seconds)", not "Queued(a few seconds)"
        # The title takes its text's width (eliding when the row is short of it) and the mark
        # follows it; the room left goes between them and the state.
        self.title.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        top.addWidget(self.title)
        top.addWidget(self.origin_label)
        top.addStretch(1)
        top.addWidget(self.state_label)
        top.addWidget(self.time_label)
        bottom = QHBoxLayout()
        bottom.setContentsMargins(0, 0, 0, 0)
        bottom.addWidget(self.bar, 1)
        bottom.addWidget(self.message, 1)
        bottom.addWidget(self.cancel_button)
        bottom.addWidget(self.open_button)
        bottom.addWidget(self.reveal_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 3, 6, 3)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addLayout(bottom)
        for button in (self.cancel_button, self.open_button, self.reveal_button):
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click leaves the focus where it was
        self._styles: dict[QWidget, str] = {}
        self._titled: Job | None = None  # the job whose title the row shows
        self._title = ("", "")
        self._laid: tuple[JobState, int, int] | None = None
        self.refresh()

    def _style(self, widget: QWidget, sheet: str) -> None:
        # A style sheet set again costs a restyle of the widget even when it is the same.
        if self._styles.get(widget) != sheet:
            self._styles[widget] = sheet
            widget.setStyleSheet(sheet)

    def bind(self, job: Job) -> None:
        self.job = job
        self.refresh()

    def refresh(self, now: float | None = None) -> None:
        job = self.job
        if self._titled is not job:  # a job's title is the same all its life (and reads a stat)
            self._titled = job
            self._title = (job.heading, "\n".join(str(p) for p in job.request.inputs))
            self.origin_label.setText(job.origin_mark)
            self.origin_label.setVisible(bool(job.origin_mark))
        self.title.setText(*self._title)  # and lays the row out again for its new texts
        state = job.state
        self.state_label.setText(state.value)
        failed = state is JobState.FAILED
        self._style(self.state_label, FAILED_STYLE + " font-weight: bold;" if failed else "")
        running = state in (JobState.LOADING, JobState.RUNNING, JobState.CANCELLING)
        trouble = failed or (state is JobState.FINISHED and bool(job.message))
        self.bar.setVisible(not trouble)
        # QProgressBar repaints at once on a new value; with updates off it is drawn with the
        # rest of the frame instead (a row rebinds each time a job of a batch ends).
        self.bar.setUpdatesEnabled(False)
        self.bar.setValue(int(job.fraction * 1000))
        text = progress_text(job.progress, job.request.operation)
        if state is JobState.QUEUED:
            text = "waiting"
        elif state is JobState.LOADING:
            text = "loading the model"
        elif state is JobState.CANCELLED:
            text = "cancelled"
        elif state is JobState.FINISHED:
            text = "done"
        elif job.writing:
            text = "writing the result…"
        self.bar.setFormat(text or "%p%")
        self.bar.setUpdatesEnabled(True)
        self.message.setVisible(trouble)
        self.message.setText(job.message)
        self._style(self.message, FAILED_STYLE if failed else "")
        self.cancel_button.setVisible(state.cancellable or state is JobState.CANCELLING)
        self.cancel_button.setEnabled(state.cancellable)
        has_result = state is JobState.FINISHED and bool(job.result and job.result.products)
        self.open_button.setVisible(has_result)
        self.reveal_button.setVisible(has_result)
        times = ""
        if job.started_at is not None:
            times = fmt_duration(job.elapsed(now))
            eta = job.eta(now) if running else None
            if eta is not None:  # while writing: the write's own estimate, when one is known
                times += f" · {fmt_estimate(eta)} left"
                if job.eta_is_estimate() and not job.writing:
                    times += " (estimate)"
        elif state is JobState.QUEUED and job.expected_s is not None:
            times = f"({fmt_estimate(job.expected_s)})"
        self.time_label.setText(times)
        laid = (state, self.state_label.sizeHint().width(), self.time_label.sizeHint().width())
        if laid != self._laid:  # new widths: lay the row out now, not a frame late (stale)
            self._laid = laid
            layout = self.layout()
            if layout is not None:
                layout.activate()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.showRequested.emit(self.job.id)
        super().mouseReleaseEvent(event)


class JobList(QWidget):
    """A virtual list: a few real rows (`rows_shown`) bound to whichever jobs are in view, over
    a scroll bar for the rest, so a thousand jobs cost no more than three (issue #21). Counts
    and the batch's sums are kept as jobs change state, so each event costs the same whatever
    the batch's size; the batch line and the rows' binding are redrawn at most once a frame."""

    cancelRequested = Signal(str)
    cancelAllRequested = Signal()
    clearRequested = Signal()
    showRequested = Signal(str)
    openRequested = Signal(str)
    revealRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._jobs: list[Job] = []
        self._index: dict[str, int] = {}  # job id → its place in `_jobs`
        self._states: dict[str, JobState] = {}  # the state each job had when last counted
        self._counts: Counter[JobState] = Counter()
        self._batch = BatchPace()
        self._top = 0  # the first job in view
        self._running: str | None = None
        self._next_hint = 0  # no job before this place is still queued (jobs run in order)
        self._person_scrolled_at = -1e9  # the list follows the running job unless just scrolled
        self._batch_left: float | None = None  # seconds the batch has left, refreshed each tick
        self._pinned: bool | None = None  # the person's choice; None: open while jobs run
        self._attention: list[str] = []  # failed jobs the person has not seen yet, in order
        self._heights: tuple[int, int, tuple[str, ...]] | None = None  # width, shown, rows' states
        self.rows_shown = ROWS_SHOWN
        self.toggle = QToolButton()
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setText("Jobs")
        self.toggle.setToolTip("Show or hide the job list")
        self.toggle.clicked.connect(self._toggled)
        self.summary = ElidedLabel()
        self.cancel_all_button = QPushButton("Cancel all")
        self.cancel_all_button.setToolTip("Cancel the running job and every queued one")
        self.cancel_all_button.clicked.connect(self.cancelAllRequested)
        self.clear_button = QPushButton("Clear finished")
        self.clear_button.clicked.connect(self.clearRequested)
        for button in (self.cancel_all_button, self.clear_button):
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click leaves the focus where it was
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.toggle)
        head.addWidget(self.summary, 1)
        head.addWidget(self.cancel_all_button)
        head.addWidget(self.clear_button)

        self.pool: list[JobRow] = []  # the real rows, bound to the jobs in view
        self.container = QWidget()
        self.rows_layout = QVBoxLayout(self.container)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(3)
        self.scroll_bar = QScrollBar(Qt.Orientation.Vertical)
        self.scroll_bar.setSingleStep(1)
        self.scroll_bar.valueChanged.connect(self._scrolled)
        self.scroll_bar.sliderPressed.connect(self._person_scrolled)
        self.body = QWidget()
        body = QHBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        body.setSpacing(2)
        body.addWidget(self.container, 1)
        body.addWidget(self.scroll_bar)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        layout.addLayout(head)
        layout.addWidget(self.body)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        self.clock = QTimer(self)
        self.clock.setInterval(1000)  # elapsed time and ETA of running jobs
        self.clock.timeout.connect(self.tick)
        self._later = QTimer(self)  # the next frame's redraw, for every change until then
        self._later.setSingleShot(True)
        self._later.setInterval(FRAME_MS)
        self._later.timeout.connect(self._redraw)
        self._follow_wanted = False
        self._update()

    # -- jobs ---------------------------------------------------------------------------------
    @property
    def jobs(self) -> list[Job]:
        return list(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: Job) -> None:
        if job.id in self._index:
            return
        if not self._active_count():
            self._batch = BatchPace()  # a new batch
            self._batch_left = None
            self._next_hint = len(self._jobs)
        self._index[job.id] = len(self._jobs)
        self._jobs.append(job)
        self._count(job)
        self._pinned = None  # a new batch shows itself
        self._schedule(follow=True)  # 1000 jobs queued at once: one redraw after them

    def update_job(self, job_id: str) -> None:
        place = self._index.get(job_id)
        if place is None:
            return
        job = self._jobs[place]
        self._count(job)
        state = job.state
        follow = False
        if state is JobState.FAILED and job_id not in self._attention:
            self._attention.append(job_id)
            self._pinned = None
        if state in (JobState.LOADING, JobState.RUNNING, JobState.CANCELLING):
            if self._running != job_id:
                self._running = job_id
                follow = True
        elif self._running == job_id:
            self._running = None
            follow = True  # the next queued one, or at the batch's end its failure or last job
        row = self._bound(job)
        if row is not None:
            row.refresh()  # at once: the person may be looking at this very row
        self._schedule(follow)

    def _bound(self, job: Job) -> JobRow | None:
        """The real row showing `job` now, without binding anything."""
        slot = self._index.get(job.id, -1) - self._top
        if 0 <= slot < min(self.rows_shown, len(self.pool)) and self.pool[slot].job is job:
            return self.pool[slot]
        return None

    def row(self, job_id: str) -> JobRow | None:
        """The row bound to the job, when it is in view (or would be, with the list open)."""
        place = self._index.get(job_id)
        if place is None or not self._top <= place < self._top + self.rows_shown:
            return None
        self._bind()
        slot = place - self._top
        return self.pool[slot] if slot < len(self.pool) else None

    def remove(self, job_ids: list[str]) -> None:
        gone = set(job_ids)
        if not gone & self._index.keys():
            return
        self._attention = [j for j in self._attention if j not in gone]
        self._jobs = [j for j in self._jobs if j.id not in gone]
        self._index = {job.id: i for i, job in enumerate(self._jobs)}
        for job_id in gone:
            state = self._states.pop(job_id, None)
            if state is not None:
                self._counts[state] -= 1
            self._batch.drop(job_id)
        if self._running in gone:
            self._running = None
        self._next_hint = 0
        self._update()
        self._follow()

    def _count(self, job: Job) -> None:
        old = self._states.get(job.id)
        if old is not None:
            self._counts[old] -= 1
        self._states[job.id] = job.state
        self._counts[job.state] += 1
        self._batch.count(job, old)

    def _active_count(self) -> int:
        return sum(n for state, n in self._counts.items() if state.active)

    def tick(self, now: Callable[[], float] = time.monotonic) -> None:
        moment = now()
        for row in self.pool:
            if not row.isHidden() and row.job.state in (
                JobState.LOADING,
                JobState.RUNNING,
                JobState.CANCELLING,
            ):
                row.refresh(moment)
        self._batch_left = self._estimate_left(moment)
        self._update()

    def _estimate_left(self, now: float) -> float | None:
        """The batch's time left, one figure: the running job's, then the queued jobs' own
        estimates scaled by how this batch's finished jobs compared with theirs (or this
        batch's time per job where there was no estimate). O(1): sums kept per change."""
        if not self._active_count():
            return None
        running = self._jobs[self._index[self._running]] if self._running else None
        left = running.eta(now) if running is not None else None
        if running is not None and left is None:
            left = self._batch.expected(running)
            if left is None and not running.writing:
                return None
            left = max((left or 0.0) - running.elapsed(now), 0.0)
        queued = self._batch.queued_left()
        if queued is None:
            return None
        return (left or 0.0) + queued

    # -- what is in view ----------------------------------------------------------------------
    @property
    def expanded(self) -> bool:
        if self._pinned is not None:
            return self._pinned and bool(self._jobs)
        # open while jobs run, and after a failure until the person has seen it
        return self._active_count() > 0 or bool(self._attention)

    def _toggled(self) -> None:
        self._pinned = not self.expanded
        if not self._pinned:
            self._attention.clear()
        self._update()

    def set_compact(self, compact: bool) -> None:
        """One row at a time while another panel (the memory panel) takes height."""
        self.rows_shown = 1 if compact else ROWS_SHOWN
        self._update()
        self._follow()

    def anchor(self) -> int:
        """The place the list keeps in view: the running job, else the next queued one, else
        the last failure the person has not seen, else the newest job."""
        if self._running is not None and self._running in self._index:
            return self._index[self._running]
        if self._active_count():
            while self._next_hint < len(self._jobs) and self._jobs[self._next_hint].state.ended:
                self._next_hint += 1  # amortised: jobs leave the queue in order
            if self._next_hint < len(self._jobs):
                return self._next_hint
        if self._attention and self._attention[-1] in self._index:
            return self._index[self._attention[-1]]
        return max(len(self._jobs) - 1, 0)

    def _schedule(self, follow: bool = False) -> None:
        """Redraw the batch line and the rows in view at the next frame, once for every
        change until then (a thousand jobs cancelled at once, tiles every few ms)."""
        self._follow_wanted = self._follow_wanted or follow
        if not self._later.isActive():
            self._later.start()

    def _redraw(self) -> None:
        if self._follow_wanted:
            self._follow_wanted = False
            self._follow()
        self._update()

    def _follow(self) -> None:
        if time.monotonic() - self._person_scrolled_at < FOLLOW_AFTER_S:
            return  # the person is reading other rows
        self.scroll_to(self.anchor())

    def scroll_to(self, place: int) -> None:
        shown = self.rows_shown
        top = min(max(place - (1 if shown > 2 else 0), 0), max(len(self._jobs) - shown, 0))
        if top != self._top:
            self._top = top
            self._bind()

    def _person_scrolled(self) -> None:
        self._person_scrolled_at = time.monotonic()

    def _scrolled(self, value: int) -> None:
        if value != self._top:
            self._top = value
            self._bind()

    def wheelEvent(self, event: QWheelEvent) -> None:
        steps = -event.angleDelta().y() // 120 or (-1 if event.angleDelta().y() > 0 else 0)
        if steps:
            self._person_scrolled()
            self.scroll_bar.setValue(self.scroll_bar.value() + steps)
        event.accept()

    def _row_widget(self, slot: int) -> JobRow:
        while len(self.pool) <= slot:
            row = JobRow(self._jobs[self._top + slot])
            row.cancelRequested.connect(self.cancelRequested)
            row.showRequested.connect(self.showRequested)
            row.openRequested.connect(self.openRequested)
            row.revealRequested.connect(self.revealRequested)
            self.rows_layout.addWidget(row)
            self.pool.append(row)
        return self.pool[slot]

    def _bind(self) -> None:
        """Bind the real rows to the jobs from `_top` (only the rows whose job changed), and
        size the list to them."""
        shown = min(self.rows_shown, len(self._jobs))
        self._top = min(self._top, max(len(self._jobs) - shown, 0))
        for slot in range(max(shown, len(self.pool))):
            if slot < shown:
                row = self._row_widget(slot)
                job = self._jobs[self._top + slot]
                if row.job is not job:
                    row.bind(job)
                if row.isHidden():
                    row.show()
            elif not self.pool[slot].isHidden():
                self.pool[slot].hide()
        length = max(len(self._jobs) - shown, 0)
        if (self.scroll_bar.maximum(), self.scroll_bar.value()) != (length, self._top):
            self.scroll_bar.blockSignals(True)
            self.scroll_bar.setRange(0, length)
            self.scroll_bar.setPageStep(max(shown, 1))
            self.scroll_bar.setValue(self._top)
            self.scroll_bar.blockSignals(False)
        self.scroll_bar.setVisible(len(self._jobs) > shown)
        width = self.container.width()
        # A row's height changes with its state (a failure's wrapped reason) and the width.
        key = (
            width,
            shown,
            tuple(f"{r.job.state.value}{r.job.message}" for r in self.pool[:shown]),
        )
        if key == self._heights:
            return
        self._heights = key
        heights = [
            r.heightForWidth(width)
            if r.hasHeightForWidth() and width > 50
            else r.sizeHint().height()
            for r in self.pool[:shown]
        ] or [48]
        self.body.setFixedHeight(sum(heights) + 3 * (len(heights) - 1) + 2)

    def _update(self) -> None:
        counts = self._counts
        active = self._active_count()
        queued = counts[JobState.QUEUED]
        failed = counts[JobState.FAILED]
        cancelled = counts[JobState.CANCELLED]
        ended = self._batch.ended
        parts = []
        if active:
            total = active + ended
            running = self._jobs[self._index[self._running]] if self._running else None
            if total > 1:
                head = f"{ended}/{total}"
            elif running is not None and running.writing:
                head = "writing the result…"
            else:
                head = "1 running"
            if self._batch_left is not None:
                head += f" · {fmt_estimate(self._batch_left)} left"
            parts.append(head)
            if queued and total > 1:
                parts.append(f"{queued} queued")
        elif counts[JobState.FINISHED]:
            parts.append(f"{counts[JobState.FINISHED]} done")
        if failed:
            parts.append(f"{failed} failed")
        if cancelled:
            parts.append(f"{cancelled} cancelled")
        text = " · ".join(parts) if parts else "No jobs yet: add images and press Run."
        self.summary.setText(text)
        sheet = FAILED_STYLE if failed and not active else ""
        if self.summary.styleSheet() != sheet:
            self.summary.setStyleSheet(sheet)
        self.summary.setForegroundRole(
            QPalette.ColorRole.WindowText if parts else QPalette.ColorRole.PlaceholderText
        )
        self.cancel_all_button.setVisible(active > 0)
        self.clear_button.setVisible(len(self._jobs) > active)
        open_ = self.expanded
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)
        self.toggle.setEnabled(bool(self._jobs))
        self.body.setVisible(open_)
        if open_:
            self._bind()
        if active and not self.clock.isActive():
            self.clock.start()
        elif not active:
            self.clock.stop()


def confirm_quit(parent: QWidget, active: int) -> bool:
    """Closing with jobs running or queued: whether the person wants them cancelled."""
    answer = QMessageBox.question(
        parent,
        "Jobs are running",
        f"{active} job{'s are' if active != 1 else ' is'} still running or queued. "
        "Cancel and quit?",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.No,
    )
    return answer == QMessageBox.StandardButton.Yes
