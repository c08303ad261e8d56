"""The bench's table: rows printed as they are measured, and kept for `--json`."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO


@dataclass
class Row:
    name: str
    value: float | int | str
    unit: str
    target: str = ""
    met: bool | None = None
    note: str = ""


@dataclass
class Table:
    """The rows measured so far, printed as they come. With `--json` the printed table goes
    to stderr so that stdout carries nothing but the JSON."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    rows: list[Row] = field(default_factory=list)

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def header(self, title: str) -> None:
        self.say(title)
        self.say(f"{'figure':<52} {'value':>12} {'unit':<6} {'target':<14} {'status':<8} note")

    def add(self, row: Row) -> None:
        self.rows.append(row)
        mark = {True: "met", False: "NOT met", None: ""}[row.met]
        value = f"{row.value:.3f}" if isinstance(row.value, float) else str(row.value)
        self.say(f"{row.name:<52} {value:>12} {row.unit:<6} {row.target:<14} {mark:<8} {row.note}")


def table_for(args: argparse.Namespace) -> Table:
    return Table(sys.stderr if getattr(args, "json", False) else sys.stdout)


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as d:
        yield Path(d)


def find_model(models_dir: Path, model_id: str) -> Path | None:
    p = models_dir / f"{model_id}.onnx"
    return p if p.is_file() else None
