"""The CPU's own copy of a model: exact graph rewrites, optimised by ONNX Runtime once, kept.

On the CPU, ONNX Runtime's layout transformer (NCHWc) keeps convolutions in a blocked layout
only across the ops it knows how to block. A `PRelu` is not one of them, so in the light
Real-ESRGAN models (SRVGG "compact": conv → PRelu, sixteen times) every activation leaves the
blocked layout and comes back, and the PRelu pass itself is a fifth of the run (ORT's
profiler: 17 % at 256²). `fold_prelu_signs` rewrites each conv → PRelu → conv into ops that
stay blocked, exactly (see its docstring); the result is within float rounding (≤ 1e-5) of
the original.

The rewritten graph, optimised by ORT at load, is saved beside the original in a hidden
folder and loaded from there next time (no rewrite, no re-optimisation). Its name carries
the original file's identity, the ORT version, this module's rewrite version and the CPU's
instruction set, so a replaced model, an ORT upgrade or a copied models folder never loads a
stale or foreign copy. Where the folder cannot be written (a packaged app's bundled models),
the rewrite is made in memory at each load instead.

Only a graph that one of the rewrites changes gets a kept copy: the heavy models
(x4plus) gain nothing from a rewrite, and their copies would double the disk they take.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import Cancelled
from engine.files import LIVE, partial_name, sweep_leftovers
from engine.runtime.conv_nodes import prelu_slope, standard
from engine.runtime.identity import FileIdentity

log = logging.getLogger(__name__)

REWRITE_VERSION = 2  # bump when a rewrite changes: kept copies of the old one are not loaded
FOLDER = ".tessera-optimized"


@dataclass(frozen=True)
class CpuCopy:
    """What ORT loads for a CPU session of one model file."""

    source: Path | bytes  # the kept copy, or the rewritten graph (first load / read-only folder)
    rewrites: tuple[str, ...]  # what was rewritten, for the log and the bench
    save_to: Path | None  # where ORT should save its optimised graph (first load), else None
    kept: Path | None  # the name the saved copy takes once the session is made

    @property
    def preoptimized(self) -> bool:
        """The kept copy was optimised by ORT already: loading it needs no graph optimisation."""
        return isinstance(self.source, Path)


def cpu_copy(path: Path, identity: FileIdentity) -> CpuCopy | None:
    """The optimised copy of `path` for the CPU, or None: load the original as it is.

    `identity`: the file's version (identity.py); another version of the file is another copy.
    """
    folder = path.parent / FOLDER
    kept = folder / f"{path.stem}-{copy_digest(identity)}.onnx"
    if kept.is_file():
        return CpuCopy(kept, ("kept copy",), None, None)
    model = load_inline(path)
    if model is None:
        return None
    rewrites = rewrite_for_cpu(model)
    if not rewrites:
        return None
    data = model.SerializeToString()
    del model
    try:
        folder.mkdir(exist_ok=True)
        sweep_leftovers(folder)  # a killed process's half-saved copies
        save_to = folder / partial_name(kept.name)
        # Created here, exclusively: a folder ORT could not save into (read-only, another
        # user's) is found now, and ORT never writes over a file it did not make.
        os.close(LIVE.create(save_to, 0o644))
    except (OSError, Cancelled) as e:
        log.info("%s: cannot keep an optimised copy (%s); rewriting at each load", path.name, e)
        return CpuCopy(data, tuple(rewrites), None, None)
    return CpuCopy(data, tuple(rewrites), save_to, kept)


def keep(copy: CpuCopy) -> None:
    """Publish the copy ORT saved while making the session, and drop older copies."""
    if copy.save_to is None or copy.kept is None:
        return
    try:
        if os.path.getsize(copy.save_to) == 0:  # ORT saved nothing into the file we made
            raise OSError(f"{copy.save_to.name} is empty")
        os.replace(copy.save_to, copy.kept)
        LIVE.forget(copy.save_to)
    except OSError as e:  # ORT did not write it, or the folder went away: load from memory
        log.info("the optimised copy %s was not kept (%s)", copy.kept.name, e)
        discard(copy)
        return
    stem = copy.kept.name.rsplit("-", 1)[0]
    try:
        for old in copy.kept.parent.glob(f"{stem}-*.onnx"):
            if old != copy.kept and old.name.rsplit("-", 1)[0] == stem:
                old.unlink(missing_ok=True)
    except OSError as e:  # clean-up never turns a kept copy into a failure
        log.info("older optimised copies of %s stay (%s)", stem, e)


def discard(copy: CpuCopy) -> None:
    """Remove the file ORT was to save into. Never raises: it runs in fallbacks (a read-only
    folder answers EROFS even for a file that is not there)."""
    if copy.save_to is not None:
        LIVE.discard(copy.save_to)


def drop_kept(path: Path) -> None:
    """Remove a kept copy that failed; never raises."""
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        log.info("the optimised copy %s stays (%s)", path.name, e)


def copy_digest(identity: FileIdentity) -> str:
    """The name of what is kept for this version of a model on this CPU and ORT."""
    import onnxruntime as ort

    return identity.digest(ort.__version__, REWRITE_VERSION, _instruction_set())


@functools.cache  # read once per process, not at every session load
def _instruction_set() -> str:
    """The CPU features ORT's kernels and blocked layouts depend on (a copy optimised on an
    AVX-512 machine must not be loaded on an AVX2 one)."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "amx_tile")
    return platform.machine() + ":" + ",".join(f for f in wanted if f in flags)


