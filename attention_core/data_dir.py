"""Opening a data directory: create or validate the SQLite schema and metadata, take the write lock.

``open_store(dir, embedder_name=..., dim=...)`` creates a store; ``open_store(dir)`` opens one
(``readonly=True`` for readers). A store built by another embedder or dimension, or by a newer
format, is refused before anything is touched, with a message naming the expected and the actual.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from pathlib import Path

from . import snapshot as snap
from .errors import FailedPreconditionError, StoreLockedError, StoreMismatchError
from .store import DB_FILE, ParagraphStore
from .vector_index import choose_index

LOCK_FILE = "write.lock"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, n_paragraphs INTEGER NOT NULL,
    content_hash TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS paragraphs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, doc_id TEXT NOT NULL REFERENCES documents(doc_id),
    position INTEGER NOT NULL, text TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL,
    UNIQUE (doc_id, position));
CREATE INDEX IF NOT EXISTS paragraphs_text_hash ON paragraphs (text_hash);
"""


def _take_write_lock(data_dir: Path) -> int:
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreLockedError(f"{data_dir} is being written by another process (pid {holder})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _has_meta(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is not None


def open_store(data_dir: str | os.PathLike, *, readonly: bool = False, embedder_name: str | None = None,
               dim: int | None = None, embedder_spec: str | None = None, index: str = "auto") -> ParagraphStore:
    """Open the store in ``data_dir``; create it when ``embedder_name`` and ``dim`` are given.

    An existing store built by another embedder, or with another dimension, is refused
    with a StoreMismatchError naming the expected and the actual.
    """
    data_dir = Path(data_dir).resolve()
    if not (data_dir / DB_FILE).exists() and (readonly or embedder_name is None or dim is None):
        raise FailedPreconditionError(f"no nextpara store in {data_dir}: build one with `nextpara build --data-dir {data_dir}`")
    snap.read_manifest(data_dir)  # refuses newer formats before touching anything
    if not readonly:
        data_dir.mkdir(parents=True, exist_ok=True)
    lock_fd = None if readonly else _take_write_lock(data_dir)
    try:
        uri = f"file:{data_dir / DB_FILE}" + ("?mode=ro" if readonly else "")
        db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False)
        if not readonly:
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        meta = dict(db.execute("SELECT key, value FROM meta")) if _has_meta(db) else {}
        exists = "embedder" in meta  # a file whose first transaction never committed counts as absent
        if not exists:
            if readonly or embedder_name is None or dim is None:
                raise FailedPreconditionError(f"no nextpara store in {data_dir}: build one with `nextpara build`")
            choose_index(index, 0)  # validate before creating anything
            db.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
                ("format_version", str(snap.FORMAT_VERSION)), ("embedder", embedder_name),
                ("embedder_spec", embedder_spec or embedder_name), ("dim", str(dim)), ("index", index),
                ("generation", "0"), ("created_at", str(time.time()))])
            db.execute("COMMIT")
        else:
            if int(meta.get("format_version", 0)) > snap.FORMAT_VERSION:
                raise StoreMismatchError(f"{data_dir} has format {meta['format_version']}, this nextpara reads {snap.FORMAT_VERSION}")
            if embedder_name is not None and embedder_name != meta["embedder"]:
                raise StoreMismatchError(
                    f"{data_dir} was built by embedder {meta['embedder']!r} (dim {meta['dim']}), not {embedder_name!r}"
                    + (f" (dim {dim})" if dim else "") + "; use another --data-dir or the same embedder")
            if dim is not None and dim != int(meta["dim"]):
                raise StoreMismatchError(f"{data_dir} holds vectors of dimension {meta['dim']}, not {dim}")
        store = ParagraphStore(data_dir, db, readonly=readonly, lock_fd=lock_fd)
    except BaseException:
        if lock_fd is not None:
            os.close(lock_fd)
        raise
    if not readonly and not exists:
        store.snapshot()  # a new store gets its manifest at once
    return store
