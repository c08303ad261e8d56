"""Colour maps for data products: Google's Turbo, for depth previews."""

from __future__ import annotations

import numpy as np

# Google's Turbo colormap (Mikhailov 2019, Apache-2.0), every 8th entry of its 256-entry
# table plus the last; linear interpolation between them stays within 2.2/255 of the table.
_TURBO_KNOTS = np.array(
    [
        (48, 18, 59), (57, 42, 115), (64, 64, 162), (68, 86, 199), (70, 107, 227), (70, 128, 246),
        (66, 148, 255), (55, 168, 250), (40, 188, 235), (28, 205, 216), (24, 221, 194),
        (31, 233, 175), (50, 242, 152), (78, 249, 125), (109, 254, 98), (139, 255, 75),
        (164, 252, 60), (185, 246, 53), (205, 236, 52), (223, 223, 55), (238, 207, 58),
        (248, 190, 57), (253, 172, 52), (254, 150, 43), (251, 126, 33), (244, 102, 23),
        (235, 80, 14), (223, 63, 8), (208, 47, 5), (190, 33, 2), (169, 22, 1), (146, 11, 1),
        (122, 4, 3),
    ],
    np.float32,
)  # fmt: skip
_TURBO_AT = np.array([*range(0, 256, 8), 255], np.float32) / 255


def turbo(t: np.ndarray) -> np.ndarray:
    """H×W values in 0…1 → H×W×3 uint8 Turbo colours (0 dark blue … 1 dark red); NaN → black."""
    x = np.asarray(t, dtype=np.float32)
    known = ~np.isnan(x)
    clipped = np.clip(np.where(known, x, 0), 0.0, 1.0)
    rgb = np.stack([np.interp(clipped, _TURBO_AT, _TURBO_KNOTS[:, c]) for c in range(3)], axis=-1)
    return np.where(known[..., None], np.rint(rgb), 0).astype(np.uint8)
