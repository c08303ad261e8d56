"""The memory figures of DESIGN §7 and M11: what an operation leaves held, what handing it back
costs in time, each family's peak against its output, and whether frames make peaks grow.

Each figure comes from one engine in this process; peaks are the kernel's high-water mark
(reset before each operation, engine/runtime/memory.py). A family's "output" is what its
products hold as images: width × height × channels × bytes per sample of each image product
(the point cloud, a derived file written band by band, is left out). The model's own working
memory is measured apart — the same model on an image of its input size — because a model's
activations are its own (DESIGN: "no full-size float32 copy that is not the model's own tensor")
and do not grow with the photo.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from engine.api import Engine
from engine.bench.table import Row, Table
from engine.requests import Operation, OperationRequest, Result
from engine.runtime import memory
from engine.samples.background_models import make_u2net
from engine.samples.depth_models import make_da3
from engine.samples.geometry_models import make_moge
from engine.samples.synthetic import test_image
from engine.samples.upscaler_models import make_upscaler
from engine.settings import EngineSettings

HELD_TARGET = 48 << 20  # DESIGN §7: within 48 MB of the RSS after loading
MIB = float(1 << 20)


def _drop(result: Result) -> None:
    for p in result.products:
        p.path.unlink(missing_ok=True)


def _output_bytes(result: Result) -> int:
    total = 0
    for p in result.products:
        if p.path.suffix.lower() not in (".png", ".tif", ".webp"):
            continue
        with Image.open(p.path) as im:
            frames = getattr(im, "n_frames", 1)
            sample = {"I;16": 2, "F": 4, "I": 4}.get(im.mode, 1)
            total += im.size[0] * im.size[1] * len(im.getbands()) * sample * frames
    return total


def measure_held(
    table: Table,
    settings: EngineSettings,
    model: Path,
    label: str,
    work: Path,
    pairs: int = 3,
    size: tuple[int, int] = (768, 512),
) -> None:
    """RSS held after an operation above the RSS right after loading (M11), and the same job's
    time with and without the hand-back, alternating (medians of `pairs` pairs); the image
    `size` is tiled at 256 (a few tiles at the least)."""
    width, height = size
    img = test_image(work / "held.png", width, height)
    tiny = test_image(work / "held-tiny.png", 32, 32)
    engines = {
        "hand back": Engine(settings),
        "keep": Engine(EngineSettings(models_dir=settings.models_dir, keep_cpu_arena=True)),
    }
    held: dict[str, list[float]] = {k: [] for k in engines}
    seconds: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(pairs):
        for name, engine in engines.items():
            engine.unload_all()
            _drop(
                engine.run(
                    OperationRequest(Operation.UPSCALE, str(model), (tiny,), output_dir=work / "h")
                )
            )
            gc.collect()
            loaded = memory.process_rss()
            start = time.perf_counter()
            result = engine.run(
                OperationRequest(
                    Operation.UPSCALE, str(model), (img,), output_dir=work / "h", tile=256
                )
            )
            seconds[name].append(time.perf_counter() - start)
            gc.collect()
            held[name].append(memory.process_rss() - loaded)
            _drop(result)
            engine.unload_all()
    kept = float(np.median(held["hand back"]))
    table.add(
        Row(
            f"RSS held after an operation above loaded, {label} ×4 of {width}×{height}, tile 256",
            kept / MIB,
            "MiB",
            "<= 48 MB",
            kept <= HELD_TARGET,
            f"without the hand-back (--keep-cpu-arena): {np.median(held['keep']) / MIB:+.0f} MiB",
        )
    )
    with_, without = float(np.median(seconds["hand back"])), float(np.median(seconds["keep"]))
    table.add(
        Row(
            "same job, time with the hand-back / without",
            with_ / without,
            "×",
            "within noise",
            None,
            f"{with_:.2f} s / {without:.2f} s, medians of {pairs} alternating pairs",
        )
    )


@dataclass(frozen=True)
class FamilyPeak:
    operation: Operation
    peak: int  # high-water mark above the RSS after loading
    model_own: int  # the same model's run on an image of its input size
    output: int  # bytes of the image products
    seconds: float

    @property
    def ratio(self) -> float:
        return (self.peak - self.model_own) / self.output


def family_models(
    work: Path, models_dir: Path | None
) -> dict[Operation, tuple[Path, tuple[int, int]]]:
    """Per family: a model (the starter model where installed, else a contract model) and the
    image size it runs at (its fixed input, or the size it is fed at most)."""
    starters = models_dir or Path()
    anime = starters / "realesrgan-animevideov3-x2.onnx"
    u2netp = starters / "u2netp.onnx"
    return {
        Operation.UPSCALE: (
            anime if anime.is_file() else make_upscaler(work / "up2.onnx", scale=2),
            (256, 256),
        ),
        Operation.REMOVE_BACKGROUND: (
            u2netp if u2netp.is_file() else make_u2net(work / "u2netp.onnx"),
            (320, 320),
        ),
        Operation.DEPTH: (make_da3(work / "da3.onnx", fixed=False), (378, 504)),
        Operation.GEOMETRY: (make_moge(work / "moge.onnx"), (960, 1280)),
    }


def family_peak(
    engine: Engine,
    operation: Operation,
    model: Path,
    model_hw: tuple[int, int],
    photo: Path,
    work: Path,
) -> FamilyPeak:
    own = test_image(work / f"own-{operation.value}.png", model_hw[1], model_hw[0])
    request = OperationRequest(operation, str(model), (own,), output_dir=work / "fam", tile=256)
    _drop(engine.run(request))  # load and warm
    first = engine.run(request)
    _drop(first)
    assert first.memory is not None
    model_own = first.memory.rss_peak - first.memory.rss_after_load
    gc.collect()
    start = time.perf_counter()
    result = engine.run(
        OperationRequest(operation, str(model), (photo,), output_dir=work / "fam", tile=256)
    )
    seconds = time.perf_counter() - start
    assert result.memory is not None and result.ok, result.failures
    peak = result.memory.rss_peak - result.memory.rss_after_load
    out = _output_bytes(result)
    _drop(result)
    engine.unload_all()
    return FamilyPeak(operation, peak, model_own, out, seconds)


def measure_family_peaks(
    table: Table, settings: EngineSettings, side: tuple[int, int], work: Path
) -> None:
    photo = test_image(work / f"photo-{side[0]}x{side[1]}.jpg", *side)
    engine = Engine(settings)
    megapixels = side[0] * side[1] / 1e6
    for operation, (model, model_hw) in family_models(work, settings.resolved_models_dir()).items():
        f = family_peak(engine, operation, model, model_hw, photo, work)
        table.add(
            Row(
                f"peak RSS above loaded / output, {operation.value}, {megapixels:.0f} Mpx",
                f.ratio,
                "×",
                "<= 1.5 ×",
                f.ratio <= 1.5,
                f"+{f.peak / MIB:.0f} MiB, of it the model's own run {f.model_own / MIB:.0f} MiB; "
                f"output {f.output / MIB:.0f} MiB; {model.name}; {f.seconds:.1f} s",
            )
        )


def gif_peak(
    engine: Engine, model: Path, frames: int, work: Path, size: tuple[int, int] = (320, 240)
) -> int:
    """Peak RSS above loaded of remove-background over an animated GIF of `frames` frames."""
    path = work / f"anim-{frames}.gif"
    rng = np.random.default_rng(frames)
    palette = rng.integers(0, 256, 768, dtype=np.uint8).tolist()
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    images = []
    for i in range(frames):  # palette images made directly: Pillow's quantize takes ~1 s a frame
        index = ((x + 3 * i) // 4 + (y + 5 * i) // 4 + rng.integers(0, 3, (h, w))) % 256
        frame = Image.fromarray(index.astype(np.uint8), "P")
        frame.putpalette(palette)
        images.append(frame)
    images[0].save(path, save_all=True, append_images=images[1:], duration=40, loop=0)
    del images
    request = OperationRequest(
        Operation.REMOVE_BACKGROUND, str(model), (path,), output_dir=work / "gif"
    )
    _drop(
        engine.run(
            OperationRequest(
                Operation.REMOVE_BACKGROUND,
                str(model),
                (test_image(work / "g.png", 64, 48),),
                output_dir=work / "gif",
            )
        )
    )
    gc.collect()
    result = engine.run(request)
    assert result.memory is not None and result.ok, result.failures
    _drop(result)
    return result.memory.rss_peak - result.memory.rss_after_load


def measure_frames(
    table: Table, settings: EngineSettings, work: Path, frames: tuple[int, int]
) -> None:
    model, _ = family_models(work, settings.resolved_models_dir())[Operation.REMOVE_BACKGROUND]
    engine = Engine(settings)
    few, many = (gif_peak(engine, model, n, work) for n in frames)
    growth = many / few - 1
    table.add(
        Row(
            f"peak RSS of a {frames[1]}-frame GIF vs a {frames[0]}-frame GIF (remove-background)",
            growth * 100,
            "%",
            "within 10 %",
            growth <= 0.10,
            f"+{many / MIB:.0f} MiB vs +{few / MIB:.0f} MiB above loaded; {model.name}, 320×240",
        )
    )
