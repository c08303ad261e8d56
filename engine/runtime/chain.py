"""A model's chain of 3×3 convolutions run by Tessera's kernel, the rest of its graph by ORT.

The light Real-ESRGAN models (SRVGG "compact") are a chain from the image input: conv 3×3 →
PRelu, eighteen times, then a tail (DepthToSpace, the nearest-upscaled input added, for ×2
and ×3 a cubic downscale). ORT's direct convolution is at the CPU's FMA peak and ncnn, with
Winograd, still does the chain in 0.6× the time. A `ChainSession` runs that chain with the
Winograd kernel (winograd.py) and hands the chain's output to an ORT session of the tail: the
tail is ORT's, exactly as in the model, so only the convolutions change, within float rounding.

The chain runs streamed (winograd.StreamedChain): each layer keeps 32 rows of its output,
so a 1024×768 run holds ~140 MB for the chain, not two 200 MB whole-image activations.

A `ChainSession` is what `SessionCache` holds in place of an `InferenceSession` for such a
model on the CPU, with the same methods the engine calls (`run`, `io_binding`,
`run_with_iobinding`, `get_providers`…). The analysed chain is kept beside the model, in the
kept copies' folder (optimize.py), as an `.npz` of its weights and the tail's graph, so a later
load reads no ONNX graph (no `onnx` import at all); a model with no such chain leaves an
empty `.nochain` marker, so it is not analysed again.

A model whose whole graph is convolutions the kernel takes (RRDBNet: x4plus) gets a
`GraphSession` instead (convgraph.py), with no ORT session at all; its analysis is not kept
(it takes a fraction of a second, and its weights would be 4× the model on disk).
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.files import LIVE, partial_name, sweep_leftovers
from engine.runtime import convgraph, optimize, winograd

log = logging.getLogger(__name__)

FORMAT = 2  # bump when the kept chain's contents or what is analysed change
MIN_LAYERS = 4  # a shorter chain is not worth leaving ORT's graph for
STEPS = 8  # rows of tiles per kernel call: how often a run looks for a cancel
TERMINATED = "Exiting due to terminate flag being set to true."  # ORT's own words (errors.py)


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
    weights: tuple[tuple[np.ndarray, np.ndarray | None, np.ndarray | None], ...]
    tail: bytes | None
    tail_takes_input: bool  # the tail also reads the graph's image input
    # The chain ends in DepthToSpace(r) plus the input upscaled r× (nearest): the SRVGG
    # output, done in one pass by the kernel; `end` is then that sum. 0: no such ending.
    shuffle: int = 0

    def save(self, path: Path) -> None:
        meta = {
            "format": FORMAT,
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
            Arg(name, tuple(shape)),
            tuple(Arg(n, tuple(s)) for n, s in meta["outputs"]),
            meta["end"],
            tuple(weights),
            tail,
            bool(meta["tail_takes_input"]),
            int(meta["shuffle"]),
        )


def analyse(model: Any) -> Chain | None:
    """The chain of plain 3×3 convolutions (each with an optional PRelu, Relu or LeakyRelu)
    that starts at the graph's one image input, and the rest of the graph as the tail; None
    where the graph has no such chain of at least MIN_LAYERS convolutions."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1:
        return None
    image = inputs[0]
    tensor_type = image.type.tensor_type
    if tensor_type.elem_type != onnx.TensorProto.FLOAT or len(tensor_type.shape.dim) != 4:
        return None
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            if name:
                consumers[name].append(node)
    outputs = {o.name for o in graph.output}

    def array(name: str) -> np.ndarray | None:
        return numpy_helper.to_array(inits[name]) if name in inits else None

    def plain_conv(node: Any, channels: int | None) -> np.ndarray | None:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            return None
        weight = array(node.input[1])
        if weight is None or weight.dtype != np.float32 or weight.shape[2:] != (3, 3):
            return None
        if channels is not None and weight.shape[1] != channels:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b""):
            return None
        if list(attrs.get("pads", [0] * 4)) != [1, 1, 1, 1] or attrs.get("group", 1) != 1:
            return None
        if list(attrs.get("strides", [1, 1])) != [1, 1]:
            return None
        if list(attrs.get("dilations", [1, 1])) != [1, 1]:
            return None
        if len(node.input) > 2 and node.input[2] and array(node.input[2]) is None:
            return None
        return weight

    chain_nodes: set[int] = set()
    weights: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = []
    current, channels = image.name, None
    while True:
        if weights and (len(consumers[current]) != 1 or current in outputs):
            break
        convs = [(n, w) for n in consumers[current] if (w := plain_conv(n, channels)) is not None]
        if len(convs) != 1 or convs[0][0].input[0] != current:
            break
        conv, weight = convs[0]
        cout = int(weight.shape[0])
        bias = array(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        chain_nodes.add(id(conv))
        current, slope = conv.output[0], None
        after = consumers[current]
        if len(after) == 1 and current not in outputs and after[0].input[0] == current:
            act = after[0]
            if act.op_type == "PRelu" and len(act.input) == 2:
                s = array(act.input[1])
                # One slope, or one per channel (the slopes broadcast along axis 1).
                if s is not None and (s.size == 1 or s.shape in ((cout, 1, 1), (1, cout, 1, 1))):
                    slope = np.broadcast_to(s.reshape(-1), (cout,)).astype(np.float32)
            elif act.op_type == "Relu":
                slope = np.zeros(cout, np.float32)
            elif act.op_type == "LeakyRelu":
                alpha = next(
                    (helper.get_attribute_value(a) for a in act.attribute if a.name == "alpha"),
                    0.01,
                )
                slope = np.full(cout, alpha, np.float32)
            if slope is not None:
                chain_nodes.add(id(act))
                current = act.output[0]
        weights.append((weight, bias.astype(np.float32) if bias is not None else None, slope))
        channels = cout
    if len(weights) < MIN_LAYERS:
        return None
    shuffle = 0
    ending = _shuffle_ending(
        current, image.name, int(weights[-1][0].shape[0]), consumers, outputs, array
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
        return Chain(image_arg, graph_outputs, current, tuple(weights), None, False, shuffle)
    if current in outputs:
        return None  # the chain's end is an output and feeds the tail: not worth the case
    used = {name for n in tail_nodes for name in n.input if name}
    takes_input = image.name in used
    channels_out = int(image_shape[1] or 3) if shuffle else int(weights[-1][0].shape[0])
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
        [inits[n] for n in inits if n in used],
    )
    tail = helper.make_model(
        tail_graph, opset_imports=list(model.opset_import), ir_version=model.ir_version
    )
    rewrites = optimize.rewrite_for_cpu(tail, {current: shuffle} if shuffle else None)
    if rewrites:
        log.info("the tail of %s: %s", graph.name, ", ".join(rewrites))
    return Chain(
        image_arg,
        graph_outputs,
        current,
        tuple(weights),
        tail.SerializeToString(),
        takes_input,
        shuffle,
    )


def _shuffle_ending(
    end: str,
    image: str,
    channels: int,
    consumers: dict[str, list[Any]],
    outputs: set[str],
    array: Callable[[str], np.ndarray | None],
) -> tuple[list[Any], str, int] | None:
    """DepthToSpace(end, r, CRD) + Resize(image, nearest, r×, asymmetric, floor): its nodes,
    the sum's name and r; None where the chain ends otherwise."""
    from onnx import helper

    def single(name: str) -> Any:
        after = consumers.get(name, [])
        return after[0] if len(after) == 1 and name not in outputs else None

    def attrs(node: Any) -> dict[str, Any]:
        return {
            a.name: (v.decode() if isinstance(v := helper.get_attribute_value(a), bytes) else v)
            for a in node.attribute
        }

    d2s: Any = single(end)
    if d2s is None or d2s.op_type != "DepthToSpace" or attrs(d2s).get("mode", "DCR") != "CRD":
        return None
    r = int(attrs(d2s).get("blocksize", 0))
    if r < 1 or channels % (r * r):
        return None
    add: Any = single(d2s.output[0])
    if add is None or add.op_type != "Add" or len(add.input) != 2:
        return None
    other = add.input[1] if add.input[0] == d2s.output[0] else add.input[0]
    resize: Any = next((n for n in consumers.get(image, []) if other in n.output), None)
    if resize is None or resize.op_type != "Resize" or single(other) is not add:
        return None
    a = attrs(resize)
    if (a.get("mode"), a.get("coordinate_transformation_mode"), a.get("nearest_mode")) != (
        "nearest",
        "asymmetric",
        "floor",
    ):
        return None
    scales = array(resize.input[2]) if len(resize.input) > 2 and resize.input[2] else None
    if len(resize.input) > 3 and resize.input[3]:
        return None  # sizes: not a fixed scale
    if scales is None or scales.tolist() != [1.0, 1.0, float(r), float(r)]:
        return None
    return [d2s, resize, add], add.output[0], r


class ChainBinding:
    """What `io_binding()` gives: the inputs and the caller's output buffers, bound by name."""

    def __init__(self) -> None:
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: list[tuple[str, np.dtype[Any], tuple[int, ...], int]] = []

    def bind_cpu_input(self, name: str, value: np.ndarray) -> None:
        self.inputs[name] = value

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = np.float32,
        shape: Any = None,
        buffer_ptr: int | None = None,
    ) -> None:
        if device_type != "cpu" or buffer_ptr is None or shape is None:
            raise ValueError("a chain session writes only into CPU buffers given to it")
        self.outputs.append((name, np.dtype(element_type), tuple(shape), int(buffer_ptr)))

    def only_output(self) -> np.ndarray:
        """The one bound output buffer, as an array over the caller's memory."""
        ((_, dtype, shape, pointer),) = self.outputs
        size = int(np.prod(shape))
        memory = (np.ctypeslib.as_ctypes_type(dtype) * size).from_address(pointer)
        return np.ctypeslib.as_array(memory).reshape(shape)


