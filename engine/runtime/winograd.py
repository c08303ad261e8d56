"""Tessera's own CPU convolution: Winograd F(4×4, 3×3) for 3×3 convolutions (winograd.c).

ONNX Runtime's CPU kernels (MLAS) compute a 3×3 convolution directly; they run at the
machine's FMA peak and cannot go faster (onnxruntime#12834: no Winograd). Winograd's minimal
filtering needs a quarter of the multiplies. The kernel is a plain shared library built with
the package (an optional extension: where no C compiler built it, `available()` is False,
`build_problem()` says why, and ONNX Runtime's kernels run) and called through ctypes, which
releases the GIL for the call.

The library holds one path per instruction set (AVX-512, AVX2+FMA, NEON, a portable
baseline) and runs the widest the CPU has; TESSERA_CPU_ISA caps it (`active_isa()`).

Activations are NHWC float32 with the channel count padded to a multiple of 16.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import CpuIsaError

log = logging.getLogger(__name__)

KERNEL_VERSION = 4  # winograd.c's TW_VERSION: a library of another version is not used
LANES = 16  # channels are padded to a multiple of this (one AVX-512 register)
GROUP = 2  # rows of 4×4 tiles a layer computes per step (1 and 4 measured no faster)
DISABLE_ENV = "TESSERA_CPU_KERNELS"  # "ort": ONNX Runtime's kernels only (the bench compares)
ISA_ENV = "TESSERA_CPU_ISA"  # avx512|avx2|baseline|neon: the widest set the kernel may use
ISAS = ("baseline", "avx2", "avx512", "neon")  # winograd.c's TW_BASELINE … TW_NEON, in order

_FLOATS = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")


def padded(channels: int) -> int:
    return -(-channels // LANES) * LANES


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    return load_from(Path(__file__).parent)


def load_from(here: Path) -> tuple[ctypes.CDLL | None, str | None]:
    """The library built into folder `here`, or None and why not (a sentence for a person)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_winograd{suffix}"
        if path.is_file():
            break
    else:
        return None, (
            "Tessera's CPU kernel was not built with this install (no C compiler, or its build "
            "failed: `pip install -v .` shows why); ONNX Runtime's slower kernels run"
        )
    try:
        lib = ctypes.CDLL(str(path))
        if lib.tw_version() != KERNEL_VERSION:
            return None, f"{path.name} is of another version; rebuild it (`pip install .`)"
        return _declare(lib), None
    except (OSError, AttributeError) as e:
        return None, f"{path.name} did not load ({e}); ONNX Runtime's kernels run"


def _library() -> ctypes.CDLL | None:
    lib, problem = _load()
    if problem is not None:
        _log_once(problem)
    return lib


@functools.cache
def _log_once(problem: str) -> None:
    log.warning("%s", problem)


def build_problem() -> str | None:
    """Why the kernel cannot be used (not built, another version, did not load), or None."""
    return _load()[1]


def available_isas() -> tuple[str, ...]:
    """The instruction sets this CPU can run the kernel with (empty: no kernel)."""
    lib = _library()
    if lib is None:
        return ()
    mask = int(lib.tw_isas())
    return tuple(name for i, name in enumerate(ISAS) if mask >> i & 1)


_applied: list[str | None] = [None]  # the TESSERA_CPU_ISA value the library was last given


def check_isa_setting() -> None:
    """Give the library TESSERA_CPU_ISA (when it changed). Raises CpuIsaError for a set this
    CPU lacks or an unknown word."""
    lib = _library()
    word = os.environ.get(ISA_ENV, "").strip().lower() or None
    if lib is None or word == _applied[0]:
        return
    if word is None:
        lib.tw_set_isa(-1)
    else:
        usable = available_isas()
        if word not in ISAS or lib.tw_set_isa(ISAS.index(word)) != 0:
            raise CpuIsaError(
                f"{ISA_ENV}={word}: "
                + ("this CPU does not have it" if word in ISAS else "no such instruction set")
                + f"; this CPU runs the kernel with {', '.join(usable)}."
            )
    _applied[0] = word


