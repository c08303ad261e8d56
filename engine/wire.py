"""The messages between `python -m engine run` and the running app (issue #22 item 1), Qt-free.

The command line joins the app over its private instance socket — on Linux an AF_UNIX socket
(QLocalServer's), which plain `socket` speaks — so this module is all the command line needs:
frames of a 4-byte big-endian length and one UTF-8 JSON object `{"type": …, "body": …}`, the
framing of the instance socket's file hand-over (gui/single_instance.py).

A conversation, one request per connection:

    command line                        app
    Hello (pid, version, settings)  →
                                    ←   Welcome (accepted, or the reason it runs standalone)
    OperationRequest (paths absolute) →
                                    ←   Queued (jobs ahead of it)
                                    ←   Progress …
                                    ←   Alive (every HEARTBEAT_S while queued or running)
    Cancel (Ctrl-C / SIGTERM)       →   (at any time)
    Abandon (no word for STALL_S)   →   (the command line runs it itself; the app drops it)
                                    ←   Result | OperationFailure | OperationCancellation

The command line never waits without limit: with no message for `stall_seconds()` it sends
Abandon, closes, says so in one line and runs the request in its own process; whatever the
app's job writes after that is removed by the app (gui/controllers/joined.py).

The bodies are the engine's own frozen dataclasses (requests.py), converted field by field
from their type annotations, so a field added there travels without a change here. Unknown
fields are ignored (an older peer), missing ones refused. Anything that is not a message —
too long, not JSON, an unknown type — raises `WireError` with a message for a person.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Union

from engine.errors import EngineError, ErrorKind, UsageError
from engine.operation_specs import Operation, operation_named
from engine.options import (
    TILE_RANGE,
    BackgroundOptions,
    DepthOptions,
    GeometryOptions,
    UpscaleOptions,
    tile_problem,
)
from engine.requests import (
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Progress,
    Result,
)

PROTOCOL = 2  # 2: Alive and Abandon
HEARTBEAT_S = 1.0  # the app's Alive to a command line whose request is queued or running
STALL_S = 8.0  # no message for this long: the app stopped answering (a hung or stopped app)
STALL_ENV = "TESSERA_JOIN_STALL_S"  # tests shorten it
HEADER = struct.Struct(">I")
MAX_MESSAGE = 16 * 1024 * 1024  # thousands of long paths fit; anything larger is not ours


class WireError(EngineError):
    """The peer sent something that is not one of these messages."""

    kind = ErrorKind.INTERNAL


@dataclass(frozen=True)
class Hello:
    """The command line's first message: who it is and what its engine would need."""

    pid: int
    version: str
    models_dir: str | None = None  # absolute; None: the default folder
    cpu_mem_limit: int | None = None
    gpu_mem_limit: int | None = None
    keep_cpu_arena: bool = False
    protocol: int = PROTOCOL


@dataclass(frozen=True)
class Welcome:
    """The app's answer: it takes the request, or says why the command line runs standalone."""

    pid: int
    version: str
    accepted: bool
    reason: str = ""  # one line for the terminal when not accepted
    protocol: int = PROTOCOL


@dataclass(frozen=True)
class Queued:
    request_id: str
    ahead: int  # jobs already queued in the app before this one


@dataclass(frozen=True)
class Cancel:
    request_id: str
    signal: str  # "SIGINT" or "SIGTERM": the terminal's exit code follows it


@dataclass(frozen=True)
class Alive:
    """The app still holds the request (queued behind other jobs, or running without a
    progress event for a while): the command line's sign that the app answers."""

    request_id: str


@dataclass(frozen=True)
class Abandon:
    """The command line gave up waiting and runs the request itself: the app cancels the job
    and removes whatever it still writes, so the two never both publish a product."""

    request_id: str


def stall_seconds() -> float:
    """How long the command line waits for a word from the app (`STALL_ENV` overrides)."""
    text = os.environ.get(STALL_ENV, "")
    try:
        value = float(text) if text else STALL_S
    except ValueError:
        return STALL_S
    return value if value > 0 else STALL_S


