"""OpenVINO as a runtime the engine knows: the plugin EP beside onnxruntime-gpu.

What holds everywhere: the plan asks for f32 through the plugin's devices, no shrink entry ever
reaches it (M3), a machine without the plugin or without an Intel device gets a sentence that
says why. Where the plugin offers an Intel CPU, real sessions: reused (M1), cancelled, and
products within 1/255 of the CPU provider's. The OpenVINO tests skip when the optional
`onnxruntime-ep-openvino` is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from pytestqt.qtbot import QtBot

from engine.errors import DeviceUnavailable
from engine.runtime import plugins
from engine.runtime.handle import SessionHandle
from engine.runtime.providers import (
    CPU_EP,
    OPENVINO_EP,
    Device,
    Runtime,
    missing_requirement,
    provider_plan,
    shrink_target,
)
from engine.runtime.sessions import SessionCache, SessionKey, create_session, env_allocators
from engine.samples.upscaler_models import make_compact_upscaler

REPO = Path(__file__).resolve().parent.parent


def _plugin_or_skip() -> None:
    pytest.importorskip(plugins.OPENVINO_MODULE, reason="onnxruntime-ep-openvino not installed")


def _cpu_target() -> plugins.PluginTarget:
    return plugins.openvino_target("cpu")


def _offers_cpu() -> bool:
    return plugins.register() is None and bool(plugins.ep_devices(_cpu_target()))


def test_openvino_is_a_runtime_of_the_cpu_device_asking_for_f32() -> None:
    assert Runtime.parse("OpenVINO") is Runtime.OPENVINO
    plan = provider_plan(Device("cpu"), Runtime.OPENVINO)
    assert plan.expected == OPENVINO_EP
    assert plan.plugin is not None and plan.plugin.kind == "cpu"
    config = json.loads(plan.plugin.option_dict["load_config"])
    assert config["CPU"]["INFERENCE_PRECISION_HINT"] == "f32"
    gpu = provider_plan(Device("gpu", 1), Runtime.OPENVINO)
    assert gpu.plugin is not None and (gpu.plugin.kind, gpu.plugin.index) == ("gpu", 1)
    # The plugin's own allocators: Tessera's shared arenas are not handed to it.
    assert env_allocators(plan) == (False, False)


def test_no_shrink_entry_ever_reaches_openvino() -> None:
    """M3: neither the CPU arena's nor a GPU arena's shrink for an OpenVINO session."""
    for options in ({}, {OPENVINO_EP: {"device_id": "0"}}):
        assert shrink_target([OPENVINO_EP, CPU_EP], options, cpu_arena=True) is None
    assert shrink_target([CPU_EP], {}, cpu_arena=True) == "cpu:0"


def test_without_the_plugin_the_runtime_names_the_install() -> None:
    """A machine without the optional package: the reason names the pip command."""
    code = (
        "import sys; sys.modules['onnxruntime_ep_openvino'] = None\n"
        "from engine.runtime.providers import Device, Runtime, missing_requirement\n"
        "print(missing_requirement(Runtime.OPENVINO, Device('cpu')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "not installed" in out and "pip install onnxruntime-ep-openvino" in out


def test_a_machine_the_plugin_offers_nothing_gets_the_reason_not_the_cpu(
    tmp_path: Path,
) -> None:
    """On a CPU the plugin does not take (AMD, ARM), the request fails with why, and no
    session silently runs on the CPU provider instead."""
    _plugin_or_skip()
    if _offers_cpu():
        pytest.skip("the OpenVINO plugin offers this CPU")
    reason = missing_requirement(Runtime.OPENVINO, Device("cpu"))
    assert reason is not None and "offers no CPU" in reason
    model = make_compact_upscaler(tmp_path / "c.onnx", scale=2)
    cache = SessionCache(threads=1)
    with pytest.raises(DeviceUnavailable, match="choose runtime cpu"):
        cache.get(SessionKey.make(model, Device("cpu"), Runtime.OPENVINO))
    assert cache.created == 0


@pytest.fixture
def openvino_cpu() -> None:
    _plugin_or_skip()
    if not _offers_cpu():
        pytest.skip(f"the OpenVINO plugin offers no CPU here: {plugins.missing(_cpu_target())}")


def _image(h: int, w: int) -> np.ndarray:
    return np.random.default_rng(3).random((1, 3, h, w), dtype=np.float32)


@pytest.mark.usefixtures("openvino_cpu")
def test_openvino_sessions_are_reused_and_match_the_cpu_provider(tmp_path: Path) -> None:
    model = make_compact_upscaler(tmp_path / "c.onnx", scale=2, features=16)
    cache = SessionCache(threads=2, cpu_kernels=False)
    key = SessionKey.make(model, Device("cpu"), Runtime.OPENVINO)
    first, created = cache.get(key)
    again, created_again = cache.get(key)
    assert (created, created_again) == (True, False)
    assert again.session is first.session  # M1
    assert first.providers[0] == OPENVINO_EP and first.shrink_target is None  # M3
    x = _image(24, 20)
    got = SessionHandle(cache, key).run({"input": x}, last=True)[0]
    cpu = create_session(model, provider_plan(Device("cpu"), Runtime.CPU)).run(None, {"input": x})[
        0
    ]
    assert np.abs(np.clip(got, 0, 1) - np.clip(cpu, 0, 1)).max() * 255 <= 1.0
    cache.release_all()


@pytest.mark.usefixtures("openvino_cpu")
def test_an_openvino_run_is_cancelled_by_the_terminate_flag(tmp_path: Path) -> None:
    model = make_compact_upscaler(tmp_path / "c.onnx", scale=2)
    session = create_session(model, provider_plan(Device("cpu"), Runtime.OPENVINO))
    options = ort.RunOptions()
    options.terminate = True
    with pytest.raises(Exception, match=r"(?i)terminat"):
        session.run(None, {"input": _image(16, 16)}, options)


def test_the_window_lists_openvino_among_the_cpu_runtimes(qtbot: QtBot, tmp_path: Path) -> None:
    from PySide6.QtCore import QSettings

    from engine.runtime.devices import RuntimeReport
    from gui.settings import AppSettings
    from gui.widgets.operation_panel import DATA, OperationPanel

    panel = OperationPanel(
        AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    )
    qtbot.addWidget(panel)
    panel.set_runtimes(
        (
            RuntimeReport("cpu", "cpu", True, CPU_EP, ""),
            RuntimeReport("openvino", "cpu", True, OPENVINO_EP, ""),
            RuntimeReport("openvino", "gpu:0", False, None, "it offers no GPU on this machine"),
        )
    )
    items = {
        panel.runtime.itemData(i, DATA): panel.runtime.itemText(i)
        for i in range(panel.runtime.count())
    }
    assert items == {"auto": "Automatic", "cpu": "CPU", "openvino": "OpenVINO"}
    panel.runtime.setCurrentIndex(panel.runtime.findData("openvino", DATA))
    assert panel.current_runtime() == "openvino"


def test_the_memory_panel_says_unload_is_what_frees_an_openvino_session(
    qtbot: QtBot,
    tmp_path: Path,
) -> None:
    """M3 in the window: a runtime whose arena takes no shrink is named, with Unload."""
    from engine.runtime.sessions import SessionInfo
    from gui.widgets.memory_panel import MemoryPanel

    model = make_compact_upscaler(tmp_path / "c.onnx", scale=2)
    cache = SessionCache(threads=1, cpu_kernels=False)
    cache.get(SessionKey.make(model, Device("cpu"), Runtime.CPU))
    (cpu,) = cache.snapshot()
    assert cpu.shrinkable
    ov = SessionInfo(
        SessionKey.make(model, Device("cpu"), Runtime.OPENVINO),
        "c.onnx",
        "cpu",
        "openvino",
        OPENVINO_EP,
        1,
        1,
        0.0,
        0,
        0,
        shrinkable=False,
    )
    panel = MemoryPanel()
    qtbot.addWidget(panel)
    panel.set_sessions((cpu,))
    assert "Unload hands it back" not in panel.diagnosis()
    panel.set_sessions((cpu, ov))
    assert "c.onnx on openvino: this runtime cannot hand its working memory back" in (
        panel.diagnosis()
    )
    cache.release_all()
