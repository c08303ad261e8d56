"""OpenModelDB's model cards turned into Tessera's catalogue snapshot: the models that publish
an ONNX file, with what the browser shows (name, what it is for, scale, architecture, licence,
files with size and SHA-256, sample pictures, tags). Read from a checkout (the snapshot script)
or from the site's API (a refresh the person asks for); no network here."""

from __future__ import annotations

import re
from typing import Any

SNAPSHOT_VERSION = 1
DEFAULT_REFRESH_URL = "https://openmodeldb.info/api/v1/"  # the site's own data API
_FIELD = re.compile(r"^[A-Z][A-Za-z ()/-]{1,40}:")  # "Scale: 4", "Release Date: …"
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def purpose(description: str, limit: int = 320) -> str:
    """A plain line or two of what the model is for, out of the model card's markdown."""
    text = description.replace("\r", "")
    marker = re.search(r"(?im)^\s*(description|purpose)\s*:\s*", text)
    if marker is not None and marker.group(1).lower() == "description":
        text = text[marker.end() :]
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [
            _LINK.sub(r"\1", line).replace("**", "").replace("__", "").strip()
            for line in block.split("\n")
        ]
        lines = [
            line
            for line in lines
            if line and not line.startswith(("#", "!", "|", "```")) and not _FIELD.match(line)
        ]
        plain = " ".join(lines).strip()
        if len(plain) >= 20 and not plain.lower().startswith(
            ("link to", "showcase", "please consider")
        ):
            paragraphs.append(plain)
    out = paragraphs[0] if paragraphs else ""
    return out if len(out) <= limit else out[: limit - 1].rsplit(" ", 1)[0] + "…"


def _variant(url: str) -> str:
    low = url.lower()
    return "fp16" if "fp16" in low else "fp32"


def onnx_files(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    files = []
    for r in resources:
        if r.get("platform") != "onnx" or not r.get("urls"):
            continue
        urls = [str(u) for u in r["urls"]]
        files.append(
            {
                "variant": _variant(urls[0]),
                "size": r.get("size"),
                "sha256": (r.get("sha256") or "").lower() or None,
                "urls": urls,
                # Tessera fetches only a URL that names the .onnx file itself; an archive, a
                # drive or a release page is for the person to open.
                "direct": urls[0].split("?")[0].lower().endswith(".onnx"),
            }
        )
    files.sort(key=lambda f: (f["variant"] != "fp32", not f["direct"]))  # fp32 runs everywhere
    return files


def images(raw: list[dict[str, Any]], limit: int = 3) -> list[dict[str, str]]:
    out = []
    for img in raw[:limit]:
        if img.get("type") == "paired" and img.get("SR"):
            out.append({"before": str(img.get("LR", "")), "after": str(img["SR"])})
        elif img.get("url"):
            out.append({"before": "", "after": str(img["url"])})
    return out


def build(
    cards: dict[str, dict[str, Any]],
    archs: dict[str, Any],
    tags: dict[str, Any],
    date: str,
    commit: str = "",
) -> dict[str, Any]:
    """The snapshot of `cards` (model id → OpenModelDB card)."""
    models = []
    for model_id in sorted(cards):
        card = cards[model_id]
        files = onnx_files(card.get("resources") or [])
        if not files:
            continue
        arch = str(card.get("architecture") or "")
        licence = card.get("license")
        licence = " AND ".join(licence) if isinstance(licence, list) else str(licence or "")
        models.append(
            {
                "id": model_id,
                "name": str(card.get("name") or model_id),
                "author": _author(card.get("author")),
                "purpose": purpose(str(card.get("description") or "")),
                "scale": int(card.get("scale") or 1),
                "architecture": str(archs.get(arch, {}).get("name", arch)),
                "licence": licence,
                "date": str(card.get("date") or ""),
                "tags": [str(tags.get(t, {}).get("name", t)) for t in card.get("tags") or []],
                "files": files,
                "images": images(card.get("images") or []),
                "page": f"https://openmodeldb.info/models/{model_id}",
            }
        )
    return {
        "version": SNAPSHOT_VERSION,
        "source": "https://github.com/OpenModelDB/open-model-database",
        "date": date,
        "commit": commit,
        "models_in_database": len(cards),
        "models": models,
    }


def _author(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value or "")
