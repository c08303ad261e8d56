"""Models on disk: resolving an id or a path, discovering the models folder, installing."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelError, ResourceError, UsageError
from engine.files import LIVE, partial_name, sweep_leftovers
from engine.models.catalog import CatalogEntry, Family, load_catalog, sha256_file
from engine.models.contracts import Contract, ModelSpec, validate_model, with_entry
from engine.runtime.sessions import check_loads
from engine.settings import bundled_models_dir

# ---------------------------------------------------------------------------------------------
# The models folder

_CHOOSE = "Point --models-dir or TESSERA_MODELS_DIR at another folder."


def _not_utf8(path: Path) -> bool:
    """True for a path with bytes that are not UTF-8 (kept as surrogates by Python), which
    ONNX Runtime cannot open on Linux and macOS."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _utf8_path_error(path: Path, what: str) -> UsageError:
    shown = os.fsencode(path).decode("utf-8", "backslashreplace")
    return UsageError(
        f"The path of the {what} ({shown}) has bytes that are not UTF-8 text, which ONNX Runtime "
        "cannot open. Rename the folder or file, or point --models-dir or TESSERA_MODELS_DIR "
        "at another folder."
    )


def ensure_models_dir(models_dir: Path) -> Path:
    """The models folder, created if needed and checked before anything is written into it:
    one line a person can act on when it is a file, cannot be created, or cannot be written."""
    if _not_utf8(models_dir):
        raise _utf8_path_error(models_dir, "models folder")
    if models_dir.exists() and not models_dir.is_dir():
        raise UsageError(f"The models folder {models_dir} is a file, not a folder. {_CHOOSE}")
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise ResourceError(
                f"The disk is full: the models folder {models_dir} cannot be created."
            ) from e
        if isinstance(e, FileExistsError | NotADirectoryError):
            reason = "a file is in the way of one of its folders"
        else:
            reason = e.strerror or str(e)
        raise UsageError(
            f"The models folder {models_dir} cannot be created ({reason}). {_CHOOSE}"
        ) from e
    if not os.access(models_dir, os.W_OK | os.X_OK):
        raise UsageError(f"The models folder {models_dir} cannot be written to. {_CHOOSE}")
    return models_dir


def _missing_model(path: Path) -> ModelError:
    """Why `path` is not a model file: missing, a folder, a FIFO, a link loop, unreadable."""
    try:
        info = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return ModelError(f"Model file {path} is a symbolic link that loops back on itself.")
        if isinstance(e, PermissionError):
            return ModelError(f"Model file {path} cannot be read (permission denied).")
        if os.path.islink(path):
            return ModelError(f"Model file {path} is a symbolic link to a file that is gone.")
        return ModelError(f"Model file {path} does not exist.")
    if stat.S_ISDIR(info.st_mode):
        return ModelError(f"Model file {path} is a folder, not a model file.")
    return ModelError(
        f"Model file {path} is not a regular file (a pipe, socket or device); give an .onnx file."
    )


# ---------------------------------------------------------------------------------------------
# Resolving, discovering and installing


def _entry_for_file(name: str) -> CatalogEntry | None:
    return next((e for e in load_catalog().values() if e.file == name), None)


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _installed_path(entry: CatalogEntry, models_dir: Path) -> Path | None:
    """The user's copy of a catalog model, else the copy shipped inside a packaged build."""
    for folder in (models_dir, bundled_models_dir()):
        if folder is not None and (folder / entry.file).is_file():
            return folder / entry.file
    return None


