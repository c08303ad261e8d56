"""Chains: a result as the input of the next job, and a shown chain run again on other inputs.

Any result can be the input of the next job (`use_as_input`), without saving and reopening
it; the new versions say what they were run on ("Quick cut-out → Anime ×2"). Every job
remembers its steps from the original (a list of JobSettings), so a chain can be run again on
other inputs as a batch (`run_chain`): each step's main product feeds the next step.
`ChainRuns` keeps the steps still to run after each job and queues them through the jobs
controller's `queue_one` when the job before ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.requests import ProductKind
from gui.controllers.speed import Rate
from gui.inputs import InputSource
from gui.jobs import Job, JobSettings, JobState, Version, describe_inputs
from gui.workspace import Workspace

# Up to this many images queued at once, the view shows each result as it comes (unless the
# person looks elsewhere); a larger batch leaves the view to the person.
FOLLOW_AT_MOST = 10

# (source, settings, start, the steps after it, the model's speed) → the job's id
QueueOne = Callable[[InputSource, JobSettings, Version, tuple[JobSettings, ...], Rate | None], str]


class ChainRuns:
    """The steps still to run after each job of a chain, and the actions that start chains."""

    def __init__(
        self,
        workspace: Workspace,
        queue_one: QueueOne,
        rate: Callable[[JobSettings], Rate | None],
        status: Callable[[str], None],
        warn: Callable[[str], None],
    ) -> None:
        self.workspace = workspace
        self._queue_one = queue_one
        self._rate = rate
        self._status = status
        self._warn = warn
        self._then: dict[str, tuple[JobSettings, ...]] = {}  # job id → chain steps after it

    def remember(self, job_id: str, then: tuple[JobSettings, ...]) -> None:
        if then:
            self._then[job_id] = then

    def forget(self, job_id: str) -> None:
        self._then.pop(job_id, None)

    def failed(self, job: Job, why: str) -> None:
        if self._then.pop(job.id, ()):
            self._chain_stopped(job, why)

    def use_as_input(self, key: str, version_id: str) -> Version | None:
        """The input's next job starts from this version (a result; the original resets)."""
        version = self.workspace.version(key, version_id)
        if version is None or not version.viewable:
            return None
        self.workspace.set_base(key, version_id)
        if version.is_original:
            self._status("The next job starts from the original again.")
        else:
            self._status(
                f"The next job of this image starts from {version.label}: choose the operation "
                "and press Run (Preview shows it first)."
            )
        return version

    def run_chain(self, steps: Sequence[JobSettings], sources: Sequence[InputSource]) -> list[str]:
        """Run `steps` in order on each input, from its original: each step's main product is
        the next step's input. Returns the first step's job ids."""
        if not steps:
            return []
        ids: list[str] = []
        rate = self._rate(steps[0])
        for source in sources:
            original = self.workspace.versions(source.key)[0]
            ids.append(self._queue_one(source, steps[0], original, tuple(steps[1:]), rate))
        if ids:
            self.workspace.set_following(len(ids) <= FOLLOW_AT_MOST)
        return ids

    def run_chain_from(self, version: Version | None) -> list[str]:
        """Every step that made this result, on the other images (or the selected ones)."""
        ws = self.workspace
        steps = ws.chain_of(version) if version is not None else ()
        if version is None or not steps:
            self._status("Show a result on the right first: its steps are what is run again.")
            return []
        selected = [k for k in ws.selected if k != version.input_key]
        keys = selected if len(selected) >= 1 and len(ws.selected) >= 2 else []
        targets = [ws.sources[k] for k in keys] or [
            s for k, s in ws.sources.items() if k != version.input_key
        ]
        if not targets:
            self._status("Add the other images first; the chain then runs on each of them.")
            return []
        ids = self.run_chain(steps, targets)
        names = " → ".join(step.model_label for step in steps)
        plural = "s" if len(targets) != 1 else ""
        self._status(f"Running {names} on {len(targets)} image{plural}.")
        return ids

    def next_step(self, job: Job, key: str, added: list[Version]) -> None:
        """A chain run goes on from the job's main product (the cut-out, the upscaled
        image), or stops with a reason when there is none."""
        then = self._then.pop(job.id, ())
        if not then:
            return
        source = self.workspace.sources.get(key)
        if source is None:
            return
        main = next((v for v in added if v.kind is ProductKind.IMAGE), None)
        main = main or next((v for v in added if v.viewable), None)
        if job.state is not JobState.FINISHED or main is None:
            self._chain_stopped(job, job.message or "it made no image")
            return
        self._queue_one(source, then[0], main, then[1:], self._rate(then[0]))

    def _chain_stopped(self, job: Job, why: str) -> None:
        name = describe_inputs(job.request.inputs, job.request.sequence)
        self._warn(f"The chain stopped at {job.model_label} for {name}: {why}")
