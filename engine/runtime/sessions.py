"""Where a session is born: the session cache, and the one function that creates a session.

`create_session` is the only code in Tessera that constructs an `InferenceSession` (M1, M6).
The cache keys sessions by (model file, device, runtime); they live until released:
operations hand back their temporary arena memory (M2) but keep the session and its weights.
The cache is owned by one thread — the engine thread — and refuses to be used from another.

A request holds its model's session through one `SessionHandle` (engine/runtime/handle.py),
where every run is made.
"""

from __future__ import annotations

import gc
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import (
    DeviceUnavailable,
    ModelError,
    ResourceError,
    is_out_of_memory,
)
from engine.runtime import kernel_choice, optimize, records
from engine.runtime.arena import (
    USE_ENV_ALLOCATORS,
    cpu_arena_registered,
    gpu_arena_shares,
    register_gpu_arena,
)
from engine.runtime.identity import FileIdentity
from engine.runtime.providers import (
    CPU_EP,
    CUDA_EP,
    SHRINK_CAPABLE,
    SHRINK_KEY,
    Device,
    ProviderPlan,
    Runtime,
    diagnose,
    missing_requirement,
    provider_plan,
    resolve_runtime,
    shrink_target,
)

log = logging.getLogger(__name__)

DEVICE_ALLOCATOR_FOR_INITIALIZERS = "session.use_device_allocator_for_initializers"
ARENA_SHRINKER = Path("<shared GPU arena>")  # the key a shrinker session is wrapped under


@dataclass(frozen=True)
class SessionKey:
    model: Path  # resolved absolute path of the model file
    device: Device
    runtime: Runtime  # concrete: never AUTO
    identity: FileIdentity | None = None  # None: whatever the file is now (tests, unload)

    @classmethod
    def make(cls, model: Path, device: Device, runtime: Runtime) -> SessionKey:
        path = Path(model).resolve()
        return cls(path, device, resolve_runtime(device, runtime), FileIdentity.of(path))

    def same_place(self, other: SessionKey) -> bool:
        """The same model path, device and runtime, whatever the file's version."""
        return (self.model, self.device, self.runtime) == (other.model, other.device, other.runtime)


@dataclass
class SessionEntry:
    key: SessionKey
    session: Any  # onnxruntime.InferenceSession (or a test's wrapper of one)
    providers: tuple[str, ...]
    shrink_target: str | None
    file_size: int
    # What the loaded weights hold in memory: the file's size, or what Tessera's kernel made of
    # them (its Winograd weights are 4× a 3×3 kernel's: x4plus holds 268 MB, not 67).
    weight_bytes: int
    created_at: float
    last_used: float
    load_seconds: float
    shared_gpu_arena: bool = False  # its runs use the device's shared arena (arena.py)
    runs: int = 0  # successful runs over the session's life (the memory panel shows them)
    kept_copy: Path | None = None  # loaded from this kept optimised copy (optimize.py)
    shrinks: int = 0
    # What ran its CPU convolutions: the kernel's instruction set, "onnxruntime", or None on a
    # GPU; and, where the kernel is not used, why (the memory panel and `run --json` say it).
    cpu_kernel: str | None = None
    cpu_kernel_note: str = ""
    # Output shapes and dtypes seen per input signature, so a later run with the same inputs
    # can have its outputs written into the caller's buffers (see SessionHandle.run's `into`).
    output_shapes: dict[tuple[Any, ...], dict[str, tuple[tuple[int, ...], np.dtype[Any]]]] = field(
        default_factory=dict
    )


@dataclass(frozen=True)
class SessionInfo:
    """A snapshot of one loaded session, safe to hand to another thread."""

    key: SessionKey
    model_name: str
    device: str
    runtime: str
    provider: str
    file_size: int
    weight_bytes: int  # in memory (SessionEntry.weight_bytes)
    last_used: float
    runs: int
    shrinks: int
    cpu_kernel: str | None = None  # SessionEntry.cpu_kernel
    cpu_kernel_note: str = ""
    # Whether its runtime's arena takes the shrink (M2/M3); if not, only Unload hands its
    # working memory back (OpenVINO, DirectML, CoreML).
    shrinkable: bool = True


