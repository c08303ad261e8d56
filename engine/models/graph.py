"""Reading an ONNX file without running it: its tensors, shape inference at chosen sizes, and
its external data checked to stay inside its folder.

Only `onnx` and its shape inference: no session is created here (M6). Large weights are
stripped before inference, so a probe costs milliseconds, not a copy of the weights. `onnx`
(with protobuf and ml_dtypes: half a second and 16 MB) is imported at the first file read,
not with this module: a window that only lists models never needs it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from engine.errors import ModelError

if TYPE_CHECKING:
    import onnx

_STRIP_ELEMENTS = 256  # float tensors above this lose their data before shape inference
# onnx.TensorProto's element types and data locations (fixed by the ONNX format).
_FLOAT, _DOUBLE, _FLOAT16, _BFLOAT16, _STRING = 1, 11, 10, 16, 8
_DEFAULT_LOCATION, _EXTERNAL_LOCATION = 0, 1
_FLOAT_TYPES = {"float32": _FLOAT, "float16": _FLOAT16, "bfloat16": _BFLOAT16, "float64": _DOUBLE}

Dim = int | str | None  # a fixed size, a named dynamic size, or an unknown one


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy's name: "float32", "float16", "int64", "string"…
    shape: tuple[Dim, ...] | None  # None when even the rank is unknown

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in _FLOAT_TYPES

    def describe(self) -> str:
        dims = (
            "?"
            if self.shape is None
            else "×".join(str(d) if isinstance(d, int) else (d or "?") for d in self.shape)
        )
        return f"{self.name}: {self.dtype}[{dims}]"


def _dtype_name(elem_type: int) -> str:
    import onnx

    if elem_type == _STRING:
        return "string"
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type).name)
    except (KeyError, ValueError, TypeError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def tensor_spec(value: onnx.ValueInfoProto) -> TensorSpec:
    if not value.type.HasField("tensor_type"):
        return TensorSpec(value.name, "non-tensor", None)
    tensor = value.type.tensor_type
    shape: tuple[Dim, ...] | None = None
    if tensor.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        )
    return TensorSpec(value.name, _dtype_name(tensor.elem_type), shape)


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor that can hold data: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def check_external_data(model: onnx.ModelProto, path: Path) -> tuple[str, ...]:
    """Refuse external-data locations outside the model's folder; return the locations."""
    folder = path.parent.resolve()
    locations: list[str] = []
    for tensor in _all_tensors(model.graph):
        if tensor.data_location != _EXTERNAL_LOCATION:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        loc = info.get("location", "")
        where = f"{path.name}: weights {tensor.name!r} are stored in an external file"
        if not loc:
            raise ModelError(f"{where} but the model does not say which.")
        if (
            PurePosixPath(loc).is_absolute()
            or PureWindowsPath(loc).is_absolute()
            or PureWindowsPath(loc).drive
            or loc.startswith(("/", "\\"))
        ):
            raise ModelError(
                f"{where} at the absolute path {loc!r}. Refused: external data must sit "
                "beside the model, named relative to its folder."
            )
        if ".." in PureWindowsPath(loc).parts:  # splits on both / and \
            raise ModelError(
                f"{where} at {loc!r}, which leaves the model's folder. Refused: external "
                "data must sit beside the model."
            )
        target = (folder / loc).resolve()
        if not target.is_relative_to(folder):  # a link pointing out of the folder
            raise ModelError(f"{where} at {loc!r}, which leads out of the model's folder. Refused.")
        if not target.is_file():
            raise ModelError(f"{where} at {loc!r}, which is missing from {folder}.")
        try:
            end = int(info.get("offset", "0") or 0) + int(info.get("length", "0") or 0)
        except ValueError as e:
            raise ModelError(f"{where} with an unreadable offset or length.") from e
        if end > target.stat().st_size:
            raise ModelError(
                f"{where} at {loc!r}, which is shorter than the model says: truncated?"
            )
        locations.append(loc)
    return tuple(dict.fromkeys(locations))


