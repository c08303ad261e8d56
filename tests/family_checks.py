"""Checks every image-analysis family must pass (M1, M2, M4, multi-frame, CLI), and readers
for their products. Used by test_background.py, test_depth.py and test_geometry.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from engine.api import Engine
from engine.io.image import DecodedImage
from engine.io.reading import load_image
from engine.requests import Operation, OperationRequest, ProductKind, Result
from engine.runtime.providers import CUDA_EP
from engine.settings import EngineSettings
from tests.engine_helpers import Recorder, SessionProxy, cuda_shrink
from tests.processes import engine_cli

ROOT = Path(__file__).resolve().parent.parent
GIF_DURATIONS = (80, 120, 200)
# ImageNet normalisation as the model cards state it: the tests' own, not the engine's copy.
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


class FeedLog:
    """Session wrap that records every feed's shape, dtype and (for tiny ones) value; the
    session stays on the CPU."""

    def __init__(self) -> None:
        self.feeds: list[dict[str, tuple[tuple[int, ...], str, object]]] = []

    def __call__(self, session: Any, key: object) -> Any:
        log = self.feeds

        class Logged(SessionProxy):
            def before_run(self, feeds: dict[str, np.ndarray], run_options: Any) -> Any:
                log.append(
                    {
                        k: (v.shape, str(v.dtype), v.tolist() if v.size <= 4 else None)
                        for k, v in feeds.items()
                    }
                )
                return run_options

        return Logged(session)


def request(
    op: Operation, model: Path, inputs: list[Path], out: Path, **kw: object
) -> OperationRequest:
    return OperationRequest(op, str(model), tuple(inputs), output_dir=out, **kw)  # type: ignore[arg-type]


def run(op: Operation, model: Path, inputs: list[Path], out: Path, **kw: object) -> Result:
    engine = Engine(EngineSettings(models_dir=model.parent))
    result = engine.run(request(op, model, inputs, out, **kw))
    assert result.ok, result.failures
    return result


def product(result: Result, kind: ProductKind, index: int = 0) -> Path:
    paths = [p.path for p in result.products if p.kind is kind]
    assert paths, f"no {kind.value} product in {[p.path.name for p in result.products]}"
    return paths[index]


def read(path: Path) -> DecodedImage:
    return load_image(path, 1 << 30)


def read_tiff(path: Path) -> list[np.ndarray]:
    pages = []
    with Image.open(path) as im:
        for i in range(getattr(im, "n_frames", 1)):
            im.seek(i)
            pages.append(np.asarray(im, dtype=np.float32).copy())
    return pages


def varied_gif(path: Path, width: int = 24, height: int = 16) -> Path:
    """A 3-frame GIF (durations GIF_DURATIONS) whose frames differ in every product: a ramp that
    darkens frame by frame, with a white block that moves.

    (gif3's frames give identical masks and normal maps, and write_image merges identical
    consecutive frames: see the report to the lead.)"""
    frames = []
    x = np.arange(width)[None, :, None] * 4 + np.arange(height)[:, None, None] * 2
    for i in range(len(GIF_DURATIONS)):
        arr = np.clip(x + np.array([20, 40, 60]) - 15 * i, 0, 230).astype(np.uint8)
        arr = np.broadcast_to(arr, (height, width, 3)).copy()
        arr[: height // 2, 4 * i : 4 * i + width // 3] = 255
        frames.append(Image.fromarray(arr, "RGB"))
    frames[0].save(
        path, save_all=True, append_images=frames[1:], duration=list(GIF_DURATIONS), loop=0
    )
    return path


def check_m1_session_reused(op: Operation, model: Path, image: Path, tmp_path: Path) -> None:
    engine = Engine(EngineSettings(models_dir=model.parent))
    r1 = engine.run(request(op, model, [image], tmp_path / "m1"))
    first = engine.sessions.entries()[0].session
    r2 = engine.run(request(op, model, [image], tmp_path / "m1"))
    assert r1.ok and r2.ok
    assert (r1.sessions_created, r2.sessions_created, r2.sessions_reused) == (1, 0, 1)
    assert engine.sessions.entries()[0].session is first and len(engine.sessions) == 1


def check_m2_only_the_last_run_shrinks(
    op: Operation, model: Path, image: Path, gif: Path, tmp_path: Path
) -> None:
    recorder = Recorder(CUDA_EP)
    engine = Engine(EngineSettings(models_dir=model.parent), session_wrap=recorder)
    single = engine.run(
        request(op, model, [image], tmp_path / "m2", device="gpu:0", runtime="cuda")
    )
    # Exactly one shrink, at the request's final run. That is the one run of the operation when
    # its output can be kept out of the arena (shapes the graph states, or seen before);
    # otherwise a small hand-back run after it (a first one learns its output shapes).
    assert single.ok and single.shrinks == 1 and single.runs == len(recorder.log)
    assert recorder.log[-1] == cuda_shrink() and set(recorder.log[:-1]) <= {None}
    assert len(recorder.log) in (1, 3)
    recorder.log.clear()
    frames = engine.run(request(op, model, [gif], tmp_path / "m2", device="gpu:0", runtime="cuda"))
    assert frames.ok and frames.runs == 3 and frames.shrinks == 1
    assert recorder.log == [None, None, cuda_shrink()]


def check_m4_products_identical(
    op: Operation, model: Path, inputs: list[Path], tmp_path: Path, **kw: object
) -> None:
    # "plain": no hand-back at all, neither GPU (a CPU session) nor CPU (keep_cpu_arena).
    plain = Engine(EngineSettings(models_dir=model.parent, keep_cpu_arena=True)).run(
        request(op, model, inputs, tmp_path / "plain", **kw)
    )
    cleaned = Engine(EngineSettings(models_dir=model.parent), session_wrap=Recorder(CUDA_EP)).run(
        request(op, model, inputs, tmp_path / "cleaned", device="gpu:0", runtime="cuda", **kw)
    )
    assert plain.ok and cleaned.ok
    # The hand-back may add small runs after the operation's own; the products are the same.
    assert cleaned.shrinks == 1 and plain.shrinks == 0 and cleaned.runs >= plain.runs
    assert len(plain.products) == len(cleaned.products) > 0
    for a, b in zip(plain.products, cleaned.products, strict=True):
        assert (a.path.name, a.kind, a.frames) == (b.path.name, b.kind, b.frames)
        assert a.path.read_bytes() == b.path.read_bytes(), a.path.name


def check_gif_gives_animated_products(result: Result, kinds: set[ProductKind]) -> None:
    """Image products of a 3-frame GIF: one 3-frame file with the GIF's durations."""
    for kind in kinds:
        path = product(result, kind)
        if path.suffix == ".tif":
            assert len(read_tiff(path)) == 3, path.name
            continue
        decoded = read(path)
        assert len(decoded.frames) == 3, path.name
        assert decoded.meta.durations == GIF_DURATIONS, path.name


def check_cli(operation: str, image: Path, model: Path, out: Path, expected: set[str]) -> None:
    p = engine_cli("run", operation, image, "--model", model, "--out", out, "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    kinds = {item["kind"] for item in data["products"]}
    assert kinds == expected
    assert all(Path(item["path"]).is_file() for item in data["products"])
    assert data["runs"] >= 1 and data["shrinks"] == 1 and not data["failures"]
    memory = data["memory"]
    assert set(memory) == {"rss_after_load", "rss_peak", "rss_after"}
    assert all(isinstance(v, int) and v > 0 for v in memory.values())
    assert memory["rss_peak"] >= memory["rss_after_load"]
    assert memory["rss_after"] - memory["rss_after_load"] <= 48 << 20  # handed back (M11)
