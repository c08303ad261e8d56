"""What each runtime really gives on this machine, and why not (M7).

`probe()` creates a tiny session per runtime and device through the session factory and reports
the provider ONNX Runtime really started, or why it did not come up.
Feeds `python -m engine devices` and the GUI's runtime list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.runtime import kernel_choice
from engine.runtime.memory import gpu_snapshots
from engine.runtime.providers import (
    Device,
    Runtime,
    diagnose,
    missing_requirement,
    provider_plan,
)
from engine.runtime.sessions import create_session


@dataclass(frozen=True)
class RuntimeReport:
    runtime: str
    device: str
    ok: bool
    provider: str | None  # the provider the session really got
    detail: str  # why not, or what was found
    # The CPU's convolutions (kernel_choice.py): the kernel's instruction set or "onnxruntime",
    # and how it is chosen or why the kernel is not used. The CPU runtime's report only.
    cpu_kernel: str | None = None
    cpu_kernel_note: str = ""

    def as_dict(self) -> dict[str, object]:
        found: dict[str, object] = {
            "runtime": self.runtime,
            "device": self.device,
            "ok": self.ok,
            "provider": self.provider,
            "detail": self.detail,
        }
        if self.cpu_kernel is not None:
            found["cpu_kernel"] = self.cpu_kernel
            found["cpu_kernel_note"] = self.cpu_kernel_note
        return found


# The probe: one Relu over a float[1, 4] (opset 17, IR 8), serialised once with onnx.helper
# and kept as bytes, so probing the runtimes — the window does it at start — needs no `onnx`
# (protobuf and ml_dtypes: half a second and 16 MB).
PROBE_MODEL = (
    b'\x08\x08:?\n\x0c\n\x01x\x12\x01y"\x04Relu\x12\x05probeZ\x13\n\x01x\x12\x0e\n\x0c\x08\x01'
    b"\x12\x08\n\x02\x08\x01\n\x02\x08\x04b\x13\n\x01y\x12\x0e\n\x0c\x08\x01\x12\x08\n\x02\x08\x01"
    b"\n\x02\x08\x04B\x04\n\x00\x10\x11"
)


def _probe_model() -> bytes:
    return PROBE_MODEL


def probe(gpu_indices: Sequence[int] | None = None) -> list[RuntimeReport]:
    """Create a tiny session per runtime and report what ONNX Runtime really gave (M7)."""
    if gpu_indices is None:
        gpu_indices = [g.index for g in gpu_snapshots()] or [0]
    model = _probe_model()
    reports: list[RuntimeReport] = []
    targets: list[tuple[Runtime, Device]] = [(Runtime.CPU, Device("cpu"))]
    # OpenVINO runs on the CPU too (Intel CPUs: the plugin offers no other).
    targets.append((Runtime.OPENVINO, Device("cpu")))
    for runtime in (
        Runtime.CUDA,
        Runtime.TENSORRT,
        Runtime.MIGRAPHX,
        Runtime.DIRECTML,
        Runtime.COREML,
        Runtime.OPENVINO,
    ):
        for index in gpu_indices:
            targets.append((runtime, Device("gpu", index)))
    for runtime, device in targets:
        reason = missing_requirement(runtime, device)
        if reason is not None:
            reports.append(RuntimeReport(runtime.value, str(device), False, None, reason))
            continue
        plan = provider_plan(device, runtime)
        try:
            session = create_session(model, plan, name="probe")
            actual = list(session.get_providers())
            del session
        except Exception as e:  # a provider may fail to load in many ways; report, never raise
            reports.append(
                RuntimeReport(runtime.value, str(device), False, None, str(e).splitlines()[0])
            )
            continue
        if actual and actual[0] == plan.expected:
            reports.append(RuntimeReport(runtime.value, str(device), True, actual[0], ""))
        else:
            reports.append(
                RuntimeReport(
                    runtime.value,
                    str(device),
                    False,
                    actual[0] if actual else None,
                    f"falls back to {actual[0] if actual else 'nothing'}: {diagnose(runtime, device)}",
                )
            )
    if reports and reports[0].runtime == Runtime.CPU.value:
        kernel = kernel_choice.status()
        reports[0] = replace(
            reports[0],
            cpu_kernel=kernel.kernel or kernel_choice.ONNXRUNTIME,
            cpu_kernel_note=kernel.note,
        )
    return reports
