"""Fast checks of the packaging files; the real PyInstaller build is `packaging/build.py --check`.

The spec runs here with stand-ins for PyInstaller's Analysis & co., so what it lists is checked
even where PyInstaller is not installed; the installer steps run on a tiny fake bundle.
"""

from __future__ import annotations

import configparser
import importlib.util
import inspect
import os
import plistlib
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from PIL import Image

from engine.samples.upscaler_models import make_upscaler

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
MIME_TYPES = {"image/png", "image/jpeg", "image/webp", "image/gif", "image/tiff"}
WAIT_S = 300


@pytest.fixture(scope="module")
def build() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("tessera_packaging_build", PACKAGING / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


# ------------------------------------------------------------------------------- spec


class _Recorder:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).calls.append((type(self).__name__, args, kwargs))
        self.args, self.kwargs = args, kwargs


def _run_spec(env: dict[str, str], binaries: list[tuple[str, str, str]]) -> dict[str, Any]:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    class Analysis(_Recorder):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.binaries = list(binaries)
            self.datas = kwargs.get("datas", [])
            self.pure: list[Any] = []
            self.scripts: list[Any] = []

    stand_ins: dict[str, type[_Recorder]] = {
        name: type(name, (_Recorder,), {}) for name in ("PYZ", "EXE", "COLLECT", "BUNDLE")
    }
    recorders: list[type[_Recorder]] = [Analysis, *stand_ins.values()]
    for cls in recorders:
        cls.calls = calls
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__file__": str(PACKAGING / "tessera.spec"),
        "SPECPATH": str(PACKAGING),
        "Analysis": Analysis,
        **stand_ins,
    }
    saved = dict(os.environ)
    try:
        for key in ("TESSERA_FLAVOUR", "TESSERA_MODELS", "TESSERA_ICONS", "TESSERA_THIRD_PARTY"):
            os.environ.pop(key, None)
        os.environ.update(env)
        code = compile((PACKAGING / "tessera.spec").read_text("utf-8"), "tessera.spec", "exec")
        exec(code, namespace)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    namespace["_calls"] = calls
    return namespace


CUDA_LIB = (
    "onnxruntime/capi/libonnxruntime_providers_cuda.so",
    "/x/libonnxruntime_providers_cuda.so",
    "BINARY",
)
TRT_LIB = (
    "onnxruntime/capi/libonnxruntime_providers_tensorrt.so",
    "/x/libonnxruntime_providers_tensorrt.so",
    "BINARY",
)
CUDART_LIB = ("libcudart.so.13", "/usr/local/cuda/lib/libcudart.so.13", "BINARY")
CORE_LIB = ("onnxruntime/capi/libonnxruntime.so.1.31.1", "/x/libonnxruntime.so.1.31.1", "BINARY")


def _fake_inputs(tmp: Path) -> dict[str, str]:
    models, icons, third = tmp / "models", tmp / "icons", tmp / "third-party"
    (models / "licenses").mkdir(parents=True)
    (models / "realesrgan-animevideov3-x2.onnx").write_bytes(b"model")
    (models / "licenses" / "realesrgan-animevideov3-x2.txt").write_text("BSD")
    icons.mkdir()
    Image.new("RGBA", (16, 16)).save(icons / "tessera-16.png")
    (third / "numpy-2").mkdir(parents=True)
    (third / "numpy-2" / "LICENSE.txt").write_text("BSD")
    return {
        "TESSERA_MODELS": str(models),
        "TESSERA_ICONS": str(icons),
        "TESSERA_THIRD_PARTY": str(third),
    }


def test_spec_lists_only_files_that_exist(tmp_path: Path) -> None:
    ns = _run_spec({"TESSERA_FLAVOUR": "cpu", **_fake_inputs(tmp_path)}, [CORE_LIB])
    analysis = next(kwargs for name, _, kwargs in ns["_calls"] if name == "Analysis")
    (script,) = next(args for name, args, _ in ns["_calls"] if name == "Analysis")[0]
    assert Path(script).is_file()
    datas = analysis["datas"]
    missing = [src for src, _ in datas if not Path(src).is_file()]
    assert not missing
    dests = {(Path(src).name, dest) for src, dest in datas}
    for expected in [
        ("catalog.json", "resources/models"),  # where engine/catalog.py looks when frozen
        ("tessera.desktop", "resources"),
        ("tessera.svg", "resources/icons"),
        ("tessera-16.png", "resources/icons"),
        ("realesrgan-animevideov3-x2.onnx", "models"),  # where gui/self_test.py looks
        ("realesrgan-animevideov3-x2.txt", "models/licenses"),
        ("LICENSE.txt", "licenses/third-party/numpy-2"),
        # PyAV's FFmpeg: x264/x265 are GPL, so the bundle ships the GNU texts (issue #23)
        ("FFmpeg.md", "resources/licenses"),
        ("GPL-2.0.txt", "resources/licenses"),
        ("GPL-3.0.txt", "resources/licenses"),
        ("LGPL-2.1.txt", "resources/licenses"),
        ("LGPL-3.0.txt", "resources/licenses"),
    ]:
        assert expected in dests
    for module in ("gui.single_instance", "gui.self_test", "engine.operations.upscale", "engine"):
        assert module in analysis["hiddenimports"]
    assert all(Path(p).is_dir() for p in analysis["pathex"])
    names = [name for name, _, _ in ns["_calls"]]
    assert names[:4] == ["Analysis", "PYZ", "EXE", "COLLECT"]
    assert next(kw for name, _, kw in ns["_calls"] if name == "EXE")["name"] == "tessera"
    assert next(kw for name, _, kw in ns["_calls"] if name == "COLLECT")["name"] == "tessera"


