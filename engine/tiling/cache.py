"""Tile outputs a preview made, kept for the next preview and for the full job.

A tile's output depends on the input file's version, the model's session (file version,
device, runtime), the frame, the tile plan (tile size, overlap, padding) and how the image's
channels go through the model (the passes). `PlanKey` is all of that; the cache holds the
tiles of one key at a time — a new input, model or setting drops the old ones — and at most
`limit` bytes (float32 outputs, about 3 MiB per 256-px tile at ×2), least recently used first
out, never a tile the preview in progress still needs (`pin`). The full job takes the tiles
it can use and runs only the others; what it took is gone from the cache.

Pure Python and numpy; the engine owns the one cache and uses it on its own thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.runtime.identity import FileIdentity
from engine.tiling.plan import TilePlan

__all__ = ["DEFAULT_LIMIT", "PlanKey", "TileCache", "TileSource", "file_version"]

DEFAULT_LIMIT = 96 << 20  # bytes: the tiles of a 1:1 view and its neighbours, at ×2 or ×4


def file_version(path: Path) -> Hashable:
    """Which version of an input file: its path and identity (engine/runtime/identity.py:
    size, times, inode). A file changed in place is another version, even with its mtime set
    back, so its old tiles are never reused."""
    return (str(Path(path).resolve()), FileIdentity.read(path))


@dataclass(frozen=True)
class PlanKey:
    source: Hashable  # file_version() of the input
    model: Hashable  # the session key (model file version, device, runtime)
    frame: int
    plan: TilePlan
    passes: tuple[int, ...]  # channels of each pass through the model


Outputs = tuple[np.ndarray, ...]  # one float32 H×W×C array per pass


class TileCache:
    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._items: OrderedDict[tuple[PlanKey, int], Outputs] = OrderedDict()
        self._pinned: set[tuple[PlanKey, int]] = set()
        self.nbytes = 0
        # The plan the last preview was made on: a job of that input and model keeps it even
        # when the tiles are gone, so what the preview showed is the product, bit for bit.
        self.planned: PlanKey | None = None

    def __len__(self) -> int:
        return len(self._items)

    @staticmethod
    def tile_bytes(plan: TilePlan, scale: int, passes: Sequence[int]) -> int:
        return plan.tile_h * scale * plan.tile_w * scale * sum(passes) * 4

    def capacity(self, plan: TilePlan, scale: int, passes: Sequence[int]) -> int:
        """How many tiles of this plan fit."""
        return self.limit // max(1, self.tile_bytes(plan, scale, passes))

    def keep_only(self, key: PlanKey) -> None:
        """Drop every tile of another key (a new input, model or setting); `key` is the plan
        previewed now."""
        self.planned = key
        for item in [k for k in self._items if k[0] != key]:
            self._remove(item)

    def indices(self, key: PlanKey) -> set[int]:
        return {index for k, index in self._items if k == key}

    def get(self, key: PlanKey, index: int) -> Outputs | None:
        item = (key, index)
        found = self._items.get(item)
        if found is not None:
            self._items.move_to_end(item)
        return found

    def take(self, key: PlanKey, index: int) -> Outputs | None:
        """The tile, removed from the cache (the full job uses it once)."""
        item = (key, index)
        found = self._items.get(item)
        if found is not None:
            self._remove(item)
        return found

    def put(self, key: PlanKey, index: int, outputs: Outputs) -> bool:
        """Keep a tile's outputs (the caller's arrays, not copied: never write them again).
        False when it cannot fit beside the pinned tiles."""
        item = (key, index)
        size = sum(o.nbytes for o in outputs)
        if item in self._items:
            self._remove(item)
        while self.nbytes + size > self.limit:
            victim = next((k for k in self._items if k not in self._pinned), None)
            if victim is None:
                return False
            self._remove(victim)
        self._items[item] = outputs
        self.nbytes += size
        return True

    def pin(self, key: PlanKey, indices: Iterable[int]) -> None:
        self._pinned = {(key, i) for i in indices}

    def unpin(self) -> None:
        self._pinned = set()

    def drop(self, key: PlanKey) -> None:
        for item in [k for k in self._items if k[0] == key]:
            self._remove(item)

    def clear(self) -> None:
        self._items.clear()
        self._pinned.clear()
        self.nbytes = 0
        self.planned = None

    def _remove(self, item: tuple[PlanKey, int]) -> None:
        outputs = self._items.pop(item)
        self.nbytes -= sum(o.nbytes for o in outputs)


@dataclass(frozen=True)
class TileSource:
    """The cache as one input of one request sees it: which file version and which session."""

    cache: TileCache
    source: Hashable
    model: Hashable

    def key(self, frame: int, plan: TilePlan, passes: Sequence[int]) -> PlanKey:
        return PlanKey(self.source, self.model, frame, plan, tuple(passes))

    def made(self, frame: int, plan: TilePlan) -> int:
        """How many tiles of this frame on `plan` are in the cache."""
        return sum(
            1
            for k, _index in self.cache._items
            if (k.source, k.model, k.frame, k.plan) == (self.source, self.model, frame, plan)
        )

    def cached_plan(self, frame: int) -> TilePlan | None:
        """The plan a preview of this frame was made on, if there was one: a job that adopts
        it gives the preview's pixels and runs only the tiles the preview did not."""
        keys = [k for k, _index in self.cache._items]
        if self.cache.planned is not None:
            keys.append(self.cache.planned)
        for key in keys:
            if (key.source, key.model, key.frame) == (self.source, self.model, frame):
                return key.plan
        return None
