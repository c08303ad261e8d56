"""The SRVGG ("compact") shape of model: a chain of 3×3 convolutions from the image input,
analysed from the graph once and kept beside the model as an `.npz`.

The light Real-ESRGAN models are conv 3×3 → PRelu, eighteen times, then a tail (DepthToSpace,
the nearest-upscaled input added, for ×2 and ×3 a cubic downscale). `analyse` finds the chain
(conv_nodes.py says which nodes it takes, as for RRDB graphs in convgraph.py) and cuts the rest
of the graph out as the tail, which ORT runs as it is in the model.

A kept chain is a file on disk the kernel would read by pointer: `Chain.check` holds it to what
it claims (each layer takes the channels the one before makes, the first the image's, the
shuffle's sum the image's channels) and `Chain.model` names the model version it was analysed
from. A file that does not hold is not used (chain.py drops it and analyses the graph again).
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.files import LIVE, partial_name
from engine.runtime import optimize
from engine.runtime.conv_nodes import Unsupported, activation_slope, attributes, conv3x3, standard

log = logging.getLogger(__name__)

FORMAT = 3  # bump when the kept chain's contents or what is analysed change
MIN_LAYERS = 4  # a shorter chain is not worth leaving ORT's graph for
MAX_CHANNELS = 4096  # more than any model the kernel is for; a claim beyond it is damage

Weights = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]  # weight, bias, slope


@dataclass(frozen=True)
class Arg:
    """What `get_inputs()` / `get_outputs()` answer, as ORT's NodeArg does."""

    name: str
    shape: tuple[int | str | None, ...]
    type: str = "tensor(float)"


