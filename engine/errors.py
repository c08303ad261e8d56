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


class ResourceError(EngineError):
    """The device or the process ran out of memory."""

    kind = ErrorKind.RESOURCE


class BadInputError(EngineError):
    """An input file cannot be read as an image, or is refused (too large, empty...)."""

    kind = ErrorKind.BAD_INPUT


class ModelError(EngineError):
    """A model file is missing, not ONNX, or fits no family's contract."""

    kind = ErrorKind.BAD_MODEL


class DeviceUnavailable(EngineError):
    """The requested device or runtime cannot be used on this machine (M7)."""

    kind = ErrorKind.DEVICE


class InferenceError(EngineError):
    """ONNX Runtime failed for a reason other than memory."""

    kind = ErrorKind.INFERENCE


class Cancelled(EngineError):
    kind = ErrorKind.CANCELLED

    def __init__(self, message: str = "Cancelled.") -> None:
        super().__init__(message)
