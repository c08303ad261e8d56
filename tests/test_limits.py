"""Nothing gets past the limits (issue #20): page bombs, output-size bombs, full disks,
read-only model folders, leftovers of killed processes, signals at start-up.

Full and read-only file systems are real mounts (a 2 MB tmpfs; a read-only bind mount); the
tests that need them skip, saying why, where this user cannot mount.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from engine.api import Engine
from engine.errors import BadInputError, UsageError
from engine.io.reading import load_image
from engine.io.sequences import list_sequence
from engine.options import OutputOptions
from engine.requests import Operation, OperationRequest
from engine.runtime import optimize
from engine.samples.upscaler_models import make_compact_upscaler, make_upscaler
from engine.settings import EngineSettings
from tests.engine_helpers import photo
from tests.model_files import da3, u2net, upscaler
from tests.processes import engine_cli

ROOT = Path(__file__).resolve().parent.parent

LIMIT = 100_000_000


def tiff_with_a_larger_page(path: Path, side: int) -> Path:
    """Page 1 a 4×4 grey image; page 2 claims side×side and its strip is cut after 64 bytes:
    a decoder that reaches page 2's pixels says "truncated", a header check says the size."""

    def ifd(width: int, height: int, offset: int, count: int, next_ifd: int) -> bytes:
        short = (256, width), (257, height), (258, 8), (259, 1), (262, 1), (277, 1), (278, height)
        longs = (273, offset), (279, count)
        entries = sorted(
            [struct.pack("<HHIHH", tag, 3, 1, value, 0) for tag, value in short]
            + [struct.pack("<HHII", tag, 4, 1, value) for tag, value in longs]
        )
        return struct.pack("<H", len(entries)) + b"".join(entries) + struct.pack("<I", next_ifd)

    size = 2 + 9 * 12 + 4
    first, second = 8 + 16, 8 + 16 + size
    data = b"II*\x00" + struct.pack("<I", first) + bytes(range(16))
    data += ifd(4, 4, 8, 16, second) + ifd(side, side, second + size, side * side, 0)
    path.write_bytes(data + bytes(64))
    return path


def gif_with_a_growing_frame(path: Path, side: int) -> Path:
    """A 4×4 GIF whose frame 2 is side×side: Pillow grows the canvas to fit it."""
    data = b"GIF89a" + struct.pack("<HHBBB", 4, 4, 0, 0, 0)
    pixels = b"\x02\x02\x44\x01\x00"  # LZW minimum code size 2, one tiny block, terminator
    for width in (4, side):
        data += b"," + struct.pack("<HHHHB", 0, 0, width, width, 0x80) + bytes(3) + b"\xff" * 3
        data += pixels
    path.write_bytes(data + b";")
    return path


# ------------------------------------------------------------- 1. a later page's size, from its header


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["tiff", "gif"])
def test_a_larger_later_page_is_refused_from_its_header(
    tmp_path: Path, kind: str, stream: bool
) -> None:
    if kind == "tiff":
        path = tiff_with_a_larger_page(tmp_path / "pages.tif", 6000)
    else:
        path = gif_with_a_growing_frame(tmp_path / "grow.gif", 6000)
    # Before the fix, page 2 was decoded first: the file "is truncated" (its pixels are cut).
    with pytest.raises(
        BadInputError, match=r"frame 2 is 6000×6000 pixels but frame 1 is 4×4"
    ) as info:
        load_image(path, LIMIT, stream=stream)
    assert "truncated" not in str(info.value)


# ------------------------------------------------------------------ 2. an output-size bomb


MODELS = {
    "up2.onnx": upscaler(2),
    "a-rather-long-model-name.onnx": upscaler(2),
    "u2netp.onnx": u2net,
    "da3.onnx": da3,
}


def _limited(megabytes: int) -> Callable[[], None]:
    def limit() -> None:  # the child's address space: a bomb fails there, not on this machine
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))

    return limit


