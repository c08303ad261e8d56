"""The batch line's pace: how long the queued jobs of a batch will take, from the jobs of it
that finished (their measured time against what they were expected to take)."""

from __future__ import annotations

from gui.jobs import Job, JobState


class BatchPace:
    """The sums the batch line's time left is made of, kept as each job changes state, so the
    figure costs the same for 3 jobs or 1000: the queued jobs' estimates (from the model's
    measured speed, see gui/controllers/speed.py), and how long this batch's finished jobs
    took against theirs."""

    def __init__(self) -> None:
        self.ended = 0  # jobs of this batch that ended (finished, failed or cancelled)
        self._ended_ids: set[str] = set()  # those jobs, so one taken out of the list uncounts
        self._queued: dict[str, float | None] = {}  # queued job → its estimate as counted
        self._queued_expected = 0.0
        self._queued_unknown = 0  # queued jobs without an estimate
        self._done = 0  # finished jobs, and the seconds they worked
        self._done_seconds = 0.0
        self._done_expected = 0.0  # finished jobs that had an estimate: theirs, and their time
        self._done_measured = 0.0

    def count(self, job: Job, old: JobState | None) -> None:
        self.forget(job.id)
        if job.state is JobState.QUEUED:
            self._queued[job.id] = job.expected_s
            if job.expected_s is None:
                self._queued_unknown += 1
            else:
                self._queued_expected += job.expected_s
        if old is None or not old.active or not job.state.ended:
            return
        self.ended += 1
        self._ended_ids.add(job.id)
        seconds = job.working_seconds() if job.state is JobState.FINISHED else None
        if seconds is None:
            return  # a cancelled or failed job says nothing of the pace
        self._done += 1
        self._done_seconds += seconds
        if job.expected_s is not None and job.expected_s > 0:
            self._done_expected += job.expected_s
            self._done_measured += seconds

    def drop(self, job_id: str) -> None:
        """The job left the list (its image was cleared): the batch line no longer counts it,
        as it did the 578 cancelled jobs of images already cleared."""
        self.forget(job_id)
        if job_id in self._ended_ids:
            self._ended_ids.discard(job_id)
            self.ended -= 1

    def forget(self, job_id: str) -> None:
        if job_id not in self._queued:
            return
        expected = self._queued.pop(job_id)
        if expected is None:
            self._queued_unknown -= 1
        else:
            self._queued_expected -= expected

    @property
    def ratio(self) -> float:
        """This batch's time over its estimates so far (1: as estimated)."""
        if self._done_expected <= 0:
            return 1.0
        # Unclamped: a model's first job (a fresh session's first run) can make the queued
        # jobs' estimates 100× their real time; the batch's own jobs say so.
        return max(self._done_measured / self._done_expected, 1e-3)

    def expected(self, job: Job) -> float | None:
        """A job's time, as this batch's pace says."""
        if job.expected_s is not None:
            return job.expected_s * self.ratio
        return self._done_seconds / self._done if self._done else None

    def queued_left(self) -> float | None:
        """The queued jobs' time, or None while some have no estimate and none finished."""
        total = max(self._queued_expected, 0.0) * self.ratio
        if self._queued_unknown > 0:
            if not self._done:
                return None
            total += self._queued_unknown * self._done_seconds / self._done
        return total
