"""The round trips' outputs (``benchmarks/roundtrip/*/``) kept as one compressed archive.

A round trip (``benchmarks/roundtrip.py``) writes a folder of its table, every cache it compiled and the
scoring tool's result for each: about 2,000 small files over the runs, regenerated only with TPU-MLIR
installed.  They are kept as one archive beside them, ``runs.tar.xz``, made by :func:`pack` (sorted names,
fixed times and owners, xz preset 9e: the same folders give the same bytes), and :func:`unpack` puts the
folders back where they were, once per archive, for the scripts that read them (``benchmarks/floor.py``,
``benchmarks/room.py``) and for reading by hand.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import tarfile
from pathlib import Path

ARCHIVE = "runs.tar.xz"
MARKER = ".unpacked"  # in the unpacked folder: the digest of the archive last unpacked there
MTIME = 1764115200  # 2025-11-26 00:00 UTC: every member's time, so the archive depends on contents only


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unpack(root: Path) -> Path:
    """The run folders of ``root / runs.tar.xz`` extracted into ``root`` (skipped when this archive already
    was; files outside the archive, such as a new run, are left alone); returns ``root``."""
    archive = root / ARCHIVE
    if not archive.is_file():
        return root
    marker, want = root / MARKER, digest(archive)
    if marker.is_file() and marker.read_text().strip() == want:
        return root
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(root, filter="data")
    marker.write_text(want + "\n")
    return root


def members(root: Path) -> list[Path]:
    """Every file in a folder under ``root`` (not ``root``'s own files, such as its index), sorted by path."""
    return sorted((p for p in root.glob("*/**/*") if p.is_file() and "__pycache__" not in p.parts),
                  key=lambda p: p.relative_to(root).as_posix())


def restore_missing(root: Path) -> None:
    """Extract the archive's files that are not on disk under ``root`` (a file on disk is newer: kept)."""
    archive = root / ARCHIVE
    if archive.is_file():
        with tarfile.open(archive, "r:xz") as tar:
            missing = [m for m in tar.getmembers() if not (root / m.name).exists()]
            tar.extractall(root, members=missing, filter="data")


def pack(root: Path) -> Path:
    """``root / runs.tar.xz`` made again from every run folder under ``root``, the archive's files that are not
    on disk extracted first so that no run it held is lost; deterministic.  Returns the archive's path."""
    restore_missing(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for p in members(root):
            info = tarfile.TarInfo(p.relative_to(root).as_posix())
            info.size, info.mtime, info.mode = p.stat().st_size, MTIME, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with p.open("rb") as f:
                tar.addfile(info, f)
    archive = root / ARCHIVE
    tmp = archive.with_suffix(".tmp")
    tmp.write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    os.replace(tmp, archive)
    (root / MARKER).write_text(digest(archive) + "\n")
    return archive
