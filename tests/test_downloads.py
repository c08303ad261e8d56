"""Downloads against a real local HTTP server: progress, resume, refusals, cancel, CLI codes."""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cancel import CancelToken
from engine.errors import Cancelled, ModelError, ResourceError, UsageError
from engine.models import catalog as catalog_module
from engine.models import downloads
from engine.models import inventory as models
from engine.models.cli import add_models_parser, run_models_command
from engine.models.downloads import (
    CHUNK,
    DownloadError,
    DownloadFailure,
    download,
    download_model,
    part_path,
)
from engine.samples.upscaler_models import make_upscaler
from tests.http_fixtures import PAYLOAD, SHA, ServerState, server

__all__ = ["server"]  # the fixture, used by name


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_download_verifies_and_reports_progress(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, state = server
    calls: list[tuple[int, int | None]] = []
    dest = tmp_path / "m" / "model.onnx"
    got = download(
        f"{url}/model.onnx",
        dest,
        sha256=SHA,
        size=len(PAYLOAD),
        progress=lambda d, t: calls.append((d, t)),
    )
    assert got == dest and dest.read_bytes() == PAYLOAD
    assert not part_path(dest).exists()
    assert calls[0] == (0, len(PAYLOAD)) and calls[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and len(calls) > 10
    # Already there and matching: no network at all.
    assert download(f"{url}/model.onnx", dest, sha256=SHA, size=len(PAYLOAD)) == dest
    assert len(state.ranges) == 1


def test_redirect_is_followed(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, _ = server
    dest = download(f"{url}/redirect", tmp_path / "r.onnx", sha256=SHA, size=None)
    assert dest.read_bytes() == PAYLOAD


def test_resume_after_a_broken_off_attempt(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, state = server
    state.truncate_first = 5 * CHUNK + 7
    dest = tmp_path / "model.onnx"
    with pytest.raises(DownloadError, match=r"broke off.*resume") as err:
        download(f"{url}/model.onnx", dest, sha256=SHA, size=len(PAYLOAD))
    assert err.value.failure is DownloadFailure.NETWORK and err.value.exit_code == 5
    assert part_path(dest).stat().st_size == 5 * CHUNK + 7 and not dest.exists()
    download(f"{url}/model.onnx", dest, sha256=SHA, size=len(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD
    assert state.ranges == [None, f"bytes={5 * CHUNK + 7}-"]


def test_server_ignoring_range_restarts_cleanly(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, state = server
    state.honour_range = False
    dest = tmp_path / "model.onnx"
    part_path(dest).write_bytes(b"\xff" * 1000)  # not the file's start: appending would corrupt
    download(f"{url}/model.onnx", dest, sha256=SHA, size=len(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD and state.ranges == ["bytes=1000-"]


def test_part_that_does_not_fit_is_started_again(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, state = server
    dest = tmp_path / "model.onnx"
    part_path(dest).write_bytes(b"\0" * len(PAYLOAD))  # as long as the file: the server says 416
    download(f"{url}/model.onnx", dest, sha256=SHA, size=None)
    assert dest.read_bytes() == PAYLOAD and state.ranges == [f"bytes={len(PAYLOAD)}-", None]


def test_http_404_is_readable(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, _ = server
    dest = tmp_path / "gone.onnx"
    with pytest.raises(DownloadError, match="404") as err:
        download(f"{url}/gone.onnx", dest, sha256=None, size=None)
    assert err.value.failure is DownloadFailure.HTTP and err.value.exit_code == 4
    assert not dest.exists() and not part_path(dest).exists()


def test_wrong_hash_leaves_nothing(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, _ = server
    dest = tmp_path / "model.onnx"
    with pytest.raises(DownloadError, match=r"sha256.*deleted") as err:
        download(f"{url}/model.onnx", dest, sha256="0" * 64, size=len(PAYLOAD))
    assert err.value.failure is DownloadFailure.INTEGRITY
    assert list(tmp_path.iterdir()) == []


def test_size_the_catalog_does_not_expect_is_refused(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, _ = server
    with pytest.raises(DownloadError, match="catalog expects") as err:
        download(f"{url}/model.onnx", tmp_path / "m.onnx", sha256=None, size=len(PAYLOAD) + 1)
    assert err.value.failure is DownloadFailure.INTEGRITY and list(tmp_path.iterdir()) == []


def test_connection_refused_is_readable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/model.onnx"
    with pytest.raises(DownloadError, match="refused the connection") as err:
        download(url, tmp_path / "m.onnx", sha256=None, size=None, timeout=5)
    assert err.value.failure is DownloadFailure.NETWORK and err.value.exit_code == 5
    assert list(tmp_path.iterdir()) == []


def test_unknown_host_is_readable(tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as err:
        download(
            "http://tessera-test.invalid/m.onnx",
            tmp_path / "m.onnx",
            sha256=None,
            size=None,
            timeout=5,
        )
    assert err.value.failure is DownloadFailure.NETWORK and "tessera-test.invalid" in str(err.value)


def test_cancel_keeps_the_part_for_resume(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, state = server
    token = CancelToken()
    dest = tmp_path / "model.onnx"

    def progress(done: int, total: int | None) -> None:
        if done >= 3 * CHUNK:
            token.cancel()

    with pytest.raises(Cancelled, match="resume"):
        download(
            f"{url}/model.onnx",
            dest,
            sha256=SHA,
            size=len(PAYLOAD),
            progress=progress,
            cancel=token,
        )
    kept = part_path(dest).stat().st_size
    assert 3 * CHUNK <= kept < len(PAYLOAD) and not dest.exists()
    download(f"{url}/model.onnx", dest, sha256=SHA, size=len(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD and state.ranges[-1] == f"bytes={kept}-"


def test_disk_full_is_a_resource_error(
    server: tuple[str, ServerState], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = server

    def full(f: object, chunk: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(downloads, "_write_chunk", full)
    with pytest.raises(ResourceError, match="disk is full") as err:
        download(f"{url}/model.onnx", tmp_path / "m.onnx", sha256=SHA, size=len(PAYLOAD))
    assert err.value.exit_code == 3


def test_too_little_free_space_is_refused_up_front(
    server: tuple[str, ServerState], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = server
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        downloads.shutil, "disk_usage", lambda p: usage._replace(free=len(PAYLOAD) // 2)
    )
    with pytest.raises(ResourceError, match="disk is full"):
        download(f"{url}/model.onnx", tmp_path / "m.onnx", sha256=None, size=None)


# --- catalog downloads ------------------------------------------------------------------------


@pytest.fixture
def local_catalog(
    server: tuple[str, ServerState], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ServerState, Path]]:
    """A catalog whose download entries point at the local server."""
    url, state = server
    model = make_upscaler(tmp_path / "served.onnx", 2).read_bytes()
    state.files["/up.onnx"] = model
    page = b"<!DOCTYPE html><html>Sign in to continue</html>"
    state.files["/page.onnx"] = page
    pinned = {"size": 1000, "sha256": "2" * 64}  # every download is pinned; these never match
    base = {
        "family": "upscale",
        "licence": "MIT",
        "homepage": "https://example.org",
        "source": "download",
        "options": {"scale": 2},
    }
    entries = [
        {
            **base,
            "id": "test-up",
            "name": "Test",
            "file": "test-up.onnx",
            "url": f"{url}/up.onnx",
            "size": len(model),
            "sha256": hashlib.sha256(model).hexdigest(),
        },
        {
            **base,
            "id": "test-page",
            "name": "Page",
            "file": "test-page.onnx",
            "url": f"{url}/page.onnx",
            "size": len(page),  # the server's page is what the catalog pins: only the
            "sha256": hashlib.sha256(page).hexdigest(),  # contract check can refuse it
        },
        {
            **base,
            "id": "test-bad-hash",
            "name": "Bad",
            "file": "test-bad.onnx",
            "url": f"{url}/up.onnx",
            "size": len(model),
            "sha256": "1" * 64,
        },
        {
            **base,
            "id": "test-gone",
            "name": "Gone",
            "file": "test-gone.onnx",
            "url": f"{url}/gone.onnx",
            **pinned,
        },
        {
            **base,
            "id": "test-refused",
            "name": "Refused",
            "file": "test-refused.onnx",
            "url": f"http://127.0.0.1:{_closed_port()}/x.onnx",
            **pinned,
        },
        {
            **base,
            "id": "test-unpinned",
            "name": "Unpinned",
            "file": "test-unpinned.onnx",
            "url": f"{url}/up.onnx",
            "size": None,
            "sha256": None,
        },
        {
            **base,
            "id": "test-starter",
            "name": "Starter",
            "file": "test-starter.onnx",
            "url": None,
            "source": "starter",
            "size": None,
            "sha256": None,
        },
    ]
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": entries}))
    monkeypatch.setattr(catalog_module, "catalog_path", lambda: catalog)
    yield state, tmp_path / "models"


def test_download_model_validates_before_installing(
    local_catalog: tuple[ServerState, Path],
) -> None:
    _, models_dir = local_catalog
    path = download_model("test-up", models_dir)
    assert path == models_dir / "test-up.onnx"
    assert models.resolve_model("test-up", models_dir).contract.scale == 2
    with pytest.raises(ModelError, match="not an ONNX model"):
        download_model("test-page", models_dir)  # an HTML page where a model should be
    assert not (models_dir / "test-page.onnx").exists()
    assert not part_path(models_dir / "test-page.onnx").exists()
    with pytest.raises(UsageError, match="fetch-starter"):
        download_model("test-starter", models_dir)
    with pytest.raises(UsageError, match="Unknown model id"):
        download_model("nope", models_dir)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine")
    add_models_parser(parser.add_subparsers(dest="command"))
    return run_models_command(parser.parse_args(argv))


def test_cli_download_progress_and_exit_codes(
    local_catalog: tuple[ServerState, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, models_dir = local_catalog
    d = ["--models-dir", str(models_dir)]
    assert _cli(["models", "download", "test-up", *d]) == 0
    out, err = capsys.readouterr()
    assert "\r" in err and "100.0%" in err and str(models_dir / "test-up.onnx") in out
    assert _cli(["models", "download", "test-bad-hash", *d]) == 4
    assert "sha256" in capsys.readouterr().err
    assert _cli(["models", "download", "test-gone", *d]) == 4
    assert "404" in capsys.readouterr().err
    assert _cli(["models", "download", "test-refused", *d]) == 5
    assert "refused" in capsys.readouterr().err
    assert _cli(["models", "download", "test-page", *d]) == 4

    def full(f: object, chunk: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(downloads, "_write_chunk", full)
    assert _cli(["models", "download", "test-gone-too", *d]) == 2  # unknown id: usage
    (models_dir / "test-up.onnx").unlink()
    assert _cli(["models", "download", "test-up", *d]) == 3
    assert "disk is full" in capsys.readouterr().err


@pytest.mark.parametrize("entry_id", ["test-refused", "test-gone"])
def test_a_failed_download_says_where_to_get_the_file_and_where_to_put_it(
    local_catalog: tuple[ServerState, Path], entry_id: str
) -> None:
    # Offline (nothing listens on the port) or moved (404): the person can fetch the file on
    # another computer and drop it in, so the message names the address, the file and the
    # folder — on one line, as the app's notice and the command's `error:` line show it.
    _, models_dir = local_catalog
    entry = catalog_module.load_catalog()[entry_id]
    with pytest.raises(DownloadError) as err:
        download_model(entry_id, models_dir, timeout=5)
    message = str(err.value)
    assert f"download {entry.url} (on any computer)" in message
    assert f"put it in {models_dir} as {entry.file}" in message
    assert "\n" not in message


def test_a_curated_upscaler_downloads_from_a_local_server_and_is_offered_no_more(
    local_catalog: tuple[ServerState, Path],
) -> None:
    # The same path as the catalog's new upscalers (a pinned ×2 upscale file): downloaded,
    # verified, installed under its catalog id, and then no longer in Get….
    from gui.controllers.models import get_offers, model_groups

    state, models_dir = local_catalog
    before = {
        o.entry.id
        for o in get_offers(models.discover(models_dir), catalog_module.Family.UPSCALE)
        if o.entry
    }
    assert "test-up" in before
    download_model("test-up", models_dir)
    after = models.discover(models_dir)
    assert "test-up" not in {
        o.entry.id for o in get_offers(after, catalog_module.Family.UPSCALE) if o.entry
    }
    (group,) = [g for g in model_groups(after, catalog_module.Family.UPSCALE) if g.label == "Test"]
    assert group.choices[0].model == "test-up" and group.choices[0].scale == 2
    assert state.ranges == [None]  # one request, nothing resumed


def test_the_catalog_offers_more_upscalers_than_the_starter_set(tmp_path: Path) -> None:
    from gui.controllers.models import get_offers

    inventory = models.discover(tmp_path)
    downloads_ = [
        o.entry
        for o in get_offers(inventory, catalog_module.Family.UPSCALE)
        if o.entry is not None and not o.manual
    ]
    assert len(downloads_) >= 3
    for e in downloads_:
        assert e.url is not None and e.url.startswith("https://")
        assert e.size and e.sha256 and e.licence and e.scale and e.purpose and e.label
    assert {e.scale for e in downloads_} >= {2, 4}


# --- pinned downloads, one at a time across processes, validated options, SIGTERM ------------

# Catalog downloads whose sha256 and size could not be found for that exact file (same
# repository, same path) in any stored public page; each is refused until they are filled in.
UNPINNED = {"da3-base", "realesrgan-x2plus", "realesr-general-x4v3", "realesr-animevideov3"}


def test_a_download_without_checksum_and_size_is_refused(
    local_catalog: tuple[ServerState, Path],
) -> None:
    state, models_dir = local_catalog
    with pytest.raises(ModelError, match="no checksum and size for it") as err:
        download_model("test-unpinned", models_dir)
    assert "/up.onnx" in str(err.value) and f"{models_dir} as test-unpinned.onnx" in str(err.value)
    assert state.ranges == [], "nothing may be fetched for an unverifiable download"
    assert not models_dir.exists() or not list(models_dir.iterdir())


def test_catalog_downloads_carry_checksum_and_size(tmp_path: Path) -> None:
    entries = [e for e in catalog_module.load_catalog().values() if e.url is not None]
    unpinned = {e.id for e in entries if e.sha256 is None or e.size is None}
    assert unpinned == UNPINNED, "pin every download (sha256 and size) or list it in UNPINNED"
    for entry_id in sorted(unpinned):
        with pytest.raises(ModelError, match="no checksum and size"):
            download_model(entry_id, tmp_path)  # refused before any network access
    pinned = [e for e in entries if e.id not in unpinned]
    assert len(pinned) >= 5
    for e in pinned:
        assert e.approx_size is None or abs(e.approx_size - (e.size or 0)) < 0.05 * (e.size or 1)


def test_an_unverifiable_download_is_never_offered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Neither the app's Get… menu nor `models list` offers what `models download` refuses:
    # they point to the model's page and `models add` instead.
    from gui.controllers.models import get_offers

    inventory = models.discover(tmp_path)  # an empty folder: every catalog model is missing
    offers = [o for family in catalog_module.Family for o in get_offers(inventory, family)]
    offered = {o.entry.id for o in offers if o.entry is not None and not o.manual}
    assert offered and not offered & UNPINNED
    # They are named, as files to fetch by hand (the window says where from and where to).
    by_hand = {o.entry.id for o in offers if o.entry is not None and o.manual}
    assert by_hand == UNPINNED
    catalog = catalog_module.load_catalog()
    for entry_id in UNPINNED:
        entry = catalog[entry_id]
        assert not entry.downloadable
        assert "models download" not in entry.how_to_get and entry.homepage in entry.how_to_get
    assert _cli(["models", "--models-dir", str(tmp_path), "list"]) == 0
    listed = capsys.readouterr().out
    assert "models download da3-base" not in listed
    assert "models download da3-small" in listed  # a pinned one is still offered


def _download_in_child(url: str, dest: str, start: object) -> str:
    start.wait()  # type: ignore[attr-defined]
    return str(download(url, Path(dest), sha256=SHA, size=len(PAYLOAD)))


def test_two_processes_downloading_one_model_take_turns(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, state = server
    state.pace_s = 0.01  # about 0.2 s for the whole file: the two overlap
    dest = tmp_path / "models" / "model.onnx"
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        start = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            got = pool.starmap(_download_in_child, [(f"{url}/model.onnx", str(dest), start)] * 2)
    assert got == [str(dest), str(dest)]
    assert dest.read_bytes() == PAYLOAD
    assert len(state.ranges) == 1, "the second process waits, then finds the file in place"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["model.onnx"]  # no .part, no lock


def test_a_waiting_download_can_be_cancelled(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, _ = server
    dest = tmp_path / "model.onnx"
    holder = downloads._file_lock(dest, None, None)
    holder.__enter__()  # another download holds the lock (the same lock works in-process)
    told: list[bool] = []
    cancel = CancelToken()
    try:
        threading.Timer(0.3, cancel.cancel).start()
        with pytest.raises(Cancelled, match="another download"):
            download(
                f"{url}/model.onnx",
                dest,
                sha256=SHA,
                size=len(PAYLOAD),
                cancel=cancel,
                waiting=lambda: told.append(True),
            )
    finally:
        holder.__exit__(None, None, None)
    assert told == [True] and not dest.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("timeout", ["-1", "0", "inf", "nan", "soon", "1e9"])
def test_download_timeout_must_be_a_sensible_number_of_seconds(
    timeout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    code = main(["models", "download", "da3-small", "--timeout", timeout])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--timeout takes seconds, more than 0 and at most 3600" in lines[0]


# The child runs `python -m engine models download test-up` against the test's catalog.
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from engine.models import catalog
    catalog.catalog_path = lambda: Path(sys.argv[1])
    from engine.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


def test_sigterm_during_a_download_exits_143_and_keeps_the_part_for_resuming(
    local_catalog: tuple[ServerState, Path], tmp_path: Path
) -> None:
    state, models_dir = local_catalog
    state.pace_s = 0.05
    big = os.urandom(64 * CHUNK)
    state.files["/big.onnx"] = big
    raw = json.loads((tmp_path / "catalog.json").read_text())
    raw["models"].append(
        {
            **raw["models"][0],
            "id": "test-big",
            "file": "test-big.onnx",
            "url": raw["models"][0]["url"].replace("/up.onnx", "/big.onnx"),
            "size": len(big),
            "sha256": hashlib.sha256(big).hexdigest(),
        }
    )
    (tmp_path / "catalog.json").write_text(json.dumps(raw))
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(tmp_path / "catalog.json"),
            "models",
            "download",
            "test-big",
            "--models-dir",
            str(models_dir),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
    )
    part = part_path(models_dir / "test-big.onnx")
    deadline = time.monotonic() + 30
    while not (part.exists() and part.stat().st_size > 4 * CHUNK):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 143, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "Stopped."
    assert sorted(p.name for p in models_dir.iterdir()) == ["test-big.onnx.part"]
    assert big.startswith(part.read_bytes())  # a clean prefix: the next run resumes from it
