"""ParagraphTables: the SQLite side of a store, the source of truth.

``documents`` (doc_id, title, content hash, the write generation that last changed it),
``paragraphs`` (id, doc_id, position, text, sha256 of the text, vector blob), ``document_labels``
(labels.py) and ``meta`` (embedder, dimension, index type, write generation). A document's labels are
not part of its content hash: an upsert that changes only its labels rewrites them and its generation,
and keeps its paragraphs and their ids. A store made before documents had their
generation gets the column on its first writable open (0 for the documents it holds); a
read-only open of such a store reports 0. One
write (add, upsert, delete) is one transaction that also bumps the generation: when it returns,
it is acknowledged (``synchronous=FULL``, WAL). Paragraph ids are ``INTEGER PRIMARY KEY
AUTOINCREMENT`` values: stable for the life of a paragraph, never reused, so the difference
between two sets of ids is exactly the change between them.

No locking here: the store (store.py) serialises writes and takes its lock around them; reads share the
connection (SQLite serialises its use across threads).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
from nextpara.errors import NotFoundError

from . import labels as doc_labels
from .corpus import Document, text_hash

_CHUNK = 500  # parameters per IN (...) query, under SQLite's limit
log = logging.getLogger(__name__)
MAX_LISTED_BYTES = 480  # of unknown ids listed in a NotFoundError's metadata (a refusal's details must stay small)


@dataclass(frozen=True)
class Paragraph:
    id: int
    doc_id: str
    position: int
    text: str
    text_hash: str


@dataclass(frozen=True)
class DocumentRow:
    doc_id: str
    title: str
    paragraphs: int
    generation: int  # the write generation that last changed it (0: before the store recorded it)
    labels: dict[str, str] = field(default_factory=dict)


def has_generation_column(db: sqlite3.Connection) -> bool:
    return any(row[1] == "generation" for row in db.execute("PRAGMA table_info(documents)"))


def add_generation_column(db: sqlite3.Connection) -> None:
    """Give a store made before documents had their generation the column (0 for what it holds), in one transaction."""
    with db:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ALTER TABLE documents ADD COLUMN generation INTEGER NOT NULL DEFAULT 0")


@dataclass
class WriteResult:
    added: int = 0  # new documents
    replaced: int = 0  # documents whose content or labels changed
    unchanged: int = 0  # documents identical to what was stored, labels included
    paragraphs: int = 0  # paragraphs written
    generation: int = 0


@dataclass
class Checked:
    """A document ready to write: its unit vectors and its content hash."""

    doc: Document
    vectors: np.ndarray
    content_hash: str


def content_hash(doc: Document, vectors: np.ndarray | None = None) -> str:
    """Identity of a document's content: title, paragraph texts and (if given) its vectors."""
    h = hashlib.sha256(doc.title.encode())
    for text in doc.paragraphs:
        h.update(b"\0" + text_hash(text).encode())
    if vectors is not None:
        h.update(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
    return h.hexdigest()


def select_in(db: sqlite3.Connection, query: str, values: Iterable, params: Sequence = ()) -> Iterable[tuple]:
    """Rows of ``{query} IN (values)``, asked in chunks under SQLite's parameter limit (``params``: those of the
    query's own placeholders, before the IN list's)."""
    values = list(values)
    for start in range(0, len(values), _CHUNK):
        chunk = values[start:start + _CHUNK]
        yield from db.execute(f"{query} IN ({','.join('?' * len(chunk))})", [*params, *chunk])


def unknown_ids(what: str, missing: Sequence) -> NotFoundError:
    """NOT_FOUND for ids the store does not hold (``what``: "paragraph id" or "doc_id"): the message names the first
    ten (long doc_ids cut short); the metadata holds as many whole ids as fit in MAX_LISTED_BYTES (JSON) and the count."""
    quote = str if what == "paragraph id" else (lambda d: repr(d) if len(d) <= 60 else repr(d[:57]) + "...")
    listed: list = []
    for value in missing:
        if len(json.dumps([*listed, value], ensure_ascii=False).encode()) > MAX_LISTED_BYTES:
            break
        listed.append(value)
    error = NotFoundError(f"unknown {what}(s): {', '.join(map(quote, missing[:10]))}"
                          + (f" and {len(missing) - 10} more" if len(missing) > 10 else ""),
                          metadata={"idKind": what.replace(" ", "_"), "missingCount": len(missing),
                                    "missingIds": json.dumps(listed, ensure_ascii=False)})
    error.first_missing = missing[0] if len(missing) else None  # (listed may hold none: one doc_id over the bytes)
    return error


OPTION_KEYS = {"base_url": "embedder_url", "api_key_env": "embedder_key_env"}  # embedder option -> its key in meta


def stored_options(meta: dict[str, str]) -> dict[str, str]:
    """The remote embedder options a store's ``meta`` remembers (remember_options), by option name."""
    return {k: meta[key] for k, key in OPTION_KEYS.items() if meta.get(key)}


def remember_options(db, meta: dict[str, str], options: dict | None) -> bool:
    """Write the given remote embedder options (not None) that differ from ``meta``'s into it; whether any did. The key
    itself is never stored: only the name of the environment variable that holds it."""
    changed = [(OPTION_KEYS[k], str(v)) for k, v in (options or {}).items()
               if k in OPTION_KEYS and v is not None and meta.get(OPTION_KEYS[k]) != str(v)]
    if changed:  # one transaction (the connection is in autocommit mode)
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", changed)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    return bool(changed)


def store_id(meta: dict[str, str]) -> str:
    """A store's identity: set when it was created (its meta's creation time, embedder and dimension), the same for every
    open of its data dir, its replicas and its backups, and another for any other store."""
    import hashlib

    return hashlib.sha256(f"{meta.get('created_at', '')}|{meta['embedder']}|{meta['dim']}".encode()).hexdigest()[:12]


class ParagraphTables:
    def __init__(self, db: sqlite3.Connection, meta: dict[str, str]):
        self.db = db
        self.embedder_name: str = meta["embedder"]
        self.embedder_spec: str = meta.get("embedder_spec", meta["embedder"])
        self.embedder_options: dict[str, str] = stored_options(meta)
        self.store_id = store_id(meta)
        self.dim: int = int(meta["dim"])
        self.requested_index: str = meta["index"]
        self.refresh_schema()

    def refresh_schema(self) -> None:
        """Look again for the parts of the schema a writable open adds to a store made before them (the documents'
        generation column, the labels table): a read-only open may precede the writer's open that adds them, and
        then sees them from its next catch-up. They are never removed."""
        self._generation = "d.generation" if has_generation_column(self.db) else "0"  # of a document, in queries
        self.has_labels = doc_labels.has_labels(self.db)  # False only in a read-only open of a store from before labels
        self._labels = doc_labels.labels_column(self.has_labels)  # of a document, in queries

    # ---- reads ------------------------------------------------------------------------
    @contextlib.contextmanager
    def read_transaction(self):
        """Reads inside see one state of the database (a writer committing meanwhile is not seen); on the writer's
        own connection, which may be inside a transaction already, nothing changes."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            yield
        finally:
            self.db.execute("COMMIT")

    @property
    def generation(self) -> int:
        return int(self.db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def count_documents(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def live_ids(self) -> np.ndarray:
        """Every paragraph id, ascending."""
        return np.fromiter((r[0] for r in self.db.execute("SELECT id FROM paragraphs ORDER BY id")), dtype=np.int64)

    def rows_where_in(self, select: str, column: str, values: Iterable) -> Iterable[tuple]:
        """Rows of ``SELECT {select} FROM paragraphs WHERE {column} IN values``, in chunks under SQLite's limit."""
        return select_in(self.db, f"SELECT {select} FROM paragraphs WHERE {column}", values)

    def fetch_vectors(self, ids: np.ndarray) -> np.ndarray:
        blobs = dict(self.rows_where_in("id, vector", "id", [int(i) for i in ids]))
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for j, pid in enumerate(ids):
            out[j] = np.frombuffer(blobs[int(pid)], dtype=np.float32)
        return out

    def missing_documents(self, doc_ids: Sequence[str]) -> list[str]:
        """The doc_ids among ``doc_ids`` that are not stored, in their order (one query)."""
        stored = self.content_hashes(doc_ids)
        return [d for d in doc_ids if d not in stored]

    def content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return dict(select_in(self.db, "SELECT doc_id, content_hash FROM documents WHERE doc_id", doc_ids))

    def doc_ids(self) -> list[str]:
        """Every stored doc_id, in order."""
        return [row[0] for row in self.db.execute("SELECT doc_id FROM documents ORDER BY doc_id")]

    def list_documents(self, after: str, limit: int, labels: Mapping[str, str] | None = None) -> list[DocumentRow]:
        """Up to ``limit`` documents whose doc_id sorts after ``after``, in doc_id order, with their labels; with
        ``labels``, only documents carrying every one of them (one statement: one snapshot)."""
        where, params = "", []
        if labels:
            if not self.has_labels:
                return []
            query, params = doc_labels.documents_with(labels)
            where = f" AND d.doc_id IN ({query})"
        return [DocumentRow(*row[:4], doc_labels.parse_column(row[4])) for row in self.db.execute(
            f"SELECT d.doc_id, d.title, d.n_paragraphs, {self._generation}, {self._labels} FROM documents d "
            f"WHERE d.doc_id > ?{where} ORDER BY d.doc_id LIMIT ?", (after, *params, limit))]

    def get_document(self, doc_id: str) -> tuple[DocumentRow, list[Paragraph]]:
        """A document (with its labels) and its paragraphs in order, read by one statement; NotFoundError if it is
        not stored."""
        rows = self.db.execute(
            f"SELECT d.title, d.n_paragraphs, {self._generation}, {self._labels}, p.id, "
            "p.position, p.text, p.text_hash FROM documents d JOIN paragraphs p ON p.doc_id = d.doc_id "
            "WHERE d.doc_id = ? ORDER BY p.position", (doc_id,)).fetchall()
        if not rows:
            raise unknown_ids("doc_id", [doc_id])
        title, n, generation, labels = rows[0][:4]
        return (DocumentRow(doc_id, title, n, generation, doc_labels.parse_column(labels)),
                [Paragraph(r[4], doc_id, r[5], r[6], r[7]) for r in rows])

    def labels_of(self, doc_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The stored labels of each of ``doc_ids`` that has any."""
        return doc_labels.labels_of(self.db, doc_ids) if self.has_labels else {}

    def find_paragraphs(self, ids: Iterable[int]) -> dict[int, Paragraph]:
        """The stored paragraphs among ``ids``, by id (each read once); unknown ids are left out."""
        return {row[0]: Paragraph(*row)
                for row in self.rows_where_in("id, doc_id, position, text, text_hash", "id", dict.fromkeys(map(int, ids)))}

    def get_paragraphs(self, ids: Sequence[int]) -> list[Paragraph]:
        """Paragraphs in the order asked (an id asked twice is read once; one query per 500 ids); NotFoundError
        naming the unknown ids."""
        ids = [int(i) for i in ids]
        found = self.find_paragraphs(ids)
        missing = [i for i in ids if i not in found]
        if missing:
            raise unknown_ids("paragraph id", missing)
        return [found[i] for i in ids]

    def paragraph_table(self) -> tuple[np.ndarray, list[str], np.ndarray, list[str]]:
        """(ids, doc_ids, positions, text_hashes) of every paragraph, ordered by (doc_id, position)."""
        rows = self.db.execute("SELECT id, doc_id, position, text_hash FROM paragraphs ORDER BY doc_id, position").fetchall()
        return (np.fromiter((r[0] for r in rows), np.int64, len(rows)), [r[1] for r in rows],
                np.fromiter((r[2] for r in rows), np.int64, len(rows)), [r[3] for r in rows])

    def ids_of_documents(self, doc_ids: Iterable[str]) -> np.ndarray:
        rows = self.rows_where_in("id", "doc_id", dict.fromkeys(doc_ids))
        return np.asarray(sorted(r[0] for r in rows), dtype=np.int64)

    def ids_by_text(self, texts: Iterable[str]) -> dict[str, list[int]]:
        """For each of ``texts`` that is stored: the ids of every paragraph with exactly that text (one query)."""
        by_hash = {text_hash(t): t for t in texts}
        out: dict[str, list[int]] = {}
        for pid, h in self.rows_where_in("id, text_hash", "text_hash", by_hash):
            out.setdefault(by_hash[h], []).append(pid)
        return out

    # ---- writes: each one transaction -------------------------------------------------
    def shrink_log(self) -> None:
        """Checkpoint the write-ahead log into the database and truncate it, as far as readers allow without
        waiting for them (busy timeout 0: a reader holding an old snapshot leaves the log for the next time).
        Called after a snapshot, so that an idle store's log takes no disk."""
        timeout = self.db.execute("PRAGMA busy_timeout").fetchone()[0]
        try:
            self.db.execute("PRAGMA busy_timeout = 0")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.OperationalError as e:  # a full disk, say: the log keeps the writes, nothing is lost
            log.warning("the write-ahead log was not checkpointed: %s", e)
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {int(timeout)}")

    def _drop(self, doc_id: str) -> list[int]:
        """Delete a document and its paragraphs (inside the caller's transaction); their ids."""
        old = [r[0] for r in self.db.execute("SELECT id FROM paragraphs WHERE doc_id = ?", (doc_id,))]
        self.db.execute("DELETE FROM paragraphs WHERE doc_id = ?", (doc_id,))
        self.db.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
        return old

    def write_documents(self, checked: Sequence[Checked]) -> tuple[WriteResult, np.ndarray, np.ndarray, np.ndarray]:
        """Upsert in one transaction: (result, removed ids, added ids, their vectors). Unchanged documents are skipped;
        a document whose content is unchanged but whose labels are not gets its new labels and keeps its paragraphs."""
        result = WriteResult()
        old_ids: list[int] = []
        new_ids: list[int] = []
        new_vecs: list[np.ndarray] = []
        stored = self.content_hashes([c.doc.doc_id for c in checked])
        stored_labels = self.labels_of([c.doc.doc_id for c in checked if c.doc.doc_id in stored])
        now = time.time()
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            generation = self.generation + 1  # this write's, if it changes anything
            for c in checked:
                doc = c.doc
                if stored.get(doc.doc_id) == c.content_hash:
                    if stored_labels.get(doc.doc_id, {}) == doc.labels:
                        result.unchanged += 1
                    else:  # only the labels changed
                        doc_labels.write_labels(self.db, doc.doc_id, doc.labels, replace=True)
                        self.db.execute("UPDATE documents SET generation = ?, updated_at = ? WHERE doc_id = ?",
                                        (generation, now, doc.doc_id))
                        result.replaced += 1
                    continue
                if doc.doc_id in stored:
                    old_ids += self._drop(doc.doc_id)
                    result.replaced += 1
                else:
                    result.added += 1
                self.db.execute("INSERT INTO documents (doc_id, title, n_paragraphs, content_hash, updated_at, generation) "
                                "VALUES (?, ?, ?, ?, ?, ?)",
                                (doc.doc_id, doc.title, len(doc.paragraphs), c.content_hash, now, generation))
                doc_labels.write_labels(self.db, doc.doc_id, doc.labels, replace=False)  # the old ones went with _drop
                for position, (text, vec) in enumerate(zip(doc.paragraphs, c.vectors)):
                    cur = self.db.execute(
                        "INSERT INTO paragraphs (doc_id, position, text, text_hash, vector) VALUES (?, ?, ?, ?, ?)",
                        (doc.doc_id, position, text, text_hash(text), vec.tobytes()))
                    new_ids.append(cur.lastrowid)
                new_vecs.append(c.vectors)
                result.paragraphs += len(doc.paragraphs)
            if result.added or result.replaced:
                self.db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        vectors = np.concatenate(new_vecs) if new_vecs else np.zeros((0, self.dim), np.float32)
        return result, np.asarray(old_ids, np.int64), np.asarray(new_ids, np.int64), vectors

    def delete_documents(self, doc_ids: Sequence[str]) -> np.ndarray:
        """Delete documents in one transaction; the ids of their paragraphs. NotFoundError (nothing deleted) if
        any doc_id is unknown."""
        missing = self.missing_documents(doc_ids)
        if missing:
            raise unknown_ids("doc_id", missing)
        old_ids: list[int] = []
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            for doc_id in doc_ids:
                old_ids += self._drop(doc_id)
            if doc_ids:
                self.db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        return np.asarray(old_ids, np.int64)
