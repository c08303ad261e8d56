"""The import contracts of pyproject.toml: they hold for the code, and they catch a broken rule.

`scripts/test.sh` runs `lint-imports` on the checkout; here a copy of the packages is broken on
purpose (an upward import, Qt in the engine, an import circle, the GUI reaching past the
engine's allowed modules, a widget in a controller, Qt in the GUI's plain records, an upward
import in the GUI's layers, among its controllers and among its widgets, the old circle between
the version strip and the viewer) and every one of those is reported, by the contract that
owns it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy(tmp: Path) -> Path:
    root = tmp / "tree"
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("engine", "gui"):
        shutil.copytree(ROOT / package, root / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _add_import(path: Path, line: str) -> None:
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition("from __future__ import annotations\n")
    path.write_text(head + sep + line + "\n" + rest, encoding="utf-8")


def _status(output: str) -> dict[str, str]:
    return dict(re.findall(r"^(.+?) (KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$", output, re.M))


def test_the_contracts_hold_and_catch_each_broken_rule(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    clean = _lint(root)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    kept = _status(clean.stdout)
    assert kept and set(kept.values()) == {"KEPT"}

    _add_import(root / "engine" / "runtime" / "sessions.py", "import engine.api  # upward")
    _add_import(root / "engine" / "errors.py", "import PySide6  # Qt in the engine")
    _add_import(root / "engine" / "runtime" / "providers.py", "import engine.runtime.sessions")
    _add_import(root / "gui" / "inputs.py", "import engine.operations.upscale  # not public")
    _add_import(root / "gui" / "controllers" / "jobs.py", "import gui.widgets.viewer  # a widget")
    _add_import(root / "gui" / "jobs.py", "import PySide6.QtCore  # Qt in a record")
    _add_import(root / "gui" / "settings.py", "import gui.widgets.elided_label  # upward")
    _add_import(root / "gui" / "controllers" / "speed.py", "import gui.controllers.view")
    _add_import(root / "gui" / "widgets" / "version_strip.py", "import gui.widgets.viewer")
    broken = _lint(root)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    status = _status(broken.stdout)
    assert status.keys() == kept.keys()
    assert {name for name, state in status.items() if state == "BROKEN"} == {
        "engine imports no Qt",
        "engine layers: command line on top, errors at the bottom",
        "runtime layers: runs are made in handle.py, sessions born in sessions.py",
        "the GUI imports only the engine modules listed here",
        # sessions -> api -> the families makes the run context depend on them, indirectly
        "operations layers: families over products, the run context and pixel helpers",
        "the GUI's controllers build no widgets (tests check they load no QtWidgets)",
        "the GUI's records of inputs, jobs and notices are Qt-free",
        "GUI layers: app, window, widgets, controllers, model and threads, records",
        "GUI controllers: inputs over jobs and the other actions over speeds",
        "GUI widgets: the layout over bindings over panels over their parts",
        "no import circle in the GUI",
    }
    assert "engine.runtime.sessions -> engine.api" in broken.stdout
    assert "gui.inputs -> engine.operations.upscale" in broken.stdout
    assert "gui.settings -> gui.widgets.elided_label" in broken.stdout
    assert "gui.controllers.speed -> gui.controllers.view" in broken.stdout
    assert "gui.widgets.version_strip -> gui.widgets.viewer" in broken.stdout