def create_session(
    model: Path | bytes,
    plan: ProviderPlan,
    *,
    threads: int = 0,
    name: str = "model",
    save_optimized: Path | None = None,
    preoptimized: bool = False,
) -> Any:
    """Create one ORT session; every session in the process comes through here.

    `save_optimized`: where ORT saves the graph it optimised (the CPU's kept copy,
    engine/runtime/optimize.py); `preoptimized`: the graph is such a copy, so ORT's graph
    optimisers have nothing left to do and are skipped.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    # Fatal only: ORT's own coloured `[E:onnxruntime…]` lines would reach the user's stderr
    # beside the sentence we say for the same failure (its text goes to our log).
    so.log_severity_level = 4
    if threads:
        so.intra_op_num_threads = threads
    if save_optimized is not None:
        so.optimized_model_filepath = str(save_optimized)
    if preoptimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    use_env, shared_gpu = env_allocators(plan)
    if use_env:
        # The environment's shared arenas (arena.py) instead of one per session.
        so.add_session_config_entry(USE_ENV_ALLOCATORS, "1")
    if shared_gpu:
        # Weights straight from the device, not from the shared arena: they go back to the
        # device when their session is destroyed, and the arena holds only what runs need.
        so.add_session_config_entry(DEVICE_ALLOCATOR_FOR_INITIALIZERS, "1")
    source: str | bytes = model if isinstance(model, bytes) else str(model)
    names, options = plan.names, plan.options
    if plan.plugin is not None:  # a plugin EP comes through the devices it offers (plugins.py)
        from engine.runtime.plugins import ep_devices

        so.add_provider_for_devices(ep_devices(plan.plugin), plan.plugin.option_dict)
        names, options = [], []
    try:
        # enable_fallback=0 at construction (M7): otherwise, on a provider error, ORT rebuilds
        # the session without provider options (device 0, no memory limit) before we can say no.
        session = ort.InferenceSession(
            source, so, providers=names or None, provider_options=options or None, enable_fallback=0
        )
    except Exception as e:  # ORT's exceptions are not RuntimeError subclasses
        text = str(e)
        known = _unloadable(name, text)
        if known is not None:
            raise ModelError(known) from e
        if is_out_of_memory(text):
            raise ResourceError(
                f"Not enough memory to load {name}. Close other programs using the device, "
                "or pick a smaller model."
            ) from e
        if (
            "NO_SUCHFILE" in text
            or "No such file" in text
            or ("Load model from" in text and "failed" in text)
        ):
            raise ModelError(f"{name}: the model file cannot be read ({_first_line(text)}).") from e
        if (
            "INVALID_PROTOBUF" in text
            or "INVALID_GRAPH" in text
            or "Protobuf parsing failed" in text
        ):
            raise ModelError(f"{name} is not a valid ONNX model ({_first_line(text)}).") from e
        raise ModelError(f"ONNX Runtime could not load {name}: {_first_line(text)}") from e
    return session


def _unloadable(name: str, text: str) -> str | None:
    """A sentence for the models this ONNX Runtime cannot load at all: a newer IR version or
    opset than it knows, an operator it does not have."""
    found = re.search(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)", text)
    if found:
        return (
            f"{name} was saved in a newer ONNX format (IR version {found[1]}) than this ONNX "
            f"Runtime reads (up to {found[2]}). Export it again with an older onnx package."
        )
    found = re.search(r"Opset (\d+) is under development.*?till opset (\d+)", text, re.S)
    if found:
        return (
            f"{name} uses ONNX opset {found[1]}, newer than this ONNX Runtime supports (up to "
            f"{found[2]}). Export it again with opset {found[2]} or lower."
        )
    found = re.search(r"No Op registered for (\S+) with domain_version of (\d+)", text)
    if found:
        return (
            f"{name} uses the operator {found[1]} (opset {found[2]}), which this ONNX Runtime "
            "does not have. Export it again with standard operators."
        )
    found = re.search(r"(\S+):(\S+?)\(-?\d+\) is not a registered function/op", text)
    if found:
        return (
            f"{name} uses the custom operator {found[2]} of {found[1]}, which ONNX Runtime does "
            "not have. Export it again with standard operators."
        )
    return None


def _shrinker_model() -> bytes:
    """One Identity node: a session that allocates next to nothing, for its run's shrink."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "shrink", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _elsewhere(key: SessionKey) -> str:
    """What to choose instead when a runtime does not come up: never a silent fallback."""
    if key.device.is_gpu:
        return "Tessera does not run a GPU request on the CPU; choose device cpu to run there."
    return "Tessera does not switch runtimes by itself; choose runtime cpu to run there."


