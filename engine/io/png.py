"""Tessera's own PNG codec, for what Pillow does not do: the decoder (png_decoder.py), the
encoder (png_encoder.py) and what they share (png_format.py), under one name for their users."""

from engine.io.png_decoder import Png, decode_png, key_alpha, unfilter
from engine.io.png_encoder import FrameLike, PngWriter, encode_png
from engine.io.png_format import CHANNELS, MODES16, SIGNATURE, PngError, png_header

__all__ = [
    "CHANNELS",
    "MODES16",
    "SIGNATURE",
    "FrameLike",
    "Png",
    "PngError",
    "PngWriter",
    "decode_png",
    "encode_png",
    "key_alpha",
    "png_header",
    "unfilter",
]
