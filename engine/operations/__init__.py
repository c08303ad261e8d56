"""One module per model family; `operation_class()` is the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import UsageError
from engine.requests import Operation

if TYPE_CHECKING:
    from engine.operations.base import OperationBase


def operation_class(operation: Operation) -> type[OperationBase]:
    # Imported lazily so the CLI starts fast and a family's import cost is paid only when used.
    if operation is Operation.UPSCALE:
        from engine.operations.upscale import Upscale

        return Upscale
    if operation is Operation.REMOVE_BACKGROUND:
        from engine.operations.background import RemoveBackground

        return RemoveBackground
    if operation is Operation.DEPTH:
        from engine.operations.depth import Depth

        return Depth
    if operation is Operation.GEOMETRY:
        from engine.operations.geometry import Geometry

        return Geometry
    names = ", ".join(o.value for o in Operation)
    raise UsageError(f"Unknown operation {operation}. Choose one of: {names}.")
