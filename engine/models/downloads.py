"""Verified, resumable downloads with urllib only (DESIGN §6).

The file grows as `<dest>.part`; an interrupted or cancelled download resumes from it with an
HTTP Range request. Size and sha256 are checked before the atomic rename, so `dest` never
exists half written or unverified. Every failure is an EngineError with a message a person can
act on.

Two downloads of one file — threads, or processes such as two `models download` commands or
the app's fetch helper (which runs that command) beside a terminal — take turns: a lock file
`.<name>.lock` beside it is held with flock (Windows: msvcrt.locking) for the whole download,
and removed by its holder. The second one then finds the file in place and verified.
A catalog model is downloaded only when the catalog pins its sha256 and size.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Literal
from urllib.parse import urlsplit

import engine
from engine.cancel import CancelToken
from engine.errors import Cancelled, ModelError, ResourceError, UsageError
from engine.models.catalog import Source, load_catalog, sha256_file
from engine.models.contracts import inspect_model
from engine.models.inventory import ensure_models_dir

CHUNK = 64 * 1024
USER_AGENT = f"Tessera/{engine.__version__}"
_RESTARTS = 2  # fresh starts allowed when the server will not resume (ignored Range, 416)

Progress = Callable[[int, int | None], None]  # (bytes done, total bytes or None)


class DownloadFailure(Enum):
    NETWORK = "network"  # no network, DNS, refused, timeout, dropped connection
    HTTP = "http"  # the server answered with an error status
    INTEGRITY = "integrity"  # wrong size or sha256


class DownloadError(ModelError):
    """A download failed; `failure` says how. Network failures keep the .part for resuming."""

    def __init__(self, message: str, failure: DownloadFailure, url: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.url = url

    @property
    def exit_code(self) -> int:
        return 5 if self.failure is DownloadFailure.NETWORK else 4


class _Restart(Exception):
    """The server will not continue the .part: start again from byte 0."""


_locks_guard = threading.Lock()
_locks: dict[Path, threading.Lock] = {}


def _lock_for(dest: Path) -> threading.Lock:
    # Two downloads of one file in this process would append to the same .part.
    with _locks_guard:
        return _locks.setdefault(dest.resolve(), threading.Lock())


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def lock_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.lock")


def _try_lock(descriptor: int) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def _file_lock(
    dest: Path, cancel: CancelToken | None, waiting: Callable[[], None] | None
) -> Iterator[None]:
    """Hold the download lock of `dest` across processes; `waiting` is called once if another
    process holds it. The holder removes the lock file; a waiter that then finds its file
    gone (or replaced) starts over on the new one, so two never hold it at once."""
    path = lock_path(dest)
    told = False
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        except OSError as e:
            raise _disk_error(e, path, None) from e
        while not _try_lock(descriptor):
            if not told and waiting is not None:
                waiting()
                told = True
            if cancel is not None and cancel.cancelled:
                os.close(descriptor)
                raise Cancelled(f"Cancelled while another download of {dest.name} ran.")
            time.sleep(0.1)
        try:
            same = os.path.samestat(os.fstat(descriptor), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(descriptor)  # the previous holder removed that lock file: take the new one
    try:
        yield
    finally:
        try:
            os.unlink(path)  # while still holding it
        except OSError:
            pass
        os.close(descriptor)  # releases the lock


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or url


def _network_error(url: str, reason: object, timeout: float, done: int = 0) -> DownloadError:
    import http.client  # here, not at the top: see _fetch
    import ssl

    host = _host(url)
    resume = " Run it again to resume." if done else ""
    if isinstance(reason, socket.gaierror):
        msg = (
            f"Cannot find the server {host} (DNS lookup failed): are you offline? "
            "Check the internet connection."
        )
    elif isinstance(reason, ConnectionRefusedError):
        msg = f"The server {host} refused the connection: it may be down, or a firewall blocks it."
    elif isinstance(reason, TimeoutError):
        msg = f"No answer from {host} within {timeout:g} s: check the internet connection.{resume}"
    elif isinstance(reason, ssl.SSLError):
        msg = f"The secure connection to {host} failed: {reason}."
    elif isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        msg = f"The network is unreachable (connecting to {host}): are you offline?"
    elif isinstance(reason, (ConnectionError, http.client.HTTPException)):
        msg = f"The connection to {host} broke off after {done} bytes.{resume}"
    else:
        msg = f"Cannot download from {host}: {reason}.{resume}"
    return DownloadError(msg, DownloadFailure.NETWORK, url)


def _http_error(url: str, code: int, reason: str) -> DownloadError:
    if code == 404:
        msg = (
            f"The server has no file at {url} (HTTP 404 Not Found): it may have moved. "
            "Check the model's home page."
        )
    elif code in (401, 403):
        msg = (
            f"The server refused access to {url} (HTTP {code}): the file may need a log-in "
            "or an accepted licence on its page."
        )
    elif code == 429:
        msg = f"The server at {_host(url)} is limiting requests (HTTP 429): try again later."
    elif code >= 500:
        msg = f"The server at {_host(url)} failed (HTTP {code} {reason}): try again later."
    else:
        msg = f"The server answered HTTP {code} {reason} for {url}."
    return DownloadError(msg, DownloadFailure.HTTP, url)


def _disk_error(e: OSError, path: Path, need: int | None) -> ResourceError | UsageError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        more = f" ({need / 1e6:.1f} MB still to write)" if need else ""
        return ResourceError(
            f"The disk is full: cannot write {path.name} in {path.parent}{more}. Free some "
            "space and run the download again; it resumes where it stopped."
        )
    return UsageError(
        f"Cannot write {path}: {e.strerror or e}. Choose another models folder "
        "(--models-dir or TESSERA_MODELS_DIR)."
    )


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """`bytes START-END/TOTAL` → (START, TOTAL or None)."""
    if not value or not value.startswith("bytes "):
        return None
    try:
        span, _, total = value[6:].partition("/")
        start = int(span.split("-")[0])
        return start, (int(total) if total and total != "*" else None)
    except ValueError:
        return None


def _fetch(
    url: str,
    part: Path,
    size: int | None,
    progress: Progress | None,
    cancel: CancelToken | None,
    timeout: float,
) -> None:
    """Bring `part` to the whole file, resuming from what it already holds."""
    # Imported on the first download, not with the window: HTTP, TLS and their email
    # parsing are 3 MiB of an idle window that may never download (the bench's idle row).
    import http.client
    import urllib.error
    import urllib.request

    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:
        raise _Restart  # longer than the file can be: not ours to continue
    if size is not None and offset == size:
        return  # complete already; the caller verifies it
    if cancel is not None:
        cancel.check()
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        e.close()
        if e.code == 416 and offset:  # the .part does not fit the file on the server
            raise _Restart from e
        raise _http_error(url, e.code, str(e.reason)) from e
    except urllib.error.URLError as e:
        raise _network_error(url, e.reason, timeout) from e
    except (OSError, http.client.HTTPException) as e:
        raise _network_error(url, e, timeout) from e
    with response:
        total: int | None = None
        if offset and response.status == 206:
            span = _content_range(response.headers.get("Content-Range"))
            if span is None or span[0] != offset:
                raise _Restart
            total = span[1]
            mode: Literal["ab", "wb"] = "ab"
        else:  # 200: the server ignored Range and sends the whole file, so start over
            offset = 0
            mode = "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if size is not None and total is not None and total != size:
            raise DownloadError(
                f"The server offers {total} bytes at {url}, but the catalog expects {size}: "
                "the file has changed there. Not downloading it.",
                DownloadFailure.INTEGRITY,
                url,
            )
        total = total if total is not None else size
        need = None if total is None else total - offset
        if need is not None and shutil.disk_usage(part.parent).free < need:
            raise _disk_error(OSError(errno.ENOSPC, "No space left on device"), part, need)
        done = offset
        if progress is not None:
            progress(done, total)
        try:
            f = open(part, mode)
        except OSError as e:
            raise _disk_error(e, part, need) from e
        with f:
            while True:
                if cancel is not None and cancel.cancelled:
                    raise Cancelled(
                        f"Download cancelled after {done} bytes; run it again to resume."
                    )
                try:
                    chunk = response.read(CHUNK)
                except (OSError, http.client.HTTPException) as e:
                    raise _network_error(url, e, timeout, done) from e
                if not chunk:
                    break
                try:
                    _write_chunk(f, chunk)
                except OSError as e:
                    raise _disk_error(e, part, None if total is None else total - done) from e
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
            try:
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                raise _disk_error(e, part, None) from e
    if total is not None and done < total:
        raise _network_error(url, ConnectionResetError(), timeout, done)


def _write_chunk(f: BinaryIO, chunk: bytes) -> None:
    f.write(chunk)  # a seam: tests make it fail with ENOSPC


def _verify(url: str, part: Path, sha256: str | None, size: int | None) -> None:
    got = part.stat().st_size
    if size is not None and got != size:
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"The download from {url} has {got} bytes instead of {size}; it was deleted.",
            DownloadFailure.INTEGRITY,
            url,
        )
    if sha256 is not None:
        digest = sha256_file(part)
        if digest != sha256.lower():
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"The file downloaded from {url} is not the expected one (sha256 {digest[:12]}… "
                f"instead of {sha256[:12]}…); it was deleted. The server may hold a different "
                "version.",
                DownloadFailure.INTEGRITY,
                url,
            )


def download(
    url: str,
    dest: Path,
    *,
    sha256: str | None,
    size: int | None,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
    timeout: float = 30,
    check: Callable[[Path], object] | None = None,
    waiting: Callable[[], None] | None = None,
) -> Path:
    """Download `url` to `dest`, resuming a `.part` left by an earlier attempt.

    Size and sha256 (when given) are verified, then `check` (e.g. model validation) runs on
    the finished `.part`, and only then is it renamed to `dest`. A wrong file is deleted; a
    cancelled or broken-off download keeps its `.part`. An existing `dest` that matches is
    returned without touching the network. Another download of `dest` (in this process or
    another) is waited for first; `waiting` is told when that happens.
    """
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _disk_error(e, dest.parent, size) from e
    part = part_path(dest)
    with _lock_for(dest), _file_lock(dest, cancel, waiting):
        if dest.is_file() and _matches(dest, sha256, size):
            return dest
        for _ in range(_RESTARTS + 1):
            try:
                _fetch(url, part, size, progress, cancel, timeout)
                break
            except _Restart:
                part.unlink(missing_ok=True)
        else:
            raise DownloadError(
                f"The server at {_host(url)} sent the file inconsistently; try again later.",
                DownloadFailure.NETWORK,
                url,
            )
        _verify(url, part, sha256, size)
        if check is not None:
            try:
                check(part)
            except Exception:
                part.unlink(missing_ok=True)
                raise
        os.replace(part, dest)
    return dest


def _matches(path: Path, sha256: str | None, size: int | None) -> bool:
    if size is not None and path.stat().st_size != size:
        return False
    return sha256 is None or sha256_file(path) == sha256.lower()


def download_model(
    entry_id: str,
    models_dir: Path,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
    timeout: float = 30,
    waiting: Callable[[], None] | None = None,
) -> Path:
    """Download a catalog model into the models folder; it is validated before it appears.
    A catalog entry without both sha256 and size is refused: it could not be verified."""
    catalog = load_catalog()
    entry = catalog.get(entry_id)
    if entry is None:
        raise UsageError(f"Unknown model id {entry_id!r}. Known ids: {', '.join(sorted(catalog))}.")
    if entry.source is Source.STARTER or entry.url is None:
        raise UsageError(
            f"{entry.id} ({entry.name}) is a starter model built on this machine, not "
            "downloaded: run `python -m engine models fetch-starter`."
        )
    if entry.sha256 is None or entry.size is None:
        raise ModelError(
            f"{entry.id} ({entry.name}) cannot be downloaded: the catalog has no checksum and "
            "size for it, and Tessera installs no download it cannot verify. Get the file "
            f"yourself ({entry.url}, from {entry.homepage}): put it in {models_dir} as "
            f"{entry.file}, or add it with `python -m engine models add PATH`."
        )
    ensure_models_dir(models_dir)
    dest = models_dir / entry.file

    def check(path: Path) -> None:  # a server's error page saved as .onnx must not install
        inspect_model(path, entry.family)

    try:
        return download(
            entry.url,
            dest,
            sha256=entry.sha256,
            size=entry.size,
            progress=progress,
            cancel=cancel,
            timeout=timeout,
            check=check,
            waiting=waiting,
        )
    except DownloadError as e:
        if e.failure is DownloadFailure.INTEGRITY:
            raise  # the server holds another file: fetching it elsewhere gives the same
        hint = elsewhere(entry.url, entry.file, models_dir)
        raise DownloadError(f"{e} {hint}", e.failure, e.url) from e


def elsewhere(url: str, file: str, models_dir: Path) -> str:
    """How to get a model without this computer's network: one line, every name spelt out."""
    return (
        f"To get it another way, download {url} (on any computer), and put it in {models_dir} "
        f"as {file}, or drop it on Tessera's window: it is checked before it is used."
    )
