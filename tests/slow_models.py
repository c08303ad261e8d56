"""A deliberately slow ×1 "upscaler" for cancel tests (the same one the bench uses)."""

from __future__ import annotations

from engine.bench.synthetic import slow_model as make_slow_upscaler

__all__ = ["make_slow_upscaler"]
