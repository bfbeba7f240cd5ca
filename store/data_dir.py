"""DataDir: one data directory, its files, its write lock, its manifest and its SQLite schema.

Layout::

    paragraphs.sqlite        documents, paragraphs and their vectors (WAL mode): the truth
    snapshots/g<N>/          ids.npy, vectors.npy, index.faiss (not for flat) as of write generation N (snapshot.py)
    manifest.json            format version, embedder, index, counts, current snapshot
    write.lock               held (flock) by the one process that writes
    model.lock               held (flock) while a command decides which model serves and writes it (model_lock)
    model.safetensors        the store's own reranker, if any: trained, or plain cosine where a guard chose it
                             (nextpara.attention_core.checkpoint; train_report.json, the guard's figures, beside it)

``paragraphs.sqlite`` also holds the word index (word_index.py), an FTS5 table kept in step with
the paragraphs by triggers, and the documents' labels (labels.py); a store from before either gets it
on its first writable open.

Everything that knows these names, the default location, the format version and the schema is
here; the store (store.py) opens a DataDir, and every command resolves ``--data-dir`` with
:meth:`DataDir.resolve`. The manifest is read once per DataDir, and the format version of the
manifest and of SQLite's ``meta`` table is checked by one function.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from nextpara.errors import FailedPreconditionError, StoreLockedError, StoreMismatchError

from . import labels, word_index
from .snapshot import replace_file_atomically

FORMAT_VERSION = 1
DB_FILE = "paragraphs.sqlite"
MANIFEST = "manifest.json"
LOCK_FILE = "write.lock"
MODEL_LOCK = "model.lock"

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS documents (
        doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, n_paragraphs INTEGER NOT NULL,
        content_hash TEXT NOT NULL, updated_at REAL NOT NULL, generation INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS paragraphs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, doc_id TEXT NOT NULL REFERENCES documents(doc_id),
        position INTEGER NOT NULL, text TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL,
        UNIQUE (doc_id, position))""",
    "CREATE INDEX IF NOT EXISTS paragraphs_text_hash ON paragraphs (text_hash)",
    *word_index.SCHEMA,  # FTS5 over the texts, kept in step by triggers (word_index.py)
    *labels.SCHEMA,  # the documents' labels, deleted with their document by a trigger (labels.py)
]

_UNREAD = object()
log = logging.getLogger(__name__)


def check_format(version, where: str) -> None:
    """Refuse a store written by a newer nextpara (the manifest's and SQLite's version both come here)."""
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StoreMismatchError(f"{where} has format_version {version!r}; this nextpara reads format "
                                 f"{FORMAT_VERSION} and older: upgrade nextpara")