def load_inline(path: Path) -> Any | None:
    """The graph with its weights, or None where the weights live in external files (their
    copy would have to move with them) or the file cannot be parsed (ORT will say why)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # not ONNX, truncated: the session's own load gives the message
        return None
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            return None
    return model


def rewrite_for_cpu(model: Any, multiples: dict[str, int] | None = None) -> list[str]:
    """Apply the exact rewrites that help ORT's CPU kernels; returns what was rewritten.
    `multiples`: graph inputs whose height and width are known multiples of a number (the
    tail of a chain whose kernel ends in DepthToSpace, chain.py)."""
    done = []
    folded = fold_prelu_signs(model)
    if folded:
        done.append(f"{folded} PRelu folded")
    downscales = cubic_downscales_as_convs(model, multiples)
    if downscales:
        done.append(f"{downscales} cubic downscale as a conv")
    return done


# Downscales written as convolutions: the scale → (p, q), p output pixels per q input pixels.
_CUBIC_DOWNSCALES = {0.5: (1, 2), 0.75: (3, 4)}


def _cubic_weights(t: float, a: float = -0.75) -> np.ndarray:
    """The four bicubic weights of taps at −1, 0, 1, 2 around a point `t` past tap 0."""

    def w(d: float) -> float:
        d = abs(d)
        if d <= 1:
            return (a + 2) * d**3 - (a + 3) * d**2 + 1
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a

    return np.array([w(1 + t), w(t), w(1 - t), w(2 - t)], np.float64)


def _phase_kernel(p: int, q: int) -> tuple[np.ndarray, int]:
    """Per output phase r (pixel p·k + r), its taps on input q·k − 1 + j: a (p, K) matrix, and
    K. Output pixel i samples input (i + ½)·q/p − ½ (half_pixel)."""
    bases, fracs = [], []
    for r in range(p):
        x = (r + 0.5) * q / p - 0.5
        bases.append(int(np.floor(x)))
        fracs.append(x - np.floor(x))
    assert min(bases) == 0
    size = max(bases) + 4
    kernel = np.zeros((p, size), np.float64)
    for r in range(p):
        kernel[r, bases[r] : bases[r] + 4] = _cubic_weights(fracs[r])
    return kernel, size


def cubic_downscales_as_convs(model: Any, multiples: dict[str, int] | None = None) -> int:
    """Rewrite a bicubic downscale by ½ or ¾ (Resize: cubic, a = −0.75, half_pixel, no
    exclude_outside) as an edge Pad of 1 and a strided depthwise conv with the cubic taps of
    each output phase (and, for ¾, a DepthToSpace(3) that interleaves the phases).

    Exactly the same sums: output pixel p·k + r samples input q·k + base_r + t_r, whose four
    taps the conv reads with the same weights, and the edge pad repeats the border as Resize's
    clamping does. ORT's Resize kernel is scalar code — for the ×2 and ×3 anime models (×4
    inside, then ½ or ¾) a fifth to a half of the whole run; the conv is its blocked, vectorised
    convolution. ½ holds for any size; ¾ only where height and width are multiples of 4, so it
    is applied only to a tensor a DepthToSpace of a multiple of 4 made (directly, or through
    element-wise ops), as in those models, or to an input `multiples` says is one.
    """
    from onnx import helper, numpy_helper, shape_inference

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    elementwise = {"Add", "Sub", "Mul", "Relu", "PRelu", "Clip", "Identity"}

    def multiple_of(name: str, q: int, depth: int = 0) -> bool:
        if multiples and name in multiples:
            return multiples[name] % q == 0
        node = producer.get(name)
        if node is None or depth > 8:
            return False
        if node.op_type == "DepthToSpace":
            block = next((a.i for a in node.attribute if a.name == "blocksize"), 0)
            return block % q == 0
        if node.op_type in elementwise:
            return any(multiple_of(i, q, depth + 1) for i in node.input if i in producer)
        return False

    candidates: dict[int, tuple[int, int]] = {}
    for n in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if not (
            n.op_type == "Resize"
            and attrs.get("mode") == b"cubic"
            and attrs.get("coordinate_transformation_mode") == b"half_pixel"
            and abs(float(attrs.get("cubic_coeff_a", -0.75)) + 0.75) < 1e-7
            and not attrs.get("exclude_outside", 0)
            and len(n.input) == 3
            and n.input[2] in inits
        ):
            continue
        scales = numpy_helper.to_array(inits[n.input[2]]).tolist()
        if len(scales) != 4 or scales[:2] != [1.0, 1.0] or scales[2] != scales[3]:
            continue
        pq = _CUBIC_DOWNSCALES.get(float(scales[2]))
        if pq is None or (pq[0] > 1 and not multiple_of(n.input[0], pq[1])):
            continue
        candidates[id(n)] = pq
    if not candidates:
        return 0
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # a graph shape inference cannot follow: leave it as it is
        return 0
    shapes = {
        v.name: v.type.tensor_type.shape
        for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)
    }

    def channels_of(name: str) -> int | None:
        shape = shapes.get(name)
        if shape is None or len(shape.dim) != 4 or not shape.dim[1].HasField("dim_value"):
            return None
        return int(shape.dim[1].dim_value)

    count = 0
    nodes = []
    for n in graph.node:
        channels = channels_of(n.input[0]) if id(n) in candidates else None
        if channels is None:
            nodes.append(n)
            continue
        p, q = candidates[id(n)]
        count += 1
        stem = f"tessera_downscale_{count}"
        kernel, size = _phase_kernel(p, q)
        # Output channel c·p² + ry·p + rx of group c: phase (ry, rx) of channel c (CRD order).
        phases = np.einsum("ay,bx->abyx", kernel, kernel).reshape(p * p, 1, size, size)
        weights = np.tile(phases, (channels, 1, 1, 1)).astype(np.float32)
        right = size - q - 1  # the last phase's last tap reads one pixel past the edge
        pads = np.array([0, 0, 1, 1, 0, 0, right, right], np.int64)
        graph.initializer.extend(
            [
                numpy_helper.from_array(pads, f"{stem}_pads"),
                numpy_helper.from_array(weights, f"{stem}_w"),
            ]
        )
        conv_out = list(n.output) if p == 1 else [f"{stem}_phases"]
        nodes += [
            helper.make_node("Pad", [n.input[0], f"{stem}_pads"], [f"{stem}_padded"], mode="edge"),
            helper.make_node(
                "Conv",
                [f"{stem}_padded", f"{stem}_w"],
                conv_out,
                group=channels,
                kernel_shape=[size, size],
                strides=[q, q],
                name=f"{n.name or stem}_conv",
            ),
        ]
        if p > 1:
            nodes.append(
                helper.make_node("DepthToSpace", conv_out, list(n.output), blocksize=p, mode="CRD")
            )
    if count:
        del graph.node[:]
        graph.node.extend(nodes)
    return count


def fold_prelu_signs(model: Any) -> int:
    """Rewrite each conv → PRelu(slope s) → conv(s) into ops that stay in ORT's blocked layout.

    For a channel with slope s ≤ 1, PRelu(y) = y + Relu((s − 1)·y). For s > 1 that identity
    fails (s − 1 > 0 flips which side is kept), but it holds for u = −y:
    −PRelu(y) = u + Relu((s − 1)·u). So each channel gets a sign σ (−1 where s > 1): the
    producing conv's weights and bias are multiplied by σ (it emits u = σ·y), the PRelu
    becomes BatchNormalization(scale s − 1) → Relu → Add(u, ·) — which ORT runs as a blocked
    depthwise conv with the Relu fused — and the consuming convs' input channels are
    multiplied by σ, which cancels the sign. Only a PRelu fed by a conv that nothing else
    reads, and read only by convs, is rewritten: anything else is left as it is.
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def plain_conv(n: Any) -> bool:
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        return (
            n.op_type == "Conv"
            and standard(n)
            and group == 1
            and len(n.input) >= 2
            and n.input[1] in inits
            and (len(n.input) < 3 or n.input[2] == "" or n.input[2] in inits)
        )

    signs: dict[int, np.ndarray] = {}  # id(PRelu node) → σ per channel
    for n in graph.node:
        # Only the standard PRelu: a custom domain's is another operator, which ORT refuses.
        if n.op_type != "PRelu" or not standard(n) or len(n.input) != 2 or n.input[1] not in inits:
            continue
        y, out = n.input[0], n.output[0]
        conv = producer.get(y)
        readers = consumers.get(out, [])
        if (
            conv is None
            or not plain_conv(conv)
            or y in outputs
            or out in outputs
            or len(consumers.get(y, [])) != 1
            or not readers
            or not all(
                plain_conv(r) and r.input[0] == out and out not in r.input[1:] for r in readers
            )
        ):
            continue
        channels = numpy_helper.to_array(inits[conv.input[1]]).shape[0]
        slope = prelu_slope(numpy_helper.to_array(inits[n.input[1]]), channels)
        if slope is None:
            continue
        signs[id(n)] = np.where(slope > 1, -1.0, 1.0).astype(np.float32)

    if not signs:
        return 0
    added: list[Any] = []
    count = [0]

    def const(array: np.ndarray, stem: str) -> str:
        count[0] += 1
        name = f"tessera_{stem}_{count[0]}"
        added.append(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), name))
        return name

    def scaled_conv(conv: Any, rows: np.ndarray | None, cols: np.ndarray | None) -> None:
        weight = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float32)
        if cols is not None:
            weight = weight * cols.reshape(1, -1, 1, 1)
        if rows is not None:
            weight = weight * rows.reshape(-1, 1, 1, 1)
        conv.input[1] = const(weight, "w")
        if rows is not None and len(conv.input) >= 3 and conv.input[2]:
            bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float32) * rows
            conv.input[2] = const(bias, "b")

    rows_of: dict[int, np.ndarray] = {}  # id(conv) → σ of its output channels
    cols_of: dict[int, np.ndarray] = {}  # id(conv) → σ of its input channels
    for n in graph.node:
        if id(n) in signs:
            rows_of[id(producer[n.input[0]])] = signs[id(n)]
            for r in consumers[n.output[0]]:
                cols_of[id(r)] = signs[id(n)]
    nodes = []
    for n in graph.node:
        if n.op_type == "Conv" and (id(n) in rows_of or id(n) in cols_of):
            scaled_conv(n, rows_of.get(id(n)), cols_of.get(id(n)))
        if id(n) not in signs:
            nodes.append(n)
            continue
        u, out = n.input[0], n.output[0]
        channels = signs[id(n)].size
        slope = prelu_slope(numpy_helper.to_array(inits[n.input[1]]), channels)
        assert slope is not None
        zeros, ones = np.zeros(channels, np.float32), np.ones(channels, np.float32)
        zero, one = const(zeros, "zero"), const(ones, "one")
        scaled, kept = f"{out}_tessera_scaled", f"{out}_tessera_relu"
        nodes += [
            helper.make_node(
                "BatchNormalization",
                [u, const(slope - 1, "slope_minus_1"), zero, zero, one],
                [scaled],
                epsilon=0.0,
                name=f"{n.name or out}_scaled",
            ),
            helper.make_node("Relu", [scaled], [kept], name=f"{n.name or out}_relu"),
            helper.make_node("Add", [u, kept], [out], name=f"{n.name or out}_add"),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    # Old graphs list initializers among the inputs too: those stay (an input left without its
    # initializer would become one the caller must feed).
    used = (
        {i for n in graph.node for i in n.input}
        | {o.name for o in graph.output}
        | {i.name for i in graph.input}
    )
    keep_inits = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep_inits)
    # Shapes recorded for the old intermediate tensors may no longer hold.
    del graph.value_info[:]
    return len(signs)
