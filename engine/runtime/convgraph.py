"""A whole graph of 3×3 convolutions run by Tessera's Winograd kernel (winograd.c, `tw_conv`).

The heavy Real-ESRGAN models (RRDBNet: x4plus, x4plus-anime) are nothing but 3×3
convolutions joined by LeakyRelu, channel Concats, residual sums (`x + 0.2 × conv`) and two
nearest 2× upscales. ORT computes each convolution directly, at the CPU's FMA peak; the
kernel's Winograd F(4,3) needs a quarter of the multiplies. `analyse` turns such a graph into
a list of `Step`s, one per convolution, each with the rest fused into it:

- the activation, and up to two residual sums (`o × s + r`) applied as the output is written;
- a Concat costs nothing: its members are written side by side into one NHWC tensor, and a
  convolution reads a prefix of its channels (a dense block's concats are prefixes of one
  another, so one tensor a block holds them all);
- a nearest Resize is read through: the convolution after it reads its input upscaled;
- the graph's last convolutions, each reading only the one before (x4plus's conv_up2, conv_hr,
  conv_last at 4× the size), run streamed through rings of rows (`winograd.StreamedChain`):
  two 4×-size tensors (2 × 432 MB for a 384×288 photo) are never made, nor faulted in.

A graph with anything else is not taken (`analyse` answers None) and ORT runs it as before.
The tensors of a run come from a pool and each goes back to it after the last step that
reads it, so a run holds the few tensors alive at once, not one per node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.runtime import winograd
from engine.runtime.conv_nodes import Unsupported, activation_slope, attributes, conv3x3, standard

MIN_CONVS = 4  # a smaller graph is not worth leaving ORT for
STREAM_STEPS = 8  # the streamed tail's steps (rows of tiles) between two looks for a cancel


@dataclass(frozen=True)
class Place:
    """Where a tensor lives: channels [offset, offset + channels) of tensor `tensor`."""

    tensor: int
    offset: int
    channels: int


@dataclass(frozen=True)
class Tensor:
    """One NHWC tensor of a run: `channels` (a multiple of 16) at `scale`× the input's size."""

    channels: int
    scale: int


@dataclass(frozen=True)
class Step:
    """One convolution (`layer`, an index into the graph's weights) with what is fused in."""

    layer: int
    source: Place
    up: int  # the source is read upscaled this many times (a nearest Resize read through)
    target: Place | None  # None: the graph's output, written NCHW
    residuals: tuple[tuple[Place, float], ...]  # o = o × scale + residual, in order


@dataclass(frozen=True)
class Graph:
    """The analysed model: tensor 0 is the image input (NHWC, channels padded)."""

    input: str
    output: str
    channels_in: int
    channels_out: int
    scale: int  # the output's size over the input's
    tensors: tuple[Tensor, ...]
    steps: tuple[Step, ...]
    weights: tuple[tuple[np.ndarray, np.ndarray | None, np.ndarray | None], ...]
    frees: tuple[tuple[int, ...], ...]  # tensors let go after each step


def analyse(model: Any) -> Graph | None:
    """The model as steps of the kernel, or None where any node is not one it takes."""
    try:
        return _analyse(model)
    except Unsupported:
        return None