Message = (
    Hello
    | Welcome
    | OperationRequest
    | Queued
    | Progress
    | Cancel
    | Alive
    | Abandon
    | Result
    | OperationFailure
    | OperationCancellation
)

TYPES: dict[str, type[Any]] = {
    "hello": Hello,
    "welcome": Welcome,
    "request": OperationRequest,
    "queued": Queued,
    "progress": Progress,
    "cancel": Cancel,
    "alive": Alive,
    "abandon": Abandon,
    "result": Result,
    "failure": OperationFailure,
    "cancellation": OperationCancellation,
}
NAMES = {cls: name for name, cls in TYPES.items()}
# Dataclasses that may appear inside a union field (OperationRequest.options): tagged by name.
TAGGED: dict[str, type[Any]] = {
    c.__name__: c for c in (UpscaleOptions, BackgroundOptions, DepthOptions, GeometryOptions)
}


# -- frames ---------------------------------------------------------------------------------
def encode(message: Message) -> bytes:
    name = NAMES.get(type(message))
    if name is None:
        raise TypeError(f"{type(message).__name__} is not a message")
    # ASCII with \u escapes: a file name that is not UTF-8 (os.fsdecode's lone surrogates)
    # travels as its escapes and comes back as the same bytes on the other side.
    data = json.dumps(
        {"type": name, "body": _dump(message)}, ensure_ascii=True, allow_nan=False
    ).encode("ascii")
    if len(data) > MAX_MESSAGE:
        raise WireError(f"The message is too large to send ({len(data)} bytes).")
    return HEADER.pack(len(data)) + data


