"""One concept per module: no module of the engine or the GUI grows past 600 lines (split it by
concept instead, as docs/developing.md says)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 600


def test_no_engine_or_gui_module_is_over_600_lines() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for package in ("engine", "gui")
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert len(sizes) > 100  # the walk found the packages
    too_long = {name: lines for name, lines in sizes.items() if lines > LIMIT}
    assert not too_long, f"modules over {LIMIT} lines, split them by concept: {too_long}"
