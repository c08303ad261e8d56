"""The GPUs in this machine, found without ONNX Runtime: what the set-up and `engine devices` name.

Each system is asked the way its own tools ask it:
- NVIDIA: NVML (the driver's library, `nvidia-ml-py`) for the name and compute capability,
  else the driver's own files (/proc/driver/nvidia/gpus/*/information: name, no capability);
- Linux, every vendor: the kernel's DRM devices (/sys/class/drm/card*/device: PCI vendor and
  device ids, the bound driver), named from the system's pci.ids where it has one;
- Windows: the adapter list (PowerShell's Win32_VideoController, else wmic);
- macOS: system_profiler's displays.

Everything outside Python is injectable (`Machine`): a root folder for the files, an NVML
module and a command runner, so tests describe whole machines with a temporary folder.
"""

from __future__ import annotations

import importlib
import json
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class Vendor(Enum):
    NVIDIA = "nvidia"
    AMD = "amd"
    INTEL = "intel"
    APPLE = "apple"
    OTHER = "other"

    @classmethod
    def of_pci(cls, vendor_id: int) -> Vendor:
        return {0x10DE: cls.NVIDIA, 0x1002: cls.AMD, 0x8086: cls.INTEL, 0x106B: cls.APPLE}.get(
            vendor_id, cls.OTHER
        )


@dataclass(frozen=True)
class Gpu:
    vendor: Vendor
    name: str
    pci_id: str | None = None  # "10de:1b80"
    compute: tuple[int, int] | None = None  # NVIDIA's compute capability, where NVML gave it
    driver: str | None = None  # the kernel driver bound to it (Linux): nvidia, amdgpu, i915, xe…

    @property
    def label(self) -> str:
        if self.compute is not None:
            return f"{self.name} (compute {self.compute[0]}.{self.compute[1]})"
        return self.name


def _run(command: Sequence[str]) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=20, check=True)
    return done.stdout


@dataclass(frozen=True)
class Machine:
    """Where the facts come from: this machine by default, a fake one in tests."""

    root: Path = Path("/")
    system: str = sys.platform
    arch: str = field(default_factory=platform.machine)  # x86_64, AMD64, arm64, aarch64
    nvml: Any = None  # a module with pynvml's functions; None: import pynvml
    run: Callable[[Sequence[str]], str] = field(default=_run)

    def path(self, text: str) -> Path:
        return self.root / text.lstrip("/")

    def has_rocm(self) -> bool:
        return self.path("/opt/rocm").is_dir() and self.path("/dev/kfd").exists()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def from_nvml(nvml: Any) -> list[Gpu] | None:
    """The NVIDIA GPUs NVML names, with their compute capability; None when NVML is absent."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except Exception:  # no driver, or no NVIDIA GPU: NVML says so by failing to start
        return None
    try:
        found = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            device = int(getattr(pci, "pciDeviceId", 0)) >> 16
            found.append(
                Gpu(
                    Vendor.NVIDIA,
                    _text(nvml.nvmlDeviceGetName(handle)),
                    f"10de:{device:04x}" if device else None,
                    (int(major), int(minor)),
                    "nvidia",
                )
            )
        return found
    finally:
        nvml.nvmlShutdown()


def from_nvidia_proc(machine: Machine) -> list[Gpu]:
    """The NVIDIA driver's own list, when NVML cannot be loaded: names, no compute capability."""
    found = []
    for info in sorted(machine.path("/proc/driver/nvidia/gpus").glob("*/information")):
        model = re.search(r"^Model:\s*(.+)$", info.read_text(errors="replace"), re.M)
        if model:
            found.append(Gpu(Vendor.NVIDIA, model.group(1).strip(), driver="nvidia"))
    return found


def _pci_names(machine: Machine) -> Callable[[int, int], str | None]:
    """A lookup in the system's pci.ids (hwdata), read only when a name is needed."""
    table: dict[tuple[int, int], str] = {}
    vendors: dict[int, str] = {}
    for candidate in ("/usr/share/hwdata/pci.ids", "/usr/share/misc/pci.ids"):
        path = machine.path(candidate)
        if path.is_file():
            vendor = None
            for line in path.read_text(errors="replace").splitlines():
                if not line or line.startswith("#"):
                    continue
                if not line.startswith("\t"):
                    parts = line.split(None, 1)
                    vendor = int(parts[0], 16) if re.fullmatch(r"[0-9a-f]{4}", parts[0]) else None
                    if vendor is not None and len(parts) > 1:
                        vendors[vendor] = parts[1]
                elif vendor is not None and not line.startswith("\t\t"):
                    parts = line.strip().split(None, 1)
                    if len(parts) == 2:
                        table[(vendor, int(parts[0], 16))] = parts[1]
            break

    def name(vendor: int, device: int) -> str | None:
        return table.get((vendor, device))

    return name