def test_a_size_over_the_pixel_limit_exits_2_before_the_model_loads(
    module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "small.png", 64, 48)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model",
         str(module_models / "up2.onnx"), "--out", str(out), "--size", "65535"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, preexec_fn=_limited(3000),
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "65535×49151 pixels (3.2 gigapixels); the limit is 268 megapixels" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists() or not any(out.iterdir())


def test_an_input_over_the_pixel_limit_names_the_command_lines_lever(
    models: Path, tmp_path: Path
) -> None:
    """The message names the option that raises the limit, and the option does raise it."""
    image = photo(tmp_path / "wide.png", 1200, 1000)  # 1.2 Mpx

    def run(limit: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engine", "run", "upscale", str(image), "--model",
             str(models / "up2.onnx"), "--out", str(tmp_path / limit), "--tile", "256",
             "--max-megapixels", limit],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip

    refused = run("1")
    assert refused.returncode == 4, refused.stderr
    assert "the limit is 1.0 megapixels" in refused.stderr, refused.stderr
    assert "raise the limit with --max-megapixels" in refused.stderr
    assert "settings" not in refused.stderr and "Traceback" not in refused.stderr
    admitted = run("5")  # the ×2 product too: 4.8 Mpx
    assert admitted.returncode == 0, admitted.stderr


@pytest.mark.parametrize(
    ("operation", "model", "output"),
    [
        (Operation.UPSCALE, "up2.onnx", OutputOptions()),  # the model's own ×2
        (Operation.UPSCALE, "up2.onnx", OutputOptions(factor=16)),
        (Operation.REMOVE_BACKGROUND, "u2netp.onnx", OutputOptions(width=4000)),
    ],
)
def test_a_product_over_the_limit_is_refused_from_the_header(
    module_models: Path, tmp_path: Path, operation: Operation, model: str, output: OutputOptions
) -> None:
    image = photo(tmp_path / "photo.png", 80, 60)  # 4800 pixels: under the limit of 9000
    engine = Engine(EngineSettings(models_dir=module_models, max_pixels=9000))
    request = OperationRequest(
        operation, str(module_models / model), (image,), output_dir=tmp_path / "out", output=output
    )
    with pytest.raises(UsageError, match=r"photo\.png: the product would be \d+×\d+ pixels"):
        engine.run(request)
    assert engine.loaded() == ()  # refused before the model loaded


def test_save_as_refuses_a_size_over_the_limit(tmp_path: Path) -> None:
    from engine.operations.products import export_product

    product = photo(tmp_path / "product.png", 64, 48)
    target = tmp_path / "saved.png"
    with pytest.raises(UsageError, match=r"the product would be 65535×49151 pixels"):
        export_product(product, target, OutputOptions(width=65535), (64, 48))
    assert not target.exists()


# ------------------------------------------------------- 7. the real product names, before work


def test_a_real_product_name_too_long_is_refused_before_any_run(
    module_models: Path, tmp_path: Path
) -> None:
    # "-x2.webp" (the stale template) fits after this stem; "-a-rather-long-model-name.png"
    # (the real name) does not.
    image = photo(tmp_path / ("n" * 240 + ".png"), 16, 12)
    engine = Engine(EngineSettings(models_dir=module_models))
    model = str(module_models / "a-rather-long-model-name.onnx")
    request = OperationRequest(Operation.UPSCALE, model, (image,), output_dir=tmp_path / "out")
    result = engine.run(request)
    (failure,) = result.failures
    assert result.runs == 0, "the model ran before the name was refused"
    assert "-a-rather-long-model-name.png: this output name is too long" in failure.message


