"""ONNX Runtime's plugin execution providers: OpenVINO, registered once, its devices picked.

A plugin EP is a shared library in its own wheel (`onnxruntime-ep-openvino`) that installs
beside `onnxruntime-gpu` — never a second ONNX Runtime package in the same environment. It is
not in `get_available_providers()`: it is registered with
`onnxruntime.register_execution_provider_library` and a session asks for it through the devices
it offers (`SessionOptions.add_provider_for_devices`), not by name.

The OpenVINO plugin offers only Intel devices (it compares each device's PCI vendor id with
Intel's), so on an AMD or ARM CPU it offers nothing and the runtime says why.
"""

from __future__ import annotations

import importlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

OPENVINO_EP = "OpenVINOExecutionProvider"
OPENVINO_PACKAGE = "onnxruntime-ep-openvino"
OPENVINO_MODULE = "onnxruntime_ep_openvino"
INTEL_VENDOR_ID = 0x8086

# OpenVINO's CPU plugin computes in bf16 by default on CPUs that have it (AMX, AVX-512 BF16),
# which moves products by ~6/255; Tessera's products must stay within 1/255 of the CPU
# provider's, so f32 is asked for on every device.
F32_LOAD_CONFIG = json.dumps(
    {
        "CPU": {"INFERENCE_PRECISION_HINT": "f32"},
        "GPU": {"INFERENCE_PRECISION_HINT": "f32"},
    }
)

_lock = threading.Lock()
_registered: dict[str, str | None] = {}  # EP name → None (registered) or why it is not


@dataclass(frozen=True)
class PluginTarget:
    """One plugin EP on one of its devices: `kind` "cpu", "gpu" or "npu", the index-th of it."""

    ep_name: str
    kind: str
    index: int = 0
    options: tuple[tuple[str, str], ...] = field(default=())

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)


def openvino_target(kind: str, index: int = 0) -> PluginTarget:
    return PluginTarget(OPENVINO_EP, kind, index, (("load_config", F32_LOAD_CONFIG),))


def register(ep_name: str = OPENVINO_EP) -> str | None:
    """Register the plugin's library once per process; why it cannot be, or None."""
    with _lock:
        if ep_name in _registered:
            return _registered[ep_name]
        reason = _register(ep_name)
        _registered[ep_name] = reason
        return reason


def _register(ep_name: str) -> str | None:
    if ep_name != OPENVINO_EP:
        return f"Tessera knows no plugin named {ep_name}"
    try:
        module = importlib.import_module(OPENVINO_MODULE)
    except ImportError:
        return (
            f"the OpenVINO runtime is not installed (pip install {OPENVINO_PACKAGE}, "
            "or ./scripts/start.sh --runtime openvino)"
        )
    import onnxruntime as ort

    if not hasattr(ort, "register_execution_provider_library"):
        return f"this onnxruntime ({ort.__version__}) cannot load plugin execution providers"
    try:
        ort.register_execution_provider_library(ep_name, module.get_library_path())
    except Exception as e:  # a broken install: the library or one of its own fails to load
        return f"the OpenVINO plugin failed to load: {str(e).splitlines()[0]}"
    return None


def _kind_of(device: Any) -> str:
    import onnxruntime as ort

    kinds = {
        ort.OrtHardwareDeviceType.CPU: "cpu",
        ort.OrtHardwareDeviceType.GPU: "gpu",
        ort.OrtHardwareDeviceType.NPU: "npu",
    }
    return kinds.get(device.device.type, "other")


def ep_devices(target: PluginTarget) -> list[Any]:
    """The `OrtEpDevice`s the plugin offers for `target` (empty when it offers none)."""
    if register(target.ep_name) is not None:
        return []
    import onnxruntime as ort

    mine = [
        d
        for d in ort.get_ep_devices()
        if d.ep_name == target.ep_name and _kind_of(d) == target.kind
    ]
    return mine[target.index : target.index + 1]


def missing(target: PluginTarget) -> str | None:
    """A definite reason the plugin cannot run on `target` here, or None."""
    reason = register(target.ep_name)
    if reason is not None:
        return reason
    if ep_devices(target):
        return None
    import onnxruntime as ort

    hardware = [d.device for d in ort.get_ep_devices() if _kind_of(d) == target.kind]
    others = sorted({f"{h.vendor} (vendor id {h.vendor_id:#06x})" for h in hardware})
    offered = (
        f"it offers no {target.kind.upper()} number {target.index} on this machine"
        if target.index
        else f"it offers no {target.kind.upper()} on this machine"
    )
    if others and all(h.vendor_id != INTEL_VENDOR_ID for h in hardware):
        return (
            f"the OpenVINO plugin runs on Intel devices only and this {target.kind.upper()} is "
            f"{', '.join(others)}: {offered}"
        )
    return f"the OpenVINO plugin is installed but {offered}"
