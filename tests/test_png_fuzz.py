"""Fuzzing the hand-written PNG decoder (engine/io/png.py) that reads untrusted 16-bit PNGs.

Thousands of mutated and truncated PNG and APNG files, built here from a few valid seeds with
a fixed random seed, go through `decode_png` (which may only raise PngError) and through
`load_image` (which may only raise BadInputError), with memory traced: a zlib bomb in the
image data or in a colour profile, a second header claiming a huge size, or absurd animation
frames must be refused before anything big is allocated. Mutations that change a chunk
recompute its checksum, so they reach the decoder instead of stopping at the CRC check.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time
import tracemalloc
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import numpy as np
import pytest

from engine.errors import BadInputError
from engine.io import png_encoder
from engine.io.image import DecodedImage
from engine.io.png import PngError, decode_png, encode_png
from engine.io.reading import load_image
from tests.test_imaging import _png16

SEED = 20240612
CASES = 2000
LIMIT = 1 << 16  # pixels: the seeds have at most a few hundred
MEMORY_BOUND = 48 << 20  # growth of the process's peak memory over the whole corpus
ROOT = Path(__file__).resolve().parent.parent
SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def split(data: bytes) -> list[tuple[bytes, bytes]]:
    """(kind, body) of each chunk of a valid PNG."""
    out, pos = [], len(SIGNATURE)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        out.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    return out


def join(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return SIGNATURE + b"".join(chunk(k, b) for k, b in chunks)


def ihdr(width: int, height: int, colour_type: int = 2, depth: int = 16) -> bytes:
    return struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)


def encoded(frames: list[np.ndarray], durations: list[int]) -> bytes:
    buffer = io.BytesIO()
    encode_png(buffer, frames, durations=durations)
    return buffer.getvalue()


def seeds() -> list[bytes]:
    rng = np.random.default_rng(1)

    def pixels(h: int, w: int, c: int) -> np.ndarray:
        return rng.integers(0, 65536, (h, w, c), dtype=np.uint16)

    apng = [pixels(9, 11, 4) for _ in range(3)]
    return [
        encoded([pixels(12, 9, 3)], [0]),
        encoded([pixels(7, 13, 4)], [0]),
        encoded([pixels(10, 10, 2)], [0]),
        encoded(apng, [40, 50, 60]),  # APNG: IDAT is the first frame, then fdAT
        _png16(pixels(11, 14, 3), filters=(0, 1, 2, 3, 4), interlace=True),
        _png16(pixels(6, 5, 4), filters=(4, 3, 4, 3), interlace=False),
    ]


def _bomb(size: int) -> bytes:
    """A zlib stream of `size` zero bytes (about a thousandth of that), made without ever
    holding the zeros."""
    compressor = zlib.compressobj(9)
    block = bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + compressor.flush()


BOMB = _bomb(128 << 20)


Mutation = Callable[[bytes, np.random.Generator], bytes]


def flip_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 5))):
        i = int(rng.integers(0, len(out)))
        out[i] ^= 1 << int(rng.integers(0, 8))
    return bytes(out)


def truncate(data: bytes, rng: np.random.Generator) -> bytes:
    return data[: int(rng.integers(0, len(data)))]


def mutate_body(data: bytes, rng: np.random.Generator) -> bytes:
    chunks = split(data)
    i = int(rng.integers(0, len(chunks)))
    kind, body = chunks[i]
    if body:
        b = bytearray(body)
        for _ in range(int(rng.integers(1, 4))):
            j = int(rng.integers(0, len(b)))
            b[j] = int(rng.integers(0, 256))
        chunks[i] = (kind, bytes(b))
    return join(chunks)


def huge_or_odd_header(data: bytes, rng: np.random.Generator) -> bytes:
    chunks = split(data)
    sides = [0, 1, 3, 255, 65535, 1 << 20, (1 << 31) - 1, 1 << 31, 0xFFFFFFFF]
    w, h = (int(rng.choice(sides)) for _ in range(2))
    body = bytearray(chunks[0][1].ljust(13, b"\0"))
    body[0:8] = struct.pack(">II", w, h)
    if rng.random() < 0.3:
        body[8] = int(rng.choice([1, 2, 4, 8, 16, 32]))
        body[9] = int(rng.choice([0, 2, 3, 4, 5, 6, 7]))
    if rng.random() < 0.2:
        body[12] = int(rng.choice([0, 1, 2, 255]))
    chunks[0] = (b"IHDR", bytes(body))
    return join(chunks)


def insert_chunk(data: bytes, rng: np.random.Generator) -> bytes:
    chunks = split(data)
    w, h = (int(x) for x in rng.integers(1, 1 << 16, 2))
    extra = [
        (b"IHDR", ihdr(w, h, int(rng.choice([2, 4, 6])))),  # a second header
        (b"acTL", struct.pack(">II", int(rng.integers(0, 1 << 32)), 0)),
        (b"fcTL", struct.pack(">IIIIIHHBB", 0, w, h, 0, 0, 1, 10, 0, 0)),
        (b"fdAT", b"\0\0\0\1" + BOMB[: int(rng.integers(0, 2000))]),
        (b"IDAT", BOMB),
        (b"iCCP", b"icc\0\0" + BOMB),
        (b"tRNS", bytes(int(rng.integers(0, 8)))),
        (b"pHYs", bytes(int(rng.integers(0, 12)))),
        (b"eXIf", rng.bytes(int(rng.integers(0, 40)))),
    ]
    kind, body = extra[int(rng.integers(0, len(extra)))]
    chunks.insert(int(rng.integers(1, len(chunks))), (kind, body))
    return join(chunks)


def drop_or_swap(data: bytes, rng: np.random.Generator) -> bytes:
    chunks = split(data)
    i, j = (int(x) for x in rng.integers(0, len(chunks), 2))
    if rng.random() < 0.5:
        del chunks[i]
    else:
        chunks[i], chunks[j] = chunks[j], chunks[i]
    return join(chunks)


def odd_animation(data: bytes, rng: np.random.Generator) -> bytes:
    chunks = split(data)
    for n, (kind, body) in enumerate(chunks):
        if kind == b"fcTL" and rng.random() < 0.7:
            fields = list(struct.unpack(">IIIIIHHBB", body))
            k = int(rng.integers(1, 9))
            fields[k] = int(rng.integers(0, 1 << 16 if k >= 5 else 1 << 32)) & (
                0xFF if k >= 7 else 0xFFFF if k >= 5 else 0xFFFFFFFF
            )
            chunks[n] = (kind, struct.pack(">IIIIIHHBB", *fields))
        elif kind == b"acTL" and rng.random() < 0.5:
            chunks[n] = (kind, struct.pack(">II", int(rng.integers(0, 1 << 32)), 0))
    return join(chunks)


STRUCTURAL: list[Mutation] = [
    mutate_body,
    huge_or_odd_header,
    insert_chunk,
    drop_or_swap,
    odd_animation,
]
RAW: list[Mutation] = [flip_bytes, truncate]


def corpus() -> Iterator[tuple[str, bytes]]:
    rng = np.random.default_rng(SEED)
    bases = seeds()
    for n in range(CASES):
        data = bases[n % len(bases)]
        names = []
        # A structural mutation (checksums fixed), a raw one (bytes flipped, file cut), or both.
        kind = int(rng.integers(0, 3))
        if kind in (0, 2):
            mutation = STRUCTURAL[int(rng.integers(0, len(STRUCTURAL)))]
            data = mutation(data, rng)
            names.append(mutation.__name__)
        if kind in (1, 2):
            mutation = RAW[int(rng.integers(0, len(RAW)))]
            data = mutation(data, rng)
            names.append(mutation.__name__)
        yield f"case {n} ({'+'.join(names)} of seed {n % len(bases)})", data


class Hang(Exception):
    pass


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise Hang


def _peak_rss() -> int:
    """This process's peak resident memory in bytes (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_corpus(folder: str) -> dict[str, object]:
    """Every case through `decode_png` and `load_image`; what came out, and how much the peak
    memory of this process grew. Run in a fresh process, so the peak is the corpus's own."""
    warnings.simplefilter("ignore")  # Pillow warns about some damaged files, as it may
    path = Path(folder) / "fuzz.png"
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    signal.signal(signal.SIGALRM, _alarm)
    seeds()  # everything imported and warmed up before the baseline
    baseline = _peak_rss()
    started = time.perf_counter()
    for name, data in corpus():
        signal.setitimer(signal.ITIMER_REAL, 5.0)  # a case that takes this long is a hang
        try:
            try:
                decode_png(data, LIMIT)
                outcomes["decoded"] += 1
            except PngError:
                outcomes["PngError"] += 1
            path.write_bytes(data)
            try:
                load_image(path, LIMIT)
                outcomes["loaded"] += 1
            except BadInputError:
                outcomes["BadInputError"] += 1
        except Hang:
            problems.append(f"{name}: still running after 5 s")
        except Exception as e:
            problems.append(f"{name}: {type(e).__name__}: {e}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return {
        "outcomes": dict(outcomes),
        "problems": problems,
        "growth": _peak_rss() - baseline,
        "seconds": time.perf_counter() - started,
    }


