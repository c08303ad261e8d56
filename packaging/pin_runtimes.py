"""Write resources/runtimes.json: each GPU runtime's wheels, pinned with their SHA-256, per platform.

    python packaging/pin_runtimes.py          # asks PyPI (pip's resolver, metadata only)

For each runtime and platform it runs `pip install --dry-run --report` for that platform's
CPython 3.11 wheels and keeps the runtime's own packages (onnxruntime*, nvidia-*): the rest
(numpy, protobuf…) are Tessera's own dependencies, already installed. pip reads each wheel's
hash from the index, so nothing large is downloaded. A runtime with no wheel for a platform is
left out of that platform, with the reason pip gave.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "resources" / "runtimes.json"

PLATFORMS = {
    # pip takes exactly the tags it is given: every manylinux a glibc 2.34 system (Ubuntu 22.04, Debian 12) accepts.
    "linux-x86_64": [f"manylinux_2_{minor}_x86_64" for minor in (34, 31, 28, 27, 17, 12, 5)]
    + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"],
    "windows-x86_64": ["win_amd64"],
    "macos-arm64": ["macosx_14_0_arm64"],
}

# runtime → (what it serves, the requirement, the package it replaces or None, platforms)
RUNTIMES: dict[str, tuple[str, str, str | None, tuple[str, ...]]] = {
    "cuda": (
        "NVIDIA GPUs of compute capability 7.5 (Turing) or newer: CUDA 13 and cuDNN 9 from "
        "NVIDIA's wheels, only the driver needed",
        "onnxruntime-gpu[cuda,cudnn]==1.31.1",
        None,
        ("linux-x86_64", "windows-x86_64"),
    ),
    "cuda12": (
        "NVIDIA GPUs older than Turing (compute 5.0-7.0): ONNX Runtime 1.26.0, the last CUDA 12 "
        "build, with the -cu12 wheels",
        "onnxruntime-gpu[cuda,cudnn]==1.26.0",
        None,
        ("linux-x86_64", "windows-x86_64"),
    ),
    "openvino": (
        "Intel CPUs, GPUs and NPUs: the OpenVINO plugin beside onnxruntime-gpu",
        "onnxruntime-ep-openvino==1.8.1",
        None,
        ("linux-x86_64", "windows-x86_64"),
    ),
    "migraphx": (
        "AMD GPUs on Linux with ROCm installed",
        "onnxruntime-migraphx==1.27.1",
        "onnxruntime-gpu",
        ("linux-x86_64",),
    ),
    "directml": (
        "AMD and Intel GPUs on Windows (any DirectX 12 GPU)",
        "onnxruntime-directml==1.24.4",
        "onnxruntime-gpu",
        ("windows-x86_64",),
    ),
}


def _own(name: str) -> bool:
    return name.startswith(("onnxruntime", "nvidia-"))


def _resolve(requirement: str, platforms: list[str]) -> list[dict[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed"]
        args += ["--report", str(report), "--only-binary=:all:", "--python-version", "3.11"]
        args += ["--implementation", "cp", "--target", str(Path(tmp) / "t")]
        for platform in platforms:
            args += ["--platform", platform]
        subprocess.run([*args, requirement], check=True, capture_output=True, text=True)
        data = json.loads(report.read_text())
    wheels = []
    for item in data["install"]:
        name = item["metadata"]["name"].lower()
        if not _own(name):
            continue
        info = item["download_info"]
        wheels.append(
            {
                "name": name,
                "version": item["metadata"]["version"],
                "file": info["url"].rsplit("/", 1)[-1],
                "sha256": info["archive_info"]["hashes"]["sha256"],
            }
        )
    return sorted(wheels, key=lambda w: w["name"])


def main() -> int:
    out: dict[str, object] = {
        "format": 1,
        "about": "Written by packaging/pin_runtimes.py; read by engine/runtime/runtime_setup.py.",
        "runtimes": {},
    }
    runtimes: dict[str, object] = {}
    for runtime, (serves, requirement, replaces, platforms) in RUNTIMES.items():
        per: dict[str, object] = {}
        for platform in platforms:
            try:
                per[platform] = _resolve(requirement, PLATFORMS[platform])
            except subprocess.CalledProcessError as e:
                print(f"{runtime} {platform}: not pinned: {e.stderr.strip()[-300:]}")
        runtimes[runtime] = {
            "serves": serves,
            "requirement": requirement,
            "replaces": replaces,
            "wheels": per,
        }
        print(runtime, {p: len(w) for p, w in per.items()})  # type: ignore[arg-type]
    out["runtimes"] = runtimes
    MANIFEST.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
