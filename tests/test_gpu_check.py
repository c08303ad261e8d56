"""The offline GPU check takes a folder of wheels in parts and joins them byte for byte."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_wheel_split_in_parts_is_joined_whole(tmp_path: Path) -> None:
    src = tmp_path / "wheels"
    src.mkdir()
    whole = tmp_path / "big-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whole, "w") as z:
        z.writestr("big/data.bin", bytes(range(256)) * 4000)
    data = whole.read_bytes()
    # `split -b` names: part-aa, part-ab, …; written here out of order on purpose.
    size = len(data) // 3 + 1
    for i in (2, 0, 1):
        (src / f"{whole.name}.part-a{'abc'[i]}").write_bytes(data[i * size : (i + 1) * size])
    (src / "small-1.0-py3-none-any.whl").write_bytes(b"PK small")
    dst = tmp_path / "joined"
    done = subprocess.run(
        [ROOT / "tests/gpu/join_wheels.sh", src, dst], capture_output=True, text=True, check=True
    )
    assert f"joined {whole.name} from 3 parts" in done.stdout
    joined = dst / whole.name
    assert hashlib.sha256(joined.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert zipfile.ZipFile(joined).testzip() is None
    assert (dst / "small-1.0-py3-none-any.whl").read_bytes() == b"PK small"
    assert not list(dst.glob("*.part-*")) and not list(dst.glob("*.tmp"))
