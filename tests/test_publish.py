"""Publishing never overwrites and never loses a product, whatever the file system offers.

Where hard links fail (FAT/exFAT USB sticks, SMB shares) the old fallback checked the name and
then renamed over it, so concurrent writers of one name replaced each other's files while each
was told it had succeeded. These tests write one name from several processes at once on a file
system made to behave like FAT: `os.link` refuses (EPERM, as vfat does) and `renameat2` is
unavailable — the one fault injection here, since no FAT file system can be mounted.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine import files
from engine.errors import BadInputError
from engine.io import writing
from engine.io.publish import write_bytes

WRITERS = 8
EACH = 10


def _like_fat() -> None:
    def no_links(src: object, dst: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    os.link = no_links
    files._renameat2 = None


def _writer(folder: str, writer: int, start: Any, fat: bool) -> list[tuple[str, bytes]]:
    if fat:
        _like_fat()
    start.wait()
    told = []
    for n in range(EACH):
        payload = f"writer {writer} copy {n}".encode() * 200
        told.append((str(write_bytes(Path(folder) / "out.bin", payload)), payload))
    return told


@pytest.mark.parametrize("fat", [True, False], ids=["no-hard-links", "local-disk"])
def test_concurrent_writers_of_one_name_lose_nothing(tmp_path: Path, fat: bool) -> None:
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        start = manager.Barrier(WRITERS)
        with ctx.Pool(WRITERS) as pool:
            results = pool.starmap(
                _writer, [(str(tmp_path), w, start, fat) for w in range(WRITERS)]
            )
    told = [item for result in results for item in result]
    paths = [Path(p) for p, _ in told]
    assert len(set(paths)) == WRITERS * EACH, "two writers were told the same name"
    on_disk = sorted(p.name for p in tmp_path.iterdir())
    assert len(on_disk) == WRITERS * EACH, f"{WRITERS * EACH - len(on_disk)} products lost"
    lost = [Path(p).name for p, payload in told if Path(p).read_bytes() != payload]
    assert not lost, f"overwritten by another writer: {lost}"
    assert not [n for n in on_disk if n.startswith(".")], "temp files left behind"


def test_no_replace_falls_back_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without renameat2, then also without hard links, a taken name is still refused."""
    taken = tmp_path / "taken.bin"
    taken.write_bytes(b"theirs")
    for step in ("no renameat2", "no hard links"):
        if step == "no renameat2":
            monkeypatch.setattr(files, "_renameat2", None)
        else:
            monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(1, "")))
        src = tmp_path / f"src-{step}"
        src.write_bytes(b"ours")
        with pytest.raises(FileExistsError):
            files.move_new(src, taken)
        assert taken.read_bytes() == b"theirs" and src.read_bytes() == b"ours"
        files.move_new(src, tmp_path / f"free-{step}")
        assert (tmp_path / f"free-{step}").read_bytes() == b"ours" and not src.exists()


def test_the_temp_file_is_written_through_its_own_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program swapping the temp name for a link while the product is encoded can
    neither redirect the write into its target nor get its link published."""
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"precious")
    encode = writing._encode_png

    def swap_then_encode(target: Any, *args: Any, **kwargs: Any) -> None:
        (temp,) = tmp_path.glob(".p.png.partial-*")
        temp.unlink()
        temp.symlink_to(precious)
        encode(target, *args, **kwargs)

    monkeypatch.setattr(writing, "_encode_png", swap_then_encode)
    with pytest.raises(BadInputError, match="replaced by another program"):
        writing.write_image(tmp_path / "p.png", np.zeros((4, 4, 3), np.uint8))
    assert precious.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]