def active_isa() -> str | None:
    """The instruction set the kernel runs with ("avx512", "avx2", "baseline", "neon"), after
    TESSERA_CPU_ISA; None where the library is not there."""
    lib = _library()
    if lib is None:
        return None
    check_isa_setting()
    return ISAS[int(lib.tw_active_isa())]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    c_int = ctypes.c_int
    lib.tw_weights.argtypes = [_FLOATS, c_int, c_int, c_int, c_int, _FLOATS]
    lib.tw_weights.restype = None
    pointers = ctypes.POINTER(ctypes.c_void_p)
    ints = ctypes.POINTER(c_int)
    lib.tw_chain_new.argtypes = [pointers, pointers, pointers, ints, ints, *[c_int] * 7]
    lib.tw_chain_new.restype = ctypes.c_void_p
    lib.tw_chain_steps_total.argtypes = [ctypes.c_void_p]
    lib.tw_chain_steps_total.restype = c_int
    lib.tw_chain_steps.argtypes = [ctypes.c_void_p, _FLOATS, _FLOATS, _FLOATS, c_int, c_int, c_int]
    lib.tw_chain_steps.restype = c_int
    lib.tw_chain_free.argtypes = [ctypes.c_void_p]
    lib.tw_chain_free.restype = None
    void_p = ctypes.c_void_p
    lib.tw_conv.argtypes = [
        void_p, void_p, void_p, c_int, c_int,  # U, bias, slope, cinp, coutp
        void_p, c_int, c_int,  # in, in_ld, up
        void_p, c_int, c_int, c_int,  # out, out_ld, planar, cout
        c_int, c_int,  # H, W
        c_int, pointers, ints, ctypes.POINTER(ctypes.c_float),  # the residuals
        c_int,
    ]  # fmt: skip
    lib.tw_conv.restype = c_int
    lib.tw_isas.argtypes = []
    lib.tw_isas.restype = c_int
    lib.tw_set_isa.argtypes = [c_int]
    lib.tw_set_isa.restype = c_int
    lib.tw_active_isa.argtypes = []
    lib.tw_active_isa.restype = c_int
    return lib


def available() -> bool:
    """The kernel is built, loads, and is not turned off by TESSERA_CPU_KERNELS=ort. Raises
    CpuIsaError where TESSERA_CPU_ISA is not a set this CPU has."""
    if os.environ.get(DISABLE_ENV, "").strip().lower() == "ort":
        return False
    if _library() is None:
        return False
    check_isa_setting()
    return True


@dataclass(frozen=True, eq=False)
class Conv3x3:
    """One 3×3, stride-1, pad-1 convolution with its bias and PRelu slopes, in the kernel's
    form (weights transformed once, channels padded)."""

    cin: int
    cout: int
    transformed: np.ndarray  # U [36][cin padded][cout padded]
    bias: np.ndarray  # [cout padded]
    slope: np.ndarray | None  # [cout padded]; None: no activation

    @classmethod
    def make(cls, weight: np.ndarray, bias: np.ndarray | None, slope: np.ndarray | None) -> Conv3x3:
        lib = _library()
        if lib is None:
            raise RuntimeError("Tessera's CPU convolution kernel is not available")
        cout, cin = int(weight.shape[0]), int(weight.shape[1])
        cinp, coutp = padded(cin), padded(cout)
        u = np.empty((36, cinp, coutp), np.float32)
        lib.tw_weights(np.ascontiguousarray(weight, np.float32), cout, cin, cinp, coutp, u)
        b = np.zeros(coutp, np.float32)
        if bias is not None:
            b[:cout] = bias
        s = None
        if slope is not None:
            s = np.zeros(coutp, np.float32)
            s[:cout] = slope
        return cls(cin, cout, u, b, s)


@dataclass(frozen=True)
class Slice:
    """Channels [offset, offset + channels) of an NHWC float32 tensor `base` [H][W][C]: a
    convolution reads or writes them in place (the members of a Concat share one tensor)."""

    base: np.ndarray
    offset: int = 0

    @property
    def pointer(self) -> int:
        return int(self.base.ctypes.data) + 4 * self.offset

    @property
    def stride(self) -> int:
        return int(self.base.shape[2])


