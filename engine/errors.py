"""Errors the engine raises: each carries a message a person can act on and keeps its cause."""

from __future__ import annotations

from enum import Enum


class ErrorKind(Enum):
    USAGE = "usage"
    RESOURCE = "resource"
    BAD_INPUT = "bad_input"
    BAD_MODEL = "bad_model"
    DEVICE = "device"
    INFERENCE = "inference"
    CANCELLED = "cancelled"
    INTERNAL = "internal"


# Exit codes of `python -m engine run` (DESIGN §5).
EXIT_CODES: dict[ErrorKind, int] = {
    ErrorKind.USAGE: 2,
    ErrorKind.RESOURCE: 3,
    ErrorKind.BAD_INPUT: 4,
    ErrorKind.BAD_MODEL: 4,
    ErrorKind.INFERENCE: 4,
    ErrorKind.DEVICE: 5,
    ErrorKind.CANCELLED: 130,
    ErrorKind.INTERNAL: 1,
}


class EngineError(Exception):
    """Base of every error the engine reports; `str(err)` is the message for a person."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


class UsageError(EngineError):
    kind = ErrorKind.USAGE


class CpuIsaError(UsageError):
    """TESSERA_CPU_ISA names an instruction set this CPU does not have, or no set at all."""


class ResourceError(EngineError):
    """The device or the process ran out of memory."""

    kind = ErrorKind.RESOURCE


class DiskFullError(ResourceError):
    """A disk is full, over its quota, or refuses a file that large: never a memory problem,
    so no smaller tile is tried."""


class BadInputError(EngineError):
    """An input file cannot be read as an image, or is refused (too large, empty...)."""

    kind = ErrorKind.BAD_INPUT


# How to raise the pixel limit where the engine runs from the command line; the window says
# its own lever in place of this phrase (gui/messages.py: for_window).
PIXEL_LIMIT_LEVER = "raise the limit with --max-megapixels"


class PixelLimitError(BadInputError):
    """An input over the pixel limit: refused before anything is decoded. Its message ends
    with PIXEL_LIMIT_LEVER, which each front end may say its own way."""

    def __init__(self, message: str, total: int, limit: int) -> None:
        super().__init__(message)
        self.total = total
        self.limit = limit


class ModelError(EngineError):
    """A model file is missing, not ONNX, or fits no family's contract."""

    kind = ErrorKind.BAD_MODEL


class DeviceUnavailable(EngineError):
    """The requested device or runtime cannot be used on this machine (M7)."""

    kind = ErrorKind.DEVICE


class InferenceError(EngineError):
    """ONNX Runtime failed for a reason other than memory."""

    kind = ErrorKind.INFERENCE


class DeviceFault(EngineError):
    """The device hit an error that poisons the session (a sticky CUDA error): the session is
    released, and the next job loads a fresh one."""

    kind = ErrorKind.DEVICE


class Cancelled(EngineError):
    kind = ErrorKind.CANCELLED

    def __init__(self, message: str = "Cancelled.") -> None:
        super().__init__(message)


# ---------------------------------------------------------------------------------------------
# ONNX Runtime's errors, mapped

# ORT reports allocation failures only in its message text (DESIGN §3, reference/ort.md §4).
OOM_MARKERS = (
    "failed to allocate memory",
    "available memory of",
    "out of memory",
    "bad_alloc",
    "bad allocation",
    "alloc_failed",
    "cudaerrormemoryallocation",
    "failed to create engine",
    "insufficient workspace",
    "8007000e",  # DirectML's E_OUTOFMEMORY: "Not enough memory resources are available…"
    "not enough memory resources",
)
# CUDA errors after which the context, and every session on it, is unusable (reference/ort.md).
STICKY_MARKERS = (
    "cuda failure 700",
    "illegal memory access",
    "illegal address",
    "cudaerrorillegaladdress",
    "unspecified launch failure",
    "cudaerrorlaunchfailure",
    "misaligned address",
    "illegal instruction",
)
TERMINATE_MARKER = "exiting due to terminate flag"


def is_out_of_memory(text: str) -> bool:
    low = text.lower()
    return any(marker in low for marker in OOM_MARKERS)


def map_error(error: BaseException, model: str, device: str, tiled: bool = True) -> EngineError:
    """Turn an ORT exception into an engine error with a message for a person. `tiled`: the
    operation runs in tiles, so a smaller tile is a remedy (not for a whole-image model)."""
    text = str(error)
    if TERMINATE_MARKER in text.lower():
        return Cancelled()
    if is_out_of_memory(text):
        if not tiled:
            return ResourceError(
                f"Out of memory on {device} while running {model}. Close other programs using "
                "the device, raise the memory limit in the settings, or choose a smaller model."
            )
        return ResourceError(
            f"Out of memory on {device} while running {model}. Use a smaller tile size "
            "(or automatic tiling), lower the image size, or close other programs using the device."
        )
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if any(marker in text.lower() for marker in STICKY_MARKERS):
        return DeviceFault(
            f"{device} failed while running {model} ({first[:300]}); the model was unloaded "
            "and the next job loads it again. If this repeats, update the GPU driver."
        )
    return InferenceError(f"{model} failed on {device}: {first[:400]}")
