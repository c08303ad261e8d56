"""The window offers whatever the operation table holds: a fifth operation — one row
(tests/toy_operation.py) and its implementation — is offered, picks its family's models, says
nothing it does not do, and runs from the window; the command line lists it too."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pytestqt.qtbot import QtBot

from engine import operation_specs
from engine.cli import build_parser
from engine.operation_specs import Operation, register
from engine.options import OutputFormat, OutputOptions
from tests.model_files import u2net, upscaler
from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard
from tests.toy_operation import TOY
from tests.window_fixtures import WindowFactory, wait_ended

MODELS = {"u2netp.onnx": u2net, "up2.onnx": upscaler(2)}


def test_a_fifth_operation_is_offered_by_the_window_and_runs_from_it(
    qtbot: QtBot, toy: Operation, make_window: WindowFactory, models: Path, tmp_path: Path
) -> None:
    win = make_window()
    panel = win.panel
    offered = [panel.operation.itemText(i) for i in range(panel.operation.count())]
    assert offered[-1] == "Black and white mask", offered
    panel.select_operation(toy)
    assert panel.current_operation() is toy
    # Its family's models (a file named as a catalog model is offered under its id), not the
    # upscalers.
    assert panel.select_model("u2netp")
    assert not panel.select_model(str(models / "up2.onnx"))
    # Not tiled, no per-frame point clouds, no note about products it does not write.
    assert not panel.tile.isEnabled()
    assert not panel.form.isRowVisible(panel.point_clouds)
    editor = panel.output_editor
    editor.set_context(toy, None)
    editor.set_options(OutputOptions(format=OutputFormat.JPEG))
    assert "cut-out" not in editor.note.text() and "mask stays" not in editor.note.text()
    settings = panel.job_settings()
    assert settings is not None and settings.operation is toy

    pixels = np.zeros((60, 80, 3), np.uint8)
    pixels[:, 40:] = 255
    image = tmp_path / "in.png"
    Image.fromarray(pixels).save(image)
    win.accept_paths([image])
    qtbot.waitUntil(lambda: bool(win.workspace.sources), timeout=10_000)
    win.jobs.queue(list(win.workspace.sources.values()), settings)
    wait_ended(qtbot, win)
    assert (tmp_path / "in-bw.png").is_file()


def test_a_fifth_operation_is_a_choice_of_the_command_line(
    toy: Operation, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    assert "threshold" in capsys.readouterr().out


@dataclass(frozen=True)
class CloudOptions:
    point_clouds: bool | None = None


def test_the_panels_notes_and_rows_come_from_the_operations_row(
    monkeypatch: pytest.MonkeyPatch, make_window: WindowFactory
) -> None:
    monkeypatch.setattr(operation_specs, "_BY_NAME", dict(operation_specs._BY_NAME))
    sketch = register(
        replace(
            TOY,
            value="sketch",
            label="Sketch",
            options_type=CloudOptions,
            main_with_alpha="the sketch",
            kept_formats="Its lines stay SVG{clips}.",
        )
    )
    win = make_window()
    win.panel.select_operation(sketch)
    assert win.panel.form.isRowVisible(win.panel.point_clouds)
    editor = win.panel.output_editor
    editor.set_options(OutputOptions(format=OutputFormat.JPEG))
    assert "JPEG has no transparency: the sketch gets a white background." in editor.note.text()
    assert "Its lines stay SVG" in editor.note.text()
    win.panel.point_clouds.setChecked(True)
    settings = win.panel.job_settings()
    assert settings is not None and settings.options == CloudOptions(point_clouds=True)
