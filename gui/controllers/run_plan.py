"""What Run runs, and the words its button says.

Run takes the selected inputs when the person selected several, else all of them; it leaves out
an input that cannot be read (its thumbnail said why, on the thumbnail) and one that already
has a finished result of the same operation, model and output step in this session, or a job
for it queued or running now into the same folder (a second press during a batch does not queue it twice) — unless
every one is done and none is waiting, and then it runs them all again. The button says which: "Run 3 images",
"Run 1 image (2 done)", "Run 3 images (5 queued)", "Run 3 images again", "Run 2 images and 1 clip", "Run selected (2)",
"Run on Quick cut-out". Qt-free; reads the workspace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gui.inputs import InputSource
from gui.jobs import JobSettings
from gui.workspace import Workspace


@dataclass(frozen=True)
class RunPlan:
    """What one press of Run would queue, and why the others are left out."""

    run: tuple[InputSource, ...]  # queued, in the list's order
    done: int = 0  # left out: they have this result already
    queued: int = 0  # left out: a job for this result is queued or running
    broken: tuple[InputSource, ...] = ()  # left out: they cannot be read
    again: bool = False  # every readable one is done: Run runs them again
    selected: bool = False  # the person selected several: Run runs those
    on: str = ""  # one input, run from a result of it ("Quick cut-out"), not its original

    @property
    def label(self) -> str:
        left_out = [f"{self.queued} queued"] if self.queued else []
        if self.done and not self.again:
            left_out.append(f"{self.done} done")
        done = ", ".join(left_out)
        if not self.run:
            return f"Run ({done})" if done else "Run"
        again = " again" if self.again else ""
        if self.selected:
            if done:
                return f"Run selected ({len(self.run)}, {done})"
            return f"Run selected{again} ({len(self.run)})"
        if self.on:
            return f"Run on {self.on}{again}"
        return f"Run {count_words(self.run)}{again}" + (f" ({done})" if done else "")


def count_words(sources: Sequence[InputSource]) -> str:
    """`3 images`, `1 clip`, `2 images and 1 clip`: a clip is counted as a clip."""
    clips = sum(1 for s in sources if s.clip)
    images = len(sources) - clips
    parts = []
    if images or not clips:
        parts.append(f"{images} image{'s' if images != 1 else ''}")
    if clips:
        parts.append(f"{clips} clip{'s' if clips != 1 else ''}")
    return " and ".join(parts)


def plan_run(ws: Workspace, selected: Sequence[str] | None = None) -> RunPlan:
    """What Run runs now with the workspace's settings (`selected`: instead of its selection)."""
    keys = ws.selected if selected is None else selected
    chosen = [ws.sources[k] for k in keys if k in ws.sources]
    several = len(chosen) >= 2
    if not several:
        chosen = list(ws.sources.values())
    broken = tuple(s for s in chosen if s.key in ws.broken)
    readable = [s for s in chosen if s.key not in ws.broken]
    settings = ws.settings
    waiting = {s.key for s in readable if settings is not None and is_queued(ws, s, settings)}
    todo = [
        s
        for s in readable
        if settings is None or (s.key not in waiting and not has_result(ws, s.key, settings))
    ]
    again = bool(readable) and not todo and not waiting
    run = tuple(readable if again else todo)
    # "Run on Quick cut-out": the one input that runs from a result chosen with "Use as input"
    # is named by that result, whatever else runs beside it ("… and 1 image").
    from_results = [(s, b) for s in run if (b := ws.base(s.key)) is not None and not b.is_original]
    on = ""
    if len(from_results) == 1:
        source, base = from_results[0]
        others = [s for s in run if s.key != source.key]
        on = base.label + (f" and {count_words(others)}" if others else "")
    done = 0 if again else len(readable) - len(todo) - len(waiting)
    return RunPlan(run, done, len(waiting), broken, again, several, on)


def has_result(ws: Workspace, key: str, settings: JobSettings) -> bool:
    """Whether the input's next job with `settings` would make a result it has already: a
    finished one whose steps (from the original) make the same pictures."""
    made = ws.made.get(key)
    return made is not None and next_steps(ws, key, settings) in made


def is_queued(ws: Workspace, source: InputSource, settings: JobSettings) -> bool:
    """Whether a job of the input that makes what its next job would, into the same folder, is
    queued or running (a batch sent to another folder while the first runs is a new one)."""
    active = [j for j in ws.jobs_of(source.key) if j.state.active]
    if not active:
        return False
    steps = next_steps(ws, source.key, settings)
    folder = settings.output_folder(source.paths)
    return any(
        j.request.output_dir == folder
        and tuple(step.makes for step in ws.chains.get(j.id, ())) == steps
        for j in active
    )


def next_steps(ws: Workspace, key: str, settings: JobSettings) -> tuple[object, ...]:
    """The steps (from the original) that the input's next job with `settings` would make."""
    before: tuple[object, ...] = ()
    if key in ws.bases:  # its next job starts from a result: that result's steps come first
        base = ws.base(key)
        if base is not None and not base.is_original:
            before = tuple(step.makes for step in ws.chain_of(base))
    return (*before, settings.makes)
