"""`python -m engine models list|download ID|add PATH|verify PATH|fetch-starter|browse|get ID`.

Exit codes: 0 ok, 2 usage, 3 disk full, 4 bad model / hash mismatch / HTTP error,
5 network unreachable, 130 interrupted (SIGINT), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from engine.cancel import Terminated
from engine.errors import EngineError, ModelError
from engine.models.catalog import CatalogEntry, Family, Source, sha256_file
from engine.models.contracts import Contract
from engine.models.inventory import ModelInventory, discover, install_model, resolve_model
from engine.models.openmodeldb import DEFAULT_REFRESH_URL
from engine.runtime.sessions import check_loads
from engine.settings import default_models_dir, packages_dir

if TYPE_CHECKING:
    from engine.models.browse import BrowseEntry

EXIT_OK, EXIT_USAGE, EXIT_MODEL, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 2, 4, 130, 143


TIMEOUT_MAX_S = 3600.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= TIMEOUT_MAX_S):
        raise argparse.ArgumentTypeError(
            f"--timeout takes seconds, more than 0 and at most {TIMEOUT_MAX_S:g}; not {text!r}"
        )
    return value


def add_models_parser(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser(
        "models",
        help="list, download, add and verify models",
        description="Manage the models folder (--models-dir, else TESSERA_MODELS_DIR, else the "
        "user's data folder).",
    )
    models.add_argument("--models-dir", type=Path, default=None, help="the models folder")
    models.set_defaults(handler=run_models_command)
    # Accept --models-dir after the subcommand too; SUPPRESS keeps the one given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--models-dir", type=Path, default=argparse.SUPPRESS, help="the models folder"
    )
    sub = models.add_subparsers(dest="models_command", metavar="COMMAND")
    p = sub.add_parser("list", parents=[common], help="installed, missing and other models")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p = sub.add_parser("download", parents=[common], help="download a catalog model")
    p.add_argument("id", metavar="ID", help="catalog id (see `models list`)")
    p.add_argument(
        "--timeout", type=_seconds, default=30.0, help="network timeout in seconds (up to 3600)"
    )
    p = sub.add_parser("add", parents=[common], help="validate an .onnx file and copy it in")
    p.add_argument("path", type=Path, metavar="PATH")
    p.add_argument("--family", choices=[f.value for f in Family], help="require this family")
    p = sub.add_parser("verify", parents=[common], help="check a model file against its contract")
    p.add_argument("path", metavar="PATH|ID")
    p.add_argument("--family", choices=[f.value for f in Family], help="require this family")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_browse_parsers(sub, common)
    sub.add_parser(
        "fetch-starter",
        parents=[common],
        help="build the offline starter models (Real-ESRGAN, U²-Net-p)",
    )


def _models_dir(args: argparse.Namespace) -> Path:
    given: Path | None = getattr(args, "models_dir", None)
    if given is not None:
        return given.expanduser()
    return default_models_dir()  # honours TESSERA_MODELS_DIR


def run_models_command(args: argparse.Namespace) -> int:
    command = getattr(args, "models_command", None)
    if command is None:
        print(
            "error: give a models command: list, download ID, add PATH, verify PATH, "
            "fetch-starter, browse, get ID",
            file=sys.stderr,
        )
        return EXIT_USAGE
    models_dir = _models_dir(args)
    try:
        if command == "list":
            return _list(models_dir, args.json)
        if command == "download":
            return _download(args.id, models_dir, args.timeout)
        if command == "add":
            return _add(args.path, models_dir, args.family)
        if command == "verify":
            return _verify(args.path, models_dir, args.family, args.json)
        if command == "fetch-starter":
            return _fetch_starter(models_dir)
        if command == "browse":
            return _browse(args, models_dir)
        if command == "get":
            return _get(args.id, models_dir, args.accept_license, args.timeout)
    except BrokenPipeError:
        # The reader went away (`| head`): the listing it wanted was printed; say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt as e:
        print("\nStopped.", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code  # usage 2, disk 3, model/HTTP/hash 4, network 5, cancelled 130
    print(f"error: unknown models command {command!r}", file=sys.stderr)
    return EXIT_USAGE


def _mb(size: int | None, approx: bool = False) -> str:
    if size is None:
        return "size unknown"
    return f"{'~' if approx else ''}{size / 1e6:,.1f} MB"


def _entry_json(entry: CatalogEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "family": entry.family.value,
        "name": entry.name,
        "file": entry.file,
        "source": entry.source.value,
        "licence": entry.licence,
        "licence_note": entry.licence_note,
        "homepage": entry.homepage,
    }


def contract_json(contract: Contract) -> dict[str, Any]:
    return {
        "family": contract.family.value,
        "image_input": contract.image_input,
        "inputs": [{"name": t.name, "dtype": t.dtype, "shape": t.shape} for t in contract.inputs],
        "outputs": [{"name": t.name, "dtype": t.dtype, "shape": t.shape} for t in contract.outputs],
        "scale": contract.scale,
        "layout": contract.layout.value,
        "fp16": contract.fp16,
        "channels": contract.channels,
        "multiple_of": contract.multiple_of,
        "fixed_size": contract.fixed_size,
        "views": contract.views,
        "external_data": list(contract.external_data),
    }


def inventory_json(inv: ModelInventory) -> dict[str, Any]:
    return {
        "models_dir": str(inv.models_dir),
        "problem": inv.problem,
        "installed": [
            {**_entry_json(m.entry), "path": str(m.path), "size": m.size, "problem": m.problem}
            for m in inv.installed
        ],
        "missing": [
            {
                **_entry_json(e),
                "url": e.url,
                "get": e.how_to_get,
                "size": e.size,
                "approx_size": e.approx_size,
            }
            for e in inv.missing
        ],
        "unknown": [
            {
                "file": u.path.name,
                "path": str(u.path),
                "size": u.size,
                "family": u.family.value if u.family else None,
                "contract": contract_json(u.contract) if u.contract else None,
                "reason": u.reason,
            }
            for u in inv.unknown
        ],
    }


def _list(models_dir: Path, as_json: bool) -> int:
    inv = discover(models_dir)
    if inv.problem:
        print(f"warning: {inv.problem}", file=sys.stderr)
    if as_json:
        print(json.dumps(inventory_json(inv), indent=2))
        return EXIT_OK
    print(f"Models folder: {models_dir}")
    print("\nInstalled:" if inv.installed else "\nInstalled: none")
    for m in inv.installed:
        e = m.entry
        print(f"  {e.id:28} {e.family.value:10} {e.name}  [{_mb(m.size)}]  {e.licence_text}")
        if m.problem:
            print(f"      problem: {m.problem}")
    if inv.missing:
        print("\nMissing:")
    for e in inv.missing:
        size = _mb(e.size) if e.size is not None else _mb(e.approx_size, approx=True)
        print(f"  {e.id:28} {e.family.value:10} {e.name}  [{size}]  {e.licence_text}")
        where = "fetch-starter" if e.source is Source.STARTER else e.url
        tail = f"   ({where})" if e.source is Source.STARTER or e.downloadable else ""
        print(f"      get it: {e.how_to_get}{tail}")
    if inv.unknown:
        print("\nOther .onnx files:")
    for u in inv.unknown:
        if u.contract is not None:
            print(
                f"  {u.path.name:28} {u.contract.describe()}  [{_mb(u.size)}]  licence: "
                "not in the catalog, check its source"
            )
        else:
            print(f"  {u.path.name:28} refused: {u.reason}")
    return EXIT_OK


class _ProgressBar:
    """A plain `\\r` bar on stderr, redrawn at most ten times a second."""

    def __init__(self, label: str, stream: TextIO) -> None:
        self.label = label
        self.stream = stream
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self.last < 0.1 and (total is None or done < total):
            return
        self.last = now
        if total:
            frac = min(done / total, 1.0)
            bar = "#" * int(frac * 30)
            text = f"{self.label} [{bar:30}] {frac:6.1%} {done / 1e6:,.1f}/{total / 1e6:,.1f} MB"
        else:
            text = f"{self.label} {done / 1e6:,.1f} MB"
        self.stream.write("\r" + text)
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def _download(entry_id: str, models_dir: Path, timeout: float) -> int:
    from engine.models.downloads import download_model  # urllib and friends only when downloading

    bar = _ProgressBar(entry_id, sys.stderr)

    def waiting() -> None:
        print(f"{entry_id}: waiting for another download of it to finish…", file=sys.stderr)

    try:
        path = download_model(entry_id, models_dir, progress=bar, timeout=timeout, waiting=waiting)
    finally:
        bar.close()
    print(f"{entry_id}: {path}")
    return EXIT_OK


def _add_browse_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "browse",
        parents=[common],
        help="OpenModelDB's ONNX models (permissive licences first)",
        description="The model browser's catalogue: a snapshot of OpenModelDB shipped with "
        "Tessera, or your refreshed copy (--refresh).",
    )
    p.add_argument("--family", choices=[f.value for f in Family], help="only this family")
    p.add_argument("--scale", type=int, help="only this scale (1: restore, no upscale)")
    p.add_argument("--search", default="", help="words in the name, purpose, author or tags")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--refresh",
        nargs="?",
        const=DEFAULT_REFRESH_URL,
        metavar="URL",
        help=f"read the catalogue again from OpenModelDB first (default {DEFAULT_REFRESH_URL})",
    )
    p = sub.add_parser("get", parents=[common], help="download a model of `models browse`")
    p.add_argument("id", metavar="ID", help="its id in `models browse`")
    p.add_argument(
        "--accept-license",
        action="store_true",
        help="accept a non-commercial (or missing) licence for this model",
    )
    p.add_argument(
        "--timeout", type=_seconds, default=30.0, help="network timeout in seconds (up to 3600)"
    )


def _browse_json(entry: BrowseEntry) -> dict[str, Any]:
    chosen = entry.file
    return {
        "id": entry.id,
        "name": entry.name,
        "author": entry.author,
        "purpose": entry.purpose,
        "what": entry.what,
        "family": entry.family.value,
        "scale": entry.scale,
        "architecture": entry.architecture,
        "licence": entry.licence,
        "licence_kind": entry.licence_kind.value,
        "needs_acceptance": entry.needs_acceptance,
        "size": entry.size,
        "sha256": chosen.sha256 if chosen else None,
        "urls": list(chosen.urls) if chosen else [u for f in entry.files for u in f.urls],
        "downloadable": chosen is not None,
        "images": [{"before": i.before, "after": i.after} for i in entry.images],
        "tags": list(entry.tags),
        "date": entry.date,
        "page": entry.page,
    }


def _browse(args: argparse.Namespace, models_dir: Path) -> int:
    from engine.models.browse import browse, load_snapshot, refresh_snapshot

    if args.refresh:
        fresh = refresh_snapshot(models_dir, args.refresh, timeout=30.0)
        print(
            f"Catalogue refreshed: {len(fresh.entries)} ONNX models ({fresh.date})", file=sys.stderr
        )
    snapshot = load_snapshot(models_dir)
    family = Family(args.family) if args.family else None
    found = browse(snapshot, family=family, scale=args.scale, search=args.search)
    if args.json:
        out = {"date": snapshot.date, "source": snapshot.source, "count": len(found)}
        print(json.dumps({**out, "models": [_browse_json(e) for e in found]}, indent=2))
        return EXIT_OK
    print(f"OpenModelDB ONNX models, catalogue of {snapshot.date}: {len(found)} shown")
    for e in found:
        mark = "" if not e.needs_acceptance else "  [licence to accept]"
        print(
            f"  {e.id:44} {e.what:11} {e.architecture:12} [{_mb(e.size)}]  {e.licence_text}{mark}"
        )
        if e.purpose:
            print(f"      {e.purpose[:110]}")
        print(f"      get it: {e.how_to_get(models_dir)}")
    return EXIT_OK


def _get(model_id: str, models_dir: Path, accept: bool, timeout: float) -> int:
    from engine.models.browse import download_browsed, load_snapshot

    entry = load_snapshot(models_dir).get(model_id)
    bar = _ProgressBar(entry.id, sys.stderr)
    try:
        path = download_browsed(
            entry, models_dir, accept_license=accept, progress=bar, timeout=timeout
        )
    finally:
        bar.close()
    print(f"{entry.id}: {path}")
    return EXIT_OK


def _add(path: Path, models_dir: Path, family: str | None) -> int:
    ref = install_model(path, models_dir, Family(family) if family else None)
    print(f"Added {ref.path.name} ({ref.contract.describe()}) to {models_dir}")
    return EXIT_OK


def _verify(target: str, models_dir: Path, family: str | None, as_json: bool) -> int:
    ref = resolve_model(target, models_dir)
    if family is not None and ref.family is not Family(family):
        raise ModelError(f"{ref.path.name} is a {ref.family.value} model, not {family}.")
    check_loads(ref.path)  # the contract holds, but can ONNX Runtime load it?
    sha_ok: bool | None = None
    entry = ref.entry
    mismatch = ""
    if entry is not None and entry.sha256 is not None:
        sha_ok = sha256_file(ref.path) == entry.sha256
        mismatch = (
            f"{ref.path.name} does not match the catalog's sha256: damaged or another "
            f"version; `{entry.how_to_get}` replaces it."
        )
    if as_json:
        print(
            json.dumps(
                {
                    "path": str(ref.path),
                    "id": ref.id,
                    "catalog": entry is not None,
                    "sha256_ok": sha_ok,
                    "contract": contract_json(ref.contract),
                },
                indent=2,
            )
        )
    else:
        print(f"{ref.path}: {ref.contract.describe()}")
        print("  inputs:  " + ", ".join(t.describe() for t in ref.contract.inputs))
        print("  outputs: " + ", ".join(t.describe() for t in ref.contract.outputs))
        if entry is not None:
            print(f"  catalog: {entry.id} — {entry.name}, {entry.licence_text}")
            if entry.unverified:
                print(f"  not yet verified on real weights: {', '.join(entry.unverified)}")
    if sha_ok is False:
        print(f"error: {mismatch}", file=sys.stderr)
        return EXIT_MODEL
    return EXIT_OK


def _fetch_starter(models_dir: Path) -> int:
    try:
        from engine.models.starter import fetch_starter
    except ModuleNotFoundError as e:
        if e.name != "engine.models.starter":
            raise
        print(
            "error: this build has no starter-model builder (engine/starter.py).", file=sys.stderr
        )
        return 1

    def say(message: str) -> None:
        print(message, file=sys.stderr)

    for model in fetch_starter(models_dir, cache_dir=packages_dir(), progress=say):
        print(f"{model.id}: {model.path}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.models.cli …` for use before engine/cli.py wires `models` in."""
    parser = argparse.ArgumentParser(prog="python -m engine")
    sub = parser.add_subparsers(dest="command", required=True)
    add_models_parser(sub)
    args = parser.parse_args(argv)
    return run_models_command(args)


if __name__ == "__main__":
    sys.exit(main())