@dataclass
class _Nodes:
    """The graph's nodes with what the passes below ask of them."""

    nodes: list[Any]
    inits: dict[str, np.ndarray]
    consumers: dict[str, list[Any]]
    output: str

    def only(self, name: str) -> Any:
        """The one node that reads `name` (None: several, none, or it is the output)."""
        after = self.consumers[name]
        return after[0] if len(after) == 1 and name != self.output else None

    def scalar(self, name: str) -> float | None:
        value = self.inits.get(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


@dataclass(frozen=True)
class _Fused:
    """A convolution and the nodes fused into it: it reads `source`, makes `end`."""

    source: str
    end: str
    residuals: tuple[tuple[str, float], ...]


def _analyse(model: Any) -> Graph:
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    inits: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes = []
    for node in graph.node:
        if not standard(node):
            raise Unsupported(f"{node.domain}:{node.op_type}")
        if node.op_type == "Constant" and len(node.output) == 1:
            inits[node.output[0]] = numpy_helper.to_array(
                next(a.t for a in node.attribute if a.name == "value")
            )
            continue
        nodes.append(node)
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise Unsupported("one input and one output")
    image, output = inputs[0], graph.output[0].name
    tt = image.type.tensor_type
    if tt.elem_type != onnx.TensorProto.FLOAT or len(tt.shape.dim) != 4:
        raise Unsupported("a float32 NCHW input")
    cin = tt.shape.dim[1].dim_value
    if not cin:
        raise Unsupported("a fixed channel count")
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in nodes:
        for name in node.input:
            if name:
                consumers[name].append(node)
    ns = _Nodes(nodes, inits, consumers, output)

    absorbed: set[int] = set()
    channels: dict[str, int] = {image.name: cin}
    convs: list[_Fused] = []
    weights: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = []
    for node in nodes:
        if node.op_type == "Conv":
            made = {c.end for c in convs} | {image.name}
            fused, weight = _fuse(ns, node, absorbed, made)
            convs.append(fused)
            weights.append(weight)
            channels[fused.end] = int(weight[0].shape[0])
    if len(convs) < MIN_CONVS:
        raise Unsupported("too few convolutions")
    concats, resized = _joins(ns, absorbed, channels, {c.end for c in convs} | {image.name})
    tensors, place, scale_of = _lay_out(image.name, cin, convs, concats, resized, channels, output)
    steps, frees = _steps(image.name, convs, concats, resized, place, scale_of, channels, weights)
    if sum(s.target is None for s in steps) != 1 or steps[-1].target is not None:
        raise Unsupported("an output that is not the last convolution's")
    return Graph(
        image.name,
        output,
        cin,
        channels[output],
        scale_of[output],
        tuple(Tensor(c, s) for c, s in tensors),
        steps,
        tuple(weights),
        frees,
    )


def _fuse(
    ns: _Nodes, node: Any, absorbed: set[int], made: set[str]
) -> tuple[_Fused, tuple[np.ndarray, np.ndarray | None, np.ndarray | None]]:
    """A convolution with the activation after it and up to two residual sums of what is
    `made` before it (a sum with a later convolution's output is that one's to take)."""
    weight, bias = conv3x3(node, ns.inits)
    cout = int(weight.shape[0])
    absorbed.add(id(node))
    end, slope = node.output[0], None
    act = ns.only(end)
    if act is not None:
        slope = activation_slope(act, end, cout, ns.inits)
        if slope is not None:
            absorbed.add(id(act))
            end = act.output[0]
    residuals: list[tuple[str, float]] = []
    while len(residuals) < 2:
        nxt, scale, mul = ns.only(end), 1.0, None
        if nxt is not None and nxt.op_type == "Mul" and len(nxt.input) == 2:
            factor = ns.scalar(nxt.input[1] if nxt.input[0] == end else nxt.input[0])
            add = ns.only(nxt.output[0])
            if factor is None or add is None or add.op_type != "Add":
                break
            mul, scale, nxt = nxt, factor, add
        if nxt is None or nxt.op_type != "Add" or len(nxt.input) != 2:
            break
        came = mul.output[0] if mul is not None else end
        other = nxt.input[1] if nxt.input[0] == came else nxt.input[0]
        if other in ns.inits or other == came or other not in made or id(nxt) in absorbed:
            break
        residuals.append((other, scale))
        absorbed.update(id(n) for n in (mul, nxt) if n is not None)
        end = nxt.output[0]
    return _Fused(node.input[0], end, tuple(residuals)), (weight, bias, slope)


def _joins(
    ns: _Nodes, absorbed: set[int], channels: dict[str, int], made: set[str]
) -> tuple[list[Any], dict[str, tuple[str, int]]]:
    """What is left once the convolutions took theirs: Concats (laid out as places) and
    nearest Resizes (read through), each Resize's output as (its input, factor)."""
    resized: dict[str, tuple[str, int]] = {}
    concats = []
    for node in ns.nodes:
        if id(node) in absorbed:
            continue
        if node.op_type == "Concat" and attributes(node).get("axis") in (1, -3):
            if any(n not in made for n in node.input):
                raise Unsupported("a Concat of what no convolution made")
            concats.append(node)
            channels[node.output[0]] = sum(channels[n] for n in node.input)
        elif node.op_type == "Resize":
            a = attributes(node)
            if (a.get("mode"), a.get("coordinate_transformation_mode"), a.get("nearest_mode")) != (
                "nearest",
                "asymmetric",
                "floor",
            ):
                raise Unsupported("a Resize other than nearest")
            scales = ns.inits.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            if len(node.input) > 3 and node.input[3]:
                raise Unsupported("a Resize to sizes")
            if scales is None or len(scales) != 4 or list(scales[:2]) != [1, 1]:
                raise Unsupported("a Resize other than spatial")
            r = int(scales[2])
            if scales[2] != r or scales[3] != r or r < 1:
                raise Unsupported("a Resize by a fraction")
            if node.input[0] not in made or any(
                c.op_type != "Conv" or c.input[0] != node.output[0]
                for c in ns.consumers[node.output[0]]
            ):
                raise Unsupported("a Resize not between convolutions")
            resized[node.output[0]] = (node.input[0], r)
            channels[node.output[0]] = channels[node.input[0]]
        else:
            raise Unsupported(node.op_type)
    return concats, resized


def _base(source: str, resized: dict[str, tuple[str, int]]) -> tuple[str, int]:
    """What a convolution reads, and how many times upscaled."""
    return resized[source] if source in resized else (source, 1)


def _lay_out(
    image: str,
    cin: int,
    convs: list[_Fused],
    concats: list[Any],
    resized: dict[str, tuple[str, int]],
    channels: dict[str, int],
    output: str,
) -> tuple[list[list[int]], dict[str, Place], dict[str, int]]:
    """Each tensor's place: a Concat's members side by side in one tensor (the Concats of a
    dense block are prefixes of one another, so the block's members grow one tensor), every
    other convolution's output in its own. Tensor 0 is the image."""
    tensors: list[list[int]] = [[winograd.padded(cin), 1]]  # [channels, scale]
    place: dict[str, Place] = {image: Place(0, 0, cin)}
    scale_of: dict[str, int] = {image: 1}
    concat_of = {cat.output[0]: cat for cat in concats}
    for fused in convs:  # each output is at its source's size × the upscale read through
        base, up = _base(fused.source, resized)
        if base in concat_of:
            scale_of[base] = scale_of[concat_of[base].input[0]]
        if base not in scale_of:
            raise Unsupported("a convolution of what is not made before it")
        scale_of[fused.end] = scale_of[base] * up
    for cat in concats:
        ins = list(cat.input)
        if len(set(ins)) != len(ins) or any(channels[n] % winograd.LANES for n in ins):
            raise Unsupported("a Concat the kernel cannot lay side by side")
        if len({scale_of[n] for n in ins}) != 1:
            raise Unsupported("a Concat of several sizes")
        placed = 0
        while placed < len(ins) and ins[placed] in place:
            placed += 1
        if placed:
            first = place[ins[0]]
            offset = first.offset
            for n in ins[:placed]:
                if place[n].tensor != first.tensor or place[n].offset != offset:
                    raise Unsupported("a Concat whose members lie apart")
                offset += place[n].channels
            if placed < len(ins) and offset != tensors[first.tensor][0]:
                raise Unsupported("a Concat that cannot grow its tensor")
            t, start = first.tensor, first.offset
        else:
            t, start = len(tensors), 0
            tensors.append([0, scale_of[ins[0]]])
        for n in ins[placed:]:
            if n in place:
                raise Unsupported("a member of two Concats at two places")
            place[n] = Place(t, tensors[t][0], channels[n])
            tensors[t][0] += channels[n]
        place[cat.output[0]] = Place(t, start, channels[cat.output[0]])
        scale_of[cat.output[0]] = scale_of[ins[0]]
    for fused in convs:
        if fused.end not in place and fused.end != output:
            place[fused.end] = Place(len(tensors), 0, channels[fused.end])
            tensors.append([winograd.padded(channels[fused.end]), scale_of[fused.end]])
    return tensors, place, scale_of


def _steps(
    image: str,
    convs: list[_Fused],
    concats: list[Any],
    resized: dict[str, tuple[str, int]],
    place: dict[str, Place],
    scale_of: dict[str, int],
    channels: dict[str, int],
    weights: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None]],
) -> tuple[tuple[Step, ...], tuple[tuple[int, ...], ...]]:
    """The steps in order, and the tensors let go after each (after the last that reads them).
    Each step reads only what earlier steps made: a residual made by a later convolution in
    the node order (an Add after both) would be read before it is there."""
    made_at = {image: -1} | {fused.end: i for i, fused in enumerate(convs)}
    for cat in concats:
        made_at[cat.output[0]] = max(made_at[n] for n in cat.input)
    steps: list[Step] = []
    last_read: dict[int, int] = {}
    for i, fused in enumerate(convs):
        base, up = _base(fused.source, resized)
        if base not in place:
            raise Unsupported("a convolution of the graph's output")
        if any(r not in place for r, _ in fused.residuals):
            raise Unsupported("a residual that is no tensor of the run (an upscale's output)")
        reads = [base] + [r for r, _ in fused.residuals]
        if any(made_at[n] >= i for n in reads):
            raise Unsupported("a convolution of what a later one makes")
        if any(channels[r] != channels[fused.end] for r, _ in fused.residuals):
            raise Unsupported("a residual of another channel count")
        if any(scale_of[r] != scale_of[fused.end] for r, _ in fused.residuals):
            raise Unsupported("a residual of another size")
        if place[base].channels != weights[i][0].shape[1]:
            raise Unsupported("a convolution of another channel count")
        for n in reads:
            last_read[place[n].tensor] = i
        target = place.get(fused.end)
        residuals = tuple((place[r], s) for r, s in fused.residuals)
        steps.append(Step(i, place[base], up, target, residuals))
    frees: list[list[int]] = [[] for _ in steps]
    for t, i in last_read.items():
        frees[i].append(t)
    return tuple(steps), tuple(tuple(f) for f in frees)


