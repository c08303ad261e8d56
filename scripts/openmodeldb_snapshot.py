"""Build Tessera's OpenModelDB catalogue snapshot from a checkout of open-model-database.

    git clone https://github.com/OpenModelDB/open-model-database omdb
    python scripts/openmodeldb_snapshot.py omdb resources/models/openmodeldb.json

Reads only the checkout (data/models/*.json, data/architectures.json, data/tags.json): no
network. Keeps the models that publish an ONNX file (that is what Tessera runs), with what the
browser shows: name, author, what it is for, scale, architecture, licence, the ONNX files
(size, SHA-256, URLs), sample pictures and tags. The snapshot's date is the checkout's last
commit (`--date` overrides it, for a checkout without its .git).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.models.openmodeldb import build  # noqa: E402


def read_checkout(checkout: Path, date: str | None, commit: str | None) -> dict[str, Any]:
    data = checkout / "data"
    cards = {
        p.stem: json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((data / "models").glob("*.json"))
    }
    archs = json.loads((data / "architectures.json").read_text(encoding="utf-8"))
    tags = json.loads((data / "tags.json").read_text(encoding="utf-8"))
    if date is None or commit is None:
        got_date, got_commit = _git_head(checkout)
        date = date or got_date
        commit = commit or got_commit
    return build(cards, archs, tags, date or "", commit or "")


def _git_head(checkout: Path) -> tuple[str | None, str | None]:
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), "log", "-1", "--format=%cs %H"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return (out[0], out[1]) if len(out) == 2 else (None, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of open-model-database")
    parser.add_argument("out", type=Path, help="the snapshot to write")
    parser.add_argument("--date", help="the snapshot's date (YYYY-MM-DD), else the last commit's")
    parser.add_argument("--commit", help="the checkout's commit, else read with git")
    args = parser.parse_args(argv)
    if not (args.checkout / "data" / "models").is_dir():
        print(f"error: {args.checkout} has no data/models folder", file=sys.stderr)
        return 2
    snapshot = read_checkout(args.checkout, args.date, args.commit)
    text = json.dumps(snapshot, indent=1, ensure_ascii=False) + "\n"
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(f"{len(snapshot['models'])} ONNX models of {snapshot['models_in_database']} → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
