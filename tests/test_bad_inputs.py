"""A hostile-input corpus, generated here, through `python -m engine run` for every family.

Each family gets ONE batch of the whole image corpus (good and bad inputs mixed, in a folder
whose name has unicode and runs of spaces): every bad input is refused with its own exit code
and a message naming the file, every good one is produced, and afterwards the output folder
holds no partial file (no `.partial-` name, no zero-byte file). Output folders that cannot be
written to and bad model files are separate runs, since they fail for the whole request.

A read-only folder needs care under root, which ignores permission bits: the run is started
through `setpriv` with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped, so the folder's mode
binds root like anyone else. An output "folder" whose parent is a regular file is the
privilege-free way to get a folder nobody can create; both are tried.

Counts of tried/passed cases are printed per test and in a table at the end of the module.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from engine.cli import main as cli_main
from engine.io.reading import load_image
from engine.samples.background_models import make_u2net
from engine.samples.depth_models import make_da3
from engine.samples.faulty_models import make_external_data, make_nonfinite, make_two_strings
from engine.samples.geometry_models import make_moge
from engine.samples.upscaler_models import make_upscaler
from tests.engine_helpers import photo
from tests.processes import drop_root_override
from tests.processes import engine_cli as run_engine
from tests.test_cli import png_header_only  # the header-only PNG bomb
from tests.test_limits import big_icc_png, gif_with_a_growing_frame, tiff_with_a_larger_page

ROOT = Path(__file__).resolve().parent.parent
EXIT_BAD = 4

# (category -> [tried, passed]) over the whole module, printed at its end.
TALLY: dict[str, list[int]] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_tally() -> Iterator[None]:
    yield
    if TALLY:
        print(f"\n\n{'bad-input corpus':<46} tried  passed")
        for name, (tried, passed) in TALLY.items():
            print(f"  {name:<44} {tried:>5}  {passed:>6}")
        tried = sum(t for t, _ in TALLY.values())
        passed = sum(p for _, p in TALLY.values())
        print(f"  {'total':<44} {tried:>5}  {passed:>6}")


class Checks:
    """Soft checks per case, so one run counts every case and reports every failure."""

    def __init__(self, category: str) -> None:
        self.category = category
        self.problems: dict[str, list[str]] = {}

    def case(self, name: str, problems: list[str]) -> None:
        self.problems.setdefault(name, []).extend(problems)

    def finish(self) -> None:
        tried = len(self.problems)
        failed = {k: v for k, v in self.problems.items() if v}
        tally = TALLY.setdefault(self.category, [0, 0])
        tally[0] += tried
        tally[1] += tried - len(failed)
        print(f"\n{self.category}: {tried} tried, {tried - len(failed)} passed")
        assert not failed, "\n".join(f"{k}: {'; '.join(v)}" for k, v in failed.items())


# ---------------------------------------------------------------------------------- the corpus


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


ORANGE = (230, 120, 30)


@dataclass(frozen=True)
class Corpus:
    folder: Path
    bad: dict[str, Path]  # what the file is -> path
    good: dict[str, Path]
    said: dict[str, str] = field(default_factory=dict)  # what -> a pattern its message has

    def inputs(self) -> list[Path]:
        return [*self.bad.values(), *self.good.values()]


def build_corpus(base: Path) -> Corpus:
    folder = base / "in  ünïcødé 图像 folder"
    folder.mkdir(parents=True)
    with Image.open(photo(base / "source.png", 48, 36)) as im:
        source = im.convert("RGB")
    png, jpeg, webp = (_encoded(source, f) for f in ("PNG", "JPEG", "WEBP"))

    bad: dict[str, Path] = {}

    def add_bad(what: str, name: str, data: bytes) -> None:
        (folder / name).write_bytes(data)
        bad[what] = folder / name

    add_bad("empty file", "empty.png", b"")
    add_bad("truncated PNG", "truncated.png", png[: len(png) // 2])
    add_bad("truncated JPEG", "truncated.jpg", jpeg[: len(jpeg) // 2])
    add_bad("truncated WebP", "truncated.webp", webp[: len(webp) // 2])
    add_bad("text file named .png", "notes.png", b"shopping list\nmilk\n")
    bad["decompression bomb 30000x30000"] = png_header_only(folder / "bomb.png", 30000, 30000)
    bad["missing file"] = folder / "missing.png"
    # 250 characters before ".png": every product name is over the 255-byte limit of the
    # file system, which must be found before the model runs, not when the product is written.
    add_bad("254-character name", "n" * 250 + ".png", png)
    # A later page larger than page 1 is refused from its header, before it is decoded (#20).
    bad["TIFF page 2 of 6000×6000"] = tiff_with_a_larger_page(folder / "pages.tif", 6000)
    bad["GIF frame 2 growing the canvas"] = gif_with_a_growing_frame(folder / "grow.gif", 6000)
    said = {
        "TIFF page 2 of 6000×6000": r"frame 2 is 6000×6000 pixels but frame 1 is 4×4",
        "GIF frame 2 growing the canvas": r"frame 2 is 6000×6000 pixels but frame 1 is 4×4",
    }

    good: dict[str, Path] = {}
    rng = np.random.default_rng(7)
    Image.fromarray(np.array([[[200, 40, 90]]], np.uint8)).save(folder / "one.png")
    good["1x1"] = folder / "one.png"
    line = rng.integers(0, 256, (1, 20000, 3), dtype=np.uint8)
    Image.fromarray(line).save(folder / "line.png")
    good["1x20000"] = folder / "line.png"
    orange = np.clip(np.array(ORANGE) + rng.normal(0, 4, (24, 32, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(orange).convert("CMYK").save(folder / "cmyk.jpg", quality=95)
    good["CMYK JPEG"] = folder / "cmyk.jpg"
    ramp = np.linspace(0, 65535, 20 * 24).reshape(20, 24).astype(np.uint16)
    Image.fromarray(ramp).save(folder / "grey16.png")  # Pillow writes 16-bit grey from uint16
    good["16-bit grey PNG"] = folder / "grey16.png"
    pal = Image.new("P", (24, 16))
    pal.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0])
    index = np.zeros((16, 24), np.uint8)
    index[:, 12:] = 1 + (np.arange(12) % 2)  # right half opaque red/green, left half index 0
    pal.putdata(index.ravel().tolist())
    pal.save(folder / "palette.png", transparency=0)
    good["palette PNG with transparency"] = folder / "palette.png"
    frame = Image.fromarray(np.full((16, 20, 3), 120, np.uint8))
    frame.save(folder / "single.gif", save_all=True, duration=100, loop=0)
    good["animated GIF with one frame"] = folder / "single.gif"
    # Past Pillow's 1 MB text-chunk limit, which called such a file damaged (#20).
    good["PNG with a 2 MB ICC profile"] = big_icc_png(folder / "profiled.png", 2)
    photo(folder / "ünïcødé 图像.png", 20, 14, seed=3)
    good["unicode name"] = folder / "ünïcødé 图像.png"
    photo(folder / "spaced   name  .png", 18, 12, seed=4)
    good["space-filled name"] = folder / "spaced   name  .png"
    # 77 CJK characters: 231 bytes, so every product name fits in 255 bytes; a temp name cut
    # by characters rather than bytes would not.
    photo(folder / ("长" * 77 + ".png"), 16, 12, seed=5)
    good["231-byte CJK name"] = folder / ("长" * 77 + ".png")
    return Corpus(folder, bad, good, said)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    made = build_corpus(tmp_path_factory.mktemp("corpus"))
    # Make sure the generator made what the names say, or the test would prove little.
    with Image.open(made.good["CMYK JPEG"]) as im:
        assert im.mode == "CMYK"
    with Image.open(made.good["16-bit grey PNG"]) as im:
        assert im.mode.startswith("I;16")
    with Image.open(made.good["palette PNG with transparency"]) as im:
        assert im.mode == "P" and "transparency" in im.info
    gif = made.good["animated GIF with one frame"]
    with Image.open(gif) as im:
        assert im.format == "GIF" and getattr(im, "n_frames", 1) == 1
    assert b"NETSCAPE2.0" in gif.read_bytes()  # the animation extension is there
    return made


@dataclass(frozen=True)
class Family:
    operation: str
    make_model: Callable[[Path], Path]
    precious: str  # a product name of one.png created before the run: it must survive


FAMILIES = {
    "upscale": Family("upscale", lambda d: make_upscaler(d / "up2.onnx", scale=2), "one-up2.png"),
    "remove-background": Family(
        "remove-background", lambda d: make_u2net(d / "u2netp.onnx"), "one-mask.png"
    ),
    "depth": Family("depth", lambda d: make_da3(d / "da3.onnx"), "one-depth.png"),
    "geometry": Family("geometry", lambda d: make_moge(d / "moge.onnx"), "one-normal.png"),
}


def engine_cli(*args: str | Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return run_engine(*args, timeout=300, prefix=prefix)  # a whole corpus takes its time


def no_partial_files(folder: Path) -> list[str]:
    """What in `folder` looks half written: a temp name, or a file with nothing in it."""
    if not folder.exists():
        return []
    problems = []
    for f in folder.rglob("*"):
        if ".partial-" in f.name:
            problems.append(f"partial file left: {f.name}")
        elif f.is_file() and f.stat().st_size == 0:
            problems.append(f"zero-byte file left: {f.name}")
    return problems


def _good_checks(
    what: str, source: Path, paths: list[Path], family: str, data: dict[str, Any]
) -> list[str]:
    """What each good input must look like beyond 'was produced'."""
    problems: list[str] = []
    first = paths[0]
    if family == "upscale":
        out = load_image(first, 1 << 30)
        src = load_image(source, 1 << 30)
        h, w = src.frames[0].shape[:2]
        if out.frames[0].shape[:2] != (2 * h, 2 * w):
            problems.append(f"upscaled to {out.frames[0].shape[:2]}, not {(2 * h, 2 * w)}")
        if len(out.frames) != 1:
            problems.append(f"{len(out.frames)} frames out of a still image")
        if what == "16-bit grey PNG":
            if out.frames[0].dtype != np.uint16 or out.meta.bit_depth != 16:
                problems.append(f"output is {out.frames[0].dtype}, not 16-bit")
            elif len(np.unique(out.frames[0])) <= 256:
                problems.append("16-bit output holds only 8-bit levels")
        if what == "palette PNG with transparency":
            px = out.frames[0]
            if px.shape[2] not in (2, 4):
                problems.append(f"alpha lost: {px.shape[2]} channels")
            elif px[:, 0, -1].max() != 0 or px[:, -1, -1].min() != 255:
                problems.append("transparent half not transparent / opaque half not opaque")
        if what == "CMYK JPEG":
            mean = out.frames[0][..., :3].reshape(-1, 3).mean(axis=0)
            if np.abs(mean - np.array(ORANGE)).max() > 12:
                problems.append(f"colours {mean.round()} are not the input's orange {ORANGE}")
    if family == "remove-background" and what == "16-bit grey PNG":
        cut = next(p for p in paths if p.name.endswith("-cutout.png"))
        if load_image(cut, 1 << 30).frames[0].dtype != np.uint16:
            problems.append("the cut-out of a 16-bit input is not 16-bit")
    for p in paths:
        if p.suffix == ".png" and p.name != data.get("precious"):
            with Image.open(p) as im:
                im.load()  # a complete, decodable file
    return problems


@pytest.mark.parametrize("family", list(FAMILIES))
def test_one_batch_per_family(
    family: str, corpus: Corpus, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fam = FAMILIES[family]
    model = fam.make_model(tmp_path_factory.mktemp("models"))
    out = tmp_path_factory.mktemp("outputs") / f"out  ✓ {family}"
    out.mkdir()
    (out / fam.precious).write_bytes(b"precious")  # an output name that already exists
    p = engine_cli("run", family, *corpus.inputs(), "--model", model, "--out", out, "--json")
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    data = json.loads(p.stdout)
    checks = Checks(f"{family}: image corpus")
    failures = {Path(f["source"]).name: f for f in data["failures"]}
    products: dict[str, list[Path]] = {}
    for prod in data["products"]:
        products.setdefault(Path(prod["source"]).name, []).append(Path(prod["path"]))

    for what, path in corpus.bad.items():
        problems = []
        f = failures.get(path.name)
        if f is None:
            problems.append("not refused")
        else:
            if f["kind"] != "bad_input":
                problems.append(f"kind {f['kind']}, not bad_input (exit {EXIT_BAD})")
            if path.name not in f["message"]:
                problems.append(f"message does not name the file: {f['message']!r}")
            if f"error: {f['message']}" not in p.stderr:
                problems.append("message not on stderr")
            if what in corpus.said and not re.search(corpus.said[what], f["message"]):
                problems.append(f"message is not {corpus.said[what]!r}: {f['message']!r}")
        if path.name in products:
            problems.append("produced something")
        checks.case(f"bad: {what}", problems)

    for what, path in corpus.good.items():
        problems = []
        if path.name in failures:
            problems.append(f"refused: {failures[path.name]['message']}")
        paths = products.get(path.name, [])
        if not paths:
            problems.append("no product")
        elif not all(q.parent == out and q.is_file() and q.stat().st_size > 0 for q in paths):
            problems.append(f"products missing or empty: {paths}")
        else:
            problems += _good_checks(what, path, paths, family, {"precious": fam.precious})
        checks.case(f"good: {what}", problems)

    precious = out / fam.precious
    numbered = [q for q in products.get("one.png", []) if q.name == fam.precious[:-4] + "-1.png"]
    checks.case(
        "existing output file kept, product numbered",
        ([] if precious.read_bytes() == b"precious" else ["the existing file was overwritten"])
        + ([] if numbered else [f"no numbered product: {products.get('one.png')}"]),
    )
    checks.case(
        f"exit code {EXIT_BAD} for the batch",
        [] if p.returncode == EXIT_BAD == data["exit_code"] else [f"exit {p.returncode}"],
    )
    checks.case(
        "one session for the whole batch",
        [] if data["sessions"]["created"] == 1 else [f"sessions {data['sessions']}"],
    )
    checks.case("no partial file in the output folder", no_partial_files(out))
    checks.finish()


# ----------------------------------------------------------------- folders that cannot be written


@pytest.mark.parametrize("family", list(FAMILIES))
def test_read_only_output_folder(family: str, tmp_path: Path) -> None:
    fam = FAMILIES[family]
    model = fam.make_model(tmp_path / "models")
    inputs = [photo(tmp_path / "a b.png", 20, 14), photo(tmp_path / "ç.png", 16, 12, seed=2)]
    out = tmp_path / "read-only"
    out.mkdir()
    out.chmod(0o555)
    try:
        p = engine_cli(
            "run", family, *inputs, "--model", model, "--out", out, prefix=drop_root_override()
        )
    finally:
        out.chmod(0o755)
    checks = Checks(f"{family}: read-only output folder")
    for src in inputs:
        line = next((ln for ln in p.stderr.splitlines() if ln.startswith(f"error: {src.name}")), "")
        checks.case(
            f"{src.name} refused",
            [] if "permission denied" in line else [f"no readable error: {p.stderr[-500:]!r}"],
        )
    checks.case("exit code 4", [] if p.returncode == EXIT_BAD else [f"exit {p.returncode}"])
    checks.case("folder left empty", [f"left {os.listdir(out)}"] if list(out.iterdir()) else [])
    checks.finish()


def test_output_folder_under_a_regular_file(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "models" / "up2.onnx", scale=2)
    inputs = [photo(tmp_path / "a.png", 20, 14), photo(tmp_path / "b.png", 16, 12, seed=2)]
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the output folder's parent should be")
    p = engine_cli("run", "upscale", *inputs, "--model", model, "--out", blocker / "out")
    checks = Checks("upscale: output folder under a file")
    for src in inputs:
        line = next((ln for ln in p.stderr.splitlines() if ln.startswith(f"error: {src.name}")), "")
        checks.case(
            f"{src.name} refused",
            [] if "cannot be created" in line and "Not a directory" in line else [p.stderr[-400:]],
        )
    checks.case("exit code 4", [] if p.returncode == EXIT_BAD else [f"exit {p.returncode}"])
    checks.case("nothing written", [] if blocker.is_file() else ["the file was replaced"])
    checks.finish()


# ------------------------------------------------------------------------------ bad model files


def bad_models(folder: Path) -> dict[str, tuple[Path, str]]:
    """What the model is -> (path, a phrase its refusal must contain)."""
    folder.mkdir(parents=True, exist_ok=True)
    good = make_upscaler(folder / "good.onnx", scale=2).read_bytes()
    (folder / "truncated.onnx").write_bytes(good[: len(good) // 2])
    make_two_strings(folder / "strings.onnx")
    (folder / "deep").mkdir()
    make_external_data(folder / "deep" / "escapes.onnx", "../weights.bin")
    outside = folder.parent / f"{folder.name}-outside.bin"
    make_external_data(folder / "absolute.onnx", str(outside))
    # A plain name in the folder that is a link to a file outside it.
    make_external_data(folder / "linked.onnx", "linked.bin", write_data=False)
    target = folder.parent / f"{folder.name}-linked-target.bin"
    target.write_bytes(b"\0" * 3 * 3 * 3 * 3 * 4)
    (folder / "linked.bin").symlink_to(target)
    (folder / "folder.onnx").mkdir()
    os.mkfifo(folder / "pipe.onnx")
    (folder / "loop.onnx").symlink_to(folder / "loop.onnx")
    return {
        "a folder named .onnx": (folder / "folder.onnx", "is a folder, not a model file"),
        "a FIFO named .onnx": (folder / "pipe.onnx", "is not a regular file"),
        "a symbolic link loop": (folder / "loop.onnx", "loops back on itself"),
        "truncated ONNX": (folder / "truncated.onnx", "truncated"),
        "fits no family": (folder / "strings.onnx", "fits none of Tessera's model families"),
        "external data via ..": (folder / "deep" / "escapes.onnx", "leaves the model's folder"),
        "external data at an absolute path": (folder / "absolute.onnx", "absolute path"),
        "external data linked out of the folder": (folder / "linked.onnx", "out of the model's"),
    }


def test_bad_model_files_in_every_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = bad_models(tmp_path / "models")
    img = photo(tmp_path / "a.png", 20, 14)
    checks = Checks("bad model files (x4 families)")
    for what, (model, phrase) in models.items():
        for family in FAMILIES:
            out = tmp_path / f"out-{family}"
            # In-process: the refusal happens before any session exists, so the CLI's own
            # code path is the same and 20 runs cost no interpreter starts.
            code = cli_main(["run", family, str(img), "--model", str(model), "--out", str(out)])
            err = capsys.readouterr().err
            problems = []
            if code != EXIT_BAD:
                problems.append(f"exit {code}")
            if model.name not in err or phrase not in err:
                problems.append(f"message {err.strip()!r}")
            if "Traceback" in err:
                problems.append("traceback shown")
            problems += [f"wrote {q.name}" for q in (out.iterdir() if out.exists() else [])]
            checks.case(f"{what} / {family}", problems)
    checks.finish()


# ------------------------------------------------------------- models returning NaN or inf


def test_models_returning_nan_or_inf_in_every_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model whose output is not finite (fp16 overflow, broken export) is a bad model: exit 4,
    a message naming the model (and the frame and tile where it was first seen), nothing
    written — not an all-black product with exit 0."""
    img = photo(tmp_path / "a.png", 40, 30)
    checks = Checks("models returning NaN or inf (x4 families)")
    for family, fam in FAMILIES.items():
        good = fam.make_model(tmp_path / "models" / family)
        for value, word in ((float("nan"), "NaN"), (float("inf"), "infinite")):
            model = make_nonfinite(good, tmp_path / "models" / f"{family}-{word}.onnx", value=value)
            out = tmp_path / f"out-{family}-{word}"
            code = cli_main(["run", family, str(img), "--model", str(model), "--out", str(out)])
            err = capsys.readouterr().err
            problems = [] if code == EXIT_BAD else [f"exit {code}"]
            if model.name not in err or f"returned {word} values" not in err:
                problems.append(f"message {err.strip()!r}")
            problems += [f"wrote {q.name}" for q in (out.iterdir() if out.exists() else [])]
            checks.case(f"{family}: {word}", problems)
    checks.finish()


