"""Document labels: string -> string pairs a document carries (``tenant=acme``), in the same database as the documents.

``document_labels`` holds one row per (doc_id, key). A document's labels are written in the transaction that writes
the document, and a trigger deletes them with the document's row, whatever code deletes it (a store written by an
older nextpara, which knows nothing of labels, drops them with the document and never leaves them to a later
document of the same doc_id). An index on (key, value) finds the documents carrying a label. A store made before
labels gets the table on its first writable open (one transaction; no document has labels then).

The rules for a label, shared by documents and filters, are here too (:func:`check_labels`).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Iterable, Mapping, Sequence

from nextpara.errors import InvalidInputError, Reason, not_utf8

TABLE = "document_labels"
MAX_LABELS = 64  # per document, and per filter
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 1024

SCHEMA = [
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        doc_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (doc_id, key)) WITHOUT ROWID""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_value ON {TABLE} (key, value)",
    f"CREATE TRIGGER IF NOT EXISTS documents_labels_delete AFTER DELETE ON documents BEGIN "
    f"DELETE FROM {TABLE} WHERE doc_id = old.doc_id; END",
]


def has_labels(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone() is not None


def add_labels(db: sqlite3.Connection) -> None:
    """Give a store made before labels their table, index and trigger, in one transaction."""
    with db:
        db.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA:
            db.execute(statement)


def label_path(field: str, key: str) -> str:
    """The request path of one label: ``documents[0].labels["tenant"]`` (the key quoted as JSON; the server cuts an
    over-long path when it sends it)."""
    return f"{field}[{json.dumps(key, ensure_ascii=False)}]"


def check_labels(labels: object, field: str | None, where: str = "") -> dict[str, str]:
    """``labels`` as a dict, or InvalidInputError naming the bad label: a mapping of at most MAX_LABELS non-blank
    strings without NUL characters, keys of at most MAX_KEY_CHARS, values of at most MAX_VALUE_CHARS. ``field`` is
    the labels' path in a request (``documents[0].labels``; None when they did not come in one), ``where`` prefixes
    the message."""
    at = f"{where}: " if where else ""

    def bad(message: str, reason: Reason, path: str | None, **metadata) -> InvalidInputError:
        return InvalidInputError(at + message, reason=reason, field=path if field else None, metadata=metadata)

    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise bad(f"labels must be an object of strings, got {type(labels).__name__}", Reason.INVALID_TEXT, field)
    if len(labels) > MAX_LABELS:
        raise bad(f"{len(labels)} labels, at most {MAX_LABELS}", Reason.OUT_OF_RANGE, field, min=0, max=MAX_LABELS)
    for key, value in labels.items():
        path = label_path(field, key) if field and isinstance(key, str) else field
        if not isinstance(key, str) or not isinstance(value, str):
            raise bad(f"label {key!r:.60}: keys and values must be strings, got {type(value).__name__}",
                      Reason.INVALID_TEXT, path)
        for part, text, limit in (("key", key, MAX_KEY_CHARS), ("value", value, MAX_VALUE_CHARS)):
            if not text.strip():
                raise bad(f"label {key!r:.60}: its {part} is empty", Reason.FIELD_REQUIRED, path)
            if len(text) > limit:
                raise bad(f"label {key!r:.60}: its {part} is {len(text)} characters, at most {limit}",
                          Reason.OUT_OF_RANGE, path, min=1, max=limit)
            if "\x00" in text:
                raise bad(f"label {key!r:.60}: its {part} contains a NUL character", Reason.INVALID_TEXT, path)
            if (why := not_utf8(text)) is not None:
                raise bad(f"label {key!r:.60}: its {part} {why}", Reason.INVALID_TEXT, path)
    return dict(labels)


# ---- reads and writes on the caller's connection (the store holds its lock around them) --------------------------
def labels_column(available: bool, alias: str = "d") -> str:
    """A SQL expression for the labels of document row ``alias``, as a JSON object ('{}' in a store without labels)."""
    if not available:
        return "'{}'"
    return f"(SELECT json_group_object(l.key, l.value) FROM {TABLE} l WHERE l.doc_id = {alias}.doc_id)"


def parse_column(value: str | None) -> dict[str, str]:
    return json.loads(value) if value else {}


def documents_with(labels: Mapping[str, str]) -> tuple[str, list[str]]:
    """A SQL query of the doc_ids carrying every one of ``labels`` (non-empty), and its parameters."""
    query = " INTERSECT ".join([f"SELECT doc_id FROM {TABLE} WHERE key = ? AND value = ?"] * len(labels))
    return query, [x for pair in sorted(labels.items()) for x in pair]


def labels_of(db: sqlite3.Connection, doc_ids: Sequence[str], chunk: int = 500) -> dict[str, dict[str, str]]:
    """The labels of each of ``doc_ids`` that has any (one query per ``chunk`` doc_ids)."""
    out: dict[str, dict[str, str]] = {}
    doc_ids = list(dict.fromkeys(doc_ids))
    for start in range(0, len(doc_ids), chunk):
        part = doc_ids[start:start + chunk]
        for doc_id, key, value in db.execute(
                f"SELECT doc_id, key, value FROM {TABLE} WHERE doc_id IN ({','.join('?' * len(part))})", part):
            out.setdefault(doc_id, {})[key] = value
    return out


def write_labels(db: sqlite3.Connection, doc_id: str, labels: Mapping[str, str], replace: bool) -> None:
    """Store a document's labels inside the caller's transaction (``replace``: drop the ones it had first)."""
    if replace:
        db.execute(f"DELETE FROM {TABLE} WHERE doc_id = ?", (doc_id,))
    db.executemany(f"INSERT INTO {TABLE} (doc_id, key, value) VALUES (?, ?, ?)",
                   [(doc_id, k, v) for k, v in sorted(labels.items())])


def pairs(labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Labels as sorted (key, value) pairs: a hashable, order-free form."""
    return tuple(sorted(dict(labels).items()))