def from_drm(machine: Machine) -> list[Gpu]:
    """Every display device the Linux kernel has bound, by PCI ids and driver."""
    found = []
    seen = set()
    names = None
    for card in sorted(machine.path("/sys/class/drm").glob("card[0-9]*")):
        if "-" in card.name:  # card0-DP-1: a connector, not a device
            continue
        device = card / "device"
        try:
            vendor_id = int((device / "vendor").read_text().strip(), 16)
            device_id = int((device / "device").read_text().strip(), 16)
        except (OSError, ValueError):
            continue
        bus = device.resolve().name
        if bus in seen:
            continue
        seen.add(bus)
        driver_link = device / "driver"
        driver = driver_link.resolve().name if driver_link.exists() else None
        vendor = Vendor.of_pci(vendor_id)
        if names is None:
            names = _pci_names(machine)
        name = names(vendor_id, device_id)
        pci_id = f"{vendor_id:04x}:{device_id:04x}"
        found.append(
            Gpu(vendor, name or f"{vendor.value.upper()} GPU {pci_id}", pci_id, None, driver)
        )
    return found


def _pnp_vendor(pnp: str) -> tuple[Vendor, str | None]:
    match = re.search(r"VEN_([0-9A-Fa-f]{4})&DEV_([0-9A-Fa-f]{4})", pnp)
    if not match:
        return Vendor.OTHER, None
    vendor, device = (int(g, 16) for g in match.groups())
    return Vendor.of_pci(vendor), f"{vendor:04x}:{device:04x}"


def from_windows(machine: Machine) -> list[Gpu]:
    """Windows' adapter list: PowerShell's CIM query, else wmic (gone from Windows 11 24H2)."""
    query = (
        "Get-CimInstance Win32_VideoController | Select-Object Name,PNPDeviceID | ConvertTo-Json"
    )
    rows: list[tuple[str, str]] = []
    try:
        data = json.loads(machine.run(["powershell", "-NoProfile", "-Command", query]) or "[]")
        items = data if isinstance(data, list) else [data]
        rows = [(str(i.get("Name") or ""), str(i.get("PNPDeviceID") or "")) for i in items]
    except (OSError, subprocess.SubprocessError, ValueError):
        try:
            text = machine.run(
                ["wmic", "path", "win32_VideoController", "get", "Name,PNPDeviceID", "/format:csv"]
            )
        except (OSError, subprocess.SubprocessError):
            return []
        for line in text.splitlines()[1:]:
            parts = line.strip().split(",")
            if len(parts) >= 3:
                rows.append((parts[1], parts[2]))
    found = []
    for name, pnp in rows:
        vendor, pci_id = _pnp_vendor(pnp)
        if name and not name.startswith("Microsoft Basic"):  # the no-driver display adapter
            found.append(Gpu(vendor, name, pci_id))
    return found


def from_macos(machine: Machine) -> list[Gpu]:
    try:
        data = json.loads(machine.run(["system_profiler", "SPDisplaysDataType", "-json"]))
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    found = []
    for item in data.get("SPDisplaysDataType", []):
        vendor_text = str(item.get("spdisplays_vendor", "")).lower()
        vendor = next((v for v in Vendor if v.value in vendor_text), Vendor.OTHER)
        found.append(Gpu(vendor, str(item.get("sppci_model") or item.get("_name") or "GPU")))
    return found


def detect(machine: Machine | None = None) -> list[Gpu]:
    """Every GPU of the machine, NVIDIA ones with their compute capability where NVML gives it."""
    machine = machine or Machine()
    if machine.system.startswith("win"):
        return from_windows(machine)
    if machine.system == "darwin":
        return from_macos(machine)
    nvidia = from_nvml(machine.nvml) or from_nvidia_proc(machine)
    others = [g for g in from_drm(machine) if g.vendor is not Vendor.NVIDIA or not nvidia]
    # An NVIDIA card the kernel shows but neither NVML nor its driver does (nouveau, or no
    # driver): still named, with what it needs.
    return nvidia + others
