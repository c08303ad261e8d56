"""The job list: a row per job with its progress ("frame 2/5 · tile 14/36"), elapsed time and
ETA, Cancel while it waits or runs, Open / Show in folder when done, the message when failed."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QMouseEvent, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from gui.jobs import Job, JobState, fmt_duration, progress_text


class JobRow(QFrame):
    cancelRequested = Signal(str)
    showRequested = Signal(str)

    def __init__(self, job: Job, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.title = QLabel()
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.state_label = QLabel()
        self.time_label = QLabel()
        self.time_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(True)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.hide()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Cancel this job")
        self.cancel_button.clicked.connect(lambda: self.cancelRequested.emit(self.job.id))
        self.open_button = QPushButton("Open")
        self.open_button.setToolTip("Open the result in the system's image viewer")
        self.open_button.clicked.connect(self.open_result)
        self.reveal_button = QPushButton("Show in folder")
        self.reveal_button.setToolTip("Open the folder that holds the result")
        self.reveal_button.clicked.connect(self.reveal_result)

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
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addLayout(bottom)
        self.refresh()

    def refresh(self, now: float | None = None) -> None:
        job = self.job
        self.title.setText(job.title)
        self.title.setToolTip("\n".join(str(p) for p in job.request.inputs))
        state = job.state
        self.state_label.setText(state.value)
        running = state in (JobState.LOADING, JobState.RUNNING, JobState.CANCELLING)
        failed = state is JobState.FAILED or (state is JobState.FINISHED and bool(job.message))
        self.bar.setVisible(not failed)
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
        self.message.setVisible(failed)
        self.message.setText(job.message)
        if failed:
            self.message.setForegroundRole(QPalette.ColorRole.Text)
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
                times += f" · about {fmt_duration(eta)} left"
        self.time_label.setText(times)

    def main_product(self) -> str | None:
        result = self.job.result
        if result is None or not result.products:
            return None
        viewable = self.job.viewable()
        return str((viewable[0] if viewable else result.products[0]).path)

    def open_result(self) -> None:
        path = self.main_product()
        if path is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(path))

    def reveal_result(self) -> None:
        path = self.main_product()
        if path is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(path).parent)))

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.showRequested.emit(self.job.id)
        super().mouseReleaseEvent(event)


class JobList(QWidget):
    cancelRequested = Signal(str)
    cancelAllRequested = Signal()
    showRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: dict[str, JobRow] = {}
        self.heading = QLabel("<b>Jobs</b>")
        self.summary = QLabel()
        self.cancel_all_button = QPushButton("Cancel all")
        self.cancel_all_button.setToolTip("Cancel the running job and every queued one")
        self.cancel_all_button.clicked.connect(self.cancelAllRequested)
        self.clear_button = QPushButton("Clear finished")
        self.clear_button.clicked.connect(self.clear_ended)
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.heading)
        head.addWidget(self.summary, 1)
        head.addWidget(self.cancel_all_button)
        head.addWidget(self.clear_button)

        self.empty = QLabel(
            "No jobs yet. Drop images on the window, or choose them and press Run (Ctrl+Return)."
        )
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.container = QWidget()
        self.rows_layout = QVBoxLayout(self.container)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(4)
        self.rows_layout.addWidget(self.empty)
        self.rows_layout.addStretch(1)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setWidget(self.container)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(head)
        layout.addWidget(self.scroll_area, 1)

        self.clock = QTimer(self)
        self.clock.setInterval(1000)  # elapsed time and ETA of running jobs
        self.clock.timeout.connect(self.tick)
        self._update_summary()

    def add(self, job: Job) -> JobRow:
        row = JobRow(job)
        row.cancelRequested.connect(self.cancelRequested)
        row.showRequested.connect(self.showRequested)
        self.rows[job.id] = row
        # in queue order, above the stretch; scrolled into view so a fresh drop is seen
        self.rows_layout.insertWidget(self.rows_layout.count() - 1, row)
        self.empty.hide()
        self._update_summary()
        QTimer.singleShot(0, self, lambda: self.scroll_area.ensureWidgetVisible(row))
        return row

    def update_job(self, job_id: str) -> None:
        row = self.rows.get(job_id)
        if row is not None:
            row.refresh()
        self._update_summary()

    def row(self, job_id: str) -> JobRow | None:
        return self.rows.get(job_id)

    def tick(self) -> None:
        now = time.monotonic()
        for row in self.rows.values():
            if row.job.state in (JobState.LOADING, JobState.RUNNING, JobState.CANCELLING):
                row.refresh(now)

    def clear_ended(self) -> None:
        for job_id, row in list(self.rows.items()):
            if row.job.state.ended:
                self.rows_layout.removeWidget(row)
                row.deleteLater()
                del self.rows[job_id]
        self.empty.setVisible(not self.rows)
        self._update_summary()

    def _update_summary(self) -> None:
        states = [row.job.state for row in self.rows.values()]
        active = sum(1 for s in states if not s.ended)
        queued = sum(1 for s in states if s is JobState.QUEUED)
        parts = []
        if active:
            parts.append(f"{active - queued} running" if active - queued else "")
            parts.append(f"{queued} queued" if queued else "")
        self.summary.setText("  " + ", ".join(p for p in parts if p))
        self.cancel_all_button.setEnabled(active > 0)
        self.clear_button.setEnabled(any(s.ended for s in states))
        if active and not self.clock.isActive():
            self.clock.start()
        elif not active:
            self.clock.stop()
