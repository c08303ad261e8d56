"""Resuming a batch: which inputs already have their products, present and whole.

A product's name is deterministic — `<stem>-<suffix>.<ext>`, where the suffix carries the
operation's product (and, for an upscale, the model's id and the size tag) and the extension
the output format (engine/operations/products.py) — so the products an input *would* get can
be named before anything runs. An input is done when each of them is present and whole.

"Whole": Tessera publishes every product atomically (a hidden temp file renamed to a name
that did not exist: engine/io/publish.py), so a file at a product's final name is complete
unless something else wrote it — a copy interrupted by another program, a disk that filled
while syncing, a file system without atomic rename that left a placeholder. So the check is
cheap and looks only at the file's own end: PNG's IEND chunk, JPEG's EOI marker, the RIFF
size of a WebP, every strip of a TIFF and every chunk of an EXR within the file, a JSON
document that parses. A product that fails it is not taken for done: the input runs again
(the truncated file is left as it is: Tessera never overwrites; the new product takes the
next free numbered name).

Used by `python -m engine run --resume` (engine/resume_cli.py) and by whoever keeps a batch
on disk (the window's queue): `is_whole`, `expected_products`, `pending_inputs`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from engine.errors import UsageError
from engine.files import sweep_leftovers
from engine.io.sequences import SEQUENCE_PRODUCTS, list_sequence
from engine.io.wholeness import is_whole
from engine.models.contracts import ModelSpec
from engine.models.inventory import resolve_model
from engine.operation_specs import Operation
from engine.operations.base import model_id, output_name
from engine.options import OutputFormat, OutputOptions
from engine.requests import OperationRequest
from engine.settings import EngineSettings

__all__ = [
    "ResumePlan",
    "expected_products",
    "is_done",
    "is_whole",
    "pending_inputs",
    "plan_resume",
    "whole_copy",
]

# Products an operation writes only for some models (a depth model with a confidence or a
# sky output): their absence does not make an input undone.
_OPTIONAL = frozenset({"depth-conf", "sky"})
# The float maps that the output step's EXR also writes as float EXR (products.py).
_FLOAT_MAPS = frozenset({"depth", "depth-conf", "geometry-depth", "normal"})

_MAX_COPIES = 100  # numbered names looked at for a whole copy of a product


def _product_files(
    operation: Operation, spec: ModelSpec, output: OutputOptions
) -> list[tuple[str, str, bool]]:
    """(suffix, extension, required) of each product of a still input, as products.py names
    them."""
    names: list[tuple[str, str, bool]] = []
    for index, template in enumerate(operation.products):
        text = template.format(scale=spec.contract.scale or 1, model=model_id(spec))
        suffix, _, ext = text.rpartition(".")
        ext = "." + ext
        if index == 0 and operation.main_image:
            ext = output.format.suffix
            if output.resized:
                suffix = f"{suffix}-{output.size_tag()}"
        required = suffix not in _OPTIONAL
        names.append((suffix, ext, required))
        if output.format is OutputFormat.EXR and suffix in _FLOAT_MAPS:
            names.append((suffix, ".exr", required))
    return names


def output_folder(request: OperationRequest, source: Path) -> Path:
    """Where the engine puts `source`'s products (engine/api.py `_out_dir`)."""
    if request.output_dir is not None:
        return request.output_dir
    return source / SEQUENCE_PRODUCTS if source.is_dir() else source.parent


def expected_products(
    request: OperationRequest, spec: ModelSpec, source: Path
) -> list[tuple[Path, bool]]:
    """(path, required) of every product a still `source` gets from `request`."""
    folder = output_folder(request, source)
    return [
        (folder / output_name(source, suffix, ext), required)
        for suffix, ext, required in _product_files(request.operation, spec, request.output)
    ]


def whole_copy(path: Path) -> Path | None:
    """`path`, or the first of its numbered names (`name-1.ext`, `name-2.ext`, … as publishing
    gives them while the name is taken) that is whole: a truncated file at the name is left as
    it is, and the input's redone product took the next number."""
    for number in range(_MAX_COPIES):
        candidate = path if number == 0 else path.with_name(f"{path.stem}-{number}{path.suffix}")
        if not os.path.lexists(candidate):
            return None
        if is_whole(candidate):
            return candidate
    return None


def is_done(request: OperationRequest, spec: ModelSpec, source: Path) -> bool:
    """Whether every required product of `source` is present and whole."""
    return all(
        whole_copy(path) is not None
        for path, required in expected_products(request, spec, source)
        if required
    )


def pending_inputs(
    request: OperationRequest, spec: ModelSpec, inputs: Sequence[Path] | None = None
) -> list[Path]:
    """The inputs (`request`'s by default) whose products are not all present and whole."""
    return [
        p for p in (request.inputs if inputs is None else inputs) if not is_done(request, spec, p)
    ]


_PROBE = re.compile(r"\.[0-9a-f]{6}")  # engine.io.publish.check_output_name's prefix


def _sweep_probes(folder: Path, products: set[str]) -> int:
    """Remove the name probes a killed run left: before a product is made, an empty hidden
    file `.<6 hex><product name>` tests that the file system takes the name, and is removed at
    once — unless the process is killed in between. Only empty files named exactly so for a
    product of this batch are taken for one."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        name = entry.name
        if not (_PROBE.match(name) and name[7:] in products):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_size == 0:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


@dataclass(frozen=True)
class ResumePlan:
    request: OperationRequest | None  # what is left to run; None: nothing
    total: int  # inputs of the batch
    skipped: tuple[Path, ...]  # done before: present and whole
    swept: int  # temp files of killed runs removed from the output folders


def expand_batch(request: OperationRequest) -> OperationRequest:
    """A resumable batch: each image of a folder is an input of its own (a folder is otherwise
    one sequence, whose products are published together at its end: nothing to resume).
    A folder's products go into its `Tessera` folder unless `--out` says otherwise, never among
    its images."""
    if request.sequence:
        raise UsageError(
            "--resume takes a batch of images, not a --sequence: a sequence's products are "
            "published together at its end, so an interrupted one has nothing to resume."
        )
    folders = [p for p in request.inputs if p.is_dir()]
    if not folders:
        return request
    if request.output_dir is None and len(folders) > 1:
        raise UsageError("--resume with several folders needs --out (one output folder).")
    out = request.output_dir or folders[0] / SEQUENCE_PRODUCTS
    inputs: list[Path] = []
    for p in request.inputs:
        images = list_sequence(p) if p.is_dir() else [p]
        if not images:
            raise UsageError(f"The folder {p} has no image files.")
        inputs.extend(images)
    return replace(request, inputs=tuple(inputs), output_dir=out)


def plan_resume(request: OperationRequest, settings: EngineSettings) -> ResumePlan:
    """The part of `request` left to do. UsageError for a sequence; the model's own errors
    (ModelError) as a run would give them."""
    batch = expand_batch(request)
    spec = resolve_model(batch.model, settings.resolved_models_dir())
    names: dict[Path, set[str]] = {}
    for source in batch.inputs:
        for path, _required in expected_products(batch, spec, source):
            names.setdefault(path.parent, set()).add(path.name)
    swept = 0
    for folder, products in names.items():
        swept += len(sweep_leftovers(folder)) + _sweep_probes(folder, products)
    left = pending_inputs(batch, spec)
    pending = set(left)
    skipped = tuple(p for p in batch.inputs if p not in pending)
    rest = replace(batch, inputs=tuple(left)) if left else None
    return ResumePlan(rest, len(batch.inputs), skipped, swept)
