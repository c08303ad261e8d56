"""The model browser's catalogue: OpenModelDB's ONNX models (a snapshot shipped in resources/,
or the person's refreshed copy), filtered and ordered for a person, and their downloads —
checked against the catalogue's SHA-256 and the upscale contract, a non-commercial licence
accepted first.

1× models (denoise, de-JPEG, de-H264) are upscalers at ×1: the same contract (RGB in, RGB
out), the same tiling and the same products, so they run as Upscale rather than a fourth
operation that would duplicate it.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from engine.cancel import CancelToken
from engine.errors import ModelError, UsageError
from engine.models.catalog import Family, catalog_path
from engine.models.contracts import inspect_model
from engine.models.downloads import DownloadError, DownloadFailure, Progress, download
from engine.models.inventory import ensure_models_dir
from engine.models.openmodeldb import DEFAULT_REFRESH_URL, SNAPSHOT_VERSION, build

SNAPSHOT_NAME = "openmodeldb.json"
_NON_COMMERCIAL = ("-NC", "NONCOMMERCIAL", "NON-COMMERCIAL")
_PERMISSIVE = ("CC0", "CC-BY", "MIT", "APACHE", "BSD", "UNLICENSE", "ISC", "WTFPL", "ZLIB")


class LicenceKind(StrEnum):
    PERMISSIVE = "permissive"  # commercial use allowed (share-alike licences included)
    NON_COMMERCIAL = "non-commercial"  # fetched only after the person accepts it
    UNKNOWN = "unknown"  # no licence given: treated like non-commercial


def licence_kind(licence: str) -> LicenceKind:
    text = licence.upper()
    if any(mark in text for mark in _NON_COMMERCIAL):
        return LicenceKind.NON_COMMERCIAL
    if text and all(any(p in part for p in _PERMISSIVE) for part in text.split(" AND ")):
        return LicenceKind.PERMISSIVE
    return LicenceKind.UNKNOWN


@dataclass(frozen=True)
class ModelFile:
    variant: str  # fp32 | fp16
    size: int | None
    sha256: str | None
    urls: tuple[str, ...]
    direct: bool  # the URL names the .onnx itself (not an archive, a drive or a page)


@dataclass(frozen=True)
class SamplePicture:
    before: str
    after: str


@dataclass(frozen=True)
class BrowseEntry:
    id: str
    name: str
    author: str
    purpose: str
    scale: int
    architecture: str
    licence: str
    date: str
    tags: tuple[str, ...]
    files: tuple[ModelFile, ...]
    images: tuple[SamplePicture, ...]
    page: str

    family = Family.UPSCALE  # every OpenModelDB ONNX model is an image-to-image network

    @property
    def licence_kind(self) -> LicenceKind:
        return licence_kind(self.licence)

    @property
    def needs_acceptance(self) -> bool:
        return self.licence_kind is not LicenceKind.PERMISSIVE

    @property
    def file(self) -> ModelFile | None:
        """The file Tessera fetches: the first direct one with a checksum (fp32 first)."""
        for f in self.files:
            if f.direct and f.sha256 and f.size:
                return f
        return None

    @property
    def size(self) -> int | None:
        chosen = self.file or (self.files[0] if self.files else None)
        return chosen.size if chosen else None

    @property
    def file_name(self) -> str:
        return f"{self.id}.onnx"

    @property
    def what(self) -> str:
        """`Restore ×1` or `Upscale ×4`: what it does to a picture."""
        return f"Restore ×{self.scale}" if self.scale == 1 else f"Upscale ×{self.scale}"

    @property
    def licence_text(self) -> str:
        if self.licence_kind is LicenceKind.PERMISSIVE:
            return self.licence
        return f"{self.licence or 'no licence given'} ({self.licence_kind.value})"

    def how_to_get(self, models_dir: Path) -> str:
        if self.file is not None:
            accept = " --accept-license" if self.needs_acceptance else ""
            return f"python -m engine models get {self.id}{accept}"
        where = self.files[0].urls[0] if self.files else self.page
        return (
            f"this file is not published as a plain .onnx: get it from {where}, then put it in "
            f"{models_dir} or run `python -m engine models add PATH`"
        )


@dataclass(frozen=True)
class Snapshot:
    date: str
    commit: str
    source: str
    path: Path
    entries: tuple[BrowseEntry, ...]
    models_in_database: int = 0

    def get(self, model_id: str) -> BrowseEntry:
        for e in self.entries:
            if e.id.lower() == model_id.lower():
                return e
        raise UsageError(
            f"{model_id!r} is not in the model browser's catalogue ({len(self.entries)} models, "
            f"{self.date}); see `python -m engine models browse`."
        )


def bundled_snapshot_path() -> Path:
    return catalog_path().with_name(SNAPSHOT_NAME)


def refreshed_snapshot_path(models_dir: Path) -> Path:
    return models_dir / SNAPSHOT_NAME


_cache_lock = threading.Lock()
_cache: dict[tuple[Path, int], Snapshot] = {}


def load_snapshot(models_dir: Path | None = None) -> Snapshot:
    """The person's refreshed catalogue in the models folder when it is readable, else the one
    shipped with Tessera (a damaged refresh is passed over, not fatal)."""
    if models_dir is not None:
        mine = refreshed_snapshot_path(models_dir)
        if mine.is_file():
            try:
                return read_snapshot(mine)
            except ModelError:
                pass
    return read_snapshot(bundled_snapshot_path())


def read_snapshot(path: Path) -> Snapshot:
    try:
        key = (path, path.stat().st_mtime_ns)
    except OSError as e:
        raise ModelError(f"The model browser's catalogue {path} cannot be read: {e}") from e
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        snapshot = _parse(raw, path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"The model browser's catalogue {path} is damaged: {e!r}") from e
    with _cache_lock:
        _cache[key] = snapshot
    return snapshot


def _parse(raw: dict[str, Any], path: Path) -> Snapshot:
    if raw.get("version") != SNAPSHOT_VERSION:
        raise ValueError(f"version {raw.get('version')!r}, expected {SNAPSHOT_VERSION}")
    entries = []
    for m in raw["models"]:
        files = tuple(
            ModelFile(
                variant=str(f["variant"]),
                size=f.get("size"),
                sha256=f.get("sha256"),
                urls=tuple(f["urls"]),
                direct=bool(f.get("direct")),
            )
            for f in m["files"]
        )
        entries.append(
            BrowseEntry(
                id=str(m["id"]),
                name=str(m["name"]),
                author=str(m.get("author", "")),
                purpose=str(m.get("purpose", "")),
                scale=int(m["scale"]),
                architecture=str(m.get("architecture", "")),
                licence=str(m.get("licence", "")),
                date=str(m.get("date", "")),
                tags=tuple(m.get("tags", ())),
                files=files,
                images=tuple(
                    SamplePicture(str(i.get("before", "")), str(i["after"]))
                    for i in m.get("images", ())
                ),
                page=str(m.get("page", "")),
            )
        )
    return Snapshot(
        date=str(raw.get("date", "")),
        commit=str(raw.get("commit", "")),
        source=str(raw.get("source", "")),
        path=path,
        entries=tuple(entries),
        models_in_database=int(raw.get("models_in_database", 0)),
    )


def browse(
    snapshot: Snapshot,
    *,
    family: Family | None = None,
    scale: int | None = None,
    search: str = "",
) -> list[BrowseEntry]:
    """The entries that match, permissive licences first, then by scale and name."""
    words = search.lower().split()
    found = []
    for e in snapshot.entries:
        if family is not None and e.family is not family:
            continue
        if scale is not None and e.scale != scale:
            continue
        hay = " ".join((e.id, e.name, e.author, e.purpose, e.architecture, *e.tags)).lower()
        if all(w in hay for w in words):
            found.append(e)
    found.sort(key=lambda e: (e.needs_acceptance, e.file is None, e.scale, e.name.lower()))
    return found


def download_browsed(
    entry: BrowseEntry,
    models_dir: Path,
    *,
    accept_license: bool = False,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
    timeout: float = 30,
    waiting: Callable[[], None] | None = None,
) -> Path:
    """Fetch `entry` into the models folder: its URLs in turn (a moved file: the next one),
    the size and SHA-256 of the catalogue checked, then the upscale contract and the scale."""
    if entry.needs_acceptance and not accept_license:
        raise UsageError(
            f"{entry.name} is licensed {entry.licence_text}: you may not use it commercially"
            f"{'' if entry.licence else ' (no licence is given)'}. Read {entry.page}; to accept "
            f"the licence and download it: python -m engine models get {entry.id} "
            "--accept-license"
        )
    chosen = entry.file
    if chosen is None:
        raise UsageError(f"{entry.name}: {entry.how_to_get(models_dir)}.")
    ensure_models_dir(models_dir)

    def check(path: Path) -> None:
        contract = inspect_model(path, Family.UPSCALE)
        if contract.scale is not None and contract.scale != entry.scale:
            raise ModelError(
                f"{entry.name} is listed as ×{entry.scale} but its file upscales "
                f"×{contract.scale}: not installed."
            )

    last: DownloadError | None = None
    for url in chosen.urls:
        try:
            return download(
                url,
                models_dir / entry.file_name,
                sha256=chosen.sha256,
                size=chosen.size,
                progress=progress,
                cancel=cancel,
                timeout=timeout,
                check=check,
                waiting=waiting,
            )
        except DownloadError as e:
            if e.failure is not DownloadFailure.HTTP:
                raise  # a wrong file or no network: another address gives the same
            last = e
    assert last is not None
    raise last


def refresh_snapshot(
    models_dir: Path,
    base_url: str = DEFAULT_REFRESH_URL,
    *,
    today: str | None = None,
    timeout: float = 30,
    cancel: CancelToken | None = None,
) -> Snapshot:
    """Read OpenModelDB's API at `base_url` (models.json, architectures.json, tags.json) and
    keep the snapshot in the models folder; the shipped one stays as it was."""
    import datetime

    base = base_url if base_url.endswith("/") else base_url + "/"
    ensure_models_dir(models_dir)
    parts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=models_dir, prefix=".refresh-") as tmp:
        for name in ("models.json", "architectures.json", "tags.json"):
            got = download(
                base + name,
                Path(tmp) / name,
                sha256=None,
                size=None,
                cancel=cancel,
                timeout=timeout,
            )
            try:
                parts[name] = json.loads(got.read_text(encoding="utf-8"))
            except ValueError as e:
                raise ModelError(
                    f"{base + name} is not OpenModelDB's JSON ({e}); check the catalogue URL "
                    "in the settings."
                ) from e
    models = parts["models.json"]
    if not isinstance(models, dict) or not all(isinstance(v, dict) for v in models.values()):
        raise ModelError(f"{base}models.json does not list models by id; check the URL.")
    date = today or datetime.date.today().isoformat()
    snapshot = build(models, parts["architectures.json"], parts["tags.json"], date, base)
    dest = refreshed_snapshot_path(models_dir)
    fd, tmp_name = tempfile.mkstemp(dir=models_dir, prefix=".openmodeldb-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(snapshot, f, indent=1, ensure_ascii=False)
    os.replace(tmp_name, dest)
    return read_snapshot(dest)
