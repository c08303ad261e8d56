"""Model contracts: a model's family, tensors, scale and layout, read from the ONNX graph.

A contract is read from the graph alone (engine/models/graph.py: `onnx` and its shape
inference; no session, M6), matched against each family's rules, and completed by the
catalog. What the graph cannot tell (an upscaler's scale when shape inference gives up) is left
as None for the engine's one probe run. `ModelSpec` is the one description the engine works
with: file, catalog entry and contract.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ModelError
from engine.models.catalog import (
    CatalogEntry,
    Family,
    Layout,
)
from engine.models.graph import (
    Dim,
    Graph,
    TensorSpec,
    check_external_data,
    load_model,
    strip_weights,
)
from engine.options import OperationOptions
from engine.runtime.identity import FileIdentity

if TYPE_CHECKING:
    import onnx  # read lazily by engine/models/graph.py: listing models needs no onnx

IMAGENET_PATCH = 14  # DA3's ViT patch size: depth inputs are multiples of it
_PROBE_SIZES = (16, 64, 256)  # fixed probe sizes for an upscaler's scale, as chaiNNer does
_DEPTH_PROBE = (56, 84)  # two different multiples of 14, so swapped H/W would show
# ---------------------------------------------------------------------------------------------
# Contracts


@dataclass(frozen=True)
class Contract:
    """What a model takes and gives, as far as the graph tells without running it."""

    family: Family
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    image_input: str  # the input that takes the image
    scale: int | None = None  # upscale: None when the graph does not say (probe it)
    layout: Layout = Layout.NCHW
    fp16: bool = False  # the image input is float16: feed float16
    channels: int = 3  # image channels the model takes
    multiple_of: int = 1  # H and W of the image input must be multiples of this
    fixed_size: tuple[int, int] | None = None  # (H, W) of a static image input
    views: int | None = None  # depth: N of a 1×N×3×H×W input (1 if N is dynamic); None: rank 4
    opset: int = 0
    external_data: tuple[str, ...] = ()  # weight files beside the model, relative to its folder
    # The output the operation reads: the upscaled image, the mask, the depth map, the points.
    image_output: str = ""
    confidence_output: str | None = None  # depth: `depth_conf` when the export has it
    sky_output: str | None = None  # depth: `sky` when the export has it
    tokens_rank: int = 0  # geometry: 0 for a scalar `num_tokens`, 1 for [1]

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def tensor(self, name: str) -> TensorSpec:
        for t in (*self.inputs, *self.outputs):
            if t.name == name:
                return t
        raise KeyError(name)

    def describe(self) -> str:
        parts = [self.family.value]
        if self.family is Family.UPSCALE:
            parts.append(f"×{self.scale}" if self.scale else "scale found at the first run")
            parts.append(self.layout.value)
        parts.append("float16" if self.fp16 else "float32")
        if self.fixed_size:
            parts.append(f"fixed {self.fixed_size[0]}×{self.fixed_size[1]}")
        if self.multiple_of > 1:
            parts.append(f"sizes multiple of {self.multiple_of}")
        if self.views is not None:
            parts.append(f"{self.views} view(s)")
        return ", ".join(parts)


@dataclass(frozen=True)
class ModelSpec:
    """The one description of a model, ready to be loaded: its file, its catalog entry (if
    known) and its contract — what the graph says, completed by the catalog where the graph is
    silent and, for an upscaler whose sizes shape inference could not tell, by one probe run
    (engine/operations/upscale.py) whose result the engine keeps with the session."""

    path: Path
    entry: CatalogEntry | None
    contract: Contract

    @property
    def family(self) -> Family:
        return self.contract.family

    @property
    def id(self) -> str:
        return self.entry.id if self.entry else self.path.stem

    @property
    def defaults(self) -> OperationOptions | None:
        """The options this model runs best with (its catalog entry's), if any."""
        return self.entry.defaults if self.entry else None


def _hw(shape: tuple[Dim, ...] | None, layout: Layout = Layout.NCHW) -> tuple[Dim, Dim]:
    if shape is None or len(shape) < 2:
        return (None, None)
    if layout is Layout.NHWC:
        return (shape[-3], shape[-2])
    return (shape[-2], shape[-1])


def _fixed(hw: tuple[Dim, Dim]) -> tuple[int, int] | None:
    h, w = hw
    return (h, w) if isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0 else None


def _with_size(
    spec: TensorSpec, h: int, w: int, layout: Layout = Layout.NCHW, channels: int = 3
) -> tuple[int, ...]:
    """The spec's shape with H and W set, a dynamic channel dim set to `channels` and other
    dynamic dims (batch, views) set to 1."""
    assert spec.shape is not None
    dims = [d if isinstance(d, int) and d > 0 else 1 for d in spec.shape]
    channel_axis = 3 if layout is Layout.NHWC else len(dims) - 3
    if not isinstance(spec.shape[channel_axis], int):
        dims[channel_axis] = channels
    if layout is Layout.NHWC:
        dims[-3], dims[-2] = h, w
    else:
        dims[-2], dims[-1] = h, w
    return tuple(dims)


Match = Contract | str  # a contract, or the reason the family does not fit


def _match_geometry(g: Graph) -> Match:
    by_name = {t.name: t for t in g.inputs}
    image, tokens = by_name.get("image"), by_name.get("num_tokens")
    if image is None or tokens is None:
        return "needs inputs named `image` and `num_tokens` (MoGe-2)"
    if not image.is_float or image.rank != 4:
        return f"`image` is {image.describe()}, not a float B×3×H×W tensor"
    if tokens.dtype != "int64" or (tokens.rank is not None and tokens.rank > 1):
        return f"`num_tokens` is {tokens.describe()}, not an int64 scalar or [1]"
    missing = [
        n
        for n in ("points", "normal", "mask", "metric_scale")
        if n not in {t.name for t in g.outputs}
    ]
    if missing:
        return f"outputs lack {', '.join(missing)}"
    return Contract(
        Family.GEOMETRY,
        g.inputs,
        g.outputs,
        "image",
        fp16=image.dtype == "float16",
        fixed_size=_fixed(_hw(image.shape)),
        opset=g.opset,
        image_output="points",
        tokens_rank=tokens.rank or 0,
    )


def _match_background(g: Graph, auto: bool) -> Match:
    if len(g.inputs) != 1 or not g.inputs[0].is_float:
        return "needs exactly one float image input"
    x = g.inputs[0]
    shape = x.shape
    if shape is None or len(shape) != 4 or shape[1] != 3:
        return f"input {x.describe()} is not 1×3×S×S"
    size = _fixed(_hw(shape))
    if size is None:
        return (
            f"input {x.describe()} has a dynamic size; background models take a static "
            "square (1024 for BEN2, 320 for U²-Net)"
        )
    if shape[0] != 1 or size[0] != size[1]:
        return f"input {x.describe()} is not 1×3×S×S"
    if auto and size[0] % IMAGENET_PATCH == 0:
        return f"its {size[0]}² input is a grid of 14-pixel patches, which means depth"
    out = g.outputs[0]
    if out.rank != 4 or not out.is_float or (out.shape is not None and out.shape[1] != 1):
        return f"first output {out.describe()} is not a 1×1×S×S mask"
    ohw = _hw(out.shape)
    if _fixed(ohw) is not None and _fixed(ohw) != size:
        return f"mask {out.describe()} differs in size from the input {x.describe()}"
    return Contract(
        Family.BACKGROUND,
        g.inputs,
        g.outputs,
        x.name,
        fp16=x.dtype == "float16",
        fixed_size=size,
        opset=g.opset,
        image_output=out.name,  # BEN2's only output, U²-Net's d0
    )


def _match_depth(g: Graph, named_only: bool) -> Match:
    images = [t for t in g.inputs if t.is_float and t.rank in (4, 5)]
    if not images:
        return "needs a float 1×3×H×W or 1×N×3×H×W input"
    x = images[0]
    assert x.shape is not None
    channel = x.shape[1] if len(x.shape) == 4 else x.shape[2]
    if channel not in (3, None) and not isinstance(channel, str):
        return f"input {x.describe()} does not have 3 colour channels"
    named = [t for t in g.outputs if t.name.lower() in ("depth", "predicted_depth")]
    if named:
        out = named[0]
    elif named_only:
        return "no output named depth"
    else:
        out = g.outputs[0]
        if out.rank not in (3, 4) or not out.is_float:
            return f"first output {out.describe()} is not a B×H×W or B×N×H×W float map"
        assert out.shape is not None
        if len(out.shape) == 4 and out.shape[1] == 3:
            return f"first output {out.describe()} has 3 channels: an image, not a depth map"
        in_hw, out_hw = _hw(x.shape), _hw(out.shape)
        same = in_hw == out_hw and all(d is not None for d in in_hw)
        if not same and _fixed(in_hw) is None:  # dynamic: look at a probe size
            probed = g.infer({x.name: _with_size(x, *_DEPTH_PROBE)})
            same = probed is not None and _hw(probed[0].shape) == _DEPTH_PROBE
        if not same:
            return f"first output {out.describe()} does not match the input {x.describe()} in size"
    extra = [t.name for t in g.inputs if t is not x]
    if extra:
        return f"it also needs {', '.join(extra)}; Tessera runs depth-only exports"
    views: int | None = None
    if len(x.shape) == 5:
        views = x.shape[1] if isinstance(x.shape[1], int) else 1
    names = [t.name for t in g.outputs]
    conf = next((n for n in names if "conf" in n.lower() and n != out.name), None)
    sky = next((n for n in names if "sky" in n.lower() and n != out.name), None)
    return Contract(
        Family.DEPTH,
        g.inputs,
        g.outputs,
        x.name,
        fp16=x.dtype == "float16",
        multiple_of=IMAGENET_PATCH,
        fixed_size=_fixed(_hw(x.shape)),
        views=views,
        opset=g.opset,
        image_output=out.name,
        confidence_output=conf,
        sky_output=sky,
    )


def _match_upscale(g: Graph) -> Match:
    if len(g.inputs) != 1:
        return f"an upscaler has one image input, this has {len(g.inputs)}"
    x, out = g.inputs[0], g.outputs[0]
    if not x.is_float or x.rank != 4:
        return f"input {x.describe()} is not a float image tensor of rank 4"
    assert x.shape is not None
    d1, d3 = x.shape[1], x.shape[3]
    if isinstance(d1, int) and d1 <= 4:
        layout, channels = Layout.NCHW, d1
    elif isinstance(d3, int) and d3 <= 4:
        layout, channels = Layout.NHWC, d3
    elif isinstance(d1, int) and isinstance(d3, int):
        return f"input {x.describe()} has no channel dimension of 1, 3 or 4"
    else:
        layout, channels = Layout.NCHW, 3  # both dynamic: assume RGB planes, as chaiNNer does
    if channels not in (1, 3, 4):
        return f"input {x.describe()} has {channels} channels, not 1, 3 or 4"
    if out.rank not in (4, None) or not out.is_float:
        return f"first output {out.describe()} is not a float image tensor of rank 4"
    out_channels = None
    if out.shape is not None:
        out_channels = out.shape[1] if layout is Layout.NCHW else out.shape[3]
    if isinstance(out_channels, int) and out_channels != channels:
        return f"output {out.describe()} has {out_channels} channel(s) for {channels} in"
    fixed = _fixed(_hw(x.shape, layout))
    scale: int | None = None
    multiple_of = 1
    if fixed is not None:
        out_hw = _fixed(_hw(out.shape, layout))
        if out_hw is not None:
            scale = _ratio(fixed, out_hw)
            if scale is None:
                return (
                    f"output {out.describe()} is not a whole multiple of the input {x.describe()}"
                )
    else:
        scale, multiple_of, refusal = _probe_scale(g, x, layout, channels)
        if refusal:
            return refusal
    # An exporter may state what inference cannot see (Tessera's own metadata keys).
    meta = {prop.key: prop.value for prop in g.model.metadata_props}
    scale = _positive(meta.get("tessera.scale")) or scale
    multiple_of = _positive(meta.get("tessera.multiple_of")) or multiple_of
    return Contract(
        Family.UPSCALE,
        g.inputs,
        g.outputs,
        x.name,
        scale=scale,
        layout=layout,
        fp16=x.dtype == "float16",
        channels=channels,
        multiple_of=multiple_of,
        fixed_size=fixed,
        opset=g.opset,
        image_output=out.name,
    )


def _positive(text: str | None) -> int | None:
    try:
        value = int(text) if text else 0
    except ValueError:
        return None
    return value if value > 0 else None


def _ratio(inp: tuple[int, int], out: tuple[int, int]) -> int | None:
    (ih, iw), (oh, ow) = inp, out
    if oh % ih or ow % iw or oh // ih != ow // iw or oh < ih:
        return None
    return oh // ih


def _probe_scale(
    g: Graph, x: TensorSpec, layout: Layout, channels: int
) -> tuple[int | None, int, str | None]:
    """Scale and multiple_of of a dynamic upscaler by shape inference at fixed sizes."""

    def out_hw(size: int) -> tuple[int, int] | None:
        outs = g.infer({x.name: _with_size(x, size, size, layout, channels)})
        return None if outs is None else _fixed(_hw(outs[0].shape, layout))

    concrete: list[str] = []
    for base in _PROBE_SIZES:
        got = out_hw(base)
        if got is None:
            continue
        scale = _ratio((base, base), got)
        if scale is None:
            concrete.append(f"{base}² → {got[0]}×{got[1]}")
            continue
        # The smallest m whose odd multiple base+m still gives exactly scale×: H, W % m == 0.
        for m in (1, 2, 4, 8):
            if out_hw(base + m) == ((base + m) * scale,) * 2:
                return scale, m, None
        return scale, base, None
    if concrete and len(concrete) == len(_PROBE_SIZES):
        return None, 1, f"its output is no whole multiple of its input ({'; '.join(concrete)})"
    return None, 1, None  # inference gave up: the engine finds the scale at the first run


def _inspect(model: onnx.ModelProto, path: Path, family: Family | None) -> Contract:
    g = Graph(model, path.name)
    matchers: dict[Family, Callable[[], Match]] = {
        Family.GEOMETRY: lambda: _match_geometry(g),
        Family.BACKGROUND: lambda: _match_background(g, auto=family is None),
        Family.DEPTH: lambda: _match_depth(g, named_only=False),
        Family.UPSCALE: lambda: _match_upscale(g),
    }
    if family is not None:
        found = matchers[family]()
        if isinstance(found, Contract):
            return found
        hint = ""
        with contextlib.suppress(ModelError):
            other = _inspect(model, path, None)
            hint = f" It fits the {other.family.value} contract instead."
        raise ModelError(f"{path.name} is not a {family.value} model: {found}.{hint}")
    # Order matters: MoGe's names are the most specific; an output called `depth` settles it
    # before a static square 1-channel output could pass for a background mask.
    order: list[tuple[Family, Callable[[], Match]]] = [
        (Family.GEOMETRY, matchers[Family.GEOMETRY]),
        (Family.DEPTH, lambda: _match_depth(g, named_only=True)),
        (Family.BACKGROUND, matchers[Family.BACKGROUND]),
        (Family.DEPTH, matchers[Family.DEPTH]),
        (Family.UPSCALE, matchers[Family.UPSCALE]),
    ]
    reasons: dict[Family, str] = {}
    for fam, match in order:
        found = match()
        if isinstance(found, Contract):
            return found
        reasons[fam] = found
    ins = ", ".join(t.describe() for t in g.inputs) or "none"
    outs = ", ".join(t.describe() for t in g.outputs)
    why = "; ".join(f"{f.value}: {r}" for f, r in reasons.items())
    raise ModelError(
        f"{path.name} fits none of Tessera's model families. It has inputs {ins} and outputs "
        f"{outs}. ({why}.)"
    )


def inspect_model(path: Path, family: Family | None = None) -> Contract:
    """Read the contract of an ONNX file from its graph alone (no session, no weights loaded).

    Raises ModelError when the file is not ONNX or is truncated, when its external data lies
    outside its folder or is missing, or when it fits no family (or not `family`).
    """
    path = Path(path)
    model = load_model(path)
    external = check_external_data(model, path)
    strip_weights(model)
    contract = _inspect(model, path, family)
    return replace(contract, external_data=external) if external else contract


_contract_lock = threading.Lock()
_contract_cache: dict[tuple[str, FileIdentity, Family | None], Contract] = {}
_CONTRACT_CACHE_MAX = 64


def validate_model(path: Path, family: Family | None = None) -> Contract:
    """`inspect_model`, remembered per file version: a second request for the same model
    costs a stat, not a parse of its weights."""
    path = Path(path)
    try:
        # Read once: the contract is kept for the version it was read from, even if the
        # file is replaced while its graph is parsed.
        identity = FileIdentity.read(path)
        key = (str(path.resolve()), identity, family)
        version = identity.digest()
        record = _contract_record(
            path, family, identity.digest(family and family.value, CONTRACT_RECORD_VERSION)
        )
    except OSError:
        return inspect_model(path, family)  # raises the readable error
    with _contract_lock:
        cached = _contract_cache.get(key)
    if cached is not None:
        return cached
    contract = _kept_contract(path, record, version)
    if contract is None:
        contract = inspect_model(path, family)
        _keep_contract(record, version, contract)
    with _contract_lock:
        if len(_contract_cache) >= _CONTRACT_CACHE_MAX:
            _contract_cache.clear()
        _contract_cache[key] = contract
    return contract


# The contract is also kept on disk beside the model's optimised copy, named after the file's
# identity: a new process (a command-line run, the app's first request) reads it instead of
# parsing the graph, and so needs no `onnx` (half a second with protobuf and ml_dtypes).
CONTRACT_RECORD_VERSION = 1  # bump when Contract or the family rules change


def _contract_record(path: Path, family: Family | None, digest: str) -> Path:
    """Where the contract of the file version `digest` names (with its family and the record's
    version) is kept."""
    from engine.runtime.optimize import FOLDER

    kind = family.value if family else "any"
    return path.parent / FOLDER / f"{path.stem}-{kind}-{digest}.contract.json"


def _spec_json(t: TensorSpec) -> dict[str, object]:
    return {"name": t.name, "dtype": t.dtype, "shape": None if t.shape is None else list(t.shape)}


def _spec_of(d: dict[str, Any]) -> TensorSpec:
    shape = d["shape"]
    return TensorSpec(str(d["name"]), str(d["dtype"]), None if shape is None else tuple(shape))


def _keep_contract(record: Path, version: str, c: Contract) -> None:
    data = {
        **{f.name: getattr(c, f.name) for f in fields(c)},
        "family": c.family.value,
        "layout": c.layout.value,
        "inputs": [_spec_json(t) for t in c.inputs],
        "outputs": [_spec_json(t) for t in c.outputs],
        "fixed_size": list(c.fixed_size) if c.fixed_size else None,
        "external_data": list(c.external_data),
        "model": version,  # the version it describes (read back)
    }
    try:
        record.parent.mkdir(exist_ok=True)
        partial = record.with_name(f".{record.name}.partial-{os.getpid()}")
        partial.write_text(json.dumps(data), encoding="utf-8")
        os.replace(partial, record)
    except OSError:  # a read-only folder (a packaged app's models): parse at each start
        return
    stem = record.name.split(".", 1)[0].rsplit("-", 1)[0]  # the model's stem and the family
    for old in record.parent.glob(f"{stem}-*.contract.json"):
        if old != record and old.name.split(".", 1)[0].rsplit("-", 1)[0] == stem:
            old.unlink(missing_ok=True)


def _kept_contract(path: Path, record: Path, version: str) -> Contract | None:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("model") != version:
            # Another model's record under this one's name: it goes, the graph is read.
            record.unlink(missing_ok=True)
            return None
        names = {f.name for f in fields(Contract)}
        values = {k: v for k, v in data.items() if k in names}
        values.update(
            family=Family(data["family"]),
            layout=Layout(data["layout"]),
            inputs=tuple(_spec_of(t) for t in data["inputs"]),
            outputs=tuple(_spec_of(t) for t in data["outputs"]),
            fixed_size=tuple(data["fixed_size"]) if data["fixed_size"] else None,
            external_data=tuple(data["external_data"]),
        )
        contract = Contract(**values)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # The external weights must still sit inside the model's folder (a link may have moved).
    folder = path.parent.resolve()
    for loc in contract.external_data:
        target = (folder / loc).resolve()
        if not target.is_relative_to(folder) or not target.is_file():
            return None  # the full check says why
    return contract


def with_entry(contract: Contract, entry: CatalogEntry | None) -> Contract:
    """Fill what the graph could not tell from the catalog (an upscaler's scale, multiple_of)."""
    if entry is None or contract.family is not Family.UPSCALE:
        return contract
    return replace(
        contract,
        scale=contract.scale if contract.scale is not None else entry.scale,
        multiple_of=math.lcm(contract.multiple_of, entry.multiple_of or 1),
    )
