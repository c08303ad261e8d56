"""The model browser's catalogue and downloads, against a real HTTP server on 127.0.0.1: the
shipped OpenModelDB snapshot, filters and licences, a bad hash, a moved file, a cancel, a
resume mid-file, a refresh of the catalogue."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cancel import CancelToken
from engine.errors import Cancelled, ModelError, UsageError
from engine.models.browse import (
    LicenceKind,
    browse,
    download_browsed,
    licence_kind,
    load_snapshot,
    refresh_snapshot,
    refreshed_snapshot_path,
)
from engine.models.catalog import Family
from engine.models.cli import add_models_parser, run_models_command
from engine.models.downloads import CHUNK, DownloadError, DownloadFailure, part_path
from engine.samples.upscaler_models import make_upscaler
from tests.http_fixtures import ServerState, card, catalogue, server

__all__ = ["catalogue", "server"]  # the fixtures, used by name

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_catalogue_lists_openmodeldbs_onnx_models_with_checksums() -> None:
    snap = load_snapshot()
    assert snap.date and len(snap.entries) >= 60
    assert all(f.sha256 and len(f.sha256) == 64 for e in snap.entries for f in e.files)
    assert all(e.purpose or e.name for e in snap.entries)
    found = browse(snap)
    kinds = [e.licence_kind is LicenceKind.PERMISSIVE for e in found]
    assert kinds == sorted(kinds, reverse=True)  # permissive first, non-commercial after
    assert any(e.licence_kind is LicenceKind.NON_COMMERCIAL for e in found)
    ones = browse(snap, scale=1)
    assert ones and all(e.scale == 1 and e.what == "Restore ×1" for e in ones)
    nomos = browse(snap, search="Nomos2 DAT")
    assert "4x-Nomos2-hq-dat2" in [e.id for e in nomos] and len(nomos) < len(found)
    assert all("nomos2" in e.id.lower() for e in nomos)
    assert browse(snap, family=Family.DEPTH) == []


@pytest.mark.parametrize(
    ("licence", "kind"),
    [
        ("CC-BY-4.0", LicenceKind.PERMISSIVE),
        ("CC0-1.0", LicenceKind.PERMISSIVE),
        ("CC-BY-SA-4.0", LicenceKind.PERMISSIVE),
        ("CC-BY-NC-SA-4.0", LicenceKind.NON_COMMERCIAL),
        ("CC-BY-NC-4.0", LicenceKind.NON_COMMERCIAL),
        ("", LicenceKind.UNKNOWN),
        ("WTFPL AND CC-BY-NC-4.0", LicenceKind.NON_COMMERCIAL),
    ],
)
def test_licences_are_sorted_into_permissive_and_not(licence: str, kind: LicenceKind) -> None:
    assert licence_kind(licence) is kind


def test_a_browsed_model_downloads_checks_its_contract_and_lands_in_the_models_folder(
    catalogue: tuple[str, ServerState, Path, bytes],
) -> None:
    _, _, models_dir, _ = catalogue
    snap = load_snapshot(models_dir)
    assert snap.date == "2025-02-03"
    seen: list[tuple[int, int | None]] = []
    path = download_browsed(
        snap.get("2x-good"), models_dir, progress=lambda d, t: seen.append((d, t))
    )
    assert path == models_dir / "2x-Good.onnx" and path.is_file()
    assert seen[-1][0] == seen[-1][1] == path.stat().st_size
    assert download_browsed(snap.get("1x-Denoise"), models_dir).is_file()  # a restore at ×1


def test_a_bad_hash_installs_nothing(catalogue: tuple[str, ServerState, Path, bytes]) -> None:
    _, _, models_dir, _ = catalogue
    entry = load_snapshot(models_dir).get("2x-BadHash")
    with pytest.raises(DownloadError, match="not the expected one") as info:
        download_browsed(entry, models_dir)
    assert info.value.failure is DownloadFailure.INTEGRITY
    assert not (models_dir / "2x-BadHash.onnx").exists()
    assert not part_path(models_dir / "2x-BadHash.onnx").exists()


def test_a_moved_file_is_followed_or_its_next_address_tried(
    catalogue: tuple[str, ServerState, Path, bytes],
) -> None:
    _, _, models_dir, _ = catalogue
    snap = load_snapshot(models_dir)
    assert download_browsed(snap.get("2x-Redirected"), models_dir).is_file()  # 302
    assert download_browsed(snap.get("2x-Gone"), models_dir).is_file()  # 404, then the mirror
    with pytest.raises(DownloadError, match="404") as info:
        download_browsed(snap.get("2x-Vanished"), models_dir)
    assert info.value.failure is DownloadFailure.HTTP
    assert not list(models_dir.glob("2x-Vanished*"))


def test_a_cancel_keeps_the_part_and_the_next_get_resumes_mid_file(
    catalogue: tuple[str, ServerState, Path, bytes],
) -> None:
    _, state, models_dir, data = catalogue
    assert len(data) > 3 * CHUNK, "the model must span several chunks"
    entry = load_snapshot(models_dir).get("2x-Big")
    token = CancelToken()

    def progress(done: int, total: int | None) -> None:
        if done >= 2 * CHUNK:
            token.cancel()

    with pytest.raises(Cancelled):
        download_browsed(entry, models_dir, progress=progress, cancel=token)
    kept = part_path(models_dir / entry.file_name).stat().st_size
    assert 2 * CHUNK <= kept < len(data) and not (models_dir / entry.file_name).exists()
    state.ranges.clear()
    download_browsed(entry, models_dir)
    assert state.ranges == [f"bytes={kept}-"]  # only the rest was asked for
    assert (models_dir / entry.file_name).read_bytes() == data


def test_a_non_commercial_model_needs_its_licence_accepted(
    catalogue: tuple[str, ServerState, Path, bytes],
) -> None:
    _, state, models_dir, _ = catalogue
    entry = load_snapshot(models_dir).get("2x-Private")
    assert entry.needs_acceptance and "non-commercial" in entry.licence_text
    state.ranges.clear()
    with pytest.raises(UsageError, match="--accept-license"):
        download_browsed(entry, models_dir)
    assert state.ranges == []  # nothing was even asked of the server
    assert download_browsed(entry, models_dir, accept_license=True).is_file()


def test_a_file_of_another_scale_than_listed_is_refused(
    catalogue: tuple[str, ServerState, Path, bytes],
) -> None:
    _, _, models_dir, _ = catalogue
    with pytest.raises(ModelError, match="×4 but its file upscales ×2"):
        download_browsed(load_snapshot(models_dir).get("4x-Liar"), models_dir)
    assert not list(models_dir.glob("4x-Liar*"))


def test_a_model_without_a_plain_onnx_url_says_how_to_get_it(
    catalogue: tuple[str, ServerState, Path, bytes],
) -> None:
    _, _, models_dir, _ = catalogue
    snap = load_snapshot(models_dir)
    assert "2x-Pytorch" not in [e.id for e in snap.entries]  # no ONNX file: not listed
    with pytest.raises(UsageError, match=r"not published as a plain \.onnx.*models add"):
        download_browsed(snap.get("2x-Zip"), models_dir)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine")
    add_models_parser(parser.add_subparsers(dest="command"))
    return run_models_command(parser.parse_args(argv))


def test_cli_browse_filters_and_get_needs_the_licence_accepted(
    catalogue: tuple[str, ServerState, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, models_dir, _ = catalogue
    common = ["models", "--models-dir", str(models_dir)]
    assert _cli([*common, "browse", "--scale", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ids = [m["id"] for m in out["models"]]
    assert out["date"] == "2025-02-03" and "1x-Denoise" not in ids
    assert ids.index("2x-Good") < ids.index("2x-Private")  # permissive first
    private = next(m for m in out["models"] if m["id"] == "2x-Private")
    assert private["licence_kind"] == "non-commercial" and private["needs_acceptance"]
    assert _cli([*common, "browse", "--search", "denoise"]) == 0
    text = capsys.readouterr().out
    assert "1x-Denoise" in text and "Restore ×1" in text and "2x-Good" not in text
    assert _cli([*common, "get", "2x-Private"]) == 2
    assert "--accept-license" in capsys.readouterr().err
    assert _cli([*common, "get", "2x-Private", "--accept-license"]) == 0
    assert _cli([*common, "get", "2x-BadHash"]) == 4
    assert "not the expected one" in capsys.readouterr().err
    assert _cli([*common, "get", "no-such-model"]) == 2


def test_refresh_reads_openmodeldbs_api_and_a_bad_answer_keeps_the_catalogue(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, state = server
    up = make_upscaler(tmp_path / "up.onnx", 2).read_bytes()
    cards = {"2x-Fresh": card("Fresh", 2, "MIT", [f"{url}/up.onnx"], up)}
    state.files["/api/v1/models.json"] = json.dumps(cards).encode()
    state.files["/api/v1/architectures.json"] = b'{"span": {"name": "SPAN"}}'
    state.files["/api/v1/tags.json"] = b"{}"
    models_dir = tmp_path / "models"
    shipped = load_snapshot(models_dir)
    fresh = refresh_snapshot(models_dir, f"{url}/api/v1", today="2026-12-05")
    assert [e.id for e in fresh.entries] == ["2x-Fresh"] and fresh.date == "2026-12-05"
    assert load_snapshot(models_dir).entries == fresh.entries  # the browser now shows it
    state.files["/bad/models.json"] = b"<html>maintenance</html>"
    state.files["/bad/architectures.json"] = b"{}"
    state.files["/bad/tags.json"] = b"{}"
    with pytest.raises(ModelError, match="not OpenModelDB's JSON"):
        refresh_snapshot(models_dir, f"{url}/bad/")
    with pytest.raises(DownloadError, match="404"):
        refresh_snapshot(models_dir, f"{url}/nothing/")
    assert load_snapshot(models_dir).entries == fresh.entries
    refreshed_snapshot_path(models_dir).write_text("{broken")
    assert load_snapshot(models_dir).entries == shipped.entries  # a damaged copy is passed over
    assert not list(models_dir.glob(".*tmp")) and not list(models_dir.glob(".refresh-*"))


def test_the_script_regenerates_the_snapshot_from_a_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "omdb"
    (checkout / "data" / "models").mkdir(parents=True)
    one = card("Denoise", 1, "CC0-1.0", ["https://x/1x-Denoise.onnx"], b"abc")
    (checkout / "data" / "models" / "1x-Denoise.json").write_text(json.dumps(one))
    (checkout / "data" / "models" / "2x-Torch.json").write_text(
        json.dumps({**one, "resources": []})
    )
    (checkout / "data" / "architectures.json").write_text('{"span": {"name": "SPAN"}}')
    (checkout / "data" / "tags.json").write_text('{"photo": {"name": "Photo"}}')
    out = tmp_path / "snap.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "openmodeldb_snapshot.py"),
            *(str(checkout), str(out), "--date", "2026-01-01", "--commit", "abc"),
        ],
        check=True,
        capture_output=True,
    )
    snap = json.loads(out.read_text())
    assert snap["date"] == "2026-01-01" and snap["models_in_database"] == 2
    (model,) = snap["models"]
    assert model["id"] == "1x-Denoise" and model["architecture"] == "SPAN"
    assert model["purpose"] == "A test model that denoises pictures."
    assert model["tags"] == ["Photo", "restoration"] and model["files"][0]["direct"]
    assert model["images"] == [{"before": "https://a/lr.webp", "after": "https://a/sr.webp"}]


def test_browse_into_a_closed_pipe_ends_quietly() -> None:
    """`models browse | head -1`: the reader goes away; no traceback, exit 0."""
    child = subprocess.Popen(
        [sys.executable, "-m", "engine", "models", "browse", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before it writes: its first write finds no reader
    with child.stderr:
        err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 0 and "Traceback" not in err and "Error" not in err
