"""The operation table: one row (`Operation`) per operation, read by the engine and the GUI.

A row says everything that differs between operations and is not the operation's own code:
its name on the command line, its label, the family of models it runs, its typed options, the
products it writes, whether it works tile by tile (so a preview runs only the tiles in view
and the tile setting applies) and whether its product is larger by the model's scale. Its
implementation (engine/operations/) is named as "module:Class" and imported at first use, so
importing the table costs nothing: the GUI reads it at start-up, the command line for --help.

A fifth operation is one more row (`register`), its implementation and its widget; nothing
else names the operations one by one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar

from engine.errors import UsageError
from engine.options import BackgroundOptions, DepthOptions, GeometryOptions, UpscaleOptions


class Family(Enum):
    """The model families: each has its contract (engine/models/contracts.py)."""

    UPSCALE = "upscale"
    BACKGROUND = "background"
    DEPTH = "depth"
    GEOMETRY = "geometry"


@dataclass(frozen=True, eq=False)  # one object per operation: compared by identity, like an enum
class Operation:
    """One operation, as the engine runs it and the GUI offers it."""

    value: str  # the name requests, the command line and saved settings use
    label: str  # for a person: "Remove background"
    family: Family  # the models it runs
    options_type: type[Any]  # its frozen options dataclass (engine/options.py)
    implementation: str  # "module:Class" of its OperationBase, imported when first run
    # The product names after "<stem>-" ({scale}: the model's factor, {model}: its id);
    # checked against the output folder's file system before inference.
    products: tuple[str, ...] = ()
    writes: str = ""  # what it writes, in words, for the texts that offer its models
    tiled: bool = False  # runs tile by tile: the tile setting applies, a preview runs the view
    has_scale: bool = False  # the product is the model's scale times the input's size
    # The first of `products` is the main image, which the request's output step shapes: its
    # format's extension, its size (checked against the pixel limit) and the size tag.
    main_image: bool = False
    # For the output step's notes: the main image's name where it always has transparency
    # ("the cut-out": JPEG flattens it on white), and what keeps its own format whatever the
    # output step says ({clips} becomes what a clip's such products are, or nothing; {exr}
    # what EXR adds beside them when the output step asks for it).
    main_with_alpha: str = ""
    kept_formats: str = ""

    # The built-in rows, set below.
    UPSCALE: ClassVar[Operation]
    REMOVE_BACKGROUND: ClassVar[Operation]
    DEPTH: ClassVar[Operation]
    GEOMETRY: ClassVar[Operation]

    def implementation_class(self) -> type[Any]:
        """The operation's code (an engine.operations.base.OperationBase), imported now: its
        import cost is paid only when used. Not typed as such: the table sits below it."""
        module, _, name = self.implementation.partition(":")
        cls: type[Any] = getattr(importlib.import_module(module), name)
        return cls

    def __repr__(self) -> str:
        return f"Operation({self.value!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy (pickle, deepcopy) is the registered row itself: identity is its equality.
        return (operation_named, (self.value,))


_BY_NAME: dict[str, Operation] = {}


def register(operation: Operation) -> Operation:
    """Add a row to the table (the built-ins below; a test's toy operation)."""
    if operation.value in _BY_NAME:
        raise ValueError(f"an operation named {operation.value!r} is already registered")
    _BY_NAME[operation.value] = operation
    return operation


def operations() -> tuple[Operation, ...]:
    """Every operation, in the order they are offered."""
    return tuple(_BY_NAME.values())


def operation_named(value: str) -> Operation:
    """The operation a request or the command line names; a UsageError lists the others."""
    found = _BY_NAME.get(value)
    if found is None:
        names = ", ".join(_BY_NAME)
        raise UsageError(f"Unknown operation {value!r}. Choose one of: {names}.")
    return found


def takes_option(operation: Operation, name: str) -> bool:
    """Whether the operation's options have a field `name` (the GUI shows its widget then)."""
    return any(f.name == name for f in fields(operation.options_type))


def for_family(family: Family) -> Operation:
    """The first operation that runs `family`'s models: whose options a catalog entry of that
    family presets."""
    found = next((op for op in _BY_NAME.values() if op.family is family), None)
    if found is None:
        raise UsageError(f"No operation runs {family.value} models.")
    return found


Operation.UPSCALE = register(
    Operation(
        "upscale",
        "Upscale",
        Family.UPSCALE,
        UpscaleOptions,
        "engine.operations.upscale:Upscale",
        products=("{model}.png",),  # {model}: the catalog id or file stem; .png, .webp or .tif
        writes="a larger image",
        tiled=True,
        has_scale=True,
        main_image=True,
    )
)
Operation.REMOVE_BACKGROUND = register(
    Operation(
        "remove-background",
        "Remove background",
        Family.BACKGROUND,
        BackgroundOptions,
        "engine.operations.background:RemoveBackground",
        products=("cutout.png", "mask.png"),
        writes="a cut-out with a transparent background, and its mask",
        main_image=True,
        main_with_alpha="the cut-out",
        kept_formats="The mask stays PNG.",
    )
)
Operation.DEPTH = register(
    Operation(
        "depth",
        "Depth",
        Family.DEPTH,
        DepthOptions,
        "engine.operations.depth:Depth",
        products=("depth.tif", "depth.png", "depth-preview.png", "depth-conf.tif", "sky.png"),
        writes="a depth map (16-bit PNG, float TIFF and a coloured preview)",
        kept_formats="Depth, normals and masks are always written as PNG/TIFF{clips}.{exr}",
    )
)
Operation.GEOMETRY = register(
    Operation(
        "geometry",
        "Geometry",
        Family.GEOMETRY,
        GeometryOptions,
        "engine.operations.geometry:Geometry",
        products=(
            "geometry-depth.tif",
            "geometry-depth.png",
            "normal.png",
            "geometry-mask.png",
            "intrinsics.json",
            "points.ply",
        ),
        writes="depth, a normal map, a mask, camera intrinsics and a 3-D point cloud (PLY)",
        kept_formats="Depth, normals and masks are always written as PNG/TIFF{clips}.{exr}",
    )
)
