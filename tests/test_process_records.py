"""Every Tessera process says what it holds (issue #22 item 2, M6): real processes write their
records in a private runtime folder of the test's own, `python -m engine memory` reads them,
names a model loaded twice, and ignores and sweeps the records of processes that are gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.runtime import census, records
from engine.runtime.records import HeldSession, ProcessKind, ProcessRecord
from engine.samples.synthetic import slow_model
from engine.samples.upscaler_models import make_upscaler
from engine.settings import private_runtime_dir
from tests.engine_helpers import photo

ROOT = Path(__file__).resolve().parents[1]

# Loads the model given in argv[1] through a real Engine, says "ready", then waits for stdin to
# close (or a signal): a second Tessera-engine process holding one session.
HOLDER = """
import sys
from pathlib import Path
from engine.api import Engine
from engine.requests import Operation, OperationRequest
from engine.settings import EngineSettings
model, image, out = (Path(a) for a in sys.argv[1:4])
engine = Engine(EngineSettings(models_dir=model.parent))
result = engine.run(OperationRequest(Operation.UPSCALE, str(model), (image,), output_dir=out))
print("ready" if result.ok else "failed", flush=True)
sys.stdin.read()
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


class Holder:
    def __init__(self, model: Path, tmp: Path, name: str) -> None:
        image = photo(tmp / f"{name}.png", 24, 16)
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(model), str(image), str(tmp / f"out-{name}")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=ROOT,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line == "ready", self.process.communicate()

    @property
    def pid(self) -> int:
        return self.process.pid

    def end(self) -> int:
        """Close its stdin: it returns from its script and exits normally."""
        self.process.communicate(timeout=60)
        return self.process.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=60)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return make_upscaler(tmp_path / "models" / "realesrgan-x4plus.onnx", scale=4)


def _memory(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "memory", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )


def test_two_processes_on_one_model_are_named_as_a_duplicate(
    processes_dir: Path, model: Path, tmp_path: Path
) -> None:
    a = Holder(model, tmp_path, "a")
    b = Holder(model, tmp_path, "b")
    try:
        assert sorted(p.name for p in processes_dir.iterdir()) == sorted(
            [f"{a.pid}.json", f"{b.pid}.json"]
        )
        done = _memory("--json")
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        pids = [p["pid"] for p in data["processes"]]
        assert set(pids) == {a.pid, b.pid}
        for p in data["processes"]:
            (held,) = p["sessions"]
            assert held["model"] == "realesrgan-x4plus" and held["device"] == "cpu"
            assert held["weight_bytes"] == model.stat().st_size
            assert held["path"] == str(model.resolve()) and p["rss"] > 0
        (dup,) = data["duplicates"]
        assert dup["model"] == "realesrgan-x4plus"
        assert sorted(dup["holders"]) == sorted([f"script (pid {a.pid})", f"script (pid {b.pid})"])
        text = _memory()
        assert text.returncode == 0, text.stderr
        (line,) = [ln for ln in text.stdout.splitlines() if "loaded twice" in ln]
        assert line.startswith("warning: realesrgan-x4plus is loaded twice: script (pid ")
        assert "each" in line
        # Neither holder is counted among the "other" ONNX Runtime users: they are Tessera's.
        assert not {o["pid"] for o in data["cpu_onnx"]} & {a.pid, b.pid}
    finally:
        a.kill()
        b.kill()


def test_a_normal_exit_removes_the_record(processes_dir: Path, model: Path, tmp_path: Path) -> None:
    holder = Holder(model, tmp_path, "a")
    assert (processes_dir / f"{holder.pid}.json").exists()
    assert holder.end() == 0
    assert list(processes_dir.iterdir()) == []


def test_a_sigterm_nobody_handles_still_ends_the_process_at_once(
    processes_dir: Path, model: Path, tmp_path: Path
) -> None:
    """Recording adds no signal handler (one would wait for the main thread): the process dies
    of the signal as before, and its record is ignored and swept like a killed one's."""
    holder = Holder(model, tmp_path, "a")
    holder.process.send_signal(signal.SIGTERM)
    holder.process.communicate(timeout=60)
    assert holder.process.returncode == -signal.SIGTERM
    assert records.read_all() == ()
    assert list(processes_dir.iterdir()) == []