class DataDir(os.PathLike):
    """A data directory (it need not exist yet). ``os.fspath(data_dir)`` is its path."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser().resolve()
        self._manifest = _UNREAD

    @classmethod
    def default(cls) -> "DataDir":
        """``$NEXTPARA_DATA_DIR`` (an empty value counts as unset), else ``$XDG_DATA_HOME/nextpara``
        (``~/.local/share/nextpara``)."""
        env = os.environ.get("NEXTPARA_DATA_DIR")
        if env:
            return cls(env)
        return cls(Path(os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")) / "nextpara")

    @classmethod
    def resolve(cls, path: "str | os.PathLike | DataDir | None") -> "DataDir":
        """What a ``--data-dir`` option means: the given directory, or the default when none (or "") is given."""
        if isinstance(path, DataDir):
            return path
        return cls(path) if path not in (None, "") else cls.default()

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __eq__(self, other) -> bool:
        return isinstance(other, DataDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"DataDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    @property
    def has_store(self) -> bool:
        return (self.path / DB_FILE).exists()

    # ---- the manifest -----------------------------------------------------------------
    def manifest(self) -> dict | None:
        """The manifest (None before the first snapshot), read and checked once, then as this process wrote it."""
        if self._manifest is _UNREAD:
            path = self.path / MANIFEST
            manifest = None
            if path.exists():
                try:
                    manifest = json.loads(path.read_text())
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise StoreMismatchError(f"{path} is not valid JSON ({e}); it is written atomically, "
                                             "so it was edited by hand") from e
                check_format(manifest.get("format_version"), str(path))
            self._manifest = manifest
        return self._manifest

    def forget_manifest(self) -> None:
        """Read the manifest again on next use (a writer calls this once it holds the write lock)."""
        self._manifest = _UNREAD

    def write_manifest(self, manifest: dict) -> None:
        replace_file_atomically(self.path / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
        self._manifest = manifest

    # ---- the write lock ---------------------------------------------------------------
    def take_write_lock(self) -> int:
        """An exclusive flock on write.lock (the holder's pid written in it); StoreLockedError if held."""
        return self._flock(LOCK_FILE)

    def _flock(self, name: str, waiter: str | None = None) -> int:
        """An exclusive flock on the file ``name``, this process's pid written in it; its descriptor (closing it
        releases the lock). If another process holds it: StoreLockedError, or with ``waiter`` (who waits, in words)
        wait for it."""
        fd = os.open(self.path / name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            if waiter is None:
                os.close(fd)
                # most often a server (it holds its store's lock while it runs): say what the user can do about it
                raise StoreLockedError(f"{self.path} is being written by another process (pid {holder}): if that is "
                                       "a nextpara server, add documents through it (`nextpara add --address "
                                       "HOST:PORT FILE.jsonl`; add reads JSON Lines only: a folder or text file is "
                                       "built with the server stopped), serve a replica beside it (`nextpara serve "
                                       "--read-only`), or stop it first; else wait for it to finish") from None
            log.info("%s waits for pid %s, which holds %s", waiter, holder, self.path / name)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return fd

    @contextlib.contextmanager
    def model_lock(self, who: str):
        """An exclusive flock on model.lock while ``who`` (a command, in words) reads which model serves the store,
        judges it and writes its verdict (model.safetensors, train_report.json): the guard after ``nextpara build``
        and the one of ``nextpara train``. Taken second, it waits for the first to finish, then reads what that one
        wrote, so neither decides against a model the other has replaced meanwhile. Readers take no lock: those files
        are replaced atomically."""
        fd = self._flock(MODEL_LOCK, waiter=who)
        try:
            yield
        finally:
            os.close(fd)  # releases the lock

    # ---- SQLite -----------------------------------------------------------------------
    def no_store_error(self) -> FailedPreconditionError:
        if self.path.is_file():  # a build there could not help
            return FailedPreconditionError(f"{self.path} is a file, not a nextpara data directory")
        return FailedPreconditionError(f"no nextpara store in {self.path}: build one with "
                                       f"`nextpara build --data-dir {self.path}`")

    def connect(self, readonly: bool) -> sqlite3.Connection:
        """A connection in autocommit mode (transactions are explicit), WAL for the writer, synchronous=FULL."""
        uri = f"file:{self.path / DB_FILE}" + ("?mode=ro" if readonly else "")
        db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False)
        with self.unreadable():
            if not readonly:
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
        return db

    @contextlib.contextmanager
    def unreadable(self):
        """SQLite's "file is not a database" or "database disk image is malformed" (a file damaged, or not one this
        store wrote) as the FailedPreconditionError it is, naming the file and what to do; a locked or failing disk
        (its subclass OperationalError) passes as it is."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            if type(e) is not sqlite3.DatabaseError:
                raise
            raise FailedPreconditionError(f"{self.path / DB_FILE} cannot be read as a nextpara store ({e}): restore "
                                          "the store from a backup (`nextpara backup` makes them), or remove it and "
                                          "build it again") from e

    def read_meta(self, db: sqlite3.Connection) -> dict[str, str]:
        """The ``meta`` table, or {} for a file whose first transaction never committed (a store not yet created)."""
        with self.unreadable():
            if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
                return {}
            meta = dict(db.execute("SELECT key, value FROM meta"))
        if "embedder" in meta:
            check_format(int(meta.get("format_version", 0)), str(self.path / DB_FILE))
        return meta

    @contextlib.contextmanager
    def _read_only_db(self):
        """A read-only connection to the store's SQLite and its ``meta`` ({} for no store yet), closed after use;
        None for the connection where there is no store file."""
        if not self.has_store:
            yield None, {}
            return
        db = self.connect(readonly=True)
        try:
            yield db, self.read_meta(db)
        finally:
            db.close()

    def read_store_meta(self) -> dict[str, str]:
        """The store's ``meta`` (embedder, embedder_spec, dim, ...) read without opening the store (no lock, no vectors,
        no index): {} where there is no store yet."""
        with self._read_only_db() as (_, meta):
            return meta

    def facts(self) -> "StoreFacts":
        """What the store is (its embedder and dimension) without opening it; FailedPreconditionError if there is none."""
        meta = self.read_store_meta()
        if "embedder" not in meta:
            raise self.no_store_error()
        return StoreFacts(self, meta["embedder"], int(meta["dim"]))

    def never_written(self, db: sqlite3.Connection | None = None) -> bool:
        """Whether the store exists but no write ever reached it (generation 0, no document): what a first build leaves
        when it stops or fails before its first batch commits. A build with another embedder makes it anew
        (open_store's ``replace_blank``). ``db``: a connection to ask (else a read-only one of its own)."""
        if db is None:
            with self._read_only_db() as (own, meta):
                return "embedder" in meta and self.never_written(own)
        generation = db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return generation == ("0",) and db.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is None

    def drop_manifest(self) -> None:
        """Remove the manifest (a store made anew: its snapshot is of the store it replaces; the store is loadable
        without one, from SQLite)."""
        (self.path / MANIFEST).unlink(missing_ok=True)
        self._manifest = None

    def first_doc_id_outside(self, prefixes: tuple[str, ...]) -> str | None:
        """The first stored doc_id (in doc_id order) that starts with none of ``prefixes``, None if there is none: one
        query on a read-only connection, walking the doc_id index only until it finds one."""
        with self._read_only_db() as (db, meta):
            if "embedder" not in meta:  # no store, or one whose first transaction never committed
                return None
            where = " AND ".join("substr(doc_id, 1, ?) != ?" for _ in prefixes)
            row = db.execute(f"SELECT doc_id FROM documents WHERE {where} ORDER BY doc_id LIMIT 1",
                             [v for p in prefixes for v in (len(p), p)]).fetchone()
            return row[0] if row else None

    def create_schema(self, db: sqlite3.Connection, embedder_name: str, embedder_spec: str, dim: int, index: str) -> None:
        """Tables and metadata of a new store, in one transaction (a store never written, made anew: its metadata
        replaced)."""
        db.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA:
            db.execute(statement)
        db.execute("DELETE FROM meta")
        db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
            ("format_version", str(FORMAT_VERSION)), ("embedder", embedder_name), ("embedder_spec", embedder_spec),
            ("dim", str(dim)), ("index", index), ("generation", "0"), ("created_at", str(time.time()))])
        db.execute("COMMIT")


@dataclass(frozen=True)
class StoreFacts:
    """A store's identity read from its meta table alone (DataDir.facts): enough to say which model can serve it
    (served.describe_served) without loading its vectors and index."""

    data_dir: DataDir
    embedder_name: str
    dim: int


def disk_full(e: BaseException, path: Path) -> bool:
    """Whether ``e`` says the file system of ``path`` is full: SQLite's "database or disk is full", an OSError of
    ENOSPC/EDQUOT/EFBIG, or one without an errno (NumPy's short writes, FAISS's failed ones) when little is free."""
    if isinstance(e, sqlite3.OperationalError):
        return "full" in str(e)
    if not isinstance(e, OSError):
        return False
    if e.errno is None:
        return shutil.disk_usage(path).free < 64 * 2**20
    return e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