class ChainSession:
    """One model on the CPU: its convolution chain by Tessera's kernel, its tail by ORT."""

    def __init__(self, chain: Chain, tail: Any, threads: int, kept: Path | None) -> None:
        self.kept = kept  # the kept chain it was loaded from (a failed run drops it)
        self._input = chain.input
        self._outputs = chain.outputs
        self._end = chain.end
        self._takes_input = chain.tail_takes_input
        self._shuffle = chain.shuffle
        self._layers = tuple(winograd.Conv3x3.make(w, b, s) for w, b, s in chain.weights)
        self._tail = tail
        self._threads = threads or _cores()

    @property
    def weight_bytes(self) -> int:
        """The chain's weights as the kernel holds them (4× a 3×3 kernel's), the tail's not."""
        return sum(layer.transformed.nbytes for layer in self._layers)

    # -- what the engine asks of a session -------------------------------------------------
    def get_providers(self) -> list[str]:
        return (
            list(self._tail.get_providers()) if self._tail is not None else ["CPUExecutionProvider"]
        )

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        if self._tail is not None:
            return dict(self._tail.get_provider_options())
        return {"CPUExecutionProvider": {}}

    def get_inputs(self) -> list[Arg]:
        return [self._input]

    def get_outputs(self) -> list[Arg]:
        return list(self._outputs)

    def get_modelmeta(self) -> Any:
        return self._tail.get_modelmeta() if self._tail is not None else None

    def io_binding(self) -> ChainBinding:
        return ChainBinding()

    def run(
        self, output_names: list[str] | None, feeds: dict[str, np.ndarray], run_options: Any = None
    ) -> list[np.ndarray]:
        end = self._chain(feeds[self._input.name], run_options)
        if self._tail is None:
            return [end]
        return list(self._tail.run(output_names, self._tail_feeds(end, feeds), run_options))

    def run_with_iobinding(self, binding: ChainBinding, run_options: Any = None) -> None:
        if self._tail is None:
            target = binding.only_output()
            # The kernel writes the product straight into the caller's buffer (a 4096×3072
            # product is 151 MB that need not be made and copied).
            self._chain(binding.inputs[self._input.name], run_options, into=target)
            return
        end = self._chain(binding.inputs[self._input.name], run_options)
        inner = self._tail.io_binding()
        for name, value in self._tail_feeds(end, binding.inputs).items():
            inner.bind_cpu_input(name, value)
        for name, dtype, shape, pointer in binding.outputs:
            inner.bind_output(name, "cpu", 0, dtype, shape, pointer)
        self._tail.run_with_iobinding(inner, run_options)

    # -- the chain ---------------------------------------------------------------------------
    def _tail_feeds(self, end: np.ndarray, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tail = {self._end: end}
        if self._takes_input:
            tail[self._input.name] = feeds[self._input.name]
        return tail

    def _chain(self, x: np.ndarray, run_options: Any, into: np.ndarray | None = None) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim != 4 or x.dtype != np.float32:
            raise ValueError(
                f"{self._input.name} takes float32 of rank 4, not {x.dtype} of rank {x.ndim}"
            )
        first = self._layers[0]
        if x.shape[1] != first.cin:
            raise ValueError(f"{self._input.name} takes {first.cin} channels, not {x.shape[1]}")
        n, _, h, w = x.shape
        last = self._layers[-1]
        r = self._shuffle
        try:
            shape = (n, last.cout // (r * r), h * r, w * r) if r else (n, last.cout, h, w)
            if into is not None and (into.shape != shape or into.dtype != np.float32):
                raise ValueError(f"the output buffer is {into.shape} {into.dtype}, not {shape}")
            end = into if into is not None else np.empty(shape, np.float32)
            nhwc = None if r else np.empty((h, w, last.transformed.shape[2]), np.float32)
            a = np.empty((h, w, first.transformed.shape[1]), np.float32)
            with winograd.StreamedChain(self._layers, h, w, r) as streamed:
                for i in range(n):
                    a[:, :, first.cin :] = 0
                    a[:, :, : first.cin] = x[i].transpose(1, 2, 0)
                    image = np.ascontiguousarray(x[i])
                    target = end[i] if r else nhwc
                    assert target is not None
                    # A cancel is seen between calls of STEPS rows of tiles (ORT sees it
                    # between nodes): a tenth of a second or so.
                    for s0 in range(0, streamed.steps, STEPS):
                        if run_options is not None and run_options.terminate:
                            raise RuntimeError(TERMINATED)
                        streamed.run(a, image, target, s0, s0 + STEPS, self._threads)
                    if not r:
                        assert nhwc is not None
                        end[i] = nhwc[:, :, : last.cout].transpose(2, 0, 1)
            del a, nhwc
        except MemoryError as e:
            raise RuntimeError(
                f"Failed to allocate memory for the chain's activations ({e})"
            ) from e
        return end


class GraphSession:
    """One model on the CPU whose whole graph is convolutions (convgraph.py): every one of
    them by Tessera's kernel, no ORT session at all."""

    kept: Path | None = None  # nothing is kept on disk for it

    def __init__(self, program: convgraph.Program, threads: int) -> None:
        self._program = program
        graph = program.graph
        self._input = Arg(graph.input, (None, graph.channels_in, None, None))
        self._output = Arg(graph.output, (None, graph.channels_out, None, None))
        self._threads = threads or _cores()

    @property
    def weight_bytes(self) -> int:
        return self._program.weight_bytes

    def get_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {"CPUExecutionProvider": {}}

    def get_inputs(self) -> list[Arg]:
        return [self._input]

    def get_outputs(self) -> list[Arg]:
        return [self._output]

    def get_modelmeta(self) -> Any:
        return None

    def io_binding(self) -> ChainBinding:
        return ChainBinding()

    def run(
        self, output_names: list[str] | None, feeds: dict[str, np.ndarray], run_options: Any = None
    ) -> list[np.ndarray]:
        return [self._run(feeds[self._input.name], run_options)]

    def run_with_iobinding(self, binding: ChainBinding, run_options: Any = None) -> None:
        self._run(binding.inputs[self._input.name], run_options, into=binding.only_output())

    def _run(self, x: np.ndarray, run_options: Any, into: np.ndarray | None = None) -> np.ndarray:
        graph = self._program.graph
        x = np.asarray(x)
        if x.ndim != 4 or x.dtype != np.float32:
            raise ValueError(
                f"{graph.input} takes float32 of rank 4, not {x.dtype} of rank {x.ndim}"
            )
        if x.shape[1] != graph.channels_in:
            raise ValueError(f"{graph.input} takes {graph.channels_in} channels, not {x.shape[1]}")
        n, _, h, w = x.shape
        shape = (n, graph.channels_out, h * graph.scale, w * graph.scale)
        if into is not None and (into.shape != shape or into.dtype != np.float32):
            raise ValueError(f"the output buffer is {into.shape} {into.dtype}, not {shape}")
        out = into if into is not None else np.empty(shape, np.float32)

        def stopped() -> bool:
            return run_options is not None and bool(run_options.terminate)

        try:
            for i in range(n):
                # A cancel is seen between two convolutions (ORT sees it between nodes).
                if not self._program.run(x[i], out[i], self._threads, stopped):
                    raise RuntimeError(TERMINATED)
        except MemoryError as e:
            raise RuntimeError(f"Failed to allocate memory for the graph's tensors ({e})") from e
        return out


def _cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def load(
    path: Path, identity: tuple[int, ...], threads: int, create: Callable[[bytes], Any]
) -> ChainSession | GraphSession | None:
    """A chain session for `path` on the CPU, or None: the model has no chain for the kernel,
    the kernel is not built, or something failed (the reason goes to the log; the model
    then loads in ORT as it always did). `create` makes the ORT session of the tail's graph."""
    if not winograd.available():
        return None
    folder = path.parent / optimize.FOLDER
    stem = f"{path.stem}-{optimize.copy_digest(identity)}-k{winograd.KERNEL_VERSION}f{FORMAT}"
    kept, marker = folder / f"{stem}.chain.npz", folder / f"{stem}.nochain"
    try:
        if marker.is_file():
            return None
        chain: Chain | None = None
        if kept.is_file():
            try:
                chain = Chain.read(kept)
            except Exception as e:  # damaged, another format: analysed again below
                log.info("%s: the kept chain %s is not used (%s)", path.name, kept.name, e)
                optimize.drop_kept(kept)
        loaded_from = kept if chain is not None else None
        if chain is None:
            model = optimize.load_inline(path)
            if model is None:
                return None
            chain = analyse(model)
            graph = convgraph.analyse(model) if chain is None else None
            del model
            if graph is not None:
                # Not kept: the transformed weights are 4× the model's (268 MB for x4plus),
                # made again at each load in a fraction of a second.
                program = GraphSession(convgraph.Program(graph), threads)
                log.info(
                    "%s on the CPU: %d convolutions by Tessera's kernel (the whole graph)",
                    path.name,
                    len(graph.steps),
                )
                return program
            _keep(folder, path.stem, kept if chain is not None else marker, chain)
            if chain is None:
                return None
        tail = None
        if chain.tail is not None:
            tail = create(chain.tail)
        session = ChainSession(chain, tail, threads, loaded_from)
    except Exception as e:  # never costs the model: ORT runs it as it always did
        log.warning("%s: Tessera's CPU kernel is not used (%s)", path.name, e, exc_info=True)
        return None
    log.info("%s on the CPU: %d convolutions by Tessera's kernel", path.name, len(session._layers))
    return session


def _keep(folder: Path, stem: str, target: Path, chain: Chain | None) -> None:
    """Save the analysed chain (or the no-chain marker), dropping older versions' files."""
    try:
        folder.mkdir(exist_ok=True)
        sweep_leftovers(folder)  # a killed process's half-saved copies
        if chain is not None:
            chain.save(target)
        else:
            os.close(LIVE.create(target, 0o644))
            LIVE.forget(target)
        for old in folder.glob(f"{stem}-*"):
            if old != target and old.name.endswith((".chain.npz", ".nochain")):
                if old.name[len(stem) + 1 :].count("-") == 1:  # this model's, not a longer name's
                    old.unlink(missing_ok=True)
    except OSError as e:  # a read-only folder: analysed again at the next load
        log.info("%s: the analysed chain is not kept (%s)", stem, e)