def streamed_tail(graph: Graph) -> int:
    """Where the graph's streamed tail begins (len(steps): none): the last steps that each
    read the whole output of the one before, and only they read it, without residuals or an
    upscale (the first may read its input upscaled), ending in the graph's output."""
    steps = graph.steps
    readers: dict[int, int] = defaultdict(int)
    for step in steps:
        for place in (step.source, *(p for p, _ in step.residuals)):
            readers[place.tensor] += 1

    def whole(place: Place, channels: int) -> bool:
        """The place is a tensor of its own, as a ring of the chain holds it."""
        return place.offset == 0 and graph.tensors[place.tensor].channels == winograd.padded(
            channels
        )

    k = len(steps) - 1
    while k > 0:
        before, step = steps[k - 1], steps[k]
        made = before.target
        if step.up != 1 or step.residuals or before.residuals or made is None:
            break
        cout = int(graph.weights[before.layer][0].shape[0])
        if step.source != made or readers[made.tensor] != 1 or not whole(made, cout):
            break
        k -= 1
    first = steps[k]
    cin = int(graph.weights[first.layer][0].shape[1])
    if k == len(steps) - 1 or first.residuals or not whole(first.source, cin):
        return len(steps)
    return k


class Program:
    """An analysed graph with its weights in the kernel's form, ready to run."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.layers = tuple(winograd.Conv3x3.make(w, b, s) for w, b, s in graph.weights)
        self.tail = streamed_tail(graph)

    @property
    def weight_bytes(self) -> int:
        """What the transformed weights hold (4× a 3×3 kernel's: 36 numbers for its 9)."""
        return sum(layer.transformed.nbytes for layer in self.layers)

    def run(
        self,
        image: np.ndarray,
        out: np.ndarray,
        threads: int,
        stopped: Callable[[], bool] = lambda: False,
        rows_made: Callable[[int], None] = lambda rows: None,
    ) -> bool:
        """One NCHW image [cin][H][W] into `out` [cout][H s][W s]; False where `stopped`
        answered True between two convolutions (`out` is then incomplete). `rows_made(n)`: rows
        [0, n) of `out` are final (the streamed tail writes them top to bottom)."""
        g = self.graph
        _, height, width = image.shape
        pool: dict[tuple[int, int, int], list[np.ndarray]] = defaultdict(list)
        live: dict[int, np.ndarray] = {}

        def tensor(t: int) -> np.ndarray:
            if t not in live:
                spec = g.tensors[t]
                shape = (height * spec.scale, width * spec.scale, spec.channels)
                live[t] = pool[shape].pop() if pool[shape] else np.empty(shape, np.float32)
            return live[t]

        first = np.zeros((height, width, g.tensors[0].channels), np.float32)
        first[:, :, : g.channels_in] = image.transpose(1, 2, 0)
        live[0] = first
        for i, step in enumerate(g.steps[: self.tail]):
            if stopped():
                return False
            source = winograd.Slice(tensor(step.source.tensor), step.source.offset)
            target: winograd.Slice | np.ndarray = out
            if step.target is not None:
                target = winograd.Slice(tensor(step.target.tensor), step.target.offset)
            residuals = tuple(
                (winograd.Slice(tensor(p.tensor), p.offset), s) for p, s in step.residuals
            )
            winograd.conv(self.layers[step.layer], source, target, threads, step.up, residuals)
            for t in g.frees[i]:
                done = live.pop(t)
                pool[done.shape].append(done)
        if self.tail == len(g.steps):
            return True
        head = g.steps[self.tail]
        x = tensor(head.source.tensor)
        layers = tuple(self.layers[s.layer] for s in g.steps[self.tail :])
        made = (x.shape[0] * head.up, x.shape[1] * head.up)
        with winograd.StreamedChain(layers, *made, 0, up=head.up, planar=True) as chain:
            for s0 in range(0, chain.steps, STREAM_STEPS):
                if stopped():
                    return False
                chain.run(x, x, out, s0, s0 + STREAM_STEPS, threads)
                rows_made(chain.finished_rows(s0 + STREAM_STEPS))
        return True