def test_nonfinite_output_names_the_first_tile_where_it_appeared(tmp_path: Path) -> None:
    # White only in the bottom-right corner: the poisoned (bright) output starts at a late tile.
    pixels = np.full((64, 64, 3), 60, np.uint8)
    pixels[48:, 48:] = 255
    Image.fromarray(pixels).save(tmp_path / "corner.png")
    model = make_nonfinite(
        make_upscaler(tmp_path / "up2.onnx", scale=2), tmp_path / "hot.onnx", above=0.99
    )
    out = tmp_path / "out"
    p = engine_cli(
        "run",
        "upscale",
        tmp_path / "corner.png",
        "--model",
        model,
        "--out",
        out,
        "--tile",
        "32",
        "--json",
    )
    data = json.loads(p.stdout)
    assert p.returncode == EXIT_BAD and data["failures"][0]["kind"] == "bad_model", p.stderr
    message = data["failures"][0]["message"]
    assert "hot.onnx returned NaN values" in message and "corner.png" in message
    last = re.search(r"\(tile (\d+) of (\d+)\)", message)
    assert last and last[1] == last[2] != "1", message  # only the last tile holds the corner
    assert not out.exists() or not list(out.iterdir())


def test_geometry_points_may_be_infinite_where_its_own_mask_is_invalid(tmp_path: Path) -> None:
    """MoGe-2's points are exp(z): they may overflow where its mask says "invalid" (sky), and
    infer() drops those pixels; the same values where the mask is valid are a broken model."""
    moge = make_moge(tmp_path / "moge.onnx")
    pixels = np.full((28, 42, 3), 90, np.uint8)
    pixels[:, 30:] = 255  # near-white: invalid in the contract model's mask
    Image.fromarray(pixels).save(tmp_path / "sky.png")
    for where, expect in (("invalid", 0), ("valid", EXIT_BAD)):
        model = make_nonfinite(
            moge,
            tmp_path / f"moge-{where}.onnx",
            output="points",
            value=float("inf"),
            where_mask=where,
        )
        out = tmp_path / f"out-{where}"
        p = engine_cli("run", "geometry", tmp_path / "sky.png", "--model", model, "--out", out)
        assert p.returncode == expect, p.stderr
        if expect == 0:
            assert (out / "sky-geometry-depth.tif").is_file() and (out / "sky-points.ply").is_file()
        else:
            assert "infinite values in its output 'points'" in p.stderr
            assert not out.exists() or not list(out.iterdir())


