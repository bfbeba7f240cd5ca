"""The word index: SQLite FTS5 over the paragraphs' texts, in the same database as the paragraphs.

``paragraph_words`` is an FTS5 table with external content (``content='paragraphs'``,
``rowid`` = the paragraph id); triggers on ``paragraphs`` add and delete its entries inside the
same transaction as the write, so it can never disagree with the paragraphs, whatever kills the
process (SQLite's own atomicity: no second store to keep in step). A store created before the
word index existed gets it on its first writable open, built once (``INSERT ... ('rebuild')``).

:meth:`WordIndex.search` ranks paragraphs by FTS5's bm25 against the words of a query text. A
paragraph's words are many and mostly common, and an OR over all of them would touch most of the
index, so a query keeps its ``MAX_TERMS`` rarest terms that occur in at most ``MAX_DOC_FRACTION``
of the paragraphs (or ``MIN_DOC_LIMIT``, whichever is more) (document frequencies from the ``fts5vocab`` table); words the index never saw
drop out there too. A search restricted to some paragraphs (a retrieval filter's ids) says so in its SQL
(``rowid IN`` the ids, passed as one JSON array), so its ``k`` results all pass the filter.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import unicodedata
from typing import Iterable, Sequence

import numpy as np

from .tables import select_in

log = logging.getLogger(__name__)

TABLE = "paragraph_words"
# Chosen on PEPs' validation split (python -m bench.quality.stage1_recall; bench/results/stage1_recall*.md): with
# head 100 + last 100 + 50 from each word source, stage-1 recall 0.654 at two word searches of 10 ms per query;
# 64 terms in up to 5% reached 0.666 at 46 ms, 64 in up to 2% 0.662 at 23 ms, 24 in up to 5% 0.652 at 15 ms.
MAX_TERMS = 48  # rarest terms kept per query
MAX_DOC_FRACTION = 0.01  # terms in more of the paragraphs than this say little and cost much ...
MIN_DOC_LIMIT = 200  # ... but in a small store every term is cheap
WORD = re.compile(r"[^\W_]+")  # unicode61's tokens: runs of letters and digits

SCHEMA = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5(text, content='paragraphs', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 2')",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE}_vocab USING fts5vocab({TABLE}, 'row')",
    f"CREATE TRIGGER IF NOT EXISTS paragraphs_words_insert AFTER INSERT ON paragraphs BEGIN "
    f"INSERT INTO {TABLE}(rowid, text) VALUES (new.id, new.text); END",
    f"CREATE TRIGGER IF NOT EXISTS paragraphs_words_delete AFTER DELETE ON paragraphs BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, text) VALUES ('delete', old.id, old.text); END",
]


def has_word_index(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone() is not None


def add_word_index(db: sqlite3.Connection) -> None:
    """Create the word index of an existing store and fill it from its paragraphs, in one transaction."""
    n = db.execute("SELECT COUNT(*) FROM paragraphs").fetchone()[0]
    log.info("building the word index of %d paragraphs (once, for a store made before it existed)", n)
    with db:
        db.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA:
            db.execute(statement)
        db.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")


def _fold(word: str) -> str:
    """Lower case without diacritics, as unicode61 with remove_diacritics stores a token."""
    return "".join(c for c in unicodedata.normalize("NFD", word.lower()) if not unicodedata.combining(c))


def terms(text: str) -> list[str]:
    """A text's distinct words as the index tokenises them."""
    return list(dict.fromkeys(_fold(w) for w in WORD.findall(text)))


class WordIndex:
    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.available = has_word_index(db)

    def agrees_with_paragraphs(self) -> bool:
        """FTS5's integrity check against its content table: every paragraph indexed, nothing else."""
        try:
            self.db.execute(f"INSERT INTO {TABLE}({TABLE}, rank) VALUES ('integrity-check', 1)")
            return True
        except sqlite3.DatabaseError:
            return False

    def document_frequencies(self, words: Iterable[str]) -> dict[str, int]:
        return dict(select_in(self.db, f"SELECT term, doc FROM {TABLE}_vocab WHERE term", dict.fromkeys(words)))

    def query_terms(self, texts: Sequence[str], n_paragraphs: int) -> list[list[str]]:
        """Per text: the terms its search uses (rarest first), with one vocabulary look-up for all texts."""
        words = [terms(t) for t in texts]
        df = self.document_frequencies(w for ws in words for w in ws)
        limit = max(MIN_DOC_LIMIT, MAX_DOC_FRACTION * n_paragraphs)
        return [sorted((w for w in ws if 0 < df.get(w, 0) <= limit), key=lambda w: (df[w], w))[:MAX_TERMS]
                for ws in words]

    def search(self, texts: Sequence[str | None], k: int, n_paragraphs: int,
               allow: np.ndarray | None = None) -> list[list[int]]:
        """Per text: up to ``k`` paragraph ids, best bm25 first ([] for None, or a text with no usable word); with
        ``allow``, only ids among it."""
        if not self.available:
            return [[] for _ in texts]
        given = [i for i, t in enumerate(texts) if t]
        out: list[list[int]] = [[] for _ in texts]
        restrict, extra = "", ()
        if allow is not None:
            restrict, extra = " AND rowid IN (SELECT value FROM json_each(?))", (json.dumps(np.asarray(allow).tolist()),)
        for i, query in zip(given, self.query_terms([texts[i] for i in given], n_paragraphs)):
            if query:
                match = " OR ".join('"' + w.replace('"', '""') + '"' for w in query)
                out[i] = [r[0] for r in self.db.execute(
                    f"SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH ?{restrict} ORDER BY rank LIMIT ?", (match, *extra, k))]
        return out
