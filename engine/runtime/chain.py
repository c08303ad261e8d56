"""The sessions of Tessera's CPU kernel: what `SessionCache` holds in place of an ORT session
for a model whose convolutions the kernel takes, with the same methods the engine calls
(`run`, `io_binding`, `run_with_iobinding`, `get_providers`…).

A `ChainSession` runs an SRVGG chain (conv_chain.py) with the Winograd kernel (winograd.py)
and hands the chain's output to an ORT session of the tail: only the convolutions change,
within float rounding. The chain runs streamed (winograd.StreamedChain): each layer keeps 32
rows of its output, so a 1024×768 run holds ~140 MB for the chain, not two 200 MB whole-image
activations. A `GraphSession` runs a whole RRDB graph (convgraph.py), with no ORT session.

The analysed chain is kept beside the model, in the kept copies' folder (optimize.py), so a
later load reads no ONNX graph; a model with no such chain leaves an empty `.nochain` marker.
A kept chain is used only once it holds what it claims and names this version of the model;
otherwise it is dropped and the graph analysed again. A run whose product comes back NaN
from a finite image (ORT's would not) raises `KernelDisagreed`: the handle drops the kept
chain and makes the run again on ORT's session of the original.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.files import LIVE, sweep_leftovers
from engine.runtime import convgraph, finished_rows, kernel_choice, optimize, winograd
from engine.runtime.conv_chain import FORMAT, Arg, Chain, analyse
from engine.runtime.identity import FileIdentity

__all__ = ["Arg", "Chain", "ChainSession", "GraphSession", "KernelDisagreed", "load"]

log = logging.getLogger(__name__)

STEPS = 8  # rows of tiles per kernel call: how often a run looks for a cancel
TERMINATED = "Exiting due to terminate flag being set to true."  # ORT's own words (errors.py)
CHUNK = 1 << 20  # floats a NaN scan looks at at once (no whole-product temporary)


class KernelDisagreed(RuntimeError):
    """The kernel's product holds NaN where its input did not: a kept chain damaged in a way
    its shapes do not show, or a case the kernel gets wrong. ORT runs the model instead."""

    retry_on_original = True  # the handle makes the run again on ORT's session (handle.py)


def has_nan(a: np.ndarray) -> bool:
    """Whether `a` holds a NaN, read in chunks (a max is NaN where any element is)."""
    flat = a.reshape(-1)
    return any(np.isnan(flat[i : i + CHUNK].max()) for i in range(0, flat.size, CHUNK))


def _check_finite(x: np.ndarray, product: np.ndarray, model: str) -> None:
    if has_nan(product) and not has_nan(x):
        raise KernelDisagreed(f"Tessera's CPU kernel made NaN of {model}'s finite input")


class _RowsReport:
    """Tells the run's listener (finished_rows.py) which rows of the caller's buffer are
    final, as the streamed chain makes them: only for one image whose whole product the
    kernel writes into the caller's buffer (`whole`). A band holding NaN where the image has
    none is never handed on: the run stops there and ORT's makes it again."""

    def __init__(self, whole: bool, images: int, x: np.ndarray) -> None:
        listener = finished_rows.listener()
        self._listener = listener if whole and images == 1 else None
        self._done = 0
        self._image_nan: bool | None = None
        self._x = x

    def made(self, product: np.ndarray, rows: int, model: str) -> None:
        if self._listener is None or rows <= self._done:
            return
        band = product[:, self._done : rows]
        if any(has_nan(plane) for plane in band):
            if self._image_nan is None:
                self._image_nan = has_nan(np.ascontiguousarray(self._x))
            if not self._image_nan:
                raise KernelDisagreed(f"Tessera's CPU kernel made NaN of {model}'s finite input")
        self._done = rows
        self._listener(rows)


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
        chain.check()  # the kernel is handed its layers by pointer: they must follow
        self.kept = kept  # the kept chain it was loaded from (a failed run drops it)
        self._input = chain.input
        self._outputs = chain.outputs
        self._end = chain.end
        self._takes_input = chain.tail_takes_input
        self._shuffle = chain.shuffle
        self._layers = tuple(winograd.Conv3x3.make(w, b, s) for w, b, s in chain.weights)
        self._tail = tail
        self._threads = threads or kernel_choice.cores()

    @property
    def weight_bytes(self) -> int:
        """The chain's weights as the kernel holds them (4× a 3×3 kernel's), the tail's not."""
        return sum(layer.transformed.nbytes for layer in self._layers)

    @property
    def cpu_kernel(self) -> str | None:
        """The instruction set the kernel runs with (what `run --json` reports)."""
        return kernel_choice.active_isa()

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
        _check_finite(feeds[self._input.name], end, self._input.name)
        if self._tail is None:
            return [end]
        return list(self._tail.run(output_names, self._tail_feeds(end, feeds), run_options))

    def run_with_iobinding(self, binding: ChainBinding, run_options: Any = None) -> None:
        if self._tail is None:
            target = binding.only_output()
            # The kernel writes the product straight into the caller's buffer (a 4096×3072
            # product is 151 MB that need not be made and copied).
            self._chain(binding.inputs[self._input.name], run_options, into=target)
            _check_finite(binding.inputs[self._input.name], target, self._input.name)
            return
        end = self._chain(binding.inputs[self._input.name], run_options)
        _check_finite(binding.inputs[self._input.name], end, self._input.name)
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
                    rows = _RowsReport(into is not None and r > 0, n, x[i])
                    for s0 in range(0, streamed.steps, STEPS):
                        if run_options is not None and run_options.terminate:
                            raise RuntimeError(TERMINATED)
                        streamed.run(a, image, target, s0, s0 + STEPS, self._threads)
                        rows.made(target, streamed.finished_rows(s0 + STEPS), self._input.name)
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
        self._threads = threads or kernel_choice.cores()

    @property
    def weight_bytes(self) -> int:
        return self._program.weight_bytes

    @property
    def cpu_kernel(self) -> str | None:
        return kernel_choice.active_isa()

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
        x = feeds[self._input.name]
        out = self._run(x, run_options)
        _check_finite(x, out, self._input.name)
        return [out]

    def run_with_iobinding(self, binding: ChainBinding, run_options: Any = None) -> None:
        x = binding.inputs[self._input.name]
        _check_finite(x, self._run(x, run_options, into=binding.only_output()), self._input.name)

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
                rows = _RowsReport(into is not None, n, x[i])

                def made(done: int, rows: _RowsReport = rows, product: np.ndarray = out[i]) -> None:
                    rows.made(product, done, graph.input)

                # A cancel is seen between two convolutions (ORT sees it between nodes).
                if not self._program.run(x[i], out[i], self._threads, stopped, made):
                    raise RuntimeError(TERMINATED)
        except MemoryError as e:
            raise RuntimeError(f"Failed to allocate memory for the graph's tensors ({e})") from e
        return out


