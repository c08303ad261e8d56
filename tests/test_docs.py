"""The docs keep their word: every `python -m engine` command of README.md and docs/*.md runs,
or — where it needs models or a long run — its subcommand's `--help` works and its arguments
parse with the real parser; every relative link leads to a file that exists.

Commands are taken from fenced code blocks (not those marked `text`, which hold synopses).
A page added later is read like the others; a subcommand this checkout does not know yet (its
page merged before its code) is skipped with the reason, not failed."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PREFIXES = ("python -m engine", ".venv/bin/python -m engine", "tessera-engine")
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# Cheap with no models and no network: these run for real; the others are parsed.
RUNNABLE = (("devices",), ("memory",), ("models", "list"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
# Pages docs/index.md lists that other branches write; checked like any link once they exist.
WRITTEN_ELSEWHERE = {
    "cpu-kernel.md",
    "cpu-paths.md",
    "reliability.md",
    "window.md",
    "outputs-resume-watch.md",
    "models-and-resume.md",
    "gpus-and-runtimes.md",
}
README_MOST_LINES = 160


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: str
    argv: tuple[str, ...]  # after `python -m engine`

    def __str__(self) -> str:
        return f"{self.page}: {self.line}"


def _lines(block: str) -> Iterator[str]:
    pending = ""
    for raw in block.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""


def doc_commands() -> list[DocCommand]:
    found = []
    for page in PAGES:
        for match in FENCE.finditer(page.read_text(encoding="utf-8")):
            if match.group(1) == "text":
                continue
            for line in _lines(match.group(2)):
                prefix = next((p for p in PREFIXES if line.startswith(p + " ")), None)
                if prefix is None:
                    continue
                argv = tuple(shlex.split(line[len(prefix) :], comments=True))
                found.append(DocCommand(str(page.relative_to(ROOT)), line, argv))
    return found


COMMANDS = doc_commands()


def _subcommand_path(parser: argparse.ArgumentParser, argv: tuple[str, ...]) -> list[str] | None:
    """The subcommands named in `argv` (`["models", "list"]`), or None when the first is not
    one this parser knows."""
    path: list[str] = []
    words = [a for a in argv if not a.startswith("-")]
    current = parser
    while True:
        sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or not words:
            return path
        word = words.pop(0)
        if word not in sub.choices:
            return None if not path else path
        path.append(word)
        current = sub.choices[word]


def _parse(argv: list[str]) -> int:
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if isinstance(e.code, int) else 2
    return 0


def test_the_docs_hold_engine_commands() -> None:
    assert len(COMMANDS) >= 10, [str(c) for c in COMMANDS]


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_each_engine_command_of_the_docs_runs_or_parses(
    command: DocCommand, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _subcommand_path(build_parser(), command.argv)
    if path is None:
        pytest.skip(f"{command.argv[0]!r} is not a subcommand of this checkout's engine")
    runnable = "--help" in command.argv or tuple(path) in RUNNABLE
    if runnable:
        env = dict(os.environ, TESSERA_MODELS_DIR=str(tmp_path / "models"))
        done = subprocess.run(
            [sys.executable, "-m", "engine", *command.argv],
            cwd=tmp_path,
            env=env | {"PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return
    assert _parse([*path, "--help"]) == 0, command
    assert "usage:" in capsys.readouterr().out
    assert _parse(list(command.argv)) == 0, f"{command}: {capsys.readouterr().err}"


def _links() -> list[tuple[Path, str]]:
    found = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # an address on the web, or a heading of the same page
            found.append((page, target))
    return found


@pytest.mark.parametrize(
    ("page", "target"), _links(), ids=lambda v: v.name if isinstance(v, Path) else str(v)
)
def test_each_relative_link_of_the_docs_resolves(page: Path, target: str) -> None:
    resolved = (page.parent / target.split("#", 1)[0]).resolve()
    if not resolved.exists() and resolved.name in WRITTEN_ELSEWHERE:
        pytest.skip(f"{target} is written on another branch")
    assert resolved.exists(), f"{page.relative_to(ROOT)} links to {target}, which is missing"


def test_the_readme_stays_short_and_keeps_the_exit_codes() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MOST_LINES
    for code in ("0 all done", "2 usage", "3 out of", "4 bad input", "5 device", "130", "143"):
        assert code in " ".join(text.split()), code