class FrameReader:
    """Messages out of a byte stream, however it was cut."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        self._buffer += data
        out: list[Message] = []
        while len(self._buffer) >= HEADER.size:
            (length,) = HEADER.unpack_from(self._buffer)
            if length > MAX_MESSAGE:
                raise WireError(f"A message of {length} bytes is too large: not Tessera's.")
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            payload = bytes(self._buffer[HEADER.size : end])
            del self._buffer[:end]
            out.append(decode(payload))
        return out

    @property
    def pending(self) -> int:
        """Bytes of a message not yet complete."""
        return len(self._buffer)


def parse_json(payload: bytes) -> Any:
    """JSON text of a peer; ValueError for anything else, deep nesting included (the parser
    recurses: a peer must not raise RecursionError through the app's event loop)."""
    try:
        return json.loads(payload.decode("utf-8"))
    except RecursionError as e:
        raise ValueError("nested too deeply") from e


def decode(payload: bytes) -> Message:
    try:
        data = parse_json(payload)
    except (UnicodeDecodeError, ValueError) as e:
        raise WireError(f"A message is not JSON ({e}).") from e
    if not isinstance(data, dict) or not isinstance(data.get("body"), dict):
        raise WireError("A message is not a JSON object with a type and a body.")
    cls = TYPES.get(str(data.get("type")))
    if cls is None:
        raise WireError(f"Unknown message type {data.get('type')!r}.")
    try:
        message: Message = _load(cls, data["body"])
    except (TypeError, ValueError, KeyError, RecursionError) as e:
        raise WireError(f"A {data['type']} message is malformed ({e}).") from e
    return message


# -- a blocking socket, for the command line ------------------------------------------------
def send(sock: socket.socket, message: Message) -> None:
    sock.sendall(encode(message))


def receive(sock: socket.socket, reader: FrameReader, waiting: list[Message]) -> Message | None:
    """The next message (None when the peer closed the connection). `waiting` keeps the
    messages that arrived in the same read as an earlier one."""
    while not waiting:
        data = sock.recv(65536)
        if not data:
            if reader.pending:
                raise WireError("The connection ended in the middle of a message.")
            return None
        waiting.extend(reader.feed(data))
    return waiting.pop(0)


def for_sending(request: OperationRequest, cwd: Path | None = None) -> OperationRequest:
    """The request with every path absolute (the app runs in another folder): inputs, the
    output folder, and the model where it names a file rather than a catalog id."""
    base = Path.cwd() if cwd is None else cwd

    def absolute(p: Path) -> Path:
        p = p.expanduser()
        return p if p.is_absolute() else Path(os.path.normpath(base / p))

    model = request.model
    given = Path(model).expanduser()
    if given.is_absolute() or len(given.parts) > 1 or given.suffix.lower() == ".onnx":
        model = str(absolute(given))
    elif (base / given).is_file():
        model = str(absolute(given))  # a file here shadows the catalog, as in a local run
    return dataclasses.replace(
        request,
        model=model,
        inputs=tuple(absolute(p) for p in request.inputs),
        output_dir=absolute(request.output_dir) if request.output_dir is not None else None,
    )


def check_joined(request: OperationRequest) -> None:
    """What the command line checks before it sends a request, checked again on the app's
    side for a raw one: UsageError (exit 2) with the command line's words."""
    low, high = TILE_RANGE
    if request.tile is not None and (
        isinstance(request.tile, bool) or not low <= request.tile <= high
    ):
        raise UsageError(f"{tile_problem(request.tile)}.")
    paths = [*request.inputs, *([request.output_dir] if request.output_dir else [])]
    model = Path(request.model)
    if len(model.parts) > 1 or model.suffix.lower() == ".onnx":
        paths.append(model)
    relative = [str(p) for p in paths if not p.is_absolute()]
    if relative:
        raise UsageError(
            f"a joined request names its files by absolute paths, not {relative[0]!r}."
        )


# -- dataclasses ↔ JSON, by their annotations -----------------------------------------------
def to_json(value: Any) -> Any:
    """A frozen dataclass (or what it holds) as plain JSON values, as the wire sends it."""
    return _dump(value)


def from_json(tp: Any, data: Any) -> Any:
    """`to_json`'s inverse for the type `tp`; TypeError or ValueError when it does not fit."""
    return _load(tp, data)


def _dump(value: Any) -> Any:
    if isinstance(value, Operation):
        return value.value  # a row of the operation table travels as its name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: _dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if type(value).__name__ in TAGGED:
            data["__class__"] = type(value).__name__
        return data
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{type(value).__name__} cannot be sent")


def _load(tp: Any, data: Any) -> Any:
    if tp is Any or tp is object:
        return data
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _load_union(typing.get_args(tp), data)
    if tp is Operation:
        if not isinstance(data, str):
            raise TypeError("an operation is named by text")
        try:
            return operation_named(data)
        except UsageError as e:
            raise ValueError(str(e)) from e
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"{tp.__name__} must be an object")
        hints = typing.get_type_hints(tp)
        kwargs = {
            f.name: _load(hints[f.name], data[f.name])
            for f in dataclasses.fields(tp)
            if f.init and f.name in data
        }
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(data)
    if tp is Path:
        if not isinstance(data, str):
            raise TypeError("a path must be text")
        return Path(data)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(data, list):
            raise TypeError("a list was expected")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_load(args[0], d) for d in data)
        return tuple(_load(a, d) for a, d in zip(args, data, strict=True))
    if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, Any]):
        if not isinstance(data, dict):
            raise TypeError("an object was expected")
        value_type = typing.get_args(tp)[1] if typing.get_args(tp) else Any
        return {str(k): _load(value_type, v) for k, v in data.items()}
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise TypeError("a number was expected")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError("a whole number was expected")
        return data
    if tp in (str, bool):
        if not isinstance(data, tp):
            raise TypeError(f"{tp.__name__} was expected")
        return data
    raise TypeError(f"cannot read {tp!r}")


def _load_union(args: tuple[Any, ...], data: Any) -> Any:
    if data is None:
        if type(None) in args:
            return None
        raise TypeError("a value was expected")
    options = [a for a in args if a is not type(None)]
    if isinstance(data, dict) and "__class__" in data:
        tagged = TAGGED.get(str(data["__class__"]))
        if tagged is None:
            raise TypeError(f"unknown {data['__class__']!r}")
        return _load(tagged, {k: v for k, v in data.items() if k != "__class__"})
    errors = []
    for option in options:
        if isinstance(option, type) and option.__name__ in TAGGED:
            continue  # only ever sent tagged
        try:
            return _load(option, data)
        except (TypeError, ValueError) as e:
            errors.append(str(e))
    raise TypeError("; ".join(errors) or "no type fits")