def load(
    path: Path,
    identity: FileIdentity,
    threads: int,
    create: Callable[[bytes], Any],
    *,
    measured: bool = False,
    why: list[str] | None = None,
) -> ChainSession | GraphSession | None:
    """A chain session for `path` on the CPU, or None: the model has no chain for the kernel,
    the kernel is not built, or something failed (the reason goes to the log and to `why`;
    the model then loads in ORT as it always did). `create` makes the ORT session of the
    tail's graph. `measured`: only where the kernel measured faster than ORT on this CPU
    (kernel_choice.py); otherwise wherever the graph allows."""
    notes = why if why is not None else []
    if not winograd.available():
        notes.append(f"Tessera's kernel is not used: {kernel_choice.build_problem() or 'off'}")
        return None
    folder = path.parent / optimize.FOLDER
    stem = f"{path.stem}-{optimize.copy_digest(identity)}-k{winograd.KERNEL_VERSION}f{FORMAT}"
    kept, marker = folder / f"{stem}.chain.npz", folder / f"{stem}.nochain"
    model_id = identity.digest()
    try:
        if marker.is_file():
            notes.append("the graph has no chain of convolutions the kernel takes")
            return None
        known = kernel_choice.kept(path, identity, threads) if measured else None
        if known is not None and not known.kernel:
            notes.append(known.why)  # measured before: no analysis, no weights transformed
            return None
        chain: Chain | None = None
        if kept.is_file():
            try:
                chain = Chain.read(kept)
                if chain.model != model_id:
                    raise ValueError("it was analysed from another model")
                chain.check()
            except Exception as e:  # damaged, another format, another model's: analysed again
                log.warning("%s: the kept chain %s is not used (%s)", path.name, kept.name, e)
                optimize.drop_kept(kept)
                chain = None
        loaded_from = kept if chain is not None else None
        if chain is None:
            model = optimize.load_inline(path)
            if model is None:
                notes.append("the graph cannot be read for the kernel (external weights?)")
                return None
            chain = analyse(model, model_id)
            graph = convgraph.analyse(model) if chain is None else None
            del model
            if graph is not None:
                if measured and not _faster(path, identity, _shapes(graph.weights), threads, notes):
                    return None
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
                notes.append("the graph has no chain of convolutions the kernel takes")
                return None
        chain.check()
        if measured and not _faster(path, identity, _shapes(chain.weights), threads, notes):
            return None
        tail = None
        if chain.tail is not None:
            tail = create(chain.tail)
        session = ChainSession(chain, tail, threads, loaded_from)
    except Exception as e:  # never costs the model: ORT runs it as it always did
        log.warning("%s: Tessera's CPU kernel is not used (%s)", path.name, e, exc_info=True)
        notes.append(f"Tessera's kernel failed to load the model ({e})")
        return None
    log.info("%s on the CPU: %d convolutions by Tessera's kernel", path.name, len(session._layers))
    return session


def _shapes(weights: tuple[tuple[np.ndarray, Any, Any], ...]) -> list[tuple[int, int]]:
    """Each layer's (input, output) channels: what the choice measures."""
    return [(int(w.shape[1]), int(w.shape[0])) for w, _, _ in weights]


def _faster(
    path: Path,
    identity: FileIdentity,
    shapes: list[tuple[int, int]],
    threads: int,
    notes: list[str],
) -> bool:
    """Whether the kernel measured faster than ORT on this model's layers (kept per CPU)."""
    choice = kernel_choice.choose(path, identity, shapes, threads)
    log.info("%s: %s", path.name, choice.why)
    if not choice.kernel:
        notes.append(choice.why)
    return choice.kernel


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
