"""The start script checks the Qt libraries the window needs before the app starts, names the
missing ones with the install command of the distribution, and the .deb depends on them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.qt_fixtures import qt_leak_guard  # noqa: F401 - autouse leak guard

ROOT = Path(__file__).resolve().parent.parent


def _fake_ldd(folder: Path, missing: list[str]) -> Path:
    folder.mkdir(exist_ok=True)
    ldd = folder / "ldd"
    lines = "".join(f'echo "\t{name} => not found"\n' for name in missing)
    ldd.write_text("#!/bin/sh\n" + lines + 'echo "\tlibc.so.6 => /lib/libc.so.6"\n')
    ldd.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("distro", "command"),
    [
        (
            "ID=ubuntu\nID_LIKE=debian",
            "sudo apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1",
        ),
        ("ID=fedora", "sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms"),
        ("ID=arch", "sudo pacman -S --needed xcb-util-cursor xcb-util-wm xcb-util-keysyms"),
        (
            'ID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"',
            "sudo zypper install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1",
        ),
    ],
)
def test_12_the_start_script_names_the_missing_qt_libraries(
    tmp_path: Path, distro: str, command: str
) -> None:
    fake = _fake_ldd(
        tmp_path / "bin", ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    )
    os_release = tmp_path / "os-release"
    os_release.write_text(distro + "\n")
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "OS_RELEASE": str(os_release),
    }
    env.pop("QT_QPA_PLATFORM", None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "check_qt_libs.sh"), sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    assert command in done.stderr
    assert "libxcb-icccm.so.4" in done.stderr
    assert "could not load" not in done.stderr


def test_12_the_check_passes_where_the_libraries_are_there_and_runs_before_the_app(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    real = subprocess.run(
        [str(ROOT / "scripts" / "check_qt_libs.sh"), sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    import PySide6

    qxcb = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    ldd = subprocess.run(["ldd", str(qxcb)], capture_output=True, text=True, timeout=60)
    expect_missing = "not found" in ldd.stdout
    assert real.returncode == (1 if expect_missing else 0), real.stderr
    start = (ROOT / "scripts" / "start.sh").read_text()
    assert start.index("check_qt_libs.sh") < start.index("fetch-starter") < start.index("-m gui")


def test_12_the_deb_depends_on_every_xcb_library_the_plugin_loads(tmp_path: Path) -> None:
    import PySide6

    source = (ROOT / "packaging" / "build.py").read_text(encoding="utf-8")
    block = source.split("DEB_DEPENDS = (", 1)[1].split(")", 1)[0]
    deb_depends = "".join(part.strip().strip('"') for part in block.splitlines())

    qt = Path(PySide6.__file__).parent / "Qt"
    needed: set[str] = set()
    for lib in (qt / "plugins" / "platforms" / "libqxcb.so", qt / "lib" / "libQt6XcbQpa.so.6"):
        out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, timeout=60).stdout
        needed |= {
            line.split()[0]
            for line in out.splitlines()
            if line.strip().startswith(("libxcb", "libxkbcommon", "libX11-xcb"))
        }
    assert needed, "the plugin links no xcb library?"
    # every one reported missing, on Debian: the packages the script names must be in Depends
    fake = _fake_ldd(tmp_path / "bin", sorted(needed))
    os_release = tmp_path / "os-release"
    os_release.write_text("ID=debian\n")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "OS_RELEASE": str(os_release)}
    env.pop("QT_QPA_PLATFORM", None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "check_qt_libs.sh"), sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    packages = done.stderr.split("sudo apt-get install ", 1)[1].split()
    declared = {p.strip() for p in deb_depends.split(",")}
    assert set(packages) <= declared, set(packages) - declared


def test_the_start_script_passes_the_runtime_on_and_a_second_start_installs_nothing(
    tmp_path: Path,
) -> None:
    """`start.sh --runtime X` hands X to the set-up and the rest to the app; Tessera itself
    is installed again only when pyproject.toml changes (the set-up's own check keeps the
    runtime's wheels from being installed twice: tests/test_runtime_setup.py)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "start.sh").write_bytes((ROOT / "scripts" / "start.sh").read_bytes())
    (repo / "scripts" / "start.sh").chmod(0o755)
    qt = repo / "scripts" / "check_qt_libs.sh"
    qt.write_text("#!/bin/sh\nexit 0\n")
    qt.chmod(0o755)
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    log = tmp_path / "calls.log"
    python = repo / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >>"{log}"\n')
    python.chmod(0o755)

    def start(*args: str) -> list[str]:
        log.write_text("")
        done = subprocess.run(
            [str(repo / "scripts" / "start.sh"), *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return log.read_text().splitlines()

    first = start("--runtime", "openvino", "photo one.png")
    assert "-m pip install -q -e ." in first
    assert "-m engine.runtime.runtime_setup --runtime openvino" in first
    assert first[-1] == "-m gui photo one.png"
    second = start("--runtime=cpu")
    assert not any("pip install" in line for line in second)
    assert "-m engine.runtime.runtime_setup --runtime cpu" in second and second[-1] == "-m gui"
    (repo / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    assert "-m pip install -q -e ." in start()
