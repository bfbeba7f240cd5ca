"""ParagraphStore: documents, paragraphs and vectors in a data directory, searchable with FAISS.

Its parts, each in its own file: the data directory's files, lock and manifest (data_dir.py),
the SQLite tables that are the source of truth (tables.py), the vectors in memory with the FAISS
index over them (vector_table.py), the word index inside SQLite (word_index.py), and the documents' labels
(labels.py), which retrieval filters resolve into the paragraph ids a search may return (filters.py). The store
validates writes, runs each as one SQLite transaction, mirrors it in the vector table, and turns a full disk into an error that says what
was kept. A write that returns is acknowledged and survives a kill; the index is saved as an
atomic snapshot by :meth:`ParagraphStore.snapshot`, and loading replays SQLite beyond it.

One process writes at a time (an exclusive ``flock`` on ``write.lock``); any number of processes
may open the store read-only. Open one with :func:`open_store`. Within a process, every read and write of the
store's one SQLite connection runs under the store's lock: on a shared connection a read during a write's
transaction sees it half done, and a read that overlaps another's statement shares that statement's view of the
database, taken before a writer's later commit (a replica then missed a document its writer had committed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from typing import Iterable, Sequence

import numpy as np
from nextpara.errors import FailedPreconditionError, InvalidInputError, Reason, StorageFullError, StoreMismatchError

from .corpus import Document, validate_document
from .data_dir import DB_FILE, FORMAT_VERSION, DataDir, disk_full
from .embedders import Embedder, embedder_for_store
from .filters import Allowed, RetrievalFilter, resolve
from .labels import add_labels, has_labels
from .tables import (
    Checked,
    DocumentRow,
    Paragraph,
    ParagraphTables,
    WriteResult,
    add_generation_column,
    content_hash,
    has_generation_column,
    remember_options,
    store_id,
)
from .unit_vectors import unit_rows
from .vector_index import check_index
from .vector_table import VectorTable
from .word_index import WordIndex, add_word_index, has_word_index

__all__ = ["ParagraphStore", "Paragraph", "DocumentRow", "WriteResult", "open_store", "DB_FILE"]
log = logging.getLogger(__name__)


def open_store(data_dir: str | os.PathLike | DataDir | None, *, readonly: bool = False, embedder_name: str | None = None,
               dim: int | None = None, embedder_spec: str | None = None, index: str | None = None,
               embedder_options: dict | None = None, replace_blank: bool = False) -> "ParagraphStore":
    """Open the store in ``data_dir`` (None: the default location); create it when ``embedder_name`` and ``dim``
    are given, with the index ``index`` asks for (None: "auto"); an existing store keeps the index it was created
    with, and an ``index`` that differs is said in a warning. ``embedder_options`` (a remote embedder's ``base_url`` and
    ``api_key_env``, as a build was given them) are remembered by a writable open, so that the store's queries are
    embedded where its paragraphs were (ParagraphStore.embedder_options). A store built by another embedder, dimension or a newer
    format is refused with a StoreMismatchError naming the expected and the actual, before anything is touched; with
    ``replace_blank``, one that no write ever reached (DataDir.never_written) is made anew instead."""
    data_dir = DataDir(DataDir.resolve(data_dir))  # a fresh view: its manifest is read once, by this open
    creating = not readonly and embedder_name is not None and dim is not None
    if not data_dir.has_store and not creating:
        raise data_dir.no_store_error()
    data_dir.manifest()  # refuses newer formats before touching anything
    if not readonly:
        data_dir.path.mkdir(parents=True, exist_ok=True)
    lock_fd = None if readonly else data_dir.take_write_lock()
    data_dir.forget_manifest()  # a writer that was still finishing may have replaced it: read it again under the lock
    try:
        db = data_dir.connect(readonly)
        meta = data_dir.read_meta(db)
        exists = "embedder" in meta  # a file whose first transaction never committed counts as absent
        if (exists and creating and replace_blank and (meta["embedder"], meta["dim"]) != (embedder_name, str(dim))
                and data_dir.never_written(db)):  # (under the write lock: no write can reach it meanwhile)
            log.warning("%s held no document (its first build, by %s, stored nothing): made anew for %s", data_dir,
                        meta["embedder"], embedder_name)
            data_dir.drop_manifest()
            exists = False
        if not exists:
            if not creating:
                raise data_dir.no_store_error()
            requested = index or "auto"
            check_index(requested, dim)  # before creating anything
            data_dir.create_schema(db, embedder_name, embedder_spec or embedder_name, dim, requested)
            meta = data_dir.read_meta(db)
        refuse_another_embedder(data_dir, meta, embedder_name, dim)
        if exists and index is not None and index != meta["index"]:
            log.warning("%s keeps the index it was created with (%s): --index %s applies to a new store only (build into "
                        "another --data-dir to change it)", data_dir, meta["index"], index)
        if not readonly and remember_options(db, meta, embedder_options):
            meta = data_dir.read_meta(db)
        if not readonly and not has_generation_column(db):
            add_generation_column(db)
        if not readonly and not has_labels(db):
            add_labels(db)
        if not readonly and not has_word_index(db):
            try:
                add_word_index(db)
            except sqlite3.OperationalError as e:  # a full disk, or a SQLite without FTS5: serve without word search
                log.warning("%s: the word index could not be built (%s); word search stays off until it can", data_dir, e)
        store = ParagraphStore(data_dir, ParagraphTables(db, meta), readonly=readonly, lock_fd=lock_fd)
    except BaseException:
        if lock_fd is not None:
            os.close(lock_fd)
        raise
    if not exists:
        store.snapshot()  # a new store gets its manifest at once
    return store


def refuse_another_embedder(data_dir: DataDir, meta: dict[str, str], embedder_name: str | None, dim: int | None) -> None:
    """StoreMismatchError if the store of ``meta`` (DataDir.read_meta: {} for none yet) was built by another embedder
    than ``embedder_name`` or holds vectors of another dimension than ``dim`` (None: either not asked). A build asks
    before it judges its documents' vectors (ingest.py), so that another embedder's store is named first."""
    if "embedder" not in meta:
        return
    if embedder_name is not None and embedder_name != meta["embedder"]:
        raise StoreMismatchError(
            f"{data_dir} was built by embedder {meta['embedder']!r} (dim {meta['dim']}), not {embedder_name!r}"
            + (f" (dim {dim})" if dim else "") + "; use another --data-dir or the same embedder")
    if dim is not None and dim != int(meta["dim"]):
        raise StoreMismatchError(f"{data_dir} holds vectors of dimension {meta['dim']}, not {dim}")


class ParagraphStore:
    """Open with :func:`open_store`."""

    def __init__(self, data_dir: DataDir, tables: ParagraphTables, readonly: bool, lock_fd: int | None):
        self.data_dir = data_dir
        self.tables = tables
        self.readonly = readonly
        self._lock_fd = lock_fd
        self._mutex = threading.RLock()
        self.embedder_name, self.embedder_spec, self.dim = tables.embedder_name, tables.embedder_spec, tables.dim
        self.embedder_options = tables.embedder_options  # a remote embedder's base_url and api_key_env, if remembered
        self.store_id = tables.store_id  # which store this is (tables.store_id), the same on every open of it
        self.requested_index = tables.requested_index
        with tables.read_transaction():  # the index and its generation from one view of SQLite (a writer may be
            self.vector_table = VectorTable.load(data_dir, tables)  # committing meanwhile, for a read-only open)
            self._index_generation = tables.generation
        self.words = WordIndex(tables.db)

    def query_embedder(self, **options) -> Embedder:
        """The embedder of query text for this store (embedders.embedder_for_store): its own embedder, a remote one at
        the endpoint it remembers unless ``options`` (base_url, api_key_env) say otherwise."""
        return embedder_for_store(self.embedder_spec, self.embedder_name, self.dim, **{**self.embedder_options, **options})

    # ---- properties ------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self.tables.generation

    @property
    def index_generation(self) -> int:
        """The write generation the vectors and the index hold: ``generation`` for the writer, which mirrors each of
        its writes; for a read-only open, the one it loaded (or caught up to): its SQLite may show later writes."""
        return self._index_generation

    @property
    def snapshot_generation(self) -> int:
        return self.vector_table.snapshot_generation

    @property
    def snapshot_name(self) -> str | None:
        return self.vector_table.snapshot_name

    @property
    def index(self):
        return self.vector_table.index

    def count_documents(self) -> int:
        with self._mutex:
            return self.tables.count_documents()

    def count_paragraphs(self) -> int:
        return len(self.vector_table)

    # ---- writes -----------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.readonly:
            raise FailedPreconditionError(f"store {self.data_dir} is open read-only")

    def _check(self, doc: Document, vectors) -> Checked:
        validate_document(doc, where=doc.source, dim=self.dim, embedder=self.embedder_name)
        if vectors is None:
            raise InvalidInputError(f"document {doc.doc_id!r} has no vectors", reason=Reason.VECTORS_REQUIRED)
        if len(vectors) != len(doc.paragraphs):
            raise InvalidInputError(f"document {doc.doc_id!r}: expected {len(doc.paragraphs)} vectors for its "
                                    f"paragraphs, got {len(vectors)}", reason=Reason.INVALID_VECTOR)
        field = (lambda i: f"{doc.request_path}.vectors[{i}]") if doc.request_path else None
        arr = unit_rows(vectors, self.dim, f"document {doc.doc_id!r} vectors", self.embedder_name, field=field)
        return Checked(doc, arr, content_hash(doc, arr if doc.vectors is not None else None))

    def unchanged(self, docs: Sequence[Document]) -> set[str]:
        """doc_ids of ``docs`` whose stored text content is identical (so need no embedding)."""
        stored = self.tables.content_hashes([d.doc_id for d in docs])
        labels = self.tables.labels_of([d.doc_id for d in docs if d.doc_id in stored])
        return {d.doc_id for d in docs if d.vectors is None and stored.get(d.doc_id) == content_hash(d)
                and labels.get(d.doc_id, {}) == (d.labels or {})}

    def add_documents(self, docs: Sequence[Document], vectors: Sequence[np.ndarray | None]) -> WriteResult:
        """Upsert documents atomically: all of them are stored, or (on any error) none.

        ``vectors[i]`` holds one vector per paragraph of ``docs[i]``; every document and
        vector is validated before anything is written.
        """
        self._check_writable()
        if len(docs) != len(vectors):
            raise InvalidInputError(f"{len(docs)} documents but {len(vectors)} vector arrays")
        checked = [self._check(doc, vecs) for doc, vecs in zip(docs, vectors)]
        doc_ids = [c.doc.doc_id for c in checked]
        if len(set(doc_ids)) != len(doc_ids):
            again = next(i for i, d in enumerate(doc_ids) if d in doc_ids[:i])
            first = doc_ids.index(doc_ids[again])
            where = f"{docs[again].source}: " if docs[again].source else ""  # "message 1, documents[3]", "FILE:LINE"
            also = f" (first at {docs[first].source})" if docs[first].source else ""
            raise InvalidInputError(f"{where}document {doc_ids[again]!r:.200} appears twice in one write{also}",
                                    reason=Reason.DUPLICATE_DOC_ID,
                                    field=f"{docs[again].request_path}.doc_id" if docs[again].request_path else None)
        with self._mutex:
            with self._disk_full_is_clear("adding documents"):
                result, removed, added, vecs = self.tables.write_documents(checked)
            self.vector_table.apply(removed, added, vecs)
            self._index_generation = result.generation = self.generation
        return result

    def doc_ids(self) -> list[str]:
        """Every stored doc_id, in order."""
        with self._mutex:
            return self.tables.doc_ids()

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents; returns how many paragraphs went. Unknown ids: NotFoundError, nothing deleted."""
        self._check_writable()
        doc_ids = list(dict.fromkeys(doc_ids))
        with self._mutex:
            with self._disk_full_is_clear("deleting documents"):
                removed = self.tables.delete_documents(doc_ids)
            self.vector_table.apply(removed, np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32))
            self._index_generation = self.generation
        return len(removed)

    def catch_up(self) -> int:
        """A read-only open: replay what the writer committed since this store loaded (or last caught up) into its
        vectors and index, as a reopen would; returns ``index_generation``. The writer's own store is always current."""
        if not self.readonly:
            return self._index_generation
        with self._mutex:
            with self.tables.read_transaction():
                meta = self.data_dir.read_meta(self.tables.db)
                if store_id(meta) != self.store_id:  # a store no write reached, made anew by a build (open_store)
                    raise StoreMismatchError(
                        f"{self.data_dir} was made anew (embedder {meta['embedder']!r}, dim {meta['dim']}) since this "
                        f"read-only open loaded it (embedder {self.embedder_name!r}, dim {self.dim}): open it again "
                        "(a replica: Reload, or restart it)")
                self.tables.refresh_schema()  # the writer may have added the labels table since this store opened,
                self.words.available = self.words.available or has_word_index(self.tables.db)  # or the word index
                generation = self.tables.generation
                if generation != self._index_generation:
                    self.vector_table.replay(self.tables)
                    self._index_generation = generation
        return self._index_generation

    @contextlib.contextmanager
    def _disk_full_is_clear(self, action: str, snapshot: bool = False):
        """Turn "disk full" from SQLite or the OS into a StorageFullError that says what was kept (for a
        ``snapshot``, every stored document; for a write, everything before it)."""
        try:
            yield
        except (sqlite3.OperationalError, OSError) as e:
            if not disk_full(e, self.data_dir.path):
                raise
            kept = (f"every stored document ({self.count_documents()}) is in {DB_FILE} and the store loads from it"
                    if snapshot else
                    f"nothing of this write was stored; the {self.count_documents()} documents stored before it are intact")
            raise StorageFullError(f"no space left on the file system of {self.data_dir} while {action} ({e}): {kept}. "
                                   "Free space and retry (a rebuild skips documents already stored)") from e

    def snapshot(self) -> str | None:
        """Save the index and vectors atomically and point the manifest at them (nothing to do if unchanged)."""
        self._check_writable()
        with self._mutex:
            generation = self.generation
            self.vector_table.refit()
            if generation == self.snapshot_generation and self.data_dir.manifest() is not None:
                return self.snapshot_name
            counts = {"embedder": {"name": self.embedder_name, "spec": self.embedder_spec, "dim": self.dim},
                      "counts": {"documents": self.count_documents(), "paragraphs": self.count_paragraphs()}}
            with self._disk_full_is_clear("writing the index snapshot", snapshot=True):
                name = self.vector_table.save(self.data_dir, generation, counts)
            self.tables.shrink_log()
            return name

    # ---- reads ------------------------------------------------------------------------
    def get_paragraphs(self, ids: Sequence[int]) -> list[Paragraph]:
        """Paragraphs in the order asked; NotFoundError naming the unknown ids."""
        with self._mutex:
            return self.tables.get_paragraphs(ids)

    def paragraph_table(self) -> tuple[np.ndarray, list[str], np.ndarray, list[str]]:
        """(ids, doc_ids, positions, text_hashes) of every paragraph, ordered by (doc_id, position)."""
        with self._mutex:
            return self.tables.paragraph_table()

    def list_documents(self, after: str = "", limit: int = 100, labels: dict[str, str] | None = None) -> list[DocumentRow]:
        """Up to ``limit`` documents whose doc_id sorts after ``after``, in doc_id order (keyset paging); with
        ``labels``, only those carrying every one of them. Under the store's lock: the connection is shared, and a
        read during a write's transaction would see it half done."""
        with self._mutex:
            return self.tables.list_documents(after, limit, labels)

    def get_document(self, doc_id: str) -> tuple[DocumentRow, list[Paragraph]]:
        """A document and its paragraphs in order; NotFoundError if it is not stored (under the lock, as above)."""
        with self._mutex:
            return self.tables.get_document(doc_id)

    def vectors(self, ids: Sequence[int]) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim); NotFoundError naming unknown ids."""
        with self._mutex:
            return self.vector_table.get(np.asarray(ids, dtype=np.int64))

    def missing_documents(self, doc_ids: Sequence[str]) -> list[str]:
        """The doc_ids among ``doc_ids`` that are not stored, in their order."""
        with self._mutex:
            return self.tables.missing_documents(list(doc_ids))

    def present_vectors(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The ids among ``ids`` that the vector table holds (in their order) and their vectors, under one lock: a
        writer may delete a paragraph between the search that found it and this read."""
        ids = np.asarray(ids, dtype=np.int64)
        with self._mutex:
            kept = ids[self.vector_table.rows(ids)[1]]
            return kept, self.vector_table.get(kept)

    def ids_of_documents(self, doc_ids: Iterable[str]) -> np.ndarray:
        """Ids of every paragraph of the given documents (unknown doc_ids contribute nothing)."""
        with self._mutex:
            return self.tables.ids_of_documents(doc_ids)

    def resolve_filter(self, f: RetrievalFilter | None, exclude_doc_ids: Sequence[str] = ()) -> Allowed:
        """The paragraph ids a retrieval under ``f`` may return (``exclude_doc_ids``: documents it must not), for
        search() and word_search() (filters.py); under the lock, as above."""
        with self._mutex:
            return resolve(self.tables, f or RetrievalFilter(), exclude_doc_ids)

    def ids_with_text(self, texts: Iterable[str]) -> np.ndarray:
        """Ids of every stored paragraph whose text equals one of ``texts``."""
        return np.asarray(sorted(i for ids in self.ids_by_text(texts).values() for i in ids), dtype=np.int64)

    def ids_by_text(self, texts: Iterable[str]) -> dict[str, list[int]]:
        """For each of ``texts`` that is stored: the ids of every paragraph with exactly that text."""
        with self._mutex:
            return self.tables.ids_by_text(texts)

    def search(self, queries: np.ndarray, k: int, exclude: Sequence[Iterable[int]] | None = None,
               allow: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) by inner product for each query row (a single vector is one row), in one search of the
        vector table for all rows (vector_table.py: a matrix product for a flat index, FAISS for the others).

        ``exclude[i]``: ids never returned for row i. ``allow``: the only ids any row may return (None: all; a
        filter's ``Allowed.allow``). Both are filtered inside the search (vector_table.py: an exact scan sets each
        row's exclusions to -inf; FAISS searches deeper and each row drops its own), so each row still gets k results
        where the store has them. Short rows (small store, many exclusions, few allowed) are padded with id -1 and score -inf.
        """
        queries = np.asarray(queries, dtype=np.float32)
        queries = unit_rows(queries[None, :] if queries.ndim == 1 else queries, self.dim, "query vectors")
        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        sets = [{int(i) for i in e} for e in exclude] if exclude is not None else [set() for _ in queries]
        if len(sets) != len(queries):
            raise InvalidInputError(f"{len(queries)} queries but {len(sets)} exclusion sets")
        common = set.intersection(*sets) if sets else set()
        row_exclude = [np.fromiter(e - common, np.int64) for e in sets]
        with self._mutex:
            return self.vector_table.search(queries, k, np.asarray(sorted(common), dtype=np.int64), allow, row_exclude)

    def word_search(self, texts: Sequence[str | None], k: int, exclude: Sequence[Iterable[int]] | None = None,
                    allow: np.ndarray | None = None) -> list[list[int]]:
        """Per text: up to k paragraph ids ranked by bm25 over its words (word_index.py), never one of that row's
        ``exclude``, and with ``allow`` only those ids (restricted inside the SQL query); [] for None (a raw vector has no words), and on a store whose word index is missing (a read-only
        open of a store made before it). Only ids this store's vector table holds: a read-only replica's SQLite may
        already show paragraphs that the writer added after the replica loaded."""
        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        sets = [{int(i) for i in e} for e in exclude] if exclude is not None else [set() for _ in texts]
        if len(sets) != len(texts):
            raise InvalidInputError(f"{len(texts)} texts but {len(sets)} exclusion sets")
        deep = k + max((len(e) for e in sets), default=0)
        if allow is not None and not len(allow):
            return [[] for _ in texts]
        with self._mutex:
            found = self.words.search(texts, deep, self.count_paragraphs(), allow)
            return [[i for i, ok in zip(ids, self.vector_table.rows(np.asarray(ids, np.int64))[1]) if ok and i not in e][:k]
                    for ids, e in zip(found, sets)]

    def vector_ids(self) -> np.ndarray:
        """Every id the vectors and the index hold, ascending (a copy)."""
        with self._mutex:
            return self.vector_table.ids.copy()

    def behind_writer(self) -> bool:
        """Whether SQLite holds writes this store's vectors do not (a read-only open whose writer has committed since
        it loaded or caught up): one read of the write generation. Never for the writer."""
        if not self.readonly:
            return False
        with self._mutex:
            return self.tables.generation != self._index_generation

    def sqlite_ids(self, ids: Sequence[int]) -> np.ndarray:
        """The ids among ``ids`` that SQLite holds, sorted (ids only, no text read: on a read-only replica, what its
        writer has not deleted since the replica loaded its index)."""
        with self._mutex:
            rows = self.tables.rows_where_in("id", "id", [int(i) for i in ids])
            return np.asarray(sorted(r[0] for r in rows), dtype=np.int64)

    def find_paragraphs(self, ids: Sequence[int]) -> dict[int, Paragraph]:
        """The stored paragraphs among ``ids`` that both SQLite and the vector table hold, by id (one query; no error
        for the others: a replica's index may name a paragraph the writer has deleted since)."""
        with self._mutex:
            present = [int(i) for i, ok in zip(ids, self.vector_table.rows(np.asarray(ids, np.int64))[1]) if ok]
            return self.tables.find_paragraphs(present)

    def info(self) -> dict:
        """The store's facts. Its SQL under the lock (the connection is shared); file sizes of files that may go
        meanwhile (a replica's snapshot, which its writer removes once it has written a newer one) count as 0."""
        with self._mutex:
            documents, generation, snapshot = self.count_documents(), self.generation, self.snapshot_name
        db_bytes = sizes(self.data_dir.path.glob(DB_FILE + "*"))
        snap_bytes = sizes((self.data_dir / snapshot).glob("*")) if snapshot else 0
        n = self.count_paragraphs()
        index = self.index
        return {
            "data_dir": str(self.data_dir),
            "store_id": self.store_id,
            "embedder_options": self.embedder_options,  # a remote embedder's endpoint and key variable (never the key)
            "format_version": FORMAT_VERSION,
            "embedder": self.embedder_name,
            "dim": self.dim,
            "index": {"requested": index.choice.requested, "factory": index.choice.factory,
                      "params": index.choice.params, "vectors": index.ntotal - len(index.tombstones)},
            "documents": documents,
            "paragraphs": n,
            "generation": generation,
            "snapshot_generation": self.snapshot_generation,
            "disk_bytes": db_bytes + snap_bytes,
            "disk_bytes_per_paragraph": round((db_bytes + snap_bytes) / n, 1) if n else None,
        }

    def close(self) -> None:
        with self._mutex:
            self.tables.db.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> "ParagraphStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sizes(paths) -> int:
    """Bytes of the files among ``paths`` that still exist."""
    total = 0
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size
    return total