def strip_weights(model: onnx.ModelProto) -> None:
    """Drop large float data: shape inference needs dims only, and a copy of 1 GB of weights
    per probe would cost seconds and memory. Small and integer tensors (shapes) stay."""
    tensors = list(model.graph.initializer)
    tensors += [a.t for n in model.graph.node for a in n.attribute if a.HasField("t")]
    for t in tensors:
        if t.data_type in _FLOAT_TYPES.values() and math.prod(t.dims) > _STRIP_ELEMENTS:
            for field in ("raw_data", "float_data", "int32_data", "double_data", "external_data"):
                t.ClearField(field)
            t.data_location = _DEFAULT_LOCATION


def load_model(path: Path) -> onnx.ModelProto:
    import onnx
    from google.protobuf.message import DecodeError

    try:
        if path.is_dir():
            raise ModelError(f"{path} is a folder, not an ONNX model file.")
        size = path.stat().st_size
    except FileNotFoundError as e:
        raise ModelError(f"Model file {path} does not exist.") from e
    except OSError as e:
        raise ModelError(f"Cannot read model file {path}: {e.strerror or e}.") from e
    if size == 0:
        raise ModelError(f"{path.name} is empty (0 bytes): not an ONNX model.")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except DecodeError as e:
        raise ModelError(
            f"{path.name} is not an ONNX model, or it is truncated (an interrupted download?): {e}."
        ) from e
    except OSError as e:
        raise ModelError(f"Cannot read model file {path}: {e.strerror or e}.") from e
    except Exception as e:  # onnx raises assorted types on garbage input
        raise ModelError(f"{path.name} is not a readable ONNX model: {e}.") from e
    graph = model.graph
    if model.ir_version <= 0 or not model.opset_import or not graph.node or not graph.output:
        raise ModelError(
            f"{path.name} is not an ONNX model (no graph found): it may be another kind of "
            "file saved with .onnx, or truncated."
        )
    return model


class Graph:
    """The parsed model plus lazily inferred output shapes at chosen input sizes."""

    def __init__(self, model: onnx.ModelProto, name: str) -> None:
        self.model = model
        self.name = name
        init_names = {t.name for t in model.graph.initializer}
        # Old exporters (IR < 4) list initializers as inputs too; those are not real inputs.
        self.inputs = tuple(tensor_spec(v) for v in model.graph.input if v.name not in init_names)
        declared = tuple(tensor_spec(v) for v in model.graph.output)
        inferred = self.infer({})
        if inferred is None:
            self.outputs = declared
        else:  # prefer what inference knows where the declaration is vaguer
            self.outputs = tuple(
                i
                if d.shape is None
                or (i.shape is not None and known_dims(i.shape) > known_dims(d.shape))
                else d
                for d, i in zip(declared, inferred, strict=True)
            )
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)

    def infer(self, sizes: dict[str, tuple[int, ...]]) -> tuple[TensorSpec, ...] | None:
        """Output specs by ONNX shape inference with the given inputs fixed, or None."""
        import onnx
        from onnx import shape_inference

        probe = onnx.ModelProto()
        probe.CopyFrom(self.model)
        if sizes:
            for value in probe.graph.input:
                if value.name in sizes:
                    dims = value.type.tensor_type.shape.dim
                    for d, n in zip(dims, sizes[value.name], strict=True):
                        d.Clear()
                        d.dim_value = n
            del probe.graph.value_info[:]
            for value in probe.graph.output:  # declared symbols would fight the probe sizes
                value.type.tensor_type.ClearField("shape")
        try:
            result = shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
        except Exception:  # inference is best effort; unknown shapes are handled by callers
            return None
        return tuple(tensor_spec(v) for v in result.graph.output)


def known_dims(shape: tuple[Dim, ...]) -> int:
    return sum(isinstance(d, int) for d in shape)