# ------------------------------------------------------------ 5. a full disk, for every writer


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB tmpfs: a disk that fills up."""
    point = tmp_path / "small disk"
    point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"a 2 MB tmpfs cannot be mounted here ({done.stderr.strip()})")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def noise(path: Path, width: int, height: int, frames: int = 1) -> Path:
    """Incompressible pixels: a product of them fills a small disk."""
    rng = np.random.default_rng(1)
    images = [
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        for _ in range(frames)
    ]
    if frames == 1:
        images[0].save(path)
    else:
        images[0].save(path, save_all=True, append_images=images[1:], duration=100, loop=0)
    return path


def cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return engine_cli(*args, timeout=300, env=env)


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if ".partial" in p.name or "tessera-frames" in p.name]


@pytest.mark.parametrize(
    ("what", "operation", "model", "make"),
    [
        ("PNG", "upscale", "up2.onnx", lambda d: noise(d / "noise.png", 700, 700)),
        ("APNG", "upscale", "up2.onnx", lambda d: noise(d / "noise.gif", 300, 300, frames=4)),
        ("float TIFF", "depth", "da3.onnx", lambda d: noise(d / "noise.png", 900, 900)),
    ],
)
def test_a_full_disk_while_streaming_exits_3_with_a_sentence(
    module_models: Path,
    tmp_path: Path,
    small_disk: Path,
    what: str,
    operation: str,
    model: str,
    make: Callable[[Path], Path],
) -> None:
    image = make(tmp_path)
    done = cli("run", operation, image, "--model", module_models / model, "--out", small_disk)
    assert done.returncode == 3, f"{what}: exit {done.returncode}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr
    assert f"the disk holding {small_disk} is full" in done.stderr
    assert _leftovers(small_disk) == []


def test_a_full_temporary_disk_while_spilling_frames_exits_3(
    module_models: Path, tmp_path: Path, small_disk: Path
) -> None:
    frames = tmp_path / "frames"
    frames.mkdir()
    for index in range(4):
        noise(frames / f"f{index:02d}.png", 500, 500)
    out = tmp_path / "out"
    done = cli(
        "run", "depth", frames, "--model", module_models / "da3.onnx", "--out", out,
        env={"TMPDIR": str(small_disk)},
    )  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "requested and" not in done.stderr
    assert f"the disk holding the temporary folder {small_disk} is full" in done.stderr
    assert _leftovers(small_disk) == [] and (not out.exists() or _leftovers(out) == [])


# ------------------------------------------- 3, 11. a read-only models folder; kept copies' identity


def _upscaled(engine: Engine, model: Path, image: Path, out: Path) -> np.ndarray:
    result = engine.run(
        OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out, tile=32)
    )
    assert result.ok, result.failures
    (product,) = result.products
    with Image.open(product.path) as im:
        return np.asarray(im)


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """`view(folder)`: the folder through a real read-only bind mount."""
    mounted: list[Path] = []

    def view(folder: Path) -> Path:
        point = tmp_path / f"read-only {len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "--bind", "-o", "ro", str(folder), str(point)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"a read-only bind mount is not possible here ({done.stderr.strip()})")
        mounted.append(point)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(point)], check=False)
        if os.access(point, os.W_OK) and _writable(point):
            pytest.skip("the bind mount stayed writable")
        return point

    yield view
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def test_a_read_only_models_folder_with_an_empty_copies_folder_still_runs(
    tmp_path: Path, read_only_view: Callable[[Path], Path]
) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "compact.onnx", scale=2)
    (models / optimize.FOLDER).mkdir()  # made by an earlier run, or shipped empty
    image = noise(tmp_path / "in.png", 40, 32)
    plain = _upscaled(
        Engine(EngineSettings(optimized_copies=False)), model, image, tmp_path / "plain"
    )
    shared = read_only_view(models)
    got = _upscaled(Engine(EngineSettings()), shared / "compact.onnx", image, tmp_path / "out")
    assert np.abs(got.astype(int) - plain.astype(int)).max() <= 1  # the in-memory rewrite
    left = os.listdir(models / optimize.FOLDER)  # (the plain run's calibration notes stay)
    assert not [n for n in left if ".partial" in n or n.endswith(".onnx")], left


def test_a_copy_under_another_models_name_is_dropped_and_the_run_retried(tmp_path: Path) -> None:
    models = tmp_path / "models"
    x2 = make_compact_upscaler(models / "x2.onnx", scale=2)
    x4 = make_compact_upscaler(models / "x4.onnx", scale=4, seed=3)
    image = noise(tmp_path / "in.png", 40, 32)
    # ORT's kept copies (chains by Tessera's kernel: tests/test_winograd.py).
    ort_copies = EngineSettings(cpu_kernels=False)
    want = _upscaled(Engine(EngineSettings(optimized_copies=False)), x2, image, tmp_path / "a")
    _upscaled(Engine(ort_copies), x2, image, tmp_path / "b")
    _upscaled(Engine(ort_copies), x4, image, tmp_path / "c")
    folder = models / optimize.FOLDER
    (copy2,) = folder.glob("x2-*.onnx")
    (copy4,) = folder.glob("x4-*.onnx")
    os.replace(copy4, copy2)  # x4's copy under x2's name
    got = _upscaled(Engine(ort_copies), x2, image, tmp_path / "d")
    assert got.shape == want.shape and np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_a_model_rewritten_in_place_with_its_times_kept_gets_a_new_copy(tmp_path: Path) -> None:
    models = tmp_path / "models"
    model = make_compact_upscaler(models / "m.onnx", scale=2)
    image = noise(tmp_path / "in.png", 40, 32)
    _upscaled(Engine(EngineSettings()), model, image, tmp_path / "a")  # the copy is kept
    before = model.stat()
    other = make_compact_upscaler(tmp_path / "other.onnx", scale=2, seed=9).read_bytes()
    assert len(other) == before.st_size
    with open(model, "r+b") as f:  # the same inode and size,
        f.write(other)
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the mtime (touch -r)
    after = model.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    want = _upscaled(Engine(EngineSettings(optimized_copies=False)), model, image, tmp_path / "b")
    got = _upscaled(Engine(EngineSettings()), model, image, tmp_path / "c")
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1, "the stale copy was loaded"


# ------------------------------------------------------- 12. what a killed process leaves, swept


def _killed_while(code: str) -> int:
    """Run `code` in a real Python process that then SIGKILLs itself; returns its PID."""
    child = subprocess.run(
        [sys.executable, "-c", f"import os, signal\n{code}\nos.kill(os.getpid(), signal.SIGKILL)"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    return int(child.stdout.strip() or 0)


def test_the_leftovers_of_a_killed_process_are_swept_by_the_next_run(
    module_models: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    compact = make_compact_upscaler(tmp_path / "m" / "compact.onnx", scale=2)
    _killed_while(
        "from pathlib import Path\n"
        "from engine.io.publish import open_output\n"
        "from engine.runtime import optimize\n"
        f"kept = open_output(Path({str(out)!r}) / 'photo-up2.png'); kept.__enter__()\n"
        "from engine.runtime.identity import FileIdentity\n"
        f"p = Path({str(compact)!r})\n"
        "copy = optimize.cpu_copy(p, FileIdentity.read(p))\n"
        "import onnxruntime as ort\n"
        "so = ort.SessionOptions(); so.optimized_model_filepath = str(copy.save_to)\n"
        "ort.InferenceSession(copy.source, so, providers=['CPUExecutionProvider'])"
    )  # killed after ORT saved the copy, before it was given its name
    (product_left,) = [p for p in out.iterdir() if ".partial" in p.name]
    copies = compact.parent / optimize.FOLDER
    (copy_left,) = [p for p in copies.iterdir() if ".partial" in p.name]
    # Another user's leftover and a live process's temp file must stay.
    foreign = out / f".theirs.png.partial-{_dead_pid()}-0123abcd"
    foreign.write_bytes(b"x")
    os.chown(foreign, 54321, 54321)
    live = out / f".live.png.partial-{os.getpid()}-0123abcd"
    live.write_bytes(b"x")

    image = photo(tmp_path / "photo.png", 16, 12)
    done = cli("run", "upscale", image, "--model", compact, "--out", out)
    assert done.returncode == 0, done.stderr
    assert not product_left.exists() and not copy_left.exists()
    assert foreign.exists() and live.exists()


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(child.stdout)


# ------------------------------------------------------- 6. a folder's products are not its frames


def test_running_a_folder_again_takes_only_its_frames(module_models: Path, tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    folder.mkdir()
    for index in range(3):
        photo(folder / f"shot{index + 1:02d}.png", 20, 14, seed=index)
    for _ in range(2):
        done = cli(
            "run", "remove-background", folder, "--model", module_models / "u2netp.onnx", "--json"
        )
        assert done.returncode == 0, done.stderr
        cutouts = [p for p in json.loads(done.stdout)["products"] if p["kind"] == "image"]
        assert len(cutouts) == 3  # one per frame: not 9, then 27
    products = folder / "Tessera"
    assert sorted(p.name for p in folder.iterdir()) == [
        "Tessera", "shot01.png", "shot02.png", "shot03.png",
    ]  # fmt: skip
    assert any(p.name.startswith("shot01-cutout-0001") for p in products.iterdir())


def test_products_left_among_the_frames_are_not_frames(tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    folder.mkdir()
    for index in range(3):
        photo(folder / f"shot{index + 1:02d}.png", 20, 14, seed=index)
    for name in ("shot01-cutout-0001.png", "shot01-mask-0003.png", "shot01-up2-0002.webp"):
        photo(folder / name, 20, 14)
    assert [p.name for p in list_sequence(folder)] == ["shot01.png", "shot02.png", "shot03.png"]


# ------------------------------------------------------ 8. a product name that is not UTF-8


def test_a_name_that_is_not_utf8_is_printed_as_its_bytes(
    module_models: Path, tmp_path: Path
) -> None:
    folder = os.fsencode(tmp_path)
    name = b"caf\xe9.png"  # Latin-1: not UTF-8
    photo(Path(os.fsdecode(folder + b"/" + name)), 12, 10)
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", "upscale", os.fsdecode(folder + b"/" + name),
         "--model", str(module_models / "up2.onnx")],
        capture_output=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout == folder + b"/caf\xe9-up2.png\n"
    assert b"Traceback" not in done.stderr


# ------------------------------------------------------------ 13. Ctrl-C while the imports run


@pytest.mark.parametrize(
    ("command", "inside"),
    [
        (("-m", "engine", "models", "list"), "numpy"),  # inside the models' imports
        (("-m", "gui", "--self-test"), "PySide6.QtCore"),
    ],
)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_during_the_first_imports_is_quiet(
    command: tuple[str, ...], inside: str, signum: int, tmp_path: Path
) -> None:
    # `-X importtime` reports each import as it ends: once `inside` is reported, the import
    # holding it is still running, and the signal arrives in the middle of it.
    with subprocess.Popen(
        [sys.executable, "-X", "importtime", *command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stderr is not None
        for line in child.stderr:
            if line.startswith("import time:") and line.rstrip().endswith(inside):
                break
        child.send_signal(signum)
        rest = child.stderr.read()
        code = child.wait(timeout=60)
    errors = "".join(line for line in rest.splitlines(True) if not line.startswith("import time:"))
    assert "Traceback" not in errors, errors[-2000:]
    assert code == (130 if signum == signal.SIGINT else 143), errors[-2000:]
    assert "Stopped." in errors


# ------------------------------------------- 10. verify and add load the model, as a run would


def _newer_ir(path: Path) -> Path:
    model = onnx.load(str(make_upscaler(path, scale=2)))
    model.ir_version = 99
    onnx.save(model, str(path))
    return path


def test_verify_and_add_refuse_a_model_onnx_runtime_cannot_load(tmp_path: Path) -> None:
    model = _newer_ir(tmp_path / "newer.onnx")
    models = tmp_path / "models"
    said = "newer.onnx was saved in a newer ONNX format (IR version 99)"
    verified = cli("models", "verify", model, "--models-dir", models)
    assert verified.returncode == 4, verified.stdout + verified.stderr
    assert said in verified.stderr
    added = cli("models", "add", model, "--models-dir", models)
    assert added.returncode == 4 and said in added.stderr
    assert not (models / "newer.onnx").exists()
    image = photo(tmp_path / "p.png", 12, 10)
    ran = cli("run", "upscale", image, "--model", model, "--out", tmp_path / "out")
    assert ran.returncode == 4 and said in ran.stderr, ran.stderr


def test_ort_reasons_keep_their_end() -> None:
    from engine.runtime.sessions import _first_line

    text = (
        "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 "
        "onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&) "
        + "x" * 400
        + " the reason"
    )
    assert _first_line(text).endswith("the reason")
    assert "onnxruntime::Model::Model" not in _first_line(text)


# -------------------------------------------------------------- 9. the app on SIGTERM and SIGINT


def _sockets(folder: Path) -> list[Path]:
    import stat as st

    return [p for p in folder.rglob("tessera-*") if st.S_ISSOCK(p.lstat().st_mode)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_app_quits_cleanly_on_a_stop_signal(tmp_path: Path, signum: int) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env.update(
        HOME=str(tmp_path / "home"), XDG_DATA_HOME="", XDG_CONFIG_HOME="", TMPDIR=str(temp),
        QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT),
        TESSERA_INSTANCE_NAME=f"stop-{os.getpid()}-{signum}",
        TESSERA_STARTUP_PROBE="0",  # prints "shown" once the window is up
    )  # fmt: skip
    with subprocess.Popen(
        [sys.executable, "-m", "gui"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as app:  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not _sockets(temp) and app.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _sockets(temp), "the app never listened"
            assert app.stdout is not None
            assert app.stdout.readline().strip() == "shown"  # the window is up
            app.send_signal(signum)
            _, err = app.communicate(timeout=60)
        finally:
            if app.poll() is None:
                app.kill()
    assert app.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err
    assert _sockets(temp) == []  # the socket went with the app
    assert (tmp_path / "home" / ".config" / "Tessera" / "Tessera.conf").is_file()  # saved


# ------------------------------------------------------------------------------ the small ones


def big_icc_png(path: Path, megabytes: int) -> Path:
    """An 8-bit PNG whose ICC profile is `megabytes` big (Pillow's text limit is 1 MB)."""
    icc = np.random.default_rng(2).integers(0, 256, megabytes << 20, dtype=np.uint8).tobytes()
    Image.fromarray(np.full((12, 16, 3), 90, np.uint8)).save(path, icc_profile=icc)
    return path


def test_an_8_mb_icc_profile_is_not_damage(tmp_path: Path) -> None:
    path = big_icc_png(tmp_path / "profiled.png", 8)
    image = load_image(path, LIMIT)
    assert image.meta.icc_profile is not None and len(image.meta.icc_profile) == 8 << 20


def test_an_output_folder_that_takes_no_files_is_named_as_such(
    module_models: Path, tmp_path: Path
) -> None:
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    image = photo(tmp_path / "p.png", 12, 10)
    done = cli("run", "upscale", image, "--model", module_models / "up2.onnx", "--out", "/proc")
    assert done.returncode == 4, done.stderr
    assert "the folder /proc does not take new files" in done.stderr
    assert "does not exist" not in done.stderr


def test_a_whole_image_model_out_of_memory_does_not_offer_a_tile(
    module_models: Path, tmp_path: Path
) -> None:
    image = photo(tmp_path / "p.png", 40, 30)
    done = cli(
        "run", "remove-background", image, "--model", module_models / "u2netp.onnx",
        "--out", tmp_path / "out", "--cpu-mem-limit", "1",
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "Out of memory on cpu" in done.stderr
    assert "tile" not in done.stderr.split("error:", 1)[1]
    assert "[E:onnxruntime" not in done.stderr  # ORT's own coloured line
