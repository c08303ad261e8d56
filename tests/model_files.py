"""The small models in a test's models folder, declared by file name.

A test module that needs other models than the window's set declares them once:

    MODELS = {"up2.onnx": upscaler(2), "slow.onnx": slow(150)}

and conftest's `models` fixture builds them in that test's own models folder, its
`module_models` fixture once in a folder all the module's tests share (for a module whose
engine, and the sessions it keeps, lives across its tests).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from engine.samples.background_models import make_u2net
from engine.samples.depth_models import make_da3
from engine.samples.geometry_models import make_moge
from engine.samples.synthetic import synthetic_upscaler
from engine.samples.upscaler_models import make_upscaler
from tests.slow_models import make_slow_upscaler

ModelMaker = Callable[[Path], object]


def upscaler(scale: int) -> ModelMaker:
    return partial(make_upscaler, scale=scale)


def slow(layers: int) -> ModelMaker:
    """A ×1 model that takes its time: 300 layers are about a quarter of a second a tile here."""
    return partial(make_slow_upscaler, layers=layers)


def synthetic(features: int, blocks: int) -> ModelMaker:
    return partial(synthetic_upscaler, features=features, blocks=blocks)


u2net: ModelMaker = make_u2net
da3: ModelMaker = make_da3
moge: ModelMaker = make_moge

# What the window's tests find unless their module declares MODELS.
WINDOW_MODELS: Mapping[str, ModelMaker] = {
    "up2.onnx": upscaler(2),
    "up4.onnx": upscaler(4),
    "slow.onnx": slow(300),
}


def build_models(folder: Path, makers: Mapping[str, ModelMaker]) -> Path:
    for name, make in makers.items():
        make(folder / name)
    return folder