def resolve_model(id_or_path: str, models_dir: Path) -> ModelSpec:
    """A catalog id, a file in the models folder (with or without .onnx) or a path → ModelSpec."""
    catalog = load_catalog()
    entry = catalog.get(id_or_path)
    if entry is not None:
        path = _installed_path(entry, models_dir)
        if path is not None and _not_utf8(path):
            raise _utf8_path_error(path, "model")
        if path is None:
            raise ModelError(
                f"Model {entry.id} ({entry.name}) is not installed in {models_dir}; get it with "
                f"`{entry.how_to_get}`."
            )
        contract = validate_model(path, entry.family)
        return ModelSpec(path, entry, with_entry(contract, entry))
    given = Path(id_or_path).expanduser()
    candidates = [given]
    if not given.is_absolute() and len(given.parts) == 1:
        candidates += [models_dir / id_or_path, models_dir / f"{id_or_path}.onnx"]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        if len(given.parts) > 1 or given.suffix.lower() == ".onnx":
            raise _missing_model(given)
        odd = next((c for c in candidates if os.path.lexists(c)), None)
        if odd is not None:  # there is something by that name, just not a model file
            raise _missing_model(odd)
        raise ModelError(
            f"Unknown model {id_or_path!r}: it is not a catalog id and no such file is in "
            f"{models_dir}. Known ids: {', '.join(sorted(catalog))}; or give the path of an "
            ".onnx file."
        )
    path = found
    if _not_utf8(path):
        raise _utf8_path_error(path, "model")
    entry = _entry_for_file(path.name) if _same_dir(path.parent, models_dir) else None
    contract = validate_model(path, entry.family if entry else None)
    return ModelSpec(path, entry, with_entry(contract, entry))


@dataclass(frozen=True)
class InstalledModel:
    entry: CatalogEntry
    path: Path
    size: int
    problem: str | None = None  # e.g. a size that differs from the catalog's


@dataclass(frozen=True)
class UnknownModel:
    """An .onnx file in the models folder that is not in the catalog."""

    path: Path
    size: int
    contract: Contract | None
    reason: str | None = None  # why it was refused, when contract is None

    @property
    def family(self) -> Family | None:
        return self.contract.family if self.contract else None


@dataclass(frozen=True)
class ModelInventory:
    models_dir: Path
    installed: tuple[InstalledModel, ...]
    missing: tuple[CatalogEntry, ...]  # each says where to get it: entry.how_to_get / .url
    unknown: tuple[UnknownModel, ...]
    problem: str | None = None  # why the folder could not be read (then every model is missing)


def _folder_problem(models_dir: Path) -> str | None:
    """Why the models folder cannot be listed, when it is there but unusable (a symlink loop,
    a link to nothing, no permission): every model would show as missing without a word."""
    try:
        info = models_dir.stat()
    except FileNotFoundError:
        if os.path.islink(models_dir):
            return f"the models folder {models_dir} is a link to nothing; {_CHOOSE}"
        return None  # not made yet: the first install creates it
    except OSError as e:
        reason = "a loop of symbolic links" if e.errno == errno.ELOOP else e.strerror or str(e)
        return f"the models folder {models_dir} cannot be read ({reason}). {_CHOOSE}"
    if not stat.S_ISDIR(info.st_mode):
        return f"the models folder {models_dir} is a file, not a folder. {_CHOOSE}"
    return None


def discover(models_dir: Path) -> ModelInventory:
    """What is in the models folder: catalog models present or missing, and other .onnx files
    (each validated: its family, or why it was refused). Only the folder's top level."""
    catalog = load_catalog()
    files: dict[str, Path] = {}
    problem = _folder_problem(models_dir)
    if problem is None and models_dir.is_dir():
        try:
            for p in sorted(models_dir.iterdir()):
                if p.suffix.lower() == ".onnx" and not p.name.startswith(".") and p.is_file():
                    files[p.name] = p
        except OSError as e:
            problem = f"the models folder {models_dir} cannot be read ({e.strerror or e})."
    installed: list[InstalledModel] = []
    missing: list[CatalogEntry] = []
    bundled = bundled_models_dir()
    for entry in catalog.values():
        path = files.pop(entry.file, None)
        if path is None and bundled is not None and (bundled / entry.file).is_file():
            path = bundled / entry.file
        if path is None:
            missing.append(entry)
            continue
        size = path.stat().st_size
        problem = None
        if entry.size is not None and size != entry.size:
            problem = (
                f"{size} bytes where the catalog says {entry.size}: damaged or another "
                f"version; `{entry.how_to_get}` replaces it"
            )
        installed.append(InstalledModel(entry, path, size, problem))
    unknown: list[UnknownModel] = []
    for path in files.values():
        try:
            unknown.append(UnknownModel(path, path.stat().st_size, validate_model(path)))
        except ModelError as e:
            unknown.append(UnknownModel(path, path.stat().st_size, None, str(e)))
    return ModelInventory(models_dir, tuple(installed), tuple(missing), tuple(unknown), problem)


