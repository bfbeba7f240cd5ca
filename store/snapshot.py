"""Atomic on-disk snapshots of the vector index, and the atomic file writes the manifest uses too.

A snapshot (``snapshots/g<N>/``: ids.npy, vectors.npy and, unless the index is a flat one, index.faiss,
as of SQLite generation N) is written into ``snapshots/.tmp-g<N>``, every file fsynced, the directory
renamed to ``snapshots/g<N>`` and fsynced; only then is ``manifest.json`` replaced
(write to a temporary name, fsync, rename, fsync the directory). A process killed at any
instant therefore leaves the old manifest pointing at a complete old snapshot, or the new
manifest pointing at a complete new one. Writes acknowledged after the snapshot live in
SQLite, and loading replays them (see vector_table.py).

A flat index is its vectors and ids, nothing more: its snapshot has no index.faiss (the vectors would be on
disk twice) and loading builds it from vectors.npy. Other indexes (HNSW's graph, IVF's lists) are written by
FAISS straight to their file, not through a copy in memory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
from nextpara.errors import StoreMismatchError

SNAPSHOTS = "snapshots"
INDEX_FILE = "index.faiss"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_npy_durably(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())


def replace_file_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a torn one; a write that fails
    (a full disk) leaves neither a part-written temporary file nor a changed ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write_bytes_durably(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def write_snapshot(data_dir: Path, generation: int, write_index: Callable[[Path], None] | None, ids: np.ndarray,
                   vectors: np.ndarray) -> str:
    """Write a complete snapshot directory and return its name (relative to data_dir). ``write_index`` writes the
    index file to the path it is given; None for an index that is rebuilt from the vectors (flat)."""
    root = data_dir / SNAPSHOTS
    root.mkdir(exist_ok=True)
    name = f"g{generation:08d}"
    tmp = root / f".tmp-{name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        if write_index is not None:
            write_index(tmp / INDEX_FILE)
            fsync_file(tmp / INDEX_FILE)
        write_npy_durably(tmp / "ids.npy", np.asarray(ids, dtype=np.int64))
        write_npy_durably(tmp / "vectors.npy", np.asarray(vectors, dtype=np.float32))
        fsync_dir(tmp)
    except BaseException:  # a full disk, say: give the space back; the manifest still names the old snapshot
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = root / name
    if final.exists():  # a previous run wrote this generation but died before the manifest
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(root)
    return f"{SNAPSHOTS}/{name}"


def read_snapshot(data_dir: Path, name: str) -> tuple[Path | None, np.ndarray, np.ndarray]:
    """(index file or None when the snapshot has none, ids, vectors) of a snapshot; the vectors are
    memory-mapped read-only, not read.

    np.load refuses pickled (object) arrays, so a crafted snapshot cannot run code here."""
    path = data_dir / name
    ids = np.load(path / "ids.npy")
    vectors = np.load(path / "vectors.npy", mmap_mode="r")
    if len(ids) != len(vectors):
        raise StoreMismatchError(f"snapshot {path}: {len(ids)} ids but {len(vectors)} vectors")
    return (path / INDEX_FILE if (path / INDEX_FILE).exists() else None), ids, vectors


def remove_stale_snapshots(data_dir: Path, keep: str | None) -> None:
    root = data_dir / SNAPSHOTS
    if not root.is_dir():
        return
    for entry in root.iterdir():
        if keep is None or f"{SNAPSHOTS}/{entry.name}" != keep:
            shutil.rmtree(entry, ignore_errors=True)
