"""The job list: one line when idle ("3 done · 1 failed"), the rows while jobs run, the newest
always scrolled into view. A row shows progress ("frame 2/5 · tile 14/36"), elapsed time and the
time left (from this model's measured speed until the job's own pace is known), Cancel while it
waits or runs, Open / Show in folder when done, and "Failed" in red with the reason."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QMouseEvent, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gui.jobs import Job, JobState, fmt_duration, fmt_estimate, progress_text
from gui.widgets.elided_label import ElidedLabel

FAILED_STYLE = "color: #c0392b;"
ROWS_SHOWN = 3  # rows visible while jobs run; the rest scroll


class JobRow(QFrame):
    cancelRequested = Signal(str)
    showRequested = Signal(str)
    openRequested = Signal(str)
    revealRequested = Signal(str)

    def __init__(self, job: Job, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.title = ElidedLabel()
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
        top.addWidget(self.title, 1)
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
        self.refresh()

    def refresh(self, now: float | None = None) -> None:
        job = self.job
        self.title.setText(job.title, "\n".join(str(p) for p in job.request.inputs))
        state = job.state
        self.state_label.setText(state.value)
        failed = state is JobState.FAILED
        self.state_label.setStyleSheet(FAILED_STYLE + " font-weight: bold;" if failed else "")
        running = state in (JobState.LOADING, JobState.RUNNING, JobState.CANCELLING)
        trouble = failed or (state is JobState.FINISHED and bool(job.message))
        self.bar.setVisible(not trouble)
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
        self.bar.setFormat(text or "%p%")
        self.message.setVisible(trouble)
        self.message.setText(job.message)
        self.message.setStyleSheet(FAILED_STYLE if failed else "")
        self.cancel_button.setVisible(state.cancellable or state is JobState.CANCELLING)
        self.cancel_button.setEnabled(state.cancellable)
        has_result = state is JobState.FINISHED and bool(job.result and job.result.products)
        self.open_button.setVisible(has_result)
        self.reveal_button.setVisible(has_result)
        times = ""
        if job.started_at is not None:
            times = fmt_duration(job.elapsed(now))
            eta = job.eta(now) if running else None
            if eta is not None:
                times += f" · {fmt_estimate(eta)} left"
                if job.eta_is_estimate():
                    times += " (estimate)"
        elif state is JobState.QUEUED and job.expected_s is not None:
            times = f"({fmt_estimate(job.expected_s)})"
        self.time_label.setText(times)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.showRequested.emit(self.job.id)
        super().mouseReleaseEvent(event)


class JobList(QWidget):
    cancelRequested = Signal(str)
    cancelAllRequested = Signal()
    clearRequested = Signal()
    showRequested = Signal(str)
    openRequested = Signal(str)
    revealRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: dict[str, JobRow] = {}
        self._newest: str | None = None
        self._pinned: bool | None = None  # the person's choice; None: open while jobs run
        self._attention: set[str] = set()  # failed jobs the person has not seen yet
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
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.toggle)
        head.addWidget(self.summary, 1)
        head.addWidget(self.cancel_all_button)
        head.addWidget(self.clear_button)

        self.container = QWidget()
        self.rows_layout = QVBoxLayout(self.container)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(3)
        self.rows_layout.addStretch(1)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll_area.setWidget(self.container)
        self.scroll_area.verticalScrollBar().rangeChanged.connect(self._range_changed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        layout.addLayout(head)
        layout.addWidget(self.scroll_area)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        self.clock = QTimer(self)
        self.clock.setInterval(1000)  # elapsed time and ETA of running jobs
        self.clock.timeout.connect(self.tick)
        self._scroll_pending = False
        self._update()

    # -- rows ---------------------------------------------------------------------------------
    def add(self, job: Job) -> JobRow:
        row = JobRow(job)
        row.cancelRequested.connect(self.cancelRequested)
        row.showRequested.connect(self.showRequested)
        row.openRequested.connect(self.openRequested)
        row.revealRequested.connect(self.revealRequested)
        self.rows[job.id] = row
        self.rows_layout.insertWidget(self.rows_layout.count() - 1, row)
        self._newest = job.id
        self._pinned = None  # a new batch shows itself
        self._scroll_pending = True
        self._update()
        QTimer.singleShot(0, self, self.scroll_to_newest)
        return row

    def update_job(self, job_id: str) -> None:
        row = self.rows.get(job_id)
        if row is not None:
            row.refresh()
            if row.job.state is JobState.FAILED and job_id not in self._attention:
                self._attention.add(job_id)
                self._pinned = None
        self._update()

    def row(self, job_id: str) -> JobRow | None:
        return self.rows.get(job_id)

    def remove(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self._attention.discard(job_id)
            row = self.rows.pop(job_id, None)
            if row is not None:
                self.rows_layout.removeWidget(row)
                row.hide()  # deleteLater waits for the event loop; it must not show meanwhile
                row.setParent(None)
                row.deleteLater()
        self._update()

    def tick(self, now: Callable[[], float] = time.monotonic) -> None:
        moment = now()
        for row in self.rows.values():
            if row.job.state in (JobState.LOADING, JobState.RUNNING, JobState.CANCELLING):
                row.refresh(moment)

    # -- showing ------------------------------------------------------------------------------
    @property
    def expanded(self) -> bool:
        if self._pinned is not None:
            return self._pinned and bool(self.rows)
        # open while jobs run, and after a failure until the person has seen it
        return any(r.job.state.active for r in self.rows.values()) or bool(
            self._attention & set(self.rows)
        )

    def _toggled(self) -> None:
        self._pinned = not self.expanded
        if not self._pinned:
            self._attention.clear()
        self._update()
        if self.expanded:
            QTimer.singleShot(0, self, self.scroll_to_newest)

    def set_compact(self, compact: bool) -> None:
        """One row at a time while another panel (the memory panel) takes height."""
        self.rows_shown = 1 if compact else ROWS_SHOWN
        self._update()
        QTimer.singleShot(0, self, self.scroll_to_newest)

    def scroll_to_newest(self) -> None:
        row = self.rows.get(self._newest or "")
        if row is None or not self.scroll_area.isVisible():
            return
        failed = [j for j in self._attention if j in self.rows]
        if failed and not any(r.job.state.active for r in self.rows.values()):
            row = self.rows[failed[-1]]  # after a batch, the failure is what to see
        self.container.adjustSize()
        self.scroll_area.ensureWidgetVisible(row, 0, 0)

    def _range_changed(self, _low: int, _high: int) -> None:
        # The row's geometry is known only once the layout ran: scroll then, not before.
        if self._scroll_pending:
            self._scroll_pending = False
            self.scroll_to_newest()

    def _update(self) -> None:
        states = [row.job.state for row in self.rows.values()]
        active = sum(1 for s in states if s.active)
        queued = sum(1 for s in states if s is JobState.QUEUED)
        done = sum(1 for s in states if s is JobState.FINISHED)
        failed = sum(1 for s in states if s is JobState.FAILED)
        cancelled = sum(1 for s in states if s is JobState.CANCELLED)
        parts = []
        if active - queued:
            parts.append(f"{active - queued} running")
        if queued:
            parts.append(f"{queued} queued")
        if done:
            parts.append(f"{done} done")
        if failed:
            parts.append(f"{failed} failed")
        if cancelled:
            parts.append(f"{cancelled} cancelled")
        text = " · ".join(parts) if parts else "No jobs yet: add images and press Run."
        self.summary.setText(text)
        self.summary.setStyleSheet(FAILED_STYLE if failed and not active else "")
        self.summary.setForegroundRole(
            QPalette.ColorRole.WindowText if parts else QPalette.ColorRole.PlaceholderText
        )
        self.cancel_all_button.setVisible(active > 0)
        self.clear_button.setVisible(any(s.ended for s in states))
        open_ = self.expanded
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)
        self.toggle.setEnabled(bool(self.rows))
        self.scroll_area.setVisible(open_)
        if open_:
            rows = list(self.rows.values())[-self.rows_shown :]
            width = self.scroll_area.viewport().width()
            heights = [
                r.heightForWidth(width)
                if r.hasHeightForWidth() and width > 50
                else r.sizeHint().height()
                for r in rows
            ] or [48]
            self.scroll_area.setFixedHeight(sum(heights) + 3 * (len(heights) - 1) + 2)
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