@dataclass(frozen=True)
class Chain:
    """The analysed graph: the chain's layers and the tail's graph (None: no tail)."""

    input: Arg
    outputs: tuple[Arg, ...]
    end: str  # the chain's last tensor, the tail's input
    weights: tuple[Weights, ...]
    tail: bytes | None
    tail_takes_input: bool  # the tail also reads the graph's image input
    # The chain ends in DepthToSpace(r) plus the input upscaled r× (nearest): the SRVGG
    # output, done in one pass by the kernel; `end` is then that sum. 0: no such ending.
    shuffle: int = 0
    model: str = ""  # the model version it was analysed from (FileIdentity.digest)

    @property
    def channels(self) -> int:
        """The image's channels: what the first layer takes."""
        return int(self.weights[0][0].shape[1])

    def check(self) -> None:
        """Raise ValueError unless the chain holds what it claims: the kernel is handed its
        layers by pointer and sizes its rows by their channel counts."""
        if len(self.weights) < MIN_LAYERS:
            raise ValueError(f"{len(self.weights)} layers, fewer than {MIN_LAYERS}")
        channels = self.input.shape[1] if len(self.input.shape) == 4 else None
        if not isinstance(channels, int):
            raise ValueError("an image input of no fixed channel count")
        for i, (w, b, s) in enumerate(self.weights):
            if w.dtype != np.float32 or w.ndim != 4 or w.shape[2:] != (3, 3):
                raise ValueError(f"layer {i} is not a 3×3 float32 convolution")
            cout, cin = int(w.shape[0]), int(w.shape[1])
            if cin != channels:
                raise ValueError(f"layer {i} takes {cin} channels, the one before makes {channels}")
            if not 1 <= cout <= MAX_CHANNELS:
                raise ValueError(f"layer {i} makes {cout} channels")
            for name, v in (("bias", b), ("slope", s)):
                if v is not None and (v.dtype != np.float32 or v.shape != (cout,)):
                    raise ValueError(f"layer {i}'s {name} is {v.shape}, not ({cout},)")
            channels = cout
        r = self.shuffle
        if r < 0 or (r and channels != self.channels * r * r):
            raise ValueError(
                f"the shuffle ×{r} of {channels} channels is not the image's {self.channels}"
            )

    def save(self, path: Path) -> None:
        meta = {
            "format": FORMAT,
            "model": self.model,
            "input": [self.input.name, list(self.input.shape)],
            "outputs": [[o.name, list(o.shape)] for o in self.outputs],
            "end": self.end,
            "tail_takes_input": self.tail_takes_input,
            "shuffle": self.shuffle,
            "layers": [[b is not None, s is not None] for _, b, s in self.weights],
        }
        arrays: dict[str, np.ndarray] = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
        for i, (w, b, s) in enumerate(self.weights):
            arrays[f"w{i}"] = w
            if b is not None:
                arrays[f"b{i}"] = b
            if s is not None:
                arrays[f"s{i}"] = s
        if self.tail is not None:
            arrays["tail"] = np.frombuffer(self.tail, np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
        partial = path.with_name(partial_name(path.name))
        fd = LIVE.create(partial, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(buffer.getbuffer())
            os.replace(partial, path)
            LIVE.forget(partial)
        except BaseException:
            LIVE.discard(partial)
            raise

    @classmethod
    def read(cls, path: Path) -> Chain:
        """The kept chain; ValueError (or an error of the file's format) where it is damaged,
        of another format, or does not hold what it claims."""
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            if meta.get("format") != FORMAT:
                raise ValueError(f"{path.name} is of another format")
            weights = []
            for i, (has_bias, has_slope) in enumerate(meta["layers"]):
                weights.append(
                    (
                        z[f"w{i}"],
                        z[f"b{i}"] if has_bias else None,
                        z[f"s{i}"] if has_slope else None,
                    )
                )
            tail = bytes(z["tail"]) if "tail" in z.files else None
        name, shape = meta["input"]
        return cls(
            Arg(str(name), tuple(shape)),
            tuple(Arg(str(n), tuple(s)) for n, s in meta["outputs"]),
            str(meta["end"]),
            tuple(weights),
            tail,
            bool(meta["tail_takes_input"]),
            int(meta["shuffle"]),
            str(meta.get("model", "")),
        )


def analyse(model: Any, identity: str = "") -> Chain | None:
    """The chain of plain 3×3 convolutions (each with an optional PRelu, Relu or LeakyRelu)
    that starts at the graph's one image input, and the rest of the graph as the tail; None
    where the graph has no such chain of at least MIN_LAYERS convolutions. `identity`: the
    model version's digest, kept with the chain."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    protos = {t.name: t for t in graph.initializer}
    inits = {name: numpy_helper.to_array(t) for name, t in protos.items()}
    inputs = [i for i in graph.input if i.name not in protos]
    if len(inputs) != 1:
        return None
    image = inputs[0]
    tensor_type = image.type.tensor_type
    if tensor_type.elem_type != onnx.TensorProto.FLOAT or len(tensor_type.shape.dim) != 4:
        return None
    image_channels = tensor_type.shape.dim[1].dim_value
    if not image_channels:
        return None  # the kernel is handed a fixed channel count
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            if name:
                consumers[name].append(node)
    outputs = {o.name for o in graph.output}

    chain_nodes: set[int] = set()
    weights: list[Weights] = []
    current, channels = image.name, int(image_channels)
    while True:
        readers = consumers[current]
        # The image may feed other nodes too (the tail's upscaled input); a layer's output
        # feeds its convolution alone.
        if weights and (len(readers) != 1 or current in outputs):
            break
        convs = []
        for node in readers:
            try:
                convs.append((node, *conv3x3(node, inits, channels)))
            except Unsupported:
                continue
        if len(convs) != 1 or convs[0][0].input[0] != current or current in convs[0][0].input[1:]:
            break
        conv, weight, bias = convs[0]
        cout = int(weight.shape[0])
        chain_nodes.add(id(conv))
        current, slope = conv.output[0], None
        after = consumers[current]
        if len(after) == 1 and current not in outputs:
            slope = activation_slope(after[0], current, cout, inits)
            if slope is not None:
                chain_nodes.add(id(after[0]))
                current = after[0].output[0]
        weights.append((weight, bias, slope))
        channels = cout
    if len(weights) < MIN_LAYERS:
        return None
    shuffle = 0
    ending = _shuffle_ending(
        current, image.name, channels, int(image_channels), consumers, outputs, inits
    )
    if ending is not None:
        nodes, current, shuffle = ending
        chain_nodes.update(id(n) for n in nodes)
    tail_nodes = [n for n in graph.node if id(n) not in chain_nodes]
    graph_outputs = tuple(
        Arg(o.name, tuple(d.dim_value or d.dim_param or None for d in o.type.tensor_type.shape.dim))
        for o in graph.output
    )
    image_shape = tuple(d.dim_value or d.dim_param or None for d in tensor_type.shape.dim)
    image_arg = Arg(image.name, image_shape)
    if not tail_nodes:
        if outputs != {current}:
            return None
        found = Chain(
            image_arg, graph_outputs, current, tuple(weights), None, False, shuffle, identity
        )
        found.check()
        return found
    if current in outputs:
        return None  # the chain's end is an output and feeds the tail: not worth the case
    used = {name for n in tail_nodes for name in n.input if name}
    takes_input = image.name in used
    channels_out = int(image_channels) if shuffle else channels
    tail_inputs = [
        helper.make_tensor_value_info(
            current, onnx.TensorProto.FLOAT, ["batch", channels_out, "height", "width"]
        )
    ]
    if takes_input:
        tail_inputs.append(image)
    tail_graph = helper.make_graph(
        tail_nodes,
        f"{graph.name}-tail",
        tail_inputs,
        list(graph.output),
        [protos[n] for n in protos if n in used],
    )
    tail = helper.make_model(
        tail_graph, opset_imports=list(model.opset_import), ir_version=model.ir_version
    )
    rewrites = optimize.rewrite_for_cpu(tail, {current: shuffle} if shuffle else None)
    if rewrites:
        log.info("the tail of %s: %s", graph.name, ", ".join(rewrites))
    found = Chain(
        image_arg,
        graph_outputs,
        current,
        tuple(weights),
        tail.SerializeToString(),
        takes_input,
        shuffle,
        identity,
    )
    found.check()
    return found


def _shuffle_ending(
    end: str,
    image: str,
    channels: int,
    image_channels: int,
    consumers: dict[str, list[Any]],
    outputs: set[str],
    inits: dict[str, np.ndarray],
) -> tuple[list[Any], str, int] | None:
    """DepthToSpace(end, r, CRD) + Resize(image, nearest, r×, asymmetric, floor): its nodes,
    the sum's name and r; None where the chain ends otherwise, or where the sum broadcasts
    (a grey image added to three channels: the kernel adds plane for plane)."""

    def single(name: str) -> Any:
        after = consumers.get(name, [])
        return after[0] if len(after) == 1 and name not in outputs else None

    d2s: Any = single(end)
    if (
        d2s is None
        or d2s.op_type != "DepthToSpace"
        or not standard(d2s)
        or attributes(d2s).get("mode", "DCR") != "CRD"
    ):
        return None
    r = int(attributes(d2s).get("blocksize", 0))
    if r < 1 or channels != image_channels * r * r:
        return None
    add: Any = single(d2s.output[0])
    if add is None or add.op_type != "Add" or not standard(add) or len(add.input) != 2:
        return None
    other = add.input[1] if add.input[0] == d2s.output[0] else add.input[0]
    resize: Any = next((n for n in consumers.get(image, []) if other in n.output), None)
    if resize is None or resize.op_type != "Resize" or not standard(resize):
        return None
    if single(other) is not add or resize.input[0] != image:
        return None
    a = attributes(resize)
    if (a.get("mode"), a.get("coordinate_transformation_mode"), a.get("nearest_mode")) != (
        "nearest",
        "asymmetric",
        "floor",
    ):
        return None
    scales = inits.get(resize.input[2]) if len(resize.input) > 2 and resize.input[2] else None
    if len(resize.input) > 3 and resize.input[3]:
        return None  # sizes: not a fixed scale
    if scales is None or scales.tolist() != [1.0, 1.0, float(r), float(r)]:
        return None
    return [d2s, resize, add], add.output[0], r
