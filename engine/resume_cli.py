"""`run … --resume`: the batch less the inputs whose products are present and whole
(engine/resume.py), said in one line."""

from __future__ import annotations

import json
import sys

from engine.requests import OperationRequest
from engine.resume import plan_resume
from engine.settings import EngineSettings


def resumed_request(
    request: OperationRequest, settings: EngineSettings, as_json: bool
) -> OperationRequest | None:
    """What is left of `request` to run; None when every input is done (then the outcome is
    printed here: the line, or with `as_json` the run's JSON with no products)."""
    plan = plan_resume(request, settings)
    done = len(plan.skipped)
    line = f"Resuming: {done} of {plan.total} input{'s' if plan.total != 1 else ''} already done"
    if plan.swept:
        line += f", {plan.swept} unfinished file{'s' if plan.swept != 1 else ''} of a stopped run removed"
    print(line + ("." if plan.request else "; nothing left to do."), file=sys.stderr)
    if plan.request is None and as_json:
        print(json.dumps({"products": [], "failures": [], "skipped": done, "exit_code": 0}))
    return plan.request
