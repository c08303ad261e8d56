"""`tessera --self-test`: one real upscale with a bundled starter model, no screen needed.

It checks what an installed copy needs to work: the engine and onnxruntime load, a starter
model is found (the bundle's own first, then the user's models folder), the upscale runs on
the CPU, the product has the right size and content, and Qt starts on the offscreen platform.
Prints one line; returns 0, or non-zero with the reason on stderr.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PREFERRED_MODEL = "realesrgan-animevideov3-x2.onnx"  # 2.5 MB and the fastest starter upscaler
WIDTH, HEIGHT = 64, 48
TIMEOUT_MS = 300_000  # a slow machine's first load and run
MAX_MEAN_DIFF = 30.0  # levels (of 255) from a bicubic resize: an upscaler stays close to it


class SelfTestError(Exception):
    pass


def model_dirs() -> list[Path]:
    from engine.settings import bundled_models_dir, default_models_dir

    dirs = [bundled_models_dir(), default_models_dir()]
    return [d for d in dirs if d is not None]


def find_model(dirs: Sequence[Path]) -> Path | None:
    """The preferred starter upscaler in the first folder that has one, else any Real-ESRGAN."""
    for folder in dirs:
        preferred = folder / PREFERRED_MODEL
        if preferred.is_file():
            return preferred
        others = sorted(
            (p for p in folder.glob("realesrgan-*.onnx") if p.is_file()),
            key=lambda p: (p.stat().st_size, p.name),  # the smallest runs fastest
        )
        if others:
            return others[0]
    return None


def _test_image(path: Path) -> None:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (WIDTH, HEIGHT))
    pixels = image.load()
    assert pixels is not None
    for y in range(HEIGHT):
        for x in range(WIDTH):
            pixels[x, y] = (40 + 3 * x, 30 + 4 * y, 200 - 2 * x)
    draw = ImageDraw.Draw(image)
    draw.ellipse((20, 10, 44, 34), fill=(230, 200, 60))
    draw.rectangle((4, 30, 16, 44), fill=(20, 120, 220))
    draw.line((0, 0, WIDTH - 1, HEIGHT - 1), fill=(250, 250, 250), width=2)
    image.save(path)


def _expected_scale(model: Path, contract_scale: int | None) -> int | None:
    if contract_scale:
        return contract_scale
    match = re.search(r"x(\d)", model.stem)
    return int(match.group(1)) if match else None


def _upscale(model: Path, work: Path) -> tuple[str, Path, int, str, float]:
    """One upscale through the app's own engine thread (the GUI's one door to the engine)."""
    from PySide6.QtCore import QEventLoop, QTimer

    from engine.models.inventory import resolve_model
    from engine.requests import (
        Operation,
        OperationCancellation,
        OperationFailure,
        OperationRequest,
        ProductKind,
        Result,
    )
    from engine.runtime.sessions import SessionInfo
    from engine.settings import EngineSettings
    from gui.engine_thread import EngineThread

    source = work / "self-test.png"
    _test_image(source)
    ref = resolve_model(str(model), model.parent)
    request = OperationRequest(
        Operation.UPSCALE, str(model), (source,), device="cpu", output_dir=work / "out"
    )
    ends: list[object] = []
    sessions: list[tuple[SessionInfo, ...]] = []
    loop = QEventLoop()

    def end(payload: object) -> None:
        ends.append(payload)
        loop.quit()

    engine = EngineThread(EngineSettings(models_dir=model.parent))
    engine.operationFinished.connect(end)
    engine.operationFailed.connect(end)
    engine.operationCancelled.connect(end)
    engine.sessionsChanged.connect(sessions.append)
    engine.start(probe_runtimes=False)
    started = time.perf_counter()
    try:
        engine.submit(request)
        QTimer.singleShot(TIMEOUT_MS, loop.quit)
        loop.exec()
    finally:
        seconds = time.perf_counter() - started
        engine.stop()
    if not ends:
        raise SelfTestError(f"the upscale did not end within {TIMEOUT_MS // 1000} s")
    outcome = ends[0]
    if isinstance(outcome, OperationFailure):
        raise SelfTestError(f"the upscale failed: {outcome.message}")
    if isinstance(outcome, OperationCancellation) or not isinstance(outcome, Result):
        raise SelfTestError("the upscale was cancelled")
    if outcome.failures:
        raise SelfTestError("the upscale failed: " + "; ".join(f.message for f in outcome.failures))
    images = [p.path for p in outcome.products if p.kind is ProductKind.IMAGE]
    if len(images) != 1:
        raise SelfTestError(f"the upscale gave {len(images)} images instead of one")
    loaded = [info for snapshot in sessions for info in snapshot]
    providers = ", ".join(sorted({info.provider for info in loaded})) or "?"
    scale = _expected_scale(model, ref.contract.scale)
    return ref.id, images[0], scale or 0, providers, seconds


def _check_product(source: Path, product: Path, scale: int) -> int:
    import numpy as np
    from PIL import Image

    with Image.open(product) as image:
        out = np.asarray(image.convert("RGB"), dtype=np.float32)
        size = image.size
    if scale == 0:  # the model does not say: accept any whole factor that keeps the aspect
        scale = size[0] // WIDTH
        if scale < 2 or size != (WIDTH * scale, HEIGHT * scale):
            raise SelfTestError(
                f"the product is {size[0]}×{size[1]}, not a whole multiple of {WIDTH}×{HEIGHT}"
            )
    if size != (WIDTH * scale, HEIGHT * scale):
        raise SelfTestError(
            f"the product is {size[0]}×{size[1]}, expected {WIDTH * scale}×{HEIGHT * scale} (×{scale})"
        )
    if float(out.max()) < 16.0:
        raise SelfTestError("the product is black")
    with Image.open(source) as original:
        reference = np.asarray(
            original.convert("RGB").resize(size, Image.Resampling.BICUBIC), dtype=np.float32
        )
    diff = float(np.abs(out - reference).mean())
    if diff > MAX_MEAN_DIFF:
        raise SelfTestError(
            f"the product does not look like its input (mean difference {diff:.1f} levels from bicubic)"
        )
    return scale


@contextmanager
def _qt_app() -> Iterator[None]:
    """A Qt application for the engine thread's signals, on the offscreen platform when none
    exists yet: that also proves the bundle carries the platform plugins the window needs."""
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtGui import QGuiApplication

    created = None
    if QCoreApplication.instance() is None:
        created = QGuiApplication(["tessera", "-platform", "offscreen"])
    try:
        yield
    finally:
        if created is not None:
            created.shutdown()


def _check_qt(product: Path) -> str:
    """Qt loads the product; names the platform it started on."""
    from PySide6 import __version__ as pyside_version
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtGui import QGuiApplication, QImage

    image = QImage(str(product))
    if image.isNull():
        raise SelfTestError("Qt cannot read the product")
    platform = (
        QGuiApplication.platformName()
        if isinstance(QCoreApplication.instance(), QGuiApplication)
        else "no GUI"
    )
    return f"Qt {pyside_version} {platform}"


def _say(text: str, *, error: bool = False) -> None:
    stream = sys.stderr if error else sys.stdout
    if stream is not None:  # a windowed build on Windows has no console streams
        print(text, file=stream, flush=True)


def run_self_test(dirs: Sequence[Path] | None = None) -> int:
    """Run the self-test; 0 when it passed. `dirs`: where to look for a model (tests)."""
    from engine.errors import EngineError

    search = list(dirs) if dirs is not None else model_dirs()
    model = find_model(search)
    if model is None:
        where = ", ".join(str(d) for d in search) or "nowhere"
        _say(
            f"self-test failed: no starter upscaler ({PREFERRED_MODEL} or realesrgan-*.onnx) in {where}; "
            "get them with `python -m engine models fetch-starter`",
            error=True,
        )
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="tessera-self-test-") as tmp, _qt_app():
            work = Path(tmp)
            model_id, product, scale, providers, seconds = _upscale(model, work)
            scale = _check_product(work / "self-test.png", product, scale)
            qt = _check_qt(product)
    except SelfTestError as exc:
        _say(f"self-test failed with {model}: {exc}", error=True)
        return 1
    except EngineError as exc:
        _say(f"self-test failed with {model}: {exc}", error=True)
        return exc.exit_code or 1
    except Exception as exc:  # an installed copy missing a library ends here: name it
        _say(f"self-test failed with {model}: {type(exc).__name__}: {exc}", error=True)
        return 1
    _say(
        f"self-test passed: {model_id} upscaled {WIDTH}×{HEIGHT} → {WIDTH * scale}×{HEIGHT * scale} "
        f"on {providers} in {seconds:.2f} s ({qt}; model {model}; pid {os.getpid()})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_self_test())