def test_a_sigkilled_process_record_is_ignored_and_swept(
    processes_dir: Path, model: Path, tmp_path: Path
) -> None:
    live = Holder(model, tmp_path, "live")
    dead = Holder(model, tmp_path, "dead")
    try:
        dead.kill()
        assert (processes_dir / f"{dead.pid}.json").exists()  # SIGKILL leaves it behind
        now = census.take(scan_cpu=False)
        assert [p.record.pid for p in now.processes] == [live.pid]
        assert now.duplicates == ()  # the dead one's copy is not counted
        assert not (processes_dir / f"{dead.pid}.json").exists()  # swept
        assert (processes_dir / f"{live.pid}.json").exists()
    finally:
        live.kill()


def test_a_recycled_pid_is_not_taken_for_the_recorded_process(processes_dir: Path) -> None:
    """A record whose pid now belongs to another process (its start time differs) is stale."""
    processes_dir.parent.mkdir(mode=0o700)  # one at a time: mkdir(parents=True) makes 0755 ones
    processes_dir.mkdir(mode=0o700)
    parent = os.getppid()  # a live process that is not Tessera's
    started = records.process_start(parent)
    assert started is not None
    stale = ProcessRecord(parent, started - 3600, ProcessKind.APP, ())
    path = processes_dir / f"{parent}.json"
    path.write_text(json.dumps(stale.to_json()))
    junk = processes_dir / "999999999.json"
    junk.write_text("{not json")
    assert records.read_all() == ()
    assert not path.exists() and not junk.exists()


def test_an_engine_run_records_its_kind_and_model_while_it_runs(
    processes_dir: Path, tmp_path: Path
) -> None:
    model = slow_model(tmp_path / "slow.onnx", layers=300)
    image = photo(tmp_path / "big.png", 512, 384)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine",
            "run",
            "upscale",
            str(image),
            "--model",
            str(model),
            "--out",
            str(tmp_path / "out"),
            "--tile",
            "64",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        seen: ProcessRecord | None = None
        while seen is None or not seen.sessions:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no record with the loaded model appeared"
            seen = next((r for r in records.read_all() if r.pid == process.pid), None)
            time.sleep(0.05)
        assert seen.kind is ProcessKind.RUN and seen.label == f"engine run (pid {process.pid})"
        assert [s.model for s in seen.sessions] == ["slow"]
        process.communicate(timeout=300)
        assert process.returncode == 0
        assert list(processes_dir.iterdir()) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_this_process_record_follows_loads_and_unloads(
    processes_dir: Path, model: Path, tmp_path: Path
) -> None:
    from engine.api import Engine
    from engine.requests import Operation, OperationRequest
    from engine.settings import EngineSettings

    engine = Engine(EngineSettings(models_dir=model.parent))
    result = engine.run(
        OperationRequest(
            Operation.UPSCALE,
            str(model),
            (photo(tmp_path / "a.png", 24, 16),),
            output_dir=tmp_path / "o",
        )
    )
    assert result.ok
    mine = {r.pid: r for r in records.read_all()}[os.getpid()]
    assert [s.model for s in mine.sessions] == ["realesrgan-x4plus"]
    engine.unload_all()
    mine = {r.pid: r for r in records.read_all()}[os.getpid()]
    assert mine.sessions == ()


def test_the_duplicate_line_reads_as_the_issue_asks() -> None:
    app = ProcessRecord(123, 1.0, ProcessKind.APP, ())
    run = ProcessRecord(456, 2.0, ProcessKind.RUN, ())
    held = HeldSession("realesrgan-x4plus", "/m/x.onnx", 67_000_000, 0, 1, "cpu", "cpu", 67_000_000)
    procs = tuple(
        census.TesseraProcess(ProcessRecord(r.pid, r.started, r.kind, (held,)), None)
        for r in (app, run)
    )
    (dup,) = census.duplicates(procs)
    assert dup.message == (
        "realesrgan-x4plus is loaded twice: the app (pid 123) and engine run (pid 456), 67 MB each"
    )
    newer = ProcessRecord(789, 50.0, ProcessKind.APP, ())
    (old,) = census.old_processes((procs[0], census.TesseraProcess(newer, None)))
    assert "the app (pid 123)" in old and "beside the app (pid 789)" in old