def conv(
    layer: Conv3x3,
    source: Slice,
    target: Slice | np.ndarray,
    threads: int,
    up: int = 1,
    residuals: tuple[tuple[Slice, float], ...] = (),
) -> None:
    """`layer` over `source` (read `up`× upscaled, nearest) into `target`: a Slice, or an
    NCHW [cout][H][W] array (the graph's output) that gets the first `cout` channels. After
    the bias and the slope each residual is added in turn: o = o × scale + residual."""
    lib = _library()
    assert lib is not None
    check_isa_setting()
    height, width = source.base.shape[0] * up, source.base.shape[1] * up
    cinp, coutp = layer.transformed.shape[1], layer.transformed.shape[2]
    # The C side reads and writes whole slices by pointer: a slice past its tensor's channels
    # or of another size would be memory that is not the tensor's.
    slices = [(source, cinp, source.base.shape[:2])] + [
        (r, coutp, (height, width)) for r, _ in residuals
    ]
    if isinstance(target, Slice):
        slices.append((target, coutp, (height, width)))
    for piece, channels, size in slices:
        if piece.base.dtype != np.float32 or not piece.base.flags.c_contiguous:
            raise ValueError("the kernel's tensors are C-contiguous float32")
        if piece.offset < 0 or piece.offset + channels > piece.stride:
            raise ValueError(f"channels {piece.offset}…{piece.offset + channels} of {piece.stride}")
        if piece.base.shape[:2] != size:
            raise ValueError(f"the output is {piece.base.shape[:2]}, not {size}")
    planar = isinstance(target, np.ndarray)
    if planar:
        assert isinstance(target, np.ndarray)
        if target.shape != (layer.cout, height, width) or not target.flags.c_contiguous:
            raise ValueError(f"the output is {target.shape}, not {(layer.cout, height, width)}")
        out_pointer, out_ld = int(target.ctypes.data), 0
    else:
        assert isinstance(target, Slice)
        out_pointer, out_ld = target.pointer, target.stride
    count = len(residuals)
    pointers = (ctypes.c_void_p * 2)(*(r.pointer for r, _ in residuals))
    strides = (ctypes.c_int * 2)(*(r.stride for r, _ in residuals))
    scales = (ctypes.c_float * 2)(*(s for _, s in residuals))
    failed = lib.tw_conv(
        layer.transformed.ctypes.data,
        layer.bias.ctypes.data,
        layer.slope.ctypes.data if layer.slope is not None else None,
        cinp,
        coutp,
        source.pointer,
        source.stride,
        up,
        out_pointer,
        out_ld,
        int(planar),
        layer.cout,
        height,
        width,
        count,
        pointers,
        strides,
        scales,
        threads,
    )
    if failed:
        raise MemoryError("Failed to allocate memory for the convolution's work buffers")


class StreamedChain:
    """A chain of convolutions run row by row through rings of 16 rows a layer (winograd.c,
    `tw_chain_*`): the memory the kernel holds for a run, handed back on `close`.

    `height` × `width`: what the layers make. `shuffle` > 0: the chain ends in DepthToSpace
    and the image's sum; else the last layer's output is NHWC [H][W][cout padded], or with
    `planar` NCHW [cout][H][W]. The first layer reads its input `up`× upscaled (nearest)."""

    def __init__(
        self,
        layers: tuple[Conv3x3, ...],
        height: int,
        width: int,
        shuffle: int,
        group: int = GROUP,
        *,
        up: int = 1,
        planar: bool = False,
    ) -> None:
        lib = _library()
        assert lib is not None
        self._lib = lib
        self._layers = layers  # keeps the weights the C side points at alive
        count = len(layers)
        pointers = ctypes.c_void_p * count
        ints = ctypes.c_int * count
        self._handle = lib.tw_chain_new(
            pointers(*(layer.transformed.ctypes.data for layer in layers)),
            pointers(*(layer.bias.ctypes.data for layer in layers)),
            pointers(
                *(layer.slope.ctypes.data if layer.slope is not None else None for layer in layers)
            ),
            ints(*(layer.transformed.shape[1] for layer in layers)),
            ints(*(layer.transformed.shape[2] for layer in layers)),
            count,
            height,
            width,
            shuffle,
            layers[-1].cout // (shuffle * shuffle) if shuffle else layers[-1].cout if planar else 0,
            group,
            up,
        )
        if not self._handle:
            raise MemoryError("Failed to allocate memory for the chain's rows")
        self.steps = int(lib.tw_chain_steps_total(self._handle))
        self._count, self._group, self._height, self._shuffle = count, group, height, shuffle

    def finished_rows(self, steps: int) -> int:
        """Rows of the product that steps [0, `steps`) have made final (of height × shuffle,
        or of height without one): step s makes layer l's group of rows s - 2l, and the
        shuffle the last layer's group of the step before (winograd.c, chain_worker)."""
        lag = 2 * (self._count - 1) + (1 if self._shuffle else 0)
        groups = max(0, steps - lag)
        return min(self._height, groups * self._group * 4) * max(1, self._shuffle)

    def run(
        self, x: np.ndarray, image: np.ndarray, out: np.ndarray, s0: int, s1: int, threads: int
    ) -> None:
        """Steps [s0, s1) (in order, from 0 for each image): `x` the image NHWC (channels
        padded, `up`× smaller), `image` the same NCHW (the shuffle adds it), `out` the
        product."""
        if not self._handle:
            raise ValueError("the chain is closed")
        check_isa_setting()
        if self._lib.tw_chain_steps(self._handle, x, image, out, s0, min(s1, self.steps), threads):
            raise MemoryError("Failed to allocate memory for the convolution's work buffers")

    def close(self) -> None:
        if self._handle:
            self._lib.tw_chain_free(self._handle)
            self._handle = None

    def __enter__(self) -> StreamedChain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