def test_spec_without_build_inputs_still_runs() -> None:
    ns = _run_spec({}, [])
    analysis = next(kwargs for name, _, kwargs in ns["_calls"] if name == "Analysis")
    assert all(Path(src).is_file() for src, _ in analysis["datas"])


@pytest.mark.parametrize(
    ("flavour", "kept"),
    [("cpu", [CORE_LIB]), ("gpu", [CORE_LIB, CUDA_LIB, TRT_LIB, CUDART_LIB])],
)
def test_flavours_drop_or_keep_the_gpu_providers(
    flavour: str, kept: list[tuple[str, str, str]]
) -> None:
    ns = _run_spec({"TESSERA_FLAVOUR": flavour}, [CORE_LIB, CUDA_LIB, TRT_LIB, CUDART_LIB])
    assert ns["a"].binaries == kept


def test_spec_refuses_an_unknown_flavour() -> None:
    with pytest.raises(SystemExit):
        _run_spec({"TESSERA_FLAVOUR": "tpu"}, [])


def test_spec_and_build_script_agree(build: ModuleType) -> None:
    ns = _run_spec({}, [])
    assert ns["GPU_ONLY_LIBS"] == build.GPU_ONLY_LIBS
    assert ns["CUDA_RUNTIME_PREFIXES"] == build.CUDA_RUNTIME_PREFIXES
    assert ns["VERSION"] == build.project_version()


def test_spec_matches_pyinstallers_api() -> None:
    """Only where PyInstaller is installed (a build-time tool): the keywords the spec passes exist."""
    pytest.importorskip("PyInstaller")
    from PyInstaller.building.api import COLLECT, EXE, PYZ
    from PyInstaller.building.build_main import Analysis

    ns = _run_spec({}, [])
    real = {"Analysis": Analysis, "PYZ": PYZ, "EXE": EXE, "COLLECT": COLLECT}
    for name, _args, kwargs in ns["_calls"]:
        if name in real:
            params = inspect.signature(real[name].__init__).parameters
            if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
                assert set(kwargs) <= set(params), name