def env_allocators(plan: ProviderPlan) -> tuple[bool, bool]:
    """(use the environment's arenas, among them a shared GPU arena) for a session of `plan`.

    A CUDA session whose limit differs from its device's shared arena's uses none of them:
    `session.use_env_allocators` takes every environment arena or none, and its own limit
    must hold (M9). It keeps ORT's own arenas, which its shrink target still names.
    """
    if plan.plugin is not None:  # a plugin's own allocators; the shared arenas are not its
        return False, False
    shares = [
        gpu_arena_shares(int(opts.get("device_id", "0")), int(opts.get("gpu_mem_limit", 0)))
        for name, opts in plan.providers
        if name == CUDA_EP
    ]
    if False in shares:
        return False, False
    gpu = True in shares
    return cpu_arena_registered() or gpu, gpu


def _held(entry: SessionEntry) -> records.HeldSession:
    key = entry.key
    identity = key.identity
    if identity is None:
        try:
            identity = FileIdentity.of(key.model)
        except ModelError:
            identity = FileIdentity(entry.file_size, 0, 0)
    return records.HeldSession(
        model=key.model.stem,
        path=str(key.model),
        size=identity.size,
        mtime_ns=identity.mtime_ns,
        inode=identity.inode,
        device=str(key.device),
        runtime=key.runtime.value,
        weight_bytes=entry.weight_bytes,
    )


def _first_line(text: str) -> str:
    """ORT's reason: its message without the error code, the source location and the C++
    signature in front, and its end kept when long (the reason comes last)."""
    line = text.strip().splitlines()[0] if text.strip() else text
    line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    line = re.sub(r"^\S*onnxruntime_src\S*:\d+ ", "", line)
    signature = re.match(r"^[\w:<>,\s*&]+\(.*\)(?: const)? (?=[A-Z])", line)
    if signature:
        line = line[signature.end() :]
    return line if len(line) <= 300 else "…" + line[-300:]


def check_loads(path: Path) -> None:
    """Refuse a model file this ONNX Runtime cannot load, by loading it once on the CPU (a
    graph can pass every contract check and still be one ORT refuses: a newer IR version)."""
    session = create_session(
        path, provider_plan(Device("cpu"), Runtime.CPU), threads=1, name=path.name
    )
    del session
    gc.collect()


SessionWrap = Callable[[Any, SessionKey], Any]