# ------------------------------------------------------------------- output names, up front


def test_an_output_name_too_long_is_refused_before_inference(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    long = photo(tmp_path / ("n" * 250 + ".png"), 20, 14)
    fine = photo(tmp_path / "fine.png", 20, 14)
    out = tmp_path / "out"
    p = engine_cli("run", "upscale", long, fine, "--model", model, "--out", out, "--json")
    data = json.loads(p.stdout)
    assert p.returncode == EXIT_BAD, p.stderr
    (failure,) = data["failures"]
    assert failure["kind"] == "bad_input" and "too long" in failure["message"]
    assert data["runs"] == 1, "the long name must be refused before its model run"
    assert sorted(q.name for q in out.iterdir()) == ["fine-up2.png"]


# The child runs the CLI on a "file system" that refuses ':' in names, as FAT, exFAT and SMB
# shares do (EINVAL). No such file system can be mounted here, so os.open is made to refuse.
FAT_NAMES = """
import errno, os, sys
real_open = os.open
def fat_open(path, *args, **kwargs):
    if ":" in os.path.basename(os.fsdecode(path)):
        raise OSError(errno.EINVAL, "Invalid argument", os.fsdecode(path))
    return real_open(path, *args, **kwargs)
os.open = fat_open
from engine.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_name_the_file_system_refuses_is_found_before_inference(tmp_path: Path) -> None:
    model = make_upscaler(tmp_path / "up2.onnx", scale=2)
    odd = photo(tmp_path / "12:30 photo.png", 20, 14)
    out = tmp_path / "out"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            FAT_NAMES,
            "run",
            "upscale",
            str(odd),
            "--model",
            str(model),
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
    )
    data = json.loads(p.stdout)
    assert p.returncode == EXIT_BAD, p.stderr
    (failure,) = data["failures"]
    assert failure["kind"] == "bad_input" and "refuses this name" in failure["message"]
    assert "12:30 photo" in failure["message"]
    assert data["runs"] == 0, "the name must be refused before the model runs"
    assert not list(out.iterdir())
