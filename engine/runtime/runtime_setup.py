"""Which runtime serves this machine's GPUs, whether it is installed, and installing it.

    python -m engine.runtime.runtime_setup [--runtime auto|cpu|cuda|cuda12|openvino|migraphx|directml]
                                           [--dry-run]

One manifest, resources/runtimes.json (written by packaging/pin_runtimes.py), pins each runtime's
wheels and their SHA-256 per platform; pip installs them with `--require-hashes --no-deps`, so
nothing else than those files can come in. A runtime whose pinned versions are installed
already installs nothing: a second start does no work.

One ONNX Runtime package per environment, never two (they share the `onnxruntime` module and
overwrite each other): the CUDA runtimes are builds of `onnxruntime-gpu` (Tessera's own
dependency), OpenVINO is a plugin that sits beside it, and MIGraphX and DirectML are other
builds of ONNX Runtime that *replace* onnxruntime-gpu in the environment (the manifest's
"replaces"). A machine that needs them has no NVIDIA card to lose.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from engine.runtime.gpus import Gpu, Machine, Vendor, detect

RUNTIMES = ("cpu", "cuda", "cuda12", "openvino", "migraphx", "directml")
TURING = (7, 5)  # the oldest compute capability CUDA 13 (ONNX Runtime ≥ 1.27) supports
MAXWELL = (5, 0)  # the oldest CUDA 12 supports


def manifest_path() -> Path:
    bundle = getattr(sys, "_MEIPASS", None)
    root = Path(bundle) if getattr(sys, "frozen", False) and bundle else Path(__file__).parents[2]
    return root / "resources" / "runtimes.json"


def platform_key(system: str = sys.platform, machine: str | None = None) -> str:
    """The manifest's name for a platform: linux-x86_64, windows-x86_64, macos-arm64…"""
    import platform

    machine = (machine or platform.machine()).lower()
    arch = "arm64" if machine in ("arm64", "aarch64") else "x86_64"
    if system.startswith("win"):
        return f"windows-{arch}"
    if system == "darwin":
        return f"macos-{arch}"
    return f"linux-{arch}"


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    file: str
    sha256: str


@dataclass(frozen=True)
class RuntimePin:
    runtime: str
    serves: str
    requirement: str
    replaces: str | None
    wheels: tuple[Wheel, ...]  # for this platform; empty: not offered here


def load_pin(runtime: str, platform: str | None = None, path: Path | None = None) -> RuntimePin:
    data = json.loads((path or manifest_path()).read_text())
    entry = data["runtimes"][runtime]
    wheels = entry["wheels"].get(platform or platform_key(), [])
    return RuntimePin(
        runtime,
        entry["serves"],
        entry["requirement"],
        entry.get("replaces"),
        tuple(Wheel(w["name"], w["version"], w["file"], w["sha256"]) for w in wheels),
    )


@dataclass(frozen=True)
class Choice:
    runtime: str  # one of RUNTIMES
    gpu: Gpu | None
    reason: str


def serves(gpu: Gpu, machine: Machine) -> tuple[str | None, str]:
    """The runtime that serves `gpu` on `machine`, or None, and why, in a person's words."""
    windows = machine.system.startswith("win")
    if gpu.vendor is Vendor.NVIDIA:
        if gpu.compute is None:
            return (
                "cuda",
                "an NVIDIA GPU (compute capability unknown without NVML: CUDA 13 assumed)",
            )
        if gpu.compute >= TURING:
            return "cuda", "CUDA 13 (ONNX Runtime's CUDA build)"
        if gpu.compute >= MAXWELL:
            return "cuda12", (
                "ONNX Runtime's CUDA 13 build does not support it (CUDA 13 starts at Turing, "
                "compute 7.5); the last CUDA 12 build, onnxruntime-gpu 1.26.0, does"
            )
        return None, "too old for any CUDA ONNX Runtime ships (CUDA 12 starts at compute 5.0)"
    if gpu.vendor is Vendor.INTEL:
        return "openvino", "OpenVINO (Intel GPUs and NPUs)"
    if gpu.vendor is Vendor.AMD:
        if windows:
            return "directml", "DirectML (Windows, any DirectX 12 GPU)"
        if machine.system == "darwin":
            return None, "macOS: Tessera runs on the CPU (CoreML is not a runtime it offers yet)"
        if machine.has_rocm():
            return "migraphx", "MIGraphX (AMD on Linux with ROCm)"
        return None, (
            "MIGraphX needs AMD's ROCm, which is not installed (/opt/rocm, /dev/kfd); "
            "install ROCm, then ./scripts/start.sh --runtime migraphx"
        )
    if gpu.vendor is Vendor.APPLE:
        return None, "Apple GPUs: Tessera runs on the CPU (CoreML is not a runtime it offers yet)"
    return None, "no ONNX Runtime build Tessera knows serves this GPU"