class SessionCache:
    def __init__(
        self,
        *,
        gpu_mem_limit: int | None = None,
        threads: int = 0,
        wrap: SessionWrap | None = None,
        cpu_shrink: bool = True,
        cpu_copies: bool = True,
        cpu_kernels: bool = True,
    ) -> None:
        self._entries: dict[SessionKey, SessionEntry] = {}
        self._gpu_mem_limit = gpu_mem_limit
        self._threads = threads
        self._wrap = wrap
        self._cpu_shrink = cpu_shrink  # hand the shared CPU arena back (M11) where registered
        self._cpu_copies = cpu_copies  # load CPU sessions from optimised copies (optimize.py)
        self._cpu_kernels = cpu_kernels  # convolution chains by Tessera's kernel (chain.py)
        self._distrusted: set[Path] = set()  # models whose kept copy failed a run: originals
        self._loaded_from: Path | None = None  # the kept copy the last `_load` used
        self._kernel_note = ""  # why the last `_load` did not use Tessera's kernel
        self._owner: int | None = None
        # Totals over the cache's life; a request's own counts are on its SessionHandle.
        self.created = 0
        self.reused = 0
        self.released = 0
        self.runs = 0
        self.shrinks = 0
        self.last_run_started: float | None = None  # perf_counter at the start of the latest run
        # This process's record says what the cache holds (records.py); a cache dropped
        # without unloading stops counting.
        weakref.finalize(self, records.THIS.forget, id(self)).atexit = False

    def _check_thread(self) -> None:
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        elif self._owner != me:
            raise RuntimeError(
                "The session cache is owned by the engine thread; use it only there."
            )

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: SessionKey) -> bool:
        return key in self._entries

    def get(self, key: SessionKey) -> tuple[SessionEntry, bool]:
        """The cached session for `key`, creating it on first use. Returns (entry, created)."""
        self._check_thread()
        entry = self._entries.get(key)
        if entry is not None:
            entry.last_used = time.time()
            self.reused += 1
            return entry, False
        for stale in [k for k in self._entries if k.same_place(key)]:
            log.info("%s changed on disk: unloading the old version", key.model.name)
            self.release(stale)
        entry = self._create(key)
        self._entries[key] = entry
        self.created += 1
        self._publish()
        return entry, True

    def _create(self, key: SessionKey) -> SessionEntry:
        path = key.model
        if not path.is_file():
            raise ModelError(f"The model file {path.name} does not exist.")
        plan = provider_plan(key.device, key.runtime, self._gpu_mem_limit)
        if self._wrap is None:
            reason = missing_requirement(key.runtime, key.device)
            if reason is not None:
                raise DeviceUnavailable(
                    f"{key.runtime.value} on {key.device} is not available: {reason}. "
                    + _elsewhere(key)
                )
        for name, options in plan.providers:
            if name == CUDA_EP:  # one arena per device, shared by all its sessions (M6)
                register_gpu_arena(int(options["device_id"]), options, self._gpu_mem_limit)
        start = time.perf_counter()
        session = self._load(key, plan)
        if self._wrap is not None:
            session = self._wrap(session, key)
        actual = tuple(session.get_providers())
        if not actual or actual[0] != plan.expected:
            del session
            gc.collect()
            raise DeviceUnavailable(
                f"{key.runtime.value} on {key.device} is not available: {diagnose(key.runtime, key.device)}. "
                f"ONNX Runtime could only start {actual[0] if actual else 'nothing'}. "
                + _elsewhere(key)
            )
        target = shrink_target(
            actual,
            session.get_provider_options(),
            cpu_arena=self._cpu_shrink and cpu_arena_registered(),
        )
        now = time.time()
        log.info("loaded %s on %s via %s (shrink %s)", path.name, key.device, actual[0], target)
        size = path.stat().st_size
        return SessionEntry(
            key=key,
            session=session,
            providers=actual,
            shrink_target=target,
            file_size=size,
            weight_bytes=int(getattr(session, "weight_bytes", 0)) or size,
            created_at=now,
            last_used=now,
            load_seconds=time.perf_counter() - start,
            kept_copy=self._loaded_from,
            shared_gpu_arena=env_allocators(plan)[1],
            cpu_kernel=(
                None
                if key.device.is_gpu
                else getattr(session, "cpu_kernel", None) or kernel_choice.ONNXRUNTIME
            ),
            cpu_kernel_note=self._kernel_note,
        )

    def distrust_copy(self, entry: SessionEntry) -> None:
        """A run on a kept copy failed: the copy goes, and this model loads from its original
        from now on in this process (a copy under the wrong name, or a stale one, must not
        fail every run for good)."""
        if entry.kept_copy is not None:
            optimize.drop_kept(entry.kept_copy)
        self._distrusted.add(entry.key.model)

    def _load(self, key: SessionKey, plan: ProviderPlan) -> Any:
        """The session for `key`: on the CPU from the model's optimised copy where it has one."""
        path = key.model
        self._loaded_from = None
        self._kernel_note = ""
        copy = None
        if key.runtime is Runtime.CPU:
            chosen = kernel_choice.setting()  # a wrong word is the request's usage error
            if path in self._distrusted:
                self._kernel_note = "its kept files failed a run: the original runs on ORT"
            elif not (self._cpu_copies and self._cpu_kernels):
                self._kernel_note = "Tessera's kernel is turned off in this engine's settings"
            elif chosen is kernel_choice.KernelSetting.ORT:
                self._kernel_note = f"{kernel_choice.KERNELS_ENV}=ort"
        if self._cpu_copies and key.runtime is Runtime.CPU and path not in self._distrusted:
            identity = key.identity or FileIdentity.of(path)
            if self._cpu_kernels and chosen is not kernel_choice.KernelSetting.ORT:
                threads = self._threads

                def tail(graph: bytes) -> Any:
                    return create_session(graph, plan, threads=threads, name=path.name)

                # Imported here: an idle window or a GPU request never needs the kernel.
                from engine.runtime import chain

                why: list[str] = []
                chained = chain.load(
                    path,
                    identity,
                    threads,
                    tail,
                    measured=chosen is kernel_choice.KernelSetting.AUTO,
                    why=why,
                )
                if chained is not None:
                    self._loaded_from = chained.kept
                    return chained
                self._kernel_note = "; ".join(why)
            copy = optimize.cpu_copy(path, identity)
        if copy is None:
            return create_session(path, plan, threads=self._threads, name=path.name)
        try:
            session = create_session(
                copy.source,
                plan,
                threads=self._threads,
                name=path.name,
                save_optimized=copy.save_to,
                preoptimized=copy.preoptimized,
            )
        except ModelError as e:
            optimize.discard(copy)  # never raises: clean-up must not turn a fallback into a failure
            if copy.preoptimized and isinstance(copy.source, Path):
                optimize.drop_kept(copy.source)
            if copy.save_to is not None and isinstance(copy.source, bytes):
                # ORT may have failed to save (a folder gone read-only): the rewrite in memory.
                log.warning("%s: the optimised copy was not saved (%s)", path.name, e)
                try:
                    session = create_session(
                        copy.source, plan, threads=self._threads, name=path.name
                    )
                except ModelError:
                    pass
                else:
                    log.info("%s on the CPU: %s", path.name, ", ".join(copy.rewrites))
                    return session
            # A rewrite ORT does not take (or a damaged kept copy) must never cost the model:
            # the original loads as it always did.
            log.warning(
                "%s: the optimised copy did not load (%s); using the original", path.name, e
            )
            return create_session(path, plan, threads=self._threads, name=path.name)
        optimize.keep(copy)
        if copy.preoptimized and isinstance(copy.source, Path):
            self._loaded_from = copy.source
        log.info("%s on the CPU: %s", path.name, ", ".join(copy.rewrites))
        return session

    def release(self, key: SessionKey) -> bool:
        """Drop a session and destroy it, returning its memory (M5)."""
        self._check_thread()
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        shared_gpu = entry.shared_gpu_arena and entry.providers[0] in SHRINK_CAPABLE
        entry.session = None
        del entry
        gc.collect()  # ORT frees device memory only once the last reference is gone
        if shared_gpu:
            self._shrink_gpu_arena(key.device)
        self.released += 1
        self._publish()
        return True

    def _shrink_gpu_arena(self, device: Device) -> None:
        """Hand the device's shared arena back after a session on it is gone (Unload, M5).

        Its runs' memory went back to the shared arena, not to the device; ORT shrinks an arena
        only at the end of a run that asks for it, so a tiny session on the same arena makes
        one run with `gpu:<id>`, then goes. Best effort: on failure the memory stays reusable.
        """
        import onnxruntime as ort

        plan = provider_plan(device, Runtime.CUDA, self._gpu_mem_limit)
        try:
            session = create_session(_shrinker_model(), plan, name="the arena shrink")
            if self._wrap is not None:
                session = self._wrap(session, SessionKey(ARENA_SHRINKER, device, Runtime.CUDA))
            if tuple(session.get_providers())[:1] != (CUDA_EP,):
                return  # ORT could not start CUDA for it: nothing of ours to shrink there
            options = ort.RunOptions()
            options.add_run_config_entry(SHRINK_KEY, f"gpu:{device.index}")
            session.run(None, {"x": np.zeros((1, 1), np.float32)}, options)
        except Exception as e:  # ORT's exceptions are not RuntimeError subclasses
            log.warning("the shared arena of %s was not shrunk: %s", device, e)
        finally:
            session = None
            gc.collect()

    def _publish(self) -> None:
        """Tell this process's record what the cache holds now (after a load or an unload)."""
        records.THIS.hold(id(self), tuple(_held(e) for e in self._entries.values()))

    def release_all(self) -> int:
        self._check_thread()
        keys = list(self._entries)
        for key in keys:
            self.release(key)
        return len(keys)

    def entries(self) -> list[SessionEntry]:
        return list(self._entries.values())

    def snapshot(self) -> tuple[SessionInfo, ...]:
        return tuple(
            SessionInfo(
                key=e.key,
                model_name=e.key.model.name,
                device=str(e.key.device),
                runtime=e.key.runtime.value,
                provider=e.providers[0],
                file_size=e.file_size,
                weight_bytes=e.weight_bytes,
                last_used=e.last_used,
                runs=e.runs,
                shrinks=e.shrinks,
                cpu_kernel=e.cpu_kernel,
                cpu_kernel_note=e.cpu_kernel_note,
                shrinkable=e.providers[0] in SHRINK_CAPABLE | {CPU_EP},
            )
            for e in sorted(self._entries.values(), key=lambda e: e.created_at)
        )
