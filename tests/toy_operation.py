"""A toy fifth operation, registered by tests/test_operation_specs.py: a black-and-white mask
from a background model (pixels the model calls foreground at or above `level`).

It is all a new operation needs besides its widget: its options, its implementation here, and
its row in the operation table (`TOY`); no other module of the engine names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from engine.io.image import DecodedImage
from engine.models.contracts import ModelSpec
from engine.operation_specs import Family, Operation
from engine.operations.base import OperationBase, RunContext
from engine.operations.pixels import input_dtype, plane, resize_planes, to_nchw
from engine.operations.products import Products, data_meta
from engine.requests import Product, ProductKind, ProgressKind


@dataclass(frozen=True)
class ThresholdOptions:
    level: int | None = field(
        default=None, metadata={"range": (0, 255), "help": "foreground from this mask value"}
    )


TOY = Operation(
    "threshold",
    "Black and white mask",
    Family.BACKGROUND,
    ThresholdOptions,
    "tests.toy_operation:Threshold",
    products=("bw.png",),
    writes="a black and white mask",
)


class Threshold(OperationBase):
    operation: ClassVar[Operation] = TOY
    level = 128

    def configure(self, options: Any, spec: ModelSpec) -> None:
        given = options if isinstance(options, ThresholdOptions) else ThresholdOptions()
        self.level = 128 if given.level is None else given.level

    def process(self, image: DecodedImage, ctx: RunContext) -> list[Product]:
        c = ctx.spec.contract
        side = c.fixed_size or (320, 320)
        n = len(image.frames)
        with Products(ctx, image) as products:
            masks = products.image_product("bw", ProductKind.MASK, data_meta(image))
            for index, frame in enumerate(image.frames):
                ctx.start_frame(index, n, 1)
                model_in = resize_planes(frame, side[0], side[1], Image.Resampling.BILINEAR)
                feeds = {c.image_input: to_nchw(model_in, input_dtype(c))}
                out = ctx.run(feeds, outputs=[c.image_output])[0]
                mask = Image.fromarray((np.clip(plane(out), 0, 1) * 255).astype(np.uint8))
                h, w = frame.shape[:2]
                big = np.asarray(mask.resize((w, h), Image.Resampling.BILINEAR))
                bw = np.where(big >= self.level, 255, 0).astype(np.uint8)[..., None]
                products.add(masks, bw)
                ctx.emit(ctx.progress(ProgressKind.FRAME_FINISHED))
            return products.publish()
