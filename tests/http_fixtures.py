"""A real HTTP server on 127.0.0.1 for download tests: files, Range, redirects, a slow or
broken-off body; and a model browser catalogue (OpenModelDB cards) served by it."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.models.browse import refreshed_snapshot_path
from engine.models.downloads import CHUNK
from engine.models.openmodeldb import build
from engine.samples.upscaler_models import make_upscaler

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


def card(name: str, scale: int, licence: str, urls: list[str], data: bytes) -> dict[str, Any]:
    return {
        "name": name,
        "author": "someone",
        "license": licence,
        "tags": ["photo", "restoration"],
        "description": f"# {name}\nScale: {scale}\n\nA test model that {name.lower()}s pictures.",
        "date": "2025-01-02",
        "architecture": "span",
        "scale": scale,
        "resources": [
            {"platform": "pytorch", "type": "pth", "size": 1, "sha256": "0" * 64, "urls": ["x"]},
            {
                "platform": "onnx",
                "type": "onnx",
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "urls": urls,
            },
        ],
        "images": [{"type": "paired", "LR": "https://a/lr.webp", "SR": "https://a/sr.webp"}],
    }


def _padded(path: Path, size: int) -> bytes:
    """The model at `path` made at least `size` bytes long by a doc string: still valid."""
    import onnx

    model = onnx.load(str(path))
    model.doc_string = "x" * size
    onnx.save(model, str(path))
    return path.read_bytes()


@pytest.fixture
def catalogue(
    server: tuple[str, ServerState], tmp_path: Path
) -> tuple[str, ServerState, Path, bytes]:
    """A models folder whose browser catalogue points at the local server."""
    url, state = server
    up2 = make_upscaler(tmp_path / "up2.onnx", 2).read_bytes()
    up1 = make_upscaler(tmp_path / "up1.onnx", 1).read_bytes()
    big = _padded(tmp_path / "up2.onnx", 5 * CHUNK)  # several chunks: a cancel falls mid-file
    state.files.update(
        {"/big.onnx": big, "/up2.onnx": up2, "/up1.onnx": up1, "/new/moved.onnx": up2}
    )
    state.redirects["/old/moved.onnx"] = "/new/moved.onnx"
    cards = {
        "2x-Good": card("Good", 2, "CC-BY-4.0", [f"{url}/up2.onnx"], up2),
        "2x-Big": card("Big", 2, "CC-BY-4.0", [f"{url}/big.onnx"], big),
        "1x-Denoise": card("Denoise", 1, "CC0-1.0", [f"{url}/up1.onnx"], up1),
        "2x-Private": card("Private", 2, "CC-BY-NC-SA-4.0", [f"{url}/up2.onnx"], up2),
        "2x-BadHash": {
            **card("BadHash", 2, "MIT", [f"{url}/up2.onnx"], up2),
        },
        "2x-Gone": card("Gone", 2, "MIT", [f"{url}/gone.onnx", f"{url}/up2.onnx"], up2),
        "2x-Redirected": card("Redirected", 2, "MIT", [f"{url}/old/moved.onnx"], up2),
        "2x-Vanished": card("Vanished", 2, "MIT", [f"{url}/nowhere.onnx"], up2),
        "4x-Liar": card("Liar", 4, "MIT", [f"{url}/up2.onnx"], up2),  # a ×2 file listed ×4
        "2x-Zip": card("Zip", 2, "MIT", [f"{url}/archive.zip"], up2),
        "2x-Pytorch": {**card("Pytorch", 2, "MIT", [], b""), "resources": []},
    }
    cards["2x-BadHash"]["resources"][1]["sha256"] = "1" * 64
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    snapshot = build(cards, {"span": {"name": "SPAN"}}, {"photo": {"name": "Photo"}}, "2025-02-03")
    refreshed_snapshot_path(models_dir).write_text(json.dumps(snapshot))
    return url, state, models_dir, big
