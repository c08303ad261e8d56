"""A real HTTP server on 127.0.0.1 for download tests: files, Range, redirects, a slow or
broken-off body."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.models.downloads import CHUNK

PAYLOAD = os.urandom(20 * CHUNK + 123)
SHA = hashlib.sha256(PAYLOAD).hexdigest()


@dataclass
class ServerState:
    files: dict[str, bytes] = field(default_factory=lambda: {"/model.onnx": PAYLOAD})
    honour_range: bool = True
    truncate_first: int | None = None  # the first answer stops after this many body bytes
    ranges: list[str | None] = field(default_factory=list)  # Range header of each GET
    pace_s: float = 0.0  # pause after each 64 KB of body: a slow server
    redirects: dict[str, str] = field(default_factory=dict)  # path → where it moved (302)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: ServerState

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up mid-body (cancel tests) is expected


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        state = self.server.state
        rng = self.headers.get("Range")
        state.ranges.append(rng)
        moved = state.redirects.get(self.path, "/model.onnx" if self.path == "/redirect" else None)
        if moved is not None:
            self.send_response(302)
            self.send_header("Location", moved)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = state.files.get(self.path)
        if data is None:
            self.send_error(404, "Not Found")
            return
        start = 0
        if rng and state.honour_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        if state.truncate_first is not None and len(state.ranges) == 1:
            body = body[: state.truncate_first]  # then HTTP/1.0 closes: a broken-off transfer
        if not state.pace_s:
            self.wfile.write(body)
            return
        for i in range(0, len(body), CHUNK):
            self.wfile.write(body[i : i + CHUNK])
            self.wfile.flush()
            time.sleep(state.pace_s)


@pytest.fixture
def server() -> Iterator[tuple[str, ServerState]]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.state = ServerState()
    thread = threading.Thread(
        target=httpd.serve_forever, args=(0.02,), name="test-http", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", httpd.state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