def test_mutated_pngs_give_only_bad_input_errors_and_bounded_memory(tmp_path: Path) -> None:
    code = (
        "import json, sys; from tests.test_png_fuzz import run_corpus; "
        "print(json.dumps(run_corpus(sys.argv[1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    outcomes, problems, growth = report["outcomes"], report["problems"], report["growth"]
    print(
        f"\nPNG fuzz: {CASES} cases in {report['seconds']:.1f} s, {outcomes}; "
        f"peak memory grew {growth >> 20} MB"
    )
    assert not problems, f"{len(problems)} cases failed:\n" + "\n".join(problems[:20])
    assert growth < MEMORY_BOUND, f"the corpus took {growth >> 20} MB at its peak"
    # The corpus really exercises both outcomes of both layers.
    assert outcomes["decoded"] > 50 and outcomes["PngError"] > 1000
    assert outcomes["loaded"] > 50 and outcomes["BadInputError"] > 1000


SMALL = np.zeros((4, 4, 3), np.uint16)


def test_a_second_header_claiming_a_huge_image_is_refused(tmp_path: Path) -> None:
    chunks = [c for c in split(encoded([SMALL], [0])) if c[0] != b"IDAT"]
    chunks.insert(1, (b"IHDR", ihdr(20000, 20000)))
    chunks.insert(-1, (b"IDAT", BOMB))  # 128 MB of zeros: not even the start of that image
    data = join(chunks)
    tracemalloc.start()
    try:
        outcome: object = decode_png(data)  # no pixel limit given: the header itself is refused
    except PngError as e:
        outcome = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert isinstance(outcome, PngError), outcome
    assert peak < 32 << 20, f"{peak >> 20} MB allocated"
    outcome, peak = _traced(tmp_path, data)
    assert isinstance(outcome, BadInputError), outcome
    assert peak < 32 << 20, f"{peak >> 20} MB allocated"


def test_a_colour_profile_bomb_is_dropped(tmp_path: Path) -> None:
    chunks = split(encoded([SMALL], [0]))
    chunks.insert(1, (b"iCCP", b"icc\0\0" + BOMB))
    data = join(chunks)
    tracemalloc.start()
    try:
        png, frames, _ = decode_png(data)  # our decoder: the pixels, without the profile
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert png.icc is None and frames[0].shape == SMALL.shape
    assert peak < 32 << 20, f"{peak >> 20} MB allocated"
    outcome, peak = _traced(tmp_path, data)  # Pillow, which opens the file first, refuses it
    assert isinstance(outcome, BadInputError), outcome
    assert peak < 32 << 20, f"{peak >> 20} MB allocated"


def test_an_image_data_bomb_is_inflated_only_as_far_as_the_image(tmp_path: Path) -> None:
    chunks = [c for c in split(encoded([SMALL], [0])) if c[0] != b"IDAT"]
    chunks.insert(-1, (b"IDAT", BOMB))  # zeros: filter type 0, black pixels, then far more
    outcome, peak = _traced(tmp_path, join(chunks))
    assert isinstance(outcome, DecodedImage) and not outcome.frames[0].any(), outcome
    assert peak < 32 << 20, f"{peak >> 20} MB allocated"


def test_an_animation_declaring_a_billion_frames_is_refused(tmp_path: Path) -> None:
    chunks = split(encoded([SMALL, SMALL], [10, 10]))
    chunks = [(k, struct.pack(">II", 1 << 30, 0) if k == b"acTL" else b) for k, b in chunks]
    outcome, peak = _traced(tmp_path, join(chunks))
    assert isinstance(outcome, BadInputError) and "limit" in str(outcome), outcome
    assert peak < 32 << 20, f"{peak >> 20} MB allocated"


def _traced(folder: Path, data: bytes) -> tuple[object, int]:
    """What load_image makes of `data` (an image or the exception), and the traced peak."""
    path = folder / "crafted.png"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        try:
            outcome: object = load_image(path, 1 << 24)
        except Exception as e:
            outcome = e
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(params=["isal", "zlib"])
def deflater(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The encoder with each deflate library it may find: ISA-L (a dependency where it has
    wheels) and zlib (where it has none)."""
    if request.param == "zlib":
        monkeypatch.setattr(png_encoder, "_deflate", zlib)
        monkeypatch.setattr(png_encoder, "_LEVEL", 4)
    else:
        assert png_encoder._deflate is pytest.importorskip("isal.isal_zlib")
    return str(request.param)


def test_png_products_are_deflated_by_isal_where_it_is_installed() -> None:
    # ISA-L deflates an upscale's rows 5.6x faster than zlib at the same size: the CPU it
    # saves goes to the model run beside the writer (docs/cpu-kernel.md).
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    assert png_encoder._deflate is isal_zlib
    assert png_encoder._LEVEL == 3  # ISA-L's densest


@pytest.mark.parametrize("height", [300, 20])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_a_large_frame_filtered_beside_its_compression_round_trips(
    dtype: type, height: int, deflater: str
) -> None:
    # Tall enough that blocks are filtered on the side thread while others compress: the
    # bytes must still come out in order, exactly (checked by our decoder and by Pillow);
    # 20 rows are one stream on this thread.
    import io

    from PIL import Image

    rng = np.random.default_rng(7)
    top = 255 if dtype == np.uint8 else 65535
    smooth = np.linspace(0, top, 700, dtype=np.float64)[None, :, None]
    noise = rng.normal(0, top / 50, (height, 700, 3))
    frame: np.ndarray = (smooth + noise).clip(0, top).astype(dtype)
    buffer = io.BytesIO()
    encode_png(buffer, [frame], durations=[100])
    if dtype == np.uint16:
        _, frames, _ = decode_png(buffer.getvalue(), 1 << 30)
        assert np.array_equal(frames[0], frame)
    else:
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(buffer.getvalue()))), frame)


def test_a_cancel_mid_frame_stops_the_side_thread() -> None:
    import io

    calls = []

    def check() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("cancelled")

    frame = np.zeros((600, 700, 3), np.uint8)
    with pytest.raises(RuntimeError, match="cancelled"):
        encode_png(io.BytesIO(), [frame], durations=[100], check=check)
    # (tests/conftest.py fails the test if the side thread were left running)


def _reference_filtered(rows: np.ndarray, bpp: int) -> bytes:
    """libpng's heuristic spelled out per row in plain integers: each of the five filters,
    the one with the smallest sum of |byte as int8|, ties to the lower filter type."""
    out = bytearray()
    above = np.zeros(rows.shape[1], np.int64)
    for row in rows.astype(np.int64):
        left = np.concatenate([np.zeros(bpp, np.int64), row[:-bpp]])
        corner = np.concatenate([np.zeros(bpp, np.int64), above[:-bpp]])
        p = left + above - corner
        pa, pb, pc = np.abs(p - left), np.abs(p - above), np.abs(p - corner)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, above, corner))
        candidates = [row, row - left, row - above, row - (left + above) // 2, row - paeth]
        wrapped = [(c % 256).astype(np.uint8) for c in candidates]
        scores = [int(np.abs(w.view(np.int8).astype(np.int64)).sum()) for w in wrapped]
        kind = scores.index(min(scores))
        out += bytes([kind]) + wrapped[kind].tobytes()
        above = row
    return bytes(out)


def test_the_row_filters_are_libpngs_choice_byte_for_byte() -> None:
    # Sub/Up/Average are computed in uint8 and Paeth's distances in int16: the bytes must be
    # what the plain-integer heuristic gives, on rows that use every filter (flat, ramps,
    # noise, the 0x80 bytes whose |int8| is 128).
    from engine.io.png_encoder import _filter_rows

    rng = np.random.default_rng(3)
    h, w = 40, 97
    rows = np.zeros((h, w * 3), np.uint8)
    rows[5:10] = np.arange(w * 3, dtype=np.uint8)  # horizontal ramps: Sub
    rows[10:15] = rows[9]  # repeats: Up
    rows[15:30] = rng.integers(0, 256, (15, w * 3), dtype=np.uint8)
    rows[30:] = (np.arange(w * 3)[None, :] + 3 * np.arange(10)[:, None]) % 256
    rows[:, ::17] = 0x80
    got = _filter_rows(rows, 3, np.zeros(w * 3, np.uint8))
    assert got == _reference_filtered(rows, 3)
    assert {got[i * (w * 3 + 1)] for i in range(h)} >= {1, 2}


def test_a_frame_written_in_parallel_blocks_is_one_valid_zlib_stream() -> None:
    # Blocks deflated on several threads, each primed with the 32 KB before it: one stream
    # whose checksum holds (zlib.decompress checks it), within 0.5 % of one compressor's size.
    from engine.io import png_encoder as png

    rng = np.random.default_rng(11)
    smooth = np.linspace(0, 255, 900)[None, :, None] + np.linspace(0, 60, 800)[:, None, None]
    frame = (smooth + rng.normal(0, 4, (800, 900, 3))).clip(0, 255).astype(np.uint8)
    data = encoded([frame], [100])
    idat = b"".join(body for kind, body in split(data) if kind == b"IDAT")
    rows = frame.reshape(800, -1)
    assert zlib.decompress(idat) == _reference_filtered(rows, 3)
    one_stream = len(zlib.compress(_reference_filtered(rows, 3), png._LEVEL))
    assert len(idat) <= one_stream * 1.005


class _CountedRows:
    """A frame made on demand, as a band-written product's rows are: counts the rows read."""

    def __init__(self, frame: np.ndarray) -> None:
        self.frame = frame
        self.blocks_read = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return self.frame.shape

    @property
    def dtype(self) -> np.dtype[np.uint8]:
        return self.frame.dtype

    def __getitem__(self, rows: slice) -> np.ndarray:
        self.blocks_read += 1
        return self.frame[rows]


def test_the_parallel_writer_reads_at_most_one_block_ahead_of_what_it_wrote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rows read ahead of the output pin the finished tiles they come from; three blocks in
    # flight cost a ×4 of 1536² 20 MiB more peak than two. Whatever the writer threads.
    from engine.io import png_encoder as png

    monkeypatch.setattr(png, "_WRITERS", 4)
    rng = np.random.default_rng(5)
    source = _CountedRows(rng.integers(0, 256, (1000, 700, 3), dtype=np.uint8))
    pieces = png._compressed_rows(source)
    next(pieces)  # the zlib header
    written, ahead = 0, []
    for _ in pieces:
        written += 1
        ahead.append(source.blocks_read - written)
    assert max(ahead) <= 1, ahead
    assert source.blocks_read == 9  # 124-row blocks: the parallel path was taken
