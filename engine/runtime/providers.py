"""Devices and runtimes → ONNX Runtime provider lists, what really works here, and the shrink target.

Every decision that matters (shrink or not, which device to show, whether a request was
honoured) is taken from `session.get_providers()` after creation, never from
`get_available_providers()`, which lists what was compiled in rather than what loads (M7).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from engine.errors import UsageError
from engine.runtime.plugins import OPENVINO_EP, PluginTarget, openvino_target

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
TENSORRT_EP = "TensorrtExecutionProvider"
MIGRAPHX_EP = "MIGraphXExecutionProvider"
DIRECTML_EP = "DmlExecutionProvider"
COREML_EP = "CoreMLExecutionProvider"

# Providers whose GPU allocator is a BFC arena: the only ones that may receive the shrink entry
# (M3). DirectML crashes on it; CoreML, OpenVINO and the rest fail the run.
SHRINK_CAPABLE = frozenset({CUDA_EP, TENSORRT_EP, MIGRAPHX_EP})
SHRINK_KEY = "memory.enable_memory_arena_shrinkage"


class Runtime(Enum):
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"
    TENSORRT = "tensorrt"
    DIRECTML = "directml"
    COREML = "coreml"
    MIGRAPHX = "migraphx"  # AMD on Linux with ROCm (onnxruntime-migraphx)
    OPENVINO = "openvino"  # a plugin EP: Intel CPUs, GPUs (engine/runtime/plugins.py)

    @classmethod
    def parse(cls, text: str) -> Runtime:
        try:
            return cls(text.strip().lower())
        except ValueError as e:
            names = ", ".join(r.value for r in cls)
            raise UsageError(f"Unknown runtime '{text}'. Choose one of: {names}.") from e


RUNTIME_PROVIDER: Mapping[Runtime, str] = {
    Runtime.CPU: CPU_EP,
    Runtime.CUDA: CUDA_EP,
    Runtime.TENSORRT: TENSORRT_EP,
    Runtime.DIRECTML: DIRECTML_EP,
    Runtime.COREML: COREML_EP,
    Runtime.MIGRAPHX: MIGRAPHX_EP,
    Runtime.OPENVINO: OPENVINO_EP,
}

# Runtimes that also run on the CPU device (the others need a GPU).
CPU_DEVICE_RUNTIMES = frozenset({Runtime.CPU, Runtime.OPENVINO})


@dataclass(frozen=True, order=True)
class Device:
    kind: str  # "cpu" or "gpu"
    index: int = 0

    @classmethod
    def parse(cls, text: str) -> Device:
        t = text.strip().lower()
        if t == "cpu":
            return cls("cpu", 0)
        if t in ("gpu", "cuda"):
            return cls("gpu", 0)
        if t.startswith("gpu:"):
            try:
                index = int(t[4:])
            except ValueError:
                index = -1
            if index >= 0:
                return cls("gpu", index)
        raise UsageError(f"Unknown device '{text}'. Use 'cpu' or 'gpu:N' (for example gpu:0).")

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"gpu:{self.index}"


@dataclass(frozen=True)
class ProviderPlan:
    """What to ask ORT for, and which provider must come first in the created session."""

    providers: tuple[tuple[str, Mapping[str, str]], ...]
    expected: str
    # A plugin EP is asked for through the devices it offers, not by name (plugins.py); the
    # session then falls back to the CPU provider only for nodes the plugin does not take.
    plugin: PluginTarget | None = None

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.providers]

    @property
    def options(self) -> list[dict[str, str]]:
        return [dict(opts) for _, opts in self.providers]


def cuda_options(device: Device, gpu_mem_limit: int | None) -> dict[str, str]:
    opts = {
        "device_id": str(device.index),
        # Without kSameAsRequested the arena's first region can never be shrunk.
        "arena_extend_strategy": "kSameAsRequested",
        # EXHAUSTIVE search allocates large cuDNN workspaces that outlive the run.
        "cudnn_conv_algo_search": "HEURISTIC",
        "cudnn_conv_use_max_workspace": "0",
        # CUDA graphs are never enabled: graph replay skips the shrink.
    }
    if gpu_mem_limit:
        opts["gpu_mem_limit"] = str(int(gpu_mem_limit))
    return opts


def resolve_runtime(device: Device, runtime: Runtime) -> Runtime:
    """The concrete runtime `auto` stands for on this device."""
    if runtime is not Runtime.AUTO:
        return runtime
    if not device.is_gpu:
        return Runtime.CPU
    available = available_providers()
    for candidate in (Runtime.CUDA, Runtime.MIGRAPHX, Runtime.DIRECTML, Runtime.COREML):
        if RUNTIME_PROVIDER[candidate] in available:
            return candidate
    return Runtime.CUDA  # nothing GPU-capable compiled in: fail later with the CUDA diagnosis


def provider_plan(
    device: Device, runtime: Runtime, gpu_mem_limit: int | None = None
) -> ProviderPlan:
    runtime = resolve_runtime(device, runtime)
    cpu: tuple[str, Mapping[str, str]] = (CPU_EP, {})
    if runtime is Runtime.CPU:
        if device.is_gpu:
            raise UsageError(
                f"The cpu runtime cannot run on {device}; choose device cpu or a GPU runtime."
            )
        return ProviderPlan((cpu,), CPU_EP)
    if runtime is Runtime.OPENVINO:
        target = openvino_target("gpu" if device.is_gpu else "cpu", device.index)
        return ProviderPlan(((OPENVINO_EP, target.option_dict), cpu), OPENVINO_EP, target)
    if not device.is_gpu:
        raise UsageError(
            f"The {runtime.value} runtime needs a GPU device (for example --device gpu:0), not cpu."
        )
    cuda = (CUDA_EP, cuda_options(device, gpu_mem_limit))
    if runtime is Runtime.CUDA:
        return ProviderPlan((cuda, cpu), CUDA_EP)
    if runtime is Runtime.TENSORRT:
        trt = {
            "device_id": str(device.index),
            # Since ORT 1.19 the TensorRT workspace is unlimited unless capped.
            "trt_max_workspace_size": str(gpu_mem_limit or 2 << 30),
        }
        return ProviderPlan(((TENSORRT_EP, trt), cuda, cpu), TENSORRT_EP)
    if runtime is Runtime.MIGRAPHX:  # a BFC arena like CUDA's: the shrink applies (M3)
        return ProviderPlan(((MIGRAPHX_EP, {"device_id": str(device.index)}), cpu), MIGRAPHX_EP)
    if runtime is Runtime.DIRECTML:
        return ProviderPlan(((DIRECTML_EP, {"device_id": str(device.index)}), cpu), DIRECTML_EP)
    return ProviderPlan(((COREML_EP, {}), cpu), COREML_EP)


def shrink_target(
    providers: Sequence[str],
    provider_options: Mapping[str, Mapping[str, Any]],
    cpu_arena: bool = False,
) -> str | None:
    """The arena-shrink value for a session, from its actual providers (M2, M3, M11).

    `gpu:<id>` when the session's first provider has a GPU arena, with the session's own device
    id (not a hard-coded 0); `cpu:0` when `cpu_arena` — Tessera's shared CPU arena is
    registered and handed back — and the session is a CPU session or one of those GPU
    sessions (whose outputs come back through the CPU arena). DirectML, CoreML and the rest
    get nothing: their arenas cannot shrink, and the key fails or crashes their runs.
    """
    if not providers:
        return None
    first = providers[0]
    parts: list[str] = []
    if cpu_arena and (first == CPU_EP or first in SHRINK_CAPABLE):
        parts.append("cpu:0")
    if first in SHRINK_CAPABLE:
        opts = provider_options.get(first, {})
        device_id = str(opts.get("device_id", "0")).strip() or "0"
        if not device_id.isdigit():
            return None
        parts.append(f"gpu:{int(device_id)}")
    # No spaces; ORT checks only the entries up to the first valid one, so build it exactly.
    return ";".join(parts) or None


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def _can_load(names: Sequence[str]) -> str | None:
    for name in names:
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return None


def missing_requirement(runtime: Runtime, device: Device | None = None) -> str | None:
    """A definite reason the runtime cannot start here (on `device`), checked before asking ORT.

    Checking first keeps ORT from printing its own load errors (and, for TensorRT, from
    rebuilding the session on other providers) when a library is plainly absent.
    """
    if runtime is Runtime.OPENVINO:
        from engine.runtime import plugins

        dev = device or Device("cpu")
        return plugins.missing(openvino_target("gpu" if dev.is_gpu else "cpu", dev.index))
    compiled = available_providers()
    provider = RUNTIME_PROVIDER.get(runtime)
    if provider and provider not in compiled:
        return f"this onnxruntime build does not include {provider} (it has {', '.join(compiled)})"
    if runtime not in (Runtime.CUDA, Runtime.TENSORRT):
        return None
    if sys.platform.startswith("linux"):
        driver = ["libcuda.so.1"]
        libs = [
            ("libcudart.so.13", "CUDA 13 runtime"),
            ("libcublasLt.so.13", "cuBLAS 13"),
            ("libcudnn.so.9", "cuDNN 9"),
        ]
        trt = ["libnvinfer.so.10"]
    elif os.name == "nt":
        driver = ["nvcuda.dll"]
        libs = [
            ("cudart64_13.dll", "CUDA 13 runtime"),
            ("cublasLt64_13.dll", "cuBLAS 13"),
            ("cudnn64_9.dll", "cuDNN 9"),
        ]
        trt = ["nvinfer_10.dll"]
    else:
        return "CUDA is not available on this operating system"
    if _can_load(driver) is None:
        return "no NVIDIA driver was found (the CUDA driver library could not be loaded)"
    _preload_cuda_wheels()
    for lib, what in libs:
        if _can_load([lib]) is None:
            return (
                f"the {what} library ({lib}) is missing; install it, for example with "
                "pip install 'onnxruntime-gpu[cuda,cudnn]'"
            )
    if runtime is Runtime.TENSORRT and _can_load(trt) is None:
        return "the TensorRT 10 libraries are missing"
    return None


_preloaded = False


def _preload_cuda_wheels() -> None:
    """Load CUDA/cuDNN from the nvidia-* wheels if they are installed (ORT's own helper)."""
    global _preloaded
    if _preloaded:
        return
    _preloaded = True
    try:
        import onnxruntime as ort

        if hasattr(ort, "preload_dlls"):
            import contextlib
            import io

            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                ort.preload_dlls()
    except Exception:  # best effort: the library check that follows gives the reason
        pass


def diagnose(runtime: Runtime, device: Device | None = None) -> str:
    """Why a runtime did not come up on this machine, as far as can be told without ORT's log."""
    return (
        missing_requirement(runtime, device)
        or "the provider failed to start (see the log for ONNX Runtime's message)"
    )
