"""The set-up finds each machine's GPUs and names (or installs) the runtime that serves them.

Machines are described by a temporary root (the kernel's DRM devices, the NVIDIA driver's
files, ROCm's folders, pci.ids), a small fake NVML (there is no NVIDIA GPU here) and, for
Windows and macOS, the output their adapter-listing commands give.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.runtime import runtime_setup
from engine.runtime.gpus import Gpu, Machine, Vendor, detect
from engine.runtime.runtime_setup import choose, describe, load_pin, main

PCI_IDS = """\
# a few lines of the real pci.ids
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t747e  Navi 32 [Radeon RX 7700 XT / 7800 XT]
10de  NVIDIA Corporation
\t1b80  GP104 [GeForce GTX 1080]
8086  Intel Corporation
\t56a0  DG2 [Arc A770]
\t\t1234 5678  a subsystem line
"""


def _card(root: Path, n: int, vendor: int, device: int, driver: str) -> None:
    if sys.platform == "win32":
        pytest.skip("a fake /sys tree needs symbolic links")
    dev = root / "sys" / "devices" / f"pci0000:00/0000:0{n}:00.0"
    (dev / "drm").mkdir(parents=True)
    (dev / "vendor").write_text(f"0x{vendor:04x}\n")
    (dev / "device").write_text(f"0x{device:04x}\n")
    drivers = root / "sys" / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    (dev / "driver").symlink_to(drivers)
    card = root / "sys" / "class" / "drm" / f"card{n}"
    card.mkdir(parents=True)
    (card / "device").symlink_to(dev)
    (root / "sys" / "class" / "drm" / f"card{n}-DP-1").mkdir()  # a connector, not a GPU


def _root(tmp_path: Path, *, rocm: bool = False) -> Path:
    root = tmp_path / "root"
    (root / "usr/share/hwdata").mkdir(parents=True)
    (root / "usr/share/hwdata/pci.ids").write_text(PCI_IDS)
    if rocm:
        (root / "opt/rocm").mkdir(parents=True)
        (root / "dev").mkdir()
        (root / "dev/kfd").write_text("")
    return root


class FakeNvml:
    """pynvml's few calls the detection makes, for GPUs given as (name, (major, minor))."""

    def __init__(self, gpus: Sequence[tuple[str, tuple[int, int], int]] | None) -> None:
        self.gpus = gpus
        self.open = False

    def nvmlInit(self) -> None:
        if self.gpus is None:
            raise RuntimeError("NVML Shared Library Not Found")
        self.open = True

    def nvmlShutdown(self) -> None:
        self.open = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus or ())

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, i: int) -> str:
        return (self.gpus or [])[i][0]

    def nvmlDeviceGetCudaComputeCapability(self, i: int) -> tuple[int, int]:
        return (self.gpus or [])[i][1]

    def nvmlDeviceGetPciInfo(self, i: int) -> Any:
        return SimpleNamespace(pciDeviceId=((self.gpus or [])[i][2] << 16) | 0x10DE)


NO_NVML = FakeNvml(None)


def _linux(root: Path, nvml: FakeNvml = NO_NVML) -> Machine:
    return Machine(root=root, system="linux", arch="x86_64", nvml=nvml)


def test_a_turing_or_newer_nvidia_card_gets_the_cuda_13_wheels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _root(tmp_path)
    _card(root, 1, 0x10DE, 0x2204, "nvidia")
    nvml = FakeNvml([("NVIDIA GeForce RTX 3090", (8, 6), 0x2204)])
    machine = _linux(root, nvml)
    (gpu,) = detect(machine)  # NVML's name, not the kernel's second copy of the same card
    assert gpu == Gpu(Vendor.NVIDIA, "NVIDIA GeForce RTX 3090", "10de:2204", (8, 6), "nvidia")
    assert not nvml.open
    assert choose([gpu], machine).runtime == "cuda"
    assert main(["--dry-run"], machine) == 0
    out = capsys.readouterr().out
    assert "runtime: cuda" in out
    assert "pip install --require-hashes --no-deps onnxruntime-gpu[cuda,cudnn]==1.31.1" in out


