"""Files in and out: reading inputs, sequences, writing products, our PNG codec, atomic publishing.

- `image`: a decoded image (frames as numpy arrays) and its metadata, 8/16-bit ↔ float;
- `reading`: checks before decoding, then decoding (EXIF orientation, ICC, 16-bit, frames);
- `sequences`: a folder of frames in natural order, several files as one sequence;
- `writing`: image products (PNG through `png`, the rest through Pillow);
- `png`: our PNG/APNG codec (16-bit colour, streaming encoder);
- `publish`: atomic publishing (never overwrite, never half written).
"""