def test_build_help() -> None:
    done = subprocess.run(
        [sys.executable, str(PACKAGING / "build.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr
    for option in ("--flavour", "--check", "--models", "--bundle-only"):
        assert option in done.stdout


def test_launcher_exists_and_calls_gui_app() -> None:
    text = (PACKAGING / "launcher.py").read_text("utf-8")
    assert "from gui.app import main" in text and "--self-test" in text


# ------------------------------------------------------------------------- resources


def test_desktop_file() -> None:
    desktop = ROOT / "resources" / "tessera.desktop"
    validator = shutil.which("desktop-file-validate")
    if validator:
        done = subprocess.run(
            [validator, str(desktop)], capture_output=True, text=True, timeout=WAIT_S
        )
        assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(desktop, encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Exec"] == "tessera %F"
    assert entry["Icon"] == "tessera"
    assert set(filter(None, entry["MimeType"].split(";"))) == MIME_TYPES


def test_icon_svg_is_square_and_small() -> None:
    svg = ROOT / "resources" / "icons" / "tessera.svg"
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert root.get("viewBox") == "0 0 256 256"
    assert svg.stat().st_size < 4096


def test_icons_render_at_every_size(tmp_path: Path, build: ModuleType) -> None:
    code = (
        "import importlib.util, sys; from pathlib import Path;"
        "s = importlib.util.spec_from_file_location('b', sys.argv[1]); m = importlib.util.module_from_spec(s);"
        "sys.modules['b'] = m; s.loader.exec_module(m); m.render_icons(Path(sys.argv[2]))"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(PACKAGING / "build.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=WAIT_S, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for size in build.ICON_SIZES:
        with Image.open(tmp_path / f"tessera-{size}.png") as image:
            assert image.size == (size, size)
            alpha = image.getchannel("A").getextrema()
            assert alpha[0] == 0  # transparent corners
    assert (tmp_path / "tessera.ico").stat().st_size > 0
    assert (tmp_path / "tessera.icns").stat().st_size > 0


def test_model_licence_folder_is_documented() -> None:
    text = (ROOT / "resources" / "licenses" / "README.md").read_text("utf-8")
    assert "models/licenses" in text and "third-party" in text


# ------------------------------------------------------------------ Windows and macOS


def _iss_paths(text: str) -> list[str]:
    defines = dict(re.findall(r'^\s*#define (\w+) "([^"]*)"', text, flags=re.MULTILINE))
    text = re.sub(r"\{#(\w+)\}", lambda m: defines.get(m.group(1), m.group(0)), text)
    paths = re.findall(r'^Source:\s*"([^"]+)"', text, flags=re.MULTILINE)
    paths += re.findall(
        r"^(?:SetupIconFile|LicenseFile|InfoBeforeFile)=(.+)$", text, flags=re.MULTILINE
    )
    return [p.strip() for p in paths]


def test_inno_setup_script_references_real_files(build: ModuleType) -> None:
    iss = PACKAGING / "windows" / "tessera.iss"
    text = iss.read_text("utf-8")
    paths = _iss_paths(text)
    assert paths
    bundle = (build.DEFAULT_DIST / "cpu" / "tessera").resolve()
    icons = (build.DEFAULT_WORK / "icons").resolve()
    for raw in paths:
        path = (iss.parent / raw.replace("\\", "/").replace("*", "")).resolve()
        if path == bundle or bundle in path.parents:
            continue  # the PyInstaller output: made by build.py (on Windows)
        if path.parent == icons:
            assert path.name in ("tessera.ico",), raw  # render_icons writes it
            continue
        assert path.exists(), raw
    assert "tessera.exe" in text
    for extension in (".png", ".jpg", ".jpeg", ".webp", ".gif", ".tif", ".tiff"):
        assert f'SupportedTypes"; ValueType: string; ValueName: "{extension}"' in text, extension
        assert f"Software\\Classes\\{extension}\\OpenWithProgids" in text, extension


def test_macos_info_plist_template(build: ModuleType) -> None:
    template = (PACKAGING / "macos" / "Info.plist").read_text("utf-8")
    info = plistlib.loads(template.replace("@VERSION@", build.project_version()).encode("utf-8"))
    assert info["CFBundleExecutable"] == "tessera"
    assert info["CFBundleShortVersionString"] == build.project_version()
    types = {t for d in info["CFBundleDocumentTypes"] for t in d["LSItemContentTypes"]}
    assert types == {
        "public.png",
        "public.jpeg",
        "org.webmproject.webp",
        "com.compuserve.gif",
        "public.tiff",
    }
    readme = (PACKAGING / "macos" / "README.md").read_text("utf-8")
    assert "cannot be built here" in readme.lower() or "not built here" in readme.lower()


# ---------------------------------------------------------------- .deb, .tar.gz, check


def _fake_bundle(tmp: Path) -> Path:
    bundle = tmp / "dist" / "tessera"
    (bundle / "_internal").mkdir(parents=True)
    exe = bundle / "tessera"
    exe.write_text(
        '#!/bin/sh\n[ "$1" = --self-test ] && echo "self-test passed: fake" && exit 0\nexit 9\n'
    )
    exe.chmod(0o755)
    (bundle / "_internal" / "data.txt").write_text("x")
    return bundle


def _fake_icons(tmp: Path, sizes: tuple[int, ...]) -> Path:
    icons = tmp / "icons"
    icons.mkdir()
    for size in sizes:
        Image.new("RGBA", (size, size)).save(icons / f"tessera-{size}.png")
    return icons


@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg-deb")
def test_deb_installs_under_opt_with_launcher_icons_and_mime_types(
    tmp_path: Path, build: ModuleType
) -> None:
    bundle = _fake_bundle(tmp_path)
    icons = _fake_icons(tmp_path, build.ICON_SIZES)
    deb = build.build_deb(bundle, "cpu", "0.1.0", icons, tmp_path / "work", tmp_path / "out")
    info = subprocess.run(
        ["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    assert "Package: tessera\n" in info and "Conflicts: tessera-gpu" in info
    contents = subprocess.run(
        ["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True
    )
    paths = [line.split(None, 5)[5].split(" -> ")[0] for line in contents.stdout.splitlines()]
    assert all(build._packaged_path(p) for p in paths), [
        p for p in paths if not build._packaged_path(p)
    ]
    assert all(" root/root " in line for line in contents.stdout.splitlines())
    root = tmp_path / "root"
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    launcher = root / "usr" / "bin" / "tessera"
    assert (
        launcher.is_symlink()
        and launcher.resolve() == (root / "opt" / "tessera" / "tessera").resolve()
    )
    assert build.run_self_test(launcher, "fake") == "self-test passed: fake"
    desktop = (root / "usr/share/applications/tessera.desktop").read_text("utf-8")
    assert "MimeType=image/png;image/jpeg;image/webp;image/gif;image/tiff;" in desktop
    assert (root / "usr/share/icons/hicolor/256x256/apps/tessera.png").is_file()
    assert (root / "usr/share/icons/hicolor/scalable/apps/tessera.svg").is_file()
    assert (root / "usr/share/doc/tessera/copyright").is_file()
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "--control", str(deb), str(control)], check=True)
    for script in ("postinst", "postrm"):
        text = (control / script).read_text("utf-8")
        assert "update-desktop-database" in text
        assert os.access(control / script, os.X_OK)
    gpu = build.build_deb(bundle, "gpu", "0.1.0", icons, tmp_path / "work", tmp_path / "out")
    assert gpu.name.startswith("tessera-gpu_")


def test_packaged_paths_are_only_ours(build: ModuleType) -> None:
    for ok in (
        "./",
        "./opt/",
        "./opt/tessera/_internal/x.so",
        "./usr/bin/tessera",
        "./usr/share/icons/hicolor/16x16/apps/tessera.png",
    ):
        assert build._packaged_path(ok), ok
    for bad in ("./etc/x", "./usr/lib/libfoo.so", "./opt/other/x", "./usr/bin/other"):
        assert not build._packaged_path(bad), bad


def test_tarball_holds_the_bundle_in_a_versioned_folder(tmp_path: Path, build: ModuleType) -> None:
    bundle = _fake_bundle(tmp_path)
    tarball = build.build_tarball(bundle, "cpu", "0.1.0", tmp_path / "out")
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        member = tar.getmember(f"{tarball.name.removesuffix('.tar.gz')}/tessera")
    assert member.mode & 0o111
    assert any(n.endswith("_internal/data.txt") for n in names)


def test_self_test_failure_is_reported(tmp_path: Path, build: ModuleType) -> None:
    exe = tmp_path / "tessera"
    exe.write_text("#!/bin/sh\necho 'self-test failed: no model' >&2\nexit 2\n")
    exe.chmod(0o755)
    with pytest.raises(build.BuildError, match="no model"):
        build.run_self_test(exe, "fake")


# --------------------------------------------------------------------------- self-test


def _self_test(models: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TESSERA_MODELS_DIR": str(models),
        "QT_QPA_PLATFORM": "offscreen",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, str(PACKAGING / "launcher.py"), "--self-test", *args],
        capture_output=True, text=True, timeout=WAIT_S, env=env, cwd=ROOT,
    )  # fmt: skip


def test_self_test_upscales_with_a_model_from_the_models_folder(tmp_path: Path) -> None:
    make_upscaler(tmp_path / "realesrgan-contract-x2.onnx", scale=2)
    done = _self_test(tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith("self-test passed: realesrgan-contract-x2 upscaled 64×48 → 128×96")


def test_self_test_without_a_model_says_where_it_looked(tmp_path: Path) -> None:
    done = _self_test(tmp_path / "empty")
    assert done.returncode != 0
    assert "no starter upscaler" in done.stderr and str(tmp_path / "empty") in done.stderr


def test_self_test_with_a_broken_model_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "realesrgan-broken-x2.onnx").write_bytes(b"not a model")
    done = _self_test(tmp_path)
    assert done.returncode != 0
    assert (
        done.stderr.startswith("self-test failed with ")
        and "realesrgan-broken-x2.onnx" in done.stderr
    )


def test_self_test_prefers_the_bundled_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gui import self_test

    bundled = tmp_path / "bundle" / "models"
    bundled.mkdir(parents=True)
    user = tmp_path / "user"
    user.mkdir()
    (bundled / "realesrgan-x4plus.onnx").write_bytes(b"big")
    (user / self_test.PREFERRED_MODEL).write_bytes(b"small")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "bundle"), raising=False)
    monkeypatch.setenv("TESSERA_MODELS_DIR", str(user))
    assert self_test.model_dirs() == [bundled, user]
    assert self_test.find_model(self_test.model_dirs()) == bundled / "realesrgan-x4plus.onnx"
    (bundled / self_test.PREFERRED_MODEL).write_bytes(b"small")
    assert self_test.find_model(self_test.model_dirs()) == bundled / self_test.PREFERRED_MODEL