def _same_content(a: Path, b: Path) -> bool:
    return a.stat().st_size == b.stat().st_size and sha256_file(a) == sha256_file(b)


def _copy_new(src: Path, dest: Path) -> None:
    """Copy src to dest atomically: a temp file in dest's folder written through its own
    descriptor, then a rename that never replaces a file (engine/files.py), on any file
    system. A different file already at dest is never replaced; an identical one is fine."""
    tmp = dest.with_name(partial_name(dest.name))  # with our PID: a killed copy is swept
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)  # external data may sit in a subfolder
        sweep_leftovers(dest.parent)
        with open(src, "rb") as fin, os.fdopen(LIVE.create(tmp), "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            fout.flush()
            os.fsync(fout.fileno())
        try:
            LIVE.place(tmp, dest)
        except FileExistsError:
            if not _same_content(src, dest):
                raise ModelError(
                    f"A different file named {dest.name} is already in {dest.parent}."
                ) from None
    except OSError as e:
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise ResourceError(
                f"Not enough disk space in {dest.parent} to add {src.name} "
                f"({src.stat().st_size / 1e6:.1f} MB); nothing was added."
            ) from e
        raise UsageError(f"Cannot copy {src} into {dest.parent}: {e.strerror or e}.") from e
    finally:
        LIVE.discard(tmp)  # already gone once placed; never raises over the real error


def install_model(path: Path, models_dir: Path, family: Family | None = None) -> ModelSpec:
    """Validate an .onnx file and copy it (and its external data) into the models folder.

    Custom models of any family are welcome; a file named like a catalog model must be that
    model. An identical file already there is fine; a different one is never overwritten.
    """
    src = Path(path).expanduser()
    if not src.is_file():
        raise _missing_model(src)
    if src.suffix.lower() != ".onnx":
        raise UsageError(f"{src.name} does not end in .onnx; only ONNX models can be added.")
    contract = validate_model(src, family)
    check_loads(src)  # a model ONNX Runtime cannot load is never added
    entry = _entry_for_file(src.name)
    if entry is not None:
        if entry.family is not contract.family:
            raise ModelError(
                f"{src.name} is named like the catalog's {entry.name} ({entry.family.value}) but "
                f"is a {contract.family.value} model; rename it to add it as your own."
            )
        if entry.sha256 is not None and sha256_file(src) != entry.sha256:
            raise ModelError(
                f"{src.name} is named like the catalog's {entry.name} but its content differs; "
                "rename it to add it as your own."
            )
    dest = models_dir / src.name
    ref = ModelSpec(dest, entry, with_entry(contract, entry))
    if dest.exists() and _same_dir(src.parent, models_dir):
        return ref  # already in place
    ensure_models_dir(models_dir)
    pairs = [(src.parent / loc, models_dir / loc) for loc in contract.external_data]
    pairs.append((src, dest))
    for s, d in pairs:  # check everything before copying anything
        if d.exists() and not _same_content(s, d):
            raise ModelError(
                f"A different file named {d.name} is already in {d.parent}; rename yours or "
                "remove that one first."
            )
    for s, d in pairs:  # the model last, so it never appears before its data
        if not d.exists():
            _copy_new(s, d)
    return ref
