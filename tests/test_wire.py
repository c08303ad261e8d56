"""The command line ↔ app messages (engine/wire.py, groundwork of issue #22 item 1): every
message survives the trip through frames and a real AF_UNIX socket, however the bytes are cut,
and whatever is not a message is refused with a reason."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from engine.errors import ErrorKind
from engine.options import OutputFormat, OutputOptions, UpscaleOptions
from engine.requests import (
    InputFailure,
    MemoryReport,
    Operation,
    OperationCancellation,
    OperationFailure,
    OperationRequest,
    Product,
    ProductKind,
    Progress,
    ProgressKind,
    Result,
)
from engine.wire import (
    MAX_MESSAGE,
    STALL_ENV,
    STALL_S,
    Abandon,
    Alive,
    Cancel,
    FrameReader,
    Hello,
    Message,
    Queued,
    Welcome,
    WireError,
    decode,
    encode,
    for_sending,
    receive,
    send,
    stall_seconds,
)

MESSAGES: list[Message] = [
    Hello(123, "0.1.0", "/m", 512 << 20, None, True),
    Welcome(456, "0.1.0", False, "the app uses another models folder"),
    OperationRequest(
        Operation.UPSCALE,
        "realesrgan-x4plus",
        (Path("/in/a.png"), Path("/in/é b.png")),
        device="gpu:1",
        runtime="cuda",
        output_dir=Path("/out"),
        tile=256,
        sequence=True,
        options=UpscaleOptions(max_tile=512),
        output=OutputOptions(OutputFormat.JPEG, 80, 2.0, None),
    ),
    OperationRequest(
        Operation.DEPTH, "/m/d.onnx", (Path("/x.png"),), options={"process_res": "504"}
    ),
    Queued("r1", 2),
    Progress("r1", ProgressKind.RUN_FINISHED, 0, 2, 1, 3, 14, 36, "tile 14/36"),
    Cancel("r1", "SIGTERM"),
    Alive("r1"),
    Abandon("r1"),
    Result(
        "r1",
        (Product(Path("/out/a-x4.png"), ProductKind.IMAGE, Path("/in/a.png"), 1),),
        (InputFailure(Path("/in/b.png"), ErrorKind.BAD_INPUT, "b.png is truncated"),),
        runs=36,
        shrinks=1,
        sessions_created=0,
        sessions_reused=1,
        timings={"load_s": 0.0, "total_s": 1.5},
        tile=256,
        memory=MemoryReport(100, 200, 110, None, 5),
    ),
    OperationFailure("r1", ErrorKind.RESOURCE, "Out of memory"),
    OperationCancellation("r1", True),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: Message) -> None:
    frame = encode(message)
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    back = decode(frame[4:])
    assert type(back) is type(message)
    if isinstance(message, OperationRequest) and isinstance(message.options, Mapping):
        assert isinstance(back, OperationRequest) and isinstance(back.options, Mapping)
        assert dict(back.options) == dict(message.options)  # the text the command line got
        assert back.typed_options() == message.typed_options()
    assert back == message


def test_frames_cut_anywhere_decode_the_same() -> None:
    stream = b"".join(encode(m) for m in MESSAGES)
    for step in (1, 3, 7, 64, len(stream)):
        reader = FrameReader()
        got: list[Message] = []
        for i in range(0, len(stream), step):
            got.extend(reader.feed(stream[i : i + step]))
        assert [type(m) for m in got] == [type(m) for m in MESSAGES]
        assert reader.pending == 0


def test_whatever_is_not_a_message_is_refused_with_a_reason() -> None:
    with pytest.raises(WireError, match="too large"):
        FrameReader().feed(struct.pack(">I", MAX_MESSAGE + 1))
    with pytest.raises(WireError, match="not JSON"):
        decode(b"{nope")
    with pytest.raises(WireError, match="type and a body"):
        decode(b"[1, 2]")
    with pytest.raises(WireError, match="Unknown message type 'shutdown'"):
        decode(json.dumps({"type": "shutdown", "body": {}}).encode())
    with pytest.raises(WireError, match="queued message is malformed"):
        decode(json.dumps({"type": "queued", "body": {"request_id": "r1"}}).encode())
    with pytest.raises(WireError, match="malformed"):
        decode(json.dumps({"type": "queued", "body": {"request_id": "r", "ahead": "2"}}).encode())
    unknown = json.loads(encode(MESSAGES[2])[4:])
    unknown["body"]["operation"] = "colorize"
    with pytest.raises(WireError, match="Unknown operation 'colorize'"):
        decode(json.dumps(unknown).encode())
    # A newer peer's extra fields are ignored.
    newer = {"type": "queued", "body": {"request_id": "r", "ahead": 0, "eta": 3}}
    assert decode(json.dumps(newer).encode()) == Queued("r", 0)


def test_a_conversation_over_a_real_unix_socket(tmp_path: Path) -> None:
    """The command line's side with plain sockets, the app's played by a thread."""
    path = str(tmp_path / "s")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    heard: list[Message] = []

    def app() -> None:
        conn, _ = server.accept()
        with conn:
            reader, waiting = FrameReader(), list[Message]()
            hello = receive(conn, reader, waiting)
            heard.append(hello)  # type: ignore[arg-type]
            send(conn, Welcome(os.getpid(), "0.1.0", True))
            request = receive(conn, reader, waiting)
            assert isinstance(request, OperationRequest)
            heard.append(request)
            # Several messages in one write: the reader hands them out one at a time.
            conn.sendall(
                encode(Queued(request.id, 0))
                + encode(Progress(request.id, ProgressKind.STARTED))
                + encode(OperationCancellation(request.id, True))
            )
            heard.append(receive(conn, reader, waiting))  # type: ignore[arg-type]

    thread = threading.Thread(target=app)
    thread.start()
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)
        with client:
            reader, waiting = FrameReader(), list[Message]()
            send(client, Hello(os.getpid(), "0.1.0"))
            welcome = receive(client, reader, waiting)
            assert isinstance(welcome, Welcome) and welcome.accepted
            request = OperationRequest(Operation.UPSCALE, "m", (Path("/a.png"),))
            send(client, request)
            queued = receive(client, reader, waiting)
            assert queued == Queued(request.id, 0)
            send(client, Cancel(request.id, "SIGINT"))
            progress = receive(client, reader, waiting)
            assert isinstance(progress, Progress) and progress.kind is ProgressKind.STARTED
            assert receive(client, reader, waiting) == OperationCancellation(request.id, True)
            thread.join(10)
            assert receive(client, reader, waiting) is None  # the app closed the connection
    finally:
        thread.join(10)
        server.close()
    assert isinstance(heard[0], Hello) and heard[2] == Cancel(heard[1].id, "SIGINT")  # type: ignore[union-attr]


def test_paths_are_made_absolute_before_sending(tmp_path: Path) -> None:
    (tmp_path / "mine.onnx").write_bytes(b"x")
    request = OperationRequest(
        Operation.UPSCALE,
        "mine.onnx",
        (Path("a.png"), Path("sub/../b.png"), Path("/abs/c.png")),
        output_dir=Path("out"),
    )
    sent = for_sending(request, tmp_path)
    assert sent.inputs == (tmp_path / "a.png", tmp_path / "b.png", Path("/abs/c.png"))
    assert sent.output_dir == tmp_path / "out" and sent.model == str(tmp_path / "mine.onnx")
    assert sent.id == request.id
    by_id = for_sending(OperationRequest(Operation.UPSCALE, "realesrgan-x4plus", ()), tmp_path)
    assert by_id.model == "realesrgan-x4plus" and by_id.output_dir is None


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 200_000 + b"]" * 200_000,
        b'{"type": "hello", "body": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001,
    ],
)
def test_deeply_nested_json_is_refused_as_no_message(payload: bytes) -> None:
    with pytest.raises(WireError, match="nested too deeply"):
        FrameReader().feed(struct.pack(">I", len(payload)) + payload)


def test_a_file_name_of_any_bytes_travels_unchanged() -> None:
    name = os.fsdecode(b"/photos/caf\xe9 \xff.png")  # Latin-1 bytes: not UTF-8
    request = OperationRequest(
        Operation.UPSCALE, "up2", (Path(name),), output_dir=Path(os.fsdecode(b"/out/\xfe"))
    )
    back = FrameReader().feed(encode(request))[0]
    assert isinstance(back, OperationRequest)
    assert [os.fsencode(p) for p in back.inputs] == [b"/photos/caf\xe9 \xff.png"]
    assert back.output_dir is not None and os.fsencode(back.output_dir) == b"/out/\xfe"
    product = Product(Path(name), ProductKind.IMAGE, Path(name))
    result = Result(back.id, (product,), (), 1, 0, 1, 0, {})
    (answer,) = FrameReader().feed(encode(result))
    assert isinstance(answer, Result) and os.fsencode(answer.products[0].path) == os.fsencode(name)


@pytest.mark.parametrize(
    ("given", "bound"), [(None, STALL_S), ("2.5", 2.5), ("soon", STALL_S), ("0", STALL_S)]
)
def test_the_command_lines_patience_is_bounded_and_set_by_its_variable(
    monkeypatch: pytest.MonkeyPatch, given: str | None, bound: float
) -> None:
    if given is None:
        monkeypatch.delenv(STALL_ENV, raising=False)
    else:
        monkeypatch.setenv(STALL_ENV, given)
    assert stall_seconds() == bound