def test_a_pascal_card_gets_the_cuda_12_build_and_the_reason(tmp_path: Path) -> None:
    root = _root(tmp_path)
    nvml = FakeNvml([("NVIDIA GeForce GTX 1080", (6, 1), 0x1B80)])
    machine = _linux(root, nvml)
    gpus = detect(machine)
    choice = choose(gpus, machine)
    assert choice.runtime == "cuda12"
    line = describe(gpus[0], machine)
    assert line.startswith("NVIDIA GeForce GTX 1080 (compute 6.1): ONNX Runtime's CUDA 13 build")
    assert "--runtime cuda12" in line
    pin = load_pin("cuda12", "linux-x86_64")
    assert {w.name: w.version for w in pin.wheels}["onnxruntime-gpu"] == "1.26.0"


def test_without_nvml_the_drivers_own_files_name_the_card(tmp_path: Path) -> None:
    root = _root(tmp_path)
    info = root / "proc/driver/nvidia/gpus/0000:01:00.0/information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA TITAN V\nIRQ:   42\nBus Location: 0000:01:00.0\n")
    _card(root, 1, 0x10DE, 0x1D81, "nvidia")
    (gpu,) = detect(_linux(root))
    assert (gpu.vendor, gpu.name, gpu.compute) == (Vendor.NVIDIA, "NVIDIA TITAN V", None)


