"""ParagraphStore: documents, paragraphs and vectors in a data directory, searchable with FAISS.

SQLite (``paragraphs.sqlite``, WAL mode, ``synchronous=FULL``) is the source of truth: one
write (add, upsert, delete) is one transaction holding the paragraphs, their vectors and a
bumped ``generation``. When it returns, the write is acknowledged and survives a kill or
power loss. The FAISS index and a copy of the vectors are kept in memory and saved as an
atomic snapshot (snapshot.py) by :meth:`ParagraphStore.snapshot`; loading takes the newest
snapshot and replays whatever SQLite holds beyond it (ids are never reused, so the
difference between the snapshot's ids and SQLite's ids is exactly the change).

Paragraph ids are SQLite ``INTEGER PRIMARY KEY AUTOINCREMENT`` values: stable for the life
of a paragraph, never reused. Upserting a changed document replaces all its paragraphs
(the new ones get new ids); upserting an unchanged one changes nothing.

One process writes at a time (an exclusive ``flock`` on ``write.lock``, see data_dir.py);
any number of processes may open the store read-only. Open a store with
:func:`nextpara.attention_core.data_dir.open_store`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from . import snapshot as snap
from .corpus import Document, text_hash, validate_document
from .embedders import normalize_rows
from .errors import FailedPreconditionError, InvalidInputError, NotFoundError, StorageFullError, StoreMismatchError
from .vector_index import IndexChoice, VectorIndex, choose_index

log = logging.getLogger(__name__)
DB_FILE = "paragraphs.sqlite"
_CHUNK = 500



@dataclass(frozen=True)
class Paragraph:
    id: int
    doc_id: str
    position: int
    text: str
    text_hash: str


@dataclass
class WriteResult:
    added: int = 0  # new documents
    replaced: int = 0  # documents whose content changed
    unchanged: int = 0  # documents identical to what was stored
    paragraphs: int = 0  # paragraphs written
    generation: int = 0


def content_hash(doc: Document, vectors: np.ndarray | None = None) -> str:
    """Identity of a document's content: title, paragraph texts and (if given) its vectors."""
    h = hashlib.sha256(doc.title.encode())
    for text in doc.paragraphs:
        h.update(b"\0" + text_hash(text).encode())
    if vectors is not None:
        h.update(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
    return h.hexdigest()


class ParagraphStore:
    """Open with :func:`nextpara.attention_core.data_dir.open_store`."""

    def __init__(self, data_dir: Path, db: sqlite3.Connection, readonly: bool, lock_fd: int | None):
        self.data_dir = data_dir
        self._db = db
        self.readonly = readonly
        self._lock_fd = lock_fd
        self._mutex = threading.RLock()
        meta = dict(db.execute("SELECT key, value FROM meta"))
        self.embedder_name: str = meta["embedder"]
        self.embedder_spec: str = meta.get("embedder_spec", meta["embedder"])
        self.dim: int = int(meta["dim"])
        self.requested_index: str = meta["index"]
        self.created_at = float(meta.get("created_at", 0))
        self.snapshot_name: str | None = None
        self.snapshot_generation = -1
        self._load()

    # ---- loading -------------------------------------------------------------------
    def _load(self) -> None:
        manifest = snap.read_manifest(self.data_dir)
        live_ids = np.fromiter((r[0] for r in self._db.execute("SELECT id FROM paragraphs ORDER BY id")), dtype=np.int64)
        choice = IndexChoice(**manifest["index"]) if manifest and "index" in manifest else choose_index(self.requested_index, len(live_ids))
        ids, vectors, index = np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32), None
        if manifest and manifest.get("snapshot"):
            try:  # a crafted snapshot cannot run code (see read_snapshot); it is then ignored
                index_path, s_ids, s_vectors = snap.read_snapshot(self.data_dir, manifest["snapshot"])
                s_index = VectorIndex.read(index_path, choice, self.dim)
                if s_vectors.dtype != np.float32 or s_vectors.shape[1:] != (self.dim,) or s_ids.dtype.kind != "i":
                    raise StoreMismatchError(f"arrays of {s_vectors.dtype} {s_vectors.shape} and {s_ids.dtype}")
                ids, vectors, index = s_ids, s_vectors, s_index
                self.snapshot_name, self.snapshot_generation = manifest["snapshot"], int(manifest["generation"])
            except (OSError, ValueError, RuntimeError, EOFError, StoreMismatchError) as e:
                log.warning("snapshot %s is unreadable (%s): rebuilding the index from paragraphs.sqlite, "
                            "which holds every vector", manifest["snapshot"], e)
        self.index = index or VectorIndex(choice, self.dim)
        keep = np.isin(ids, live_ids)
        # the snapshot's vectors stay memory-mapped until a write replaces the array (never written in place)
        self._ids, self._vectors = (ids, vectors) if keep.all() else (ids[keep], np.ascontiguousarray(vectors[keep]))
        added = np.setdiff1d(live_ids, self._ids)
        self._append(added, self._fetch_vectors(added))
        # whatever the index holds that is no longer live (removed since the snapshot, or HNSW tombstones)
        stale = np.setdiff1d(self.index.ids(), self._ids)
        self.index.remove(stale)
        if not self.index.is_trained and self.index.can_train_on(len(self._ids)):
            self._rebuild_index(choose_index(self.requested_index, len(self._ids)))
        elif self.index.is_trained:
            self.index.add(self._vectors[np.isin(self._ids, added)], added)
        if len(added) or len(stale):
            log.info("replayed %d added and %d removed paragraphs beyond snapshot %s", len(added), len(stale), self.snapshot_name)

    def _fetch_vectors(self, ids: np.ndarray) -> np.ndarray:
        blobs = dict(self._rows_where_in("id, vector", "id", [int(i) for i in ids]))
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for j, pid in enumerate(ids):
            out[j] = np.frombuffer(blobs[int(pid)], dtype=np.float32)
        return out

    def _append(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        self._ids = np.concatenate([self._ids, ids])
        self._vectors = np.concatenate([self._vectors, vectors])
        if len(self._ids) > 1 and (np.diff(self._ids) < 0).any():
            order = np.argsort(self._ids, kind="stable")
            self._ids, self._vectors = self._ids[order], self._vectors[order]

    def _rebuild_index(self, choice: IndexChoice) -> None:
        self.index = VectorIndex.build(choice, self.dim, self._ids, self._vectors)

    def _rows_where_in(self, select: str, column: str, values: Sequence) -> Iterable[tuple]:
        """Rows of ``SELECT {select} FROM paragraphs WHERE {column} IN values``, in chunks under SQLite's parameter limit."""
        values = list(values)
        for start in range(0, len(values), _CHUNK):
            chunk = values[start:start + _CHUNK]
            yield from self._db.execute(
                f"SELECT {select} FROM paragraphs WHERE {column} IN ({','.join('?' * len(chunk))})", chunk)

    # ---- properties ----------------------------------------------------------------
    @property
    def generation(self) -> int:
        return int(self._db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def count_documents(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def count_paragraphs(self) -> int:
        return len(self._ids)

    # ---- writes --------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.readonly:
            raise FailedPreconditionError(f"store {self.data_dir} is open read-only")

    def _check_vectors(self, doc: Document, vectors: np.ndarray | None) -> np.ndarray:
        if vectors is None:
            raise InvalidInputError(f"document {doc.doc_id!r} has no vectors")
        arr = np.asarray(vectors, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(doc.paragraphs):
            raise InvalidInputError(
                f"document {doc.doc_id!r}: expected {len(doc.paragraphs)} vectors for its paragraphs, got shape {arr.shape}")
        if arr.shape[1] != self.dim:
            raise InvalidInputError(
                f"document {doc.doc_id!r}: vectors have dimension {arr.shape[1]}, this store's embedder "
                f"{self.embedder_name} has dimension {self.dim}")
        return normalize_rows(arr, where=f"document {doc.doc_id!r} vectors")

    def unchanged(self, docs: Sequence[Document]) -> set[str]:
        """doc_ids of ``docs`` whose stored text content is identical (so need no embedding)."""
        stored = self._content_hashes([d.doc_id for d in docs])
        return {d.doc_id for d in docs if d.vectors is None and stored.get(d.doc_id) == content_hash(d)}

    def _content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for start in range(0, len(doc_ids), _CHUNK):
            chunk = list(doc_ids[start:start + _CHUNK])
            found.update(self._db.execute(
                f"SELECT doc_id, content_hash FROM documents WHERE doc_id IN ({','.join('?' * len(chunk))})", chunk))
        return found

    def add_documents(self, docs: Sequence[Document], vectors: Sequence[np.ndarray | None]) -> WriteResult:
        """Upsert documents atomically: all of them are stored, or (on any error) none.

        ``vectors[i]`` holds one vector per paragraph of ``docs[i]``; every document and
        vector is validated before anything is written.
        """
        self._check_writable()
        if len(docs) != len(vectors):
            raise InvalidInputError(f"{len(docs)} documents but {len(vectors)} vector arrays")
        seen: set[str] = set()
        checked = []
        for doc, vecs in zip(docs, vectors):
            validate_document(doc, where=doc.source)
            if doc.doc_id in seen:
                raise InvalidInputError(f"document {doc.doc_id!r} appears twice in one write")
            seen.add(doc.doc_id)
            arr = self._check_vectors(doc, vecs)
            checked.append((doc, arr, content_hash(doc, arr if doc.vectors is not None else None)))
        result = WriteResult()
        new_ids: list[int] = []
        new_vecs: list[np.ndarray] = []
        with self._mutex:
            old_ids: list[int] = []
            stored = self._content_hashes([d.doc_id for d, _, _ in checked])
            now = time.time()
            with self._disk_full_is_clear("adding documents"), self._db:  # one transaction
                self._db.execute("BEGIN IMMEDIATE")
                for doc, arr, chash in checked:
                    if stored.get(doc.doc_id) == chash:
                        result.unchanged += 1
                        continue
                    if doc.doc_id in stored:
                        old_ids += [r[0] for r in self._db.execute("SELECT id FROM paragraphs WHERE doc_id = ?", (doc.doc_id,))]
                        self._db.execute("DELETE FROM paragraphs WHERE doc_id = ?", (doc.doc_id,))
                        self._db.execute("DELETE FROM documents WHERE doc_id = ?", (doc.doc_id,))
                        result.replaced += 1
                    else:
                        result.added += 1
                    self._db.execute("INSERT INTO documents VALUES (?, ?, ?, ?, ?)",
                                     (doc.doc_id, doc.title, len(doc.paragraphs), chash, now))
                    for position, (text, vec) in enumerate(zip(doc.paragraphs, arr)):
                        cur = self._db.execute(
                            "INSERT INTO paragraphs (doc_id, position, text, text_hash, vector) VALUES (?, ?, ?, ?, ?)",
                            (doc.doc_id, position, text, text_hash(text), vec.tobytes()))
                        new_ids.append(cur.lastrowid)
                    new_vecs.append(arr)
                    result.paragraphs += len(doc.paragraphs)
                if result.added or result.replaced:
                    self._db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
            self._apply(np.asarray(old_ids, np.int64), np.asarray(new_ids, np.int64),
                        np.concatenate(new_vecs) if new_vecs else np.zeros((0, self.dim), np.float32))
        result.generation = self.generation
        return result

    @contextlib.contextmanager
    def _disk_full_is_clear(self, action: str, snapshot: bool = False):
        """Turn "disk full" from SQLite or the OS into a StorageFullError that says what was kept (for a
        ``snapshot``, every stored document; for a write, everything before it)."""
        try:
            yield
        except (sqlite3.OperationalError, OSError) as e:
            if isinstance(e, sqlite3.OperationalError):
                full = "full" in str(e)
            else:  # numpy's short writes raise OSError without an errno: then ask the file system
                full = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or (
                    e.errno is None and shutil.disk_usage(self.data_dir).free < 64 * 2**20)
            if not full:
                raise
            kept = (f"every stored document ({self.count_documents()}) is in {DB_FILE} and the store loads from it"
                    if snapshot else
                    f"nothing of this write was stored; the {self.count_documents()} documents stored before it are intact")
            raise StorageFullError(f"no space left on the file system of {self.data_dir} while {action} ({e}): {kept}. "
                                   "Free space and retry (a rebuild skips documents already stored)") from e

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents; returns how many paragraphs went. Unknown ids: NotFoundError, nothing deleted."""
        self._check_writable()
        doc_ids = list(dict.fromkeys(doc_ids))
        with self._mutex:
            stored = self._content_hashes(doc_ids)
            missing = [d for d in doc_ids if d not in stored]
            if missing:
                raise NotFoundError(f"unknown doc_id(s): {', '.join(map(repr, missing[:10]))}"
                                    + (f" and {len(missing) - 10} more" if len(missing) > 10 else ""))
            old_ids: list[int] = []
            with self._disk_full_is_clear("deleting documents"), self._db:
                self._db.execute("BEGIN IMMEDIATE")
                for doc_id in doc_ids:
                    old_ids += [r[0] for r in self._db.execute("SELECT id FROM paragraphs WHERE doc_id = ?", (doc_id,))]
                    self._db.execute("DELETE FROM paragraphs WHERE doc_id = ?", (doc_id,))
                    self._db.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
                if doc_ids:
                    self._db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
            self._apply(np.asarray(old_ids, np.int64), np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32))
        return len(old_ids)

    def _apply(self, removed: np.ndarray, added: np.ndarray, vectors: np.ndarray) -> None:
        """Mirror a committed write in the in-memory table and index."""
        if len(removed):
            keep = ~np.isin(self._ids, removed)
            self._ids, self._vectors = self._ids[keep], self._vectors[keep]
            self.index.remove(removed)
        self._append(added, vectors)
        if self.index.is_trained:
            self.index.add(vectors, added)
        # an untrained (IVF) index answers by exact search until the next snapshot trains it

    def _outgrown(self, wanted: IndexChoice) -> bool:
        """True when the corpus size calls for another index: auto switching type, IVF untrained or nlist off by 2x."""
        current = self.index.choice
        if self.requested_index == "auto":
            return wanted.factory != current.factory
        if "nlist" in wanted.params and len(self._ids):
            ratio = wanted.params["nlist"] / current.params.get("nlist", 1)
            return not self.index.is_trained or ratio > 2 or ratio < 0.5
        return False

    def snapshot(self) -> str | None:
        """Save the index and vectors atomically and point the manifest at them."""
        self._check_writable()
        with self._mutex:
            generation = self.generation
            wanted = choose_index(self.requested_index, len(self._ids))
            if self._outgrown(wanted) or self.index.needs_rebuild():
                self._rebuild_index(wanted)
            if generation == self.snapshot_generation and (self.data_dir / snap.MANIFEST).exists():
                return self.snapshot_name
            with self._disk_full_is_clear("writing the index snapshot", snapshot=True):
                name = snap.write_snapshot(self.data_dir, generation, self.index.serialize().tobytes(), self._ids, self._vectors)
            snap.write_manifest(self.data_dir, self.manifest(snapshot=name, generation=generation))
            snap.remove_stale_snapshots(self.data_dir, keep=name)
            self.snapshot_name, self.snapshot_generation = name, generation
            return name

    def manifest(self, snapshot: str | None, generation: int) -> dict:
        return {
            "format_version": snap.FORMAT_VERSION,
            "embedder": {"name": self.embedder_name, "spec": self.embedder_spec, "dim": self.dim},
            "index": {"requested": self.index.choice.requested, "factory": self.index.choice.factory,
                      "params": self.index.choice.params},
            "counts": {"documents": self.count_documents(), "paragraphs": self.count_paragraphs()},
            "generation": generation,
            "snapshot": snapshot,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    # ---- reads ---------------------------------------------------------------------
    def get_paragraphs(self, ids: Sequence[int]) -> list[Paragraph]:
        """Paragraphs in the order asked; NotFoundError naming the unknown ids."""
        ids = [int(i) for i in ids]
        found = {row[0]: Paragraph(*row) for row in self._rows_where_in("id, doc_id, position, text, text_hash", "id", ids)}
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFoundError(f"unknown paragraph id(s): {', '.join(map(str, missing[:10]))}"
                                + (f" and {len(missing) - 10} more" if len(missing) > 10 else ""))
        return [found[i] for i in ids]

    def paragraph_table(self) -> tuple[np.ndarray, list[str], np.ndarray, list[str]]:
        """(ids, doc_ids, positions, text_hashes) of every paragraph, ordered by (doc_id, position)."""
        rows = self._db.execute("SELECT id, doc_id, position, text_hash FROM paragraphs ORDER BY doc_id, position").fetchall()
        return (np.fromiter((r[0] for r in rows), np.int64, len(rows)), [r[1] for r in rows],
                np.fromiter((r[2] for r in rows), np.int64, len(rows)), [r[3] for r in rows])

    def _rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows into the in-memory table, mask of ids that exist)."""
        if not len(self._ids):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
        rows = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)
        return rows, self._ids[rows] == ids

    def missing_ids(self, ids: Sequence[int]) -> set[int]:
        """The ids among ``ids`` that the store does not hold."""
        ids = np.asarray(ids, dtype=np.int64)
        with self._mutex:
            _, ok = self._rows(ids)
        return set(ids[~ok].tolist())

    def vectors(self, ids: Sequence[int]) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim); NotFoundError naming unknown ids."""
        ids = np.asarray(ids, dtype=np.int64)
        with self._mutex:
            rows, ok = self._rows(ids)
            if not ok.all():
                raise NotFoundError(f"unknown paragraph id(s): {', '.join(map(str, ids[~ok][:10]))}")
            return self._vectors[rows]

    def ids_of_documents(self, doc_ids: Iterable[str]) -> np.ndarray:
        """Ids of every paragraph of the given documents (unknown doc_ids contribute nothing)."""
        rows = self._rows_where_in("id", "doc_id", dict.fromkeys(doc_ids))
        return np.asarray(sorted(r[0] for r in rows), dtype=np.int64)

    def ids_with_text(self, texts: Iterable[str]) -> np.ndarray:
        """Ids of every stored paragraph whose text equals one of ``texts``."""
        rows = self._rows_where_in("id", "text_hash", {text_hash(t) for t in texts})
        return np.asarray(sorted(r[0] for r in rows), dtype=np.int64)

    def search(self, queries: np.ndarray, k: int, exclude_ids: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) by inner product for each query row; ``exclude_ids`` never returned.

        Rows shorter than k (small store, many exclusions) are padded with id -1.
        """
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InvalidInputError(f"query vectors have shape {queries.shape}, this store expects dimension {self.dim}")
        if not np.isfinite(queries).all():
            raise InvalidInputError("query vectors contain NaN or infinite values")
        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        exclude = np.asarray(sorted(set(int(i) for i in exclude_ids)) if exclude_ids is not None else [], dtype=np.int64)
        with self._mutex:
            if self.index.is_trained:
                return self.index.search(queries, k, exclude)
            return self._exact_search(queries, k, exclude)

    def _exact_search(self, queries: np.ndarray, k: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = queries @ self._vectors.T
        scores[:, np.isin(self._ids, exclude)] = -np.inf
        kk = min(k, scores.shape[1])
        top = np.argsort(-scores, axis=1, kind="stable")[:, :kk]
        out_s = np.take_along_axis(scores, top, axis=1)
        out_i = np.where(np.isfinite(out_s), self._ids[top], -1)
        pad = ((0, 0), (0, k - kk))
        return np.pad(out_s, pad, constant_values=-np.inf), np.pad(out_i, pad, constant_values=-1)

    def info(self) -> dict:
        db_bytes = sum(p.stat().st_size for p in self.data_dir.glob(DB_FILE + "*"))
        snap_bytes = sum(p.stat().st_size for p in (self.data_dir / self.snapshot_name).iterdir()) if self.snapshot_name else 0
        n = self.count_paragraphs()
        return {
            "data_dir": str(self.data_dir),
            "format_version": snap.FORMAT_VERSION,
            "embedder": self.embedder_name,
            "dim": self.dim,
            "index": {"requested": self.index.choice.requested, "factory": self.index.choice.factory,
                      "params": self.index.choice.params, "vectors": self.index.ntotal - len(self.index.tombstones)},
            "documents": self.count_documents(),
            "paragraphs": n,
            "generation": self.generation,
            "snapshot_generation": self.snapshot_generation,
            "disk_bytes": db_bytes + snap_bytes,
            "disk_bytes_per_paragraph": round((db_bytes + snap_bytes) / n, 1) if n else None,
        }

    def close(self) -> None:
        with self._mutex:
            self._db.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> "ParagraphStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
