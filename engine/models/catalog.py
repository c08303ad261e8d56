"""The model catalog: the families, and the models Tessera knows by id (catalog.json) with
their licences, sources, checksums and the options their contract cannot tell."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

from engine.errors import ModelError, UsageError
from engine.operation_specs import Family as Family  # imported from here too, as before
from engine.operation_specs import for_family
from engine.options import OperationOptions, parse_options


class Source(Enum):
    DOWNLOAD = "download"  # fetched from `url` by engine/downloads.py
    STARTER = "starter"  # built offline by engine/starter.py (fetch-starter)


class Layout(StrEnum):
    NCHW = "NCHW"
    NHWC = "NHWC"


FETCH_STARTER = "python -m engine models fetch-starter"

# A catalog entry may preset its family's operation's options (engine/operation_specs.py), plus
# the model facts `scale` and `multiple_of` of an upscaler. An upscaler's `tile` presets
# `max_tile`.
_MODEL_FACTS = ("scale", "multiple_of")


# ---------------------------------------------------------------------------------------------
# Catalog


@dataclass(frozen=True)
class CatalogEntry:
    """One known model. `size`/`sha256` are exact (verified on download) or None if unknown."""

    id: str
    family: Family
    name: str
    file: str  # file name inside the models folder
    size: int | None
    sha256: str | None
    licence: str  # SPDX-like identifier
    licence_note: str  # short note for a person, e.g. "non-commercial"
    homepage: str
    url: str | None  # None for starter models
    source: Source
    origin: str = ""  # where the file comes from (export, package)
    approx_size: int | None = None  # bytes, for display before the download
    defaults: OperationOptions | None = None  # the options this model runs best with
    scale: int | None = None  # upscale
    multiple_of: int | None = None  # upscale: H and W must be multiples of this
    unverified: tuple[str, ...] = ()  # options still to be checked on the real weights
    notes: str = ""
    label: str = ""  # the picker's short name ("Photo", "Anime", "Fast preview")
    purpose: str = ""  # what the model is for, in a line a person reads
    rank: int = 100  # lower is offered first; the default pick of its family

    @property
    def short_label(self) -> str:
        """`Photo ×4` for an upscaler, the label alone otherwise (the name when it has none)."""
        text = self.label or self.name
        return f"{text} ×{self.scale}" if self.scale else text

    @property
    def downloadable(self) -> bool:
        """Tessera downloads only what it can verify: a URL with a pinned checksum and size."""
        return (
            self.source is Source.DOWNLOAD
            and self.url is not None
            and self.sha256 is not None
            and self.size is not None
        )

    @property
    def how_to_get(self) -> str:
        if self.source is Source.STARTER:
            return FETCH_STARTER
        if not self.downloadable:
            # No published checksum to pin (DESIGN: no unverified download is installed).
            where = f"{self.url} (see {self.homepage})" if self.url else self.homepage
            return f"download {where} yourself, then: python -m engine models add PATH"
        return f"python -m engine models download {self.id}"

    @property
    def licence_text(self) -> str:
        return f"{self.licence} ({self.licence_note})" if self.licence_note else self.licence


def catalog_path() -> Path:
    """The bundled catalog: beside the package, or in PyInstaller's unpack folder when frozen."""
    bundle = getattr(sys, "_MEIPASS", None)
    root = (
        Path(bundle)
        if getattr(sys, "frozen", False) and bundle
        else Path(__file__).resolve().parents[2]
    )
    return root / "resources" / "models" / "catalog.json"


_catalog_lock = threading.Lock()
_catalog_cache: dict[Path, tuple[CatalogEntry, ...]] = {}


def load_catalog(path: Path | None = None) -> dict[str, CatalogEntry]:
    """Every known model by id (a fresh dict; the entries are shared and frozen)."""
    path = catalog_path() if path is None else path
    with _catalog_lock:
        entries = _catalog_cache.get(path)
        if entries is None:
            entries = _read_catalog(path)
            _catalog_cache[path] = entries
    return {e.id: e for e in entries}


def _read_catalog(path: Path) -> tuple[CatalogEntry, ...]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"The model catalog {path} cannot be read: {e}") from e
    entries: list[CatalogEntry] = []
    try:
        for n, item in enumerate(raw["models"]):
            try:
                entries.append(_parse_entry(item))
            except (KeyError, ValueError, TypeError) as e:
                raise ValueError(f"entry {n} ({item.get('id', '?')}): {e!r}") from e
    except (KeyError, ValueError, TypeError) as e:
        raise ModelError(f"The model catalog {path} is damaged: {e}") from e
    for attr in ("id", "file"):
        seen = [getattr(e, attr) for e in entries]
        dupes = sorted({v for v in seen if seen.count(v) > 1})
        if dupes:
            raise ModelError(f"The model catalog {path} is damaged: duplicate {attr} {dupes}.")
    return tuple(entries)


def _parse_entry(item: dict[str, Any]) -> CatalogEntry:
    family = Family(item["family"])
    options: dict[str, Any] = dict(item.get("options") or {})
    facts: dict[str, Any] = {}
    for key in _MODEL_FACTS if family is Family.UPSCALE else ():
        if key in options:
            value = options.pop(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"option {key} must be a positive integer")
            facts[key] = value
    if family is Family.UPSCALE and "tile" in options:
        options["max_tile"] = options.pop("tile")
    try:
        cls: type[Any] = for_family(family).options_type
        defaults = parse_options(cls, options, f"a {family.value} model")
    except UsageError as e:
        raise ValueError(str(e)) from None
    sha = item.get("sha256")
    if sha is not None and (len(sha) != 64 or set(sha) - set("0123456789abcdef")):
        raise ValueError("sha256 must be 64 lower-case hex digits or null")
    size = item.get("size")
    if size is not None and (not isinstance(size, int) or size <= 0):
        raise ValueError("size must be a positive integer or null")
    source = Source(item["source"])
    if source is Source.DOWNLOAD and not item.get("url"):
        raise ValueError("a download model needs a url")
    if Path(item["file"]).name != item["file"] or not item["file"].lower().endswith(".onnx"):
        raise ValueError("file must be a plain .onnx file name")
    return CatalogEntry(
        id=str(item["id"]),
        family=family,
        name=str(item["name"]),
        file=str(item["file"]),
        size=size,
        sha256=sha,
        licence=str(item["licence"]),
        licence_note=str(item.get("licence_note", "")),
        homepage=str(item["homepage"]),
        url=item.get("url"),
        source=source,
        origin=str(item.get("origin", "")),
        approx_size=item.get("approx_size"),
        unverified=tuple(item.get("unverified", ())),
        notes=str(item.get("notes", "")),
        label=str(item.get("label", "")),
        purpose=str(item.get("purpose", "")),
        rank=_rank(item.get("rank", 100)),
        defaults=defaults,
        **facts,
    )


def _rank(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("rank must be a whole number")
    return value


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