def test_an_intel_arc_gets_openvino_named_from_pci_ids(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _card(root, 0, 0x8086, 0x56A0, "i915")
    machine = _linux(root)
    (gpu,) = detect(machine)
    assert (gpu.name, gpu.pci_id, gpu.driver) == ("DG2 [Arc A770]", "8086:56a0", "i915")
    assert choose([gpu], machine).runtime == "openvino"
    line = describe(gpu, machine)
    if runtime_setup.is_installed(load_pin("openvino", "linux-x86_64")):
        assert line == "DG2 [Arc A770]: OpenVINO runtime, installed"
    else:
        assert "no runtime installed" in line and "--runtime openvino" in line


def test_a_second_start_installs_nothing_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime_ep_openvino")
    if not runtime_setup.is_installed(load_pin("openvino", "linux-x86_64")):
        pytest.skip("another onnxruntime-ep-openvino than the pinned one is installed")
    assert main(["--runtime", "openvino"], _linux(_root(tmp_path))) == 0
    assert "openvino: installed already (onnxruntime-ep-openvino==1.8.1)" in capsys.readouterr().out


@pytest.mark.parametrize("rocm", [True, False])
def test_an_amd_card_on_linux_gets_migraphx_only_with_rocm(tmp_path: Path, rocm: bool) -> None:
    root = _root(tmp_path, rocm=rocm)
    _card(root, 0, 0x1002, 0x747E, "amdgpu")
    machine = _linux(root)
    (gpu,) = detect(machine)
    assert gpu.name == "Navi 32 [Radeon RX 7700 XT / 7800 XT]"
    choice = choose([gpu], machine)
    if rocm:
        assert choice.runtime == "migraphx"
        assert "no runtime installed" in describe(gpu, machine)
    else:
        assert choice.runtime == "cpu" and "ROCm" in choice.reason
        assert "not used" in describe(gpu, machine)


def test_nvidia_wins_over_an_integrated_intel_gpu(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _card(root, 0, 0x8086, 0x56A0, "i915")
    _card(root, 1, 0x10DE, 0x2204, "nvidia")
    machine = _linux(root, FakeNvml([("NVIDIA GeForce RTX 3090", (8, 6), 0x2204)]))
    gpus = detect(machine)
    assert [g.vendor for g in gpus] == [Vendor.NVIDIA, Vendor.INTEL]
    assert choose(gpus, machine).runtime == "cuda"


def _windows(output: str, wmic: str = "") -> Machine:
    def run(command: Sequence[str]) -> str:
        if command[0] == "powershell":
            if not output:
                raise FileNotFoundError("powershell")
            return output
        return wmic

    return Machine(system="win32", arch="AMD64", run=run)


def test_windows_amd_gets_directml_from_the_adapter_list() -> None:
    listing = json.dumps(
        [
            {"Name": "AMD Radeon RX 7800 XT", "PNPDeviceID": "PCI\\VEN_1002&DEV_747E&SUBSYS_0"},
            {"Name": "Microsoft Basic Display Adapter", "PNPDeviceID": "ROOT\\BasicDisplay"},
        ]
    )
    machine = _windows(listing)
    (gpu,) = detect(machine)
    assert (gpu.vendor, gpu.pci_id) == (Vendor.AMD, "1002:747e")
    assert choose([gpu], machine).runtime == "directml"
    pin = load_pin("directml", "windows-x86_64")
    assert pin.replaces == "onnxruntime-gpu" and pin.wheels[0].name == "onnxruntime-directml"


def test_windows_without_powershell_asks_wmic() -> None:
    wmic = "Node,Name,PNPDeviceID\nPC,Intel(R) Arc(TM) A770 Graphics,PCI\\VEN_8086&DEV_56A0&X\n"
    (gpu,) = detect(_windows("", wmic))
    assert (gpu.vendor, gpu.name) == (Vendor.INTEL, "Intel(R) Arc(TM) A770 Graphics")


def test_a_mac_runs_on_the_cpu_and_says_why() -> None:
    listing = {"SPDisplaysDataType": [{"sppci_model": "Apple M3", "spdisplays_vendor": "Apple"}]}
    machine = Machine(system="darwin", run=lambda command: json.dumps(listing))
    (gpu,) = detect(machine)
    choice = choose([gpu], machine)
    assert (gpu.vendor, choice.runtime) == (Vendor.APPLE, "cpu")
    assert "CPU" in choice.reason


def test_no_gpu_means_cpu_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([], _linux(_root(tmp_path))) == 0
    assert "runtime: cpu — no GPU was found" in capsys.readouterr().out


def test_the_manifest_pins_every_wheel_with_its_sha256() -> None:
    data = json.loads(runtime_setup.manifest_path().read_text())
    assert set(data["runtimes"]) == set(runtime_setup.RUNTIMES) - {"cpu"}
    for runtime, entry in data["runtimes"].items():
        for platform, wheels in entry["wheels"].items():
            assert wheels, (runtime, platform)
            for w in wheels:
                assert re.fullmatch(r"[0-9a-f]{64}", w["sha256"]), (runtime, w)
                assert w["file"].endswith(".whl") and w["version"] in w["file"]
                assert w["name"].startswith(("onnxruntime", "nvidia-"))
    cuda = {w["name"] for w in data["runtimes"]["cuda"]["wheels"]["linux-x86_64"]}
    assert {"onnxruntime-gpu", "nvidia-cudnn-cu13", "nvidia-cuda-runtime"} <= cuda
    # One ONNX Runtime per environment: only the plugin sits beside onnxruntime-gpu.
    assert data["runtimes"]["openvino"]["replaces"] is None
    assert data["runtimes"]["migraphx"]["replaces"] == "onnxruntime-gpu"


def test_migraphx_is_a_gpu_runtime_whose_arena_takes_the_shrink() -> None:
    from engine.runtime.providers import (
        MIGRAPHX_EP,
        Device,
        Runtime,
        provider_plan,
        shrink_target,
    )

    plan = provider_plan(Device("gpu", 1), Runtime.parse("migraphx"))
    assert plan.expected == MIGRAPHX_EP and plan.providers[0][1]["device_id"] == "1"
    assert shrink_target(plan.names, {MIGRAPHX_EP: {"device_id": "1"}}) == "gpu:1"


def test_engine_devices_names_every_gpu_and_what_tessera_does_with_it(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _card(root, 0, 0x8086, 0x56A0, "i915")
    _card(root, 1, 0x1002, 0x747E, "amdgpu")
    nvml = FakeNvml([("NVIDIA GeForce GTX 1080", (6, 1), 0x1B80)])
    lines = runtime_setup.gpu_lines(_linux(root, nvml))
    assert [line.split(":")[0] for line in lines] == [
        "NVIDIA GeForce GTX 1080 (compute 6.1)",
        "DG2 [Arc A770]",
        "Navi 32 [Radeon RX 7700 XT / 7800 XT]",
    ]
    assert "CUDA 13 build does not support it" in lines[0]
    assert "OpenVINO" in lines[1] and "ROCm" in lines[2]
    assert runtime_setup.gpu_lines(_linux(_root(tmp_path / "empty"))) == ["no GPU found"]