def test_the_runtime_folder_is_private_or_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(shared))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    folder = private_runtime_dir()
    # Not the world-readable XDG folder: our own 0700 folder in the temp folder instead.
    assert folder == tmp_path / "tmp" / f"tessera-{os.getuid()}"
    assert folder.stat().st_mode & 0o777 == 0o700
    # A folder of that name planted as a link to somewhere else is refused.
    folder.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder.symlink_to(elsewhere)
    assert private_runtime_dir() is None


def test_a_record_round_trips_with_what_a_command_line_needs_to_find_the_app() -> None:
    held = HeldSession("m", "/m/m.onnx", 10, 20, 30, "gpu:1", "cuda", 10)
    record = ProcessRecord(7, 12.5, ProcessKind.APP, (held,), "0.1.0", "/run/tessera-abc")
    assert ProcessRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    with pytest.raises(ValueError, match="schema"):
        ProcessRecord.from_json({**record.to_json(), "schema": 99})


def test_two_standalone_engine_runs_on_one_model_are_named_by_engine_memory(
    processes_dir: Path, tmp_path: Path
) -> None:
    model = slow_model(tmp_path / "slow.onnx", layers=300)
    runs = []
    for name in ("a", "b"):
        image = photo(tmp_path / f"{name}.png", 512, 384)
        runs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "engine",
                    "run",
                    "upscale",
                    str(image),
                    "--model",
                    str(model),
                    "--out",
                    str(tmp_path / f"out-{name}"),
                    "--tile",
                    "64",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(),
                cwd=ROOT,
            )
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            holding = {r.pid for r in records.read_all() if r.sessions}
            if holding >= {p.pid for p in runs}:
                break
            for p in runs:
                assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "the two runs never held the model together"
            time.sleep(0.05)
        done = _memory("--json")
        assert done.returncode == 0, done.stderr
        (dup,) = json.loads(done.stdout)["duplicates"]
        a, b = (p.pid for p in runs)
        assert dup["message"].startswith("slow is loaded twice: engine run (pid ")
        assert sorted(dup["holders"]) == sorted([f"engine run (pid {a})", f"engine run (pid {b})"])
        for p in runs:
            p.communicate(timeout=300)
            assert p.returncode == 0
        assert list(processes_dir.iterdir()) == []  # both records went with their processes
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def test_a_finaliser_that_lets_go_during_a_write_does_not_hang_the_process(
    processes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen in the full suite: garbage collection ran a session cache's finaliser in the middle
    # of json.dump, on the thread that held the record's lock, and hold() waited for itself.
    this = records._ThisProcess()
    held = HeldSession("m", "/m.onnx", 1, 1, 1, "cpu", "cpu", 10)
    real_dump = json.dump
    calls: list[object] = []

    def dump_with_a_finaliser(obj: object, f: object) -> None:
        if not calls:
            calls.append(obj)
            this.hold(2, ())  # what a collected cache's finaliser does
        real_dump(obj, f)  # type: ignore[arg-type]

    monkeypatch.setattr(records.json, "dump", dump_with_a_finaliser)

    def load_and_unload() -> None:
        this.hold(1, (held,))
        this.hold(2, (held,))
        this.hold(1, ())

    worker = threading.Thread(target=load_and_unload, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "hold() waited for its own lock"
    assert [s.model for s in this.record().sessions] == ["m"]  # cache 2 still holds it
    this.withdraw()


def test_a_fifo_or_a_record_that_is_not_an_object_is_skipped_and_swept(
    processes_dir: Path,
) -> None:
    """Only regular files are read, without blocking: a FIFO hung `engine memory` for good,
    and valid JSON that is not an object crashed it; the memory panel reads the same."""
    processes_dir.parent.mkdir(mode=0o700)
    processes_dir.mkdir(mode=0o700)
    live = os.getppid()  # a live pid: what is not a record is swept whatever its pid
    fifo = processes_dir / f"{live}.json"
    os.mkfifo(fifo, 0o600)
    listed = processes_dir / f"{os.getpid()}.json"
    listed.write_text("[]")
    huge = processes_dir / "999999998.json"
    huge.write_bytes(b" " * (2 << 20))  # no record is that large
    done = subprocess.run(
        [sys.executable, "-m", "engine", "memory"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert not fifo.exists() and not listed.exists() and not huge.exists()
    os.mkfifo(fifo, 0o600)
    listed.write_text('"a string"')
    assert census.take(scan_cpu=False).processes == ()
    assert not fifo.exists() and not listed.exists()