PREFERENCE = ("cuda", "cuda12", "migraphx", "directml", "openvino")


def choose(gpus: list[Gpu], machine: Machine) -> Choice:
    """The one runtime to install for the machine: the best GPU's (NVIDIA first)."""
    candidates = [(serves(g, machine), g) for g in gpus]
    for runtime in PREFERENCE:
        for (name, why), gpu in candidates:
            if name == runtime:
                return Choice(runtime, gpu, f"{gpu.label}: {why}")
    if gpus:
        return Choice("cpu", None, "; ".join(f"{g.label}: {why}" for (_, why), g in candidates))
    return Choice("cpu", None, "no GPU was found")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def is_installed(pin: RuntimePin) -> bool:
    """Every pinned wheel at its pinned version; the package it replaces gone."""
    if pin.runtime == "cpu":
        return True
    if not pin.wheels:
        return False
    if pin.replaces and _installed(pin.replaces) is not None:
        return False
    return all(_installed(w.name) == w.version for w in pin.wheels)


def requirements(pin: RuntimePin) -> str:
    return "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in pin.wheels)


def pip_command(pin: RuntimePin, requirements_file: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "-r",
        requirements_file,
    ]


def install(pin: RuntimePin, *, dry_run: bool = False) -> str:
    """Install the pinned wheels (nothing if they are in already); what was done, in words."""
    if pin.runtime == "cpu":
        return "CPU only: no GPU runtime installed"
    if not pin.wheels:
        return f"{pin.runtime}: no pinned wheels for this platform ({pin.serves})"
    if is_installed(pin):
        return f"{pin.runtime}: installed already ({pin.requirement})"
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(requirements(pin))
        command = pip_command(pin, str(req))
        shown = f"pip install --require-hashes --no-deps {pin.requirement}"
        if dry_run:
            return f"{pin.runtime}: would run {shown}" + (
                f" (after pip uninstall {pin.replaces})" if pin.replaces else ""
            )
        if pin.replaces and _installed(pin.replaces) is not None:
            # Both builds write the same `onnxruntime` module: removing one removes files of
            # the other, so both go, and the replacement is installed afresh.
            gone = [pin.replaces, *(w.name for w in pin.wheels if _installed(w.name))]
            subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", *gone], check=True)
            command.append("--force-reinstall")
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            return (
                f"{pin.runtime}: could not install ({last}); Tessera runs on the CPU. "
                f"To install it later: {shown}"
            )
    return f"{pin.runtime}: installed ({pin.requirement})"


RUNTIME_NAMES = {
    "cuda": "CUDA 13 runtime",
    "cuda12": "CUDA 12 runtime (onnxruntime-gpu 1.26.0)",
    "openvino": "OpenVINO runtime",
    "migraphx": "MIGraphX runtime",
    "directml": "DirectML runtime",
}


def describe(gpu: Gpu, machine: Machine, manifest: Path | None = None) -> str:
    """One line for `engine devices`: the GPU and what Tessera does with it."""
    runtime, why = serves(gpu, machine)
    if runtime is None:
        return f"{gpu.label}: not used — {why}"
    pin = load_pin(runtime, platform_key(machine.system, machine.arch), manifest)
    fix = f"./scripts/start.sh --runtime {runtime} installs it"
    if runtime == "cuda12":
        if is_installed(pin):
            return f"{gpu.label}: {RUNTIME_NAMES[runtime]}, installed"
        return f"{gpu.label}: {why} — {fix}"
    if is_installed(pin):
        return f"{gpu.label}: {RUNTIME_NAMES[runtime]}, installed"
    return f"{gpu.label}: no runtime installed — {RUNTIME_NAMES[runtime]} serves it; {fix}"


def gpu_lines(machine: Machine | None = None) -> list[str]:
    machine = machine or Machine()
    gpus = detect(machine)
    if not gpus:
        return ["no GPU found"]
    return [describe(g, machine) for g in gpus]


def main(argv: list[str] | None = None, machine: Machine | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.runtime.runtime_setup")
    parser.add_argument("--runtime", default="auto", choices=("auto", *RUNTIMES))
    parser.add_argument("--dry-run", action="store_true", help="name what would be installed")
    parser.add_argument("--manifest", type=Path, default=None)
    args = parser.parse_args(argv)
    machine = machine or Machine()
    gpus = detect(machine)
    for gpu in gpus:
        print(f"found {gpu.label}")
    if args.runtime == "auto":
        choice = choose(gpus, machine)
        print(f"runtime: {choice.runtime} — {choice.reason}")
        runtime = choice.runtime
    else:
        runtime = args.runtime
        print(f"runtime: {runtime} (asked for)")
    if runtime == "cpu":
        print("CPU only: no GPU runtime installed")
        return 0
    pin = load_pin(runtime, platform_key(machine.system, machine.arch), args.manifest)
    print(install(pin, dry_run=args.dry_run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
