"""The corpus as ordered sequences of paragraph vectors, for training and evaluation.

Loads every paragraph of a store once (ids, doc order, text hashes, vectors) and answers:
which documents are in which split (the fixed rule ``int(md5(doc_id), 16) % 10``: 0-7 train,
8 validation, 9 test), what the (context -> next paragraph) queries of a split are, which rows
share a text (identical texts count as the same paragraph: a hit when equal to the target,
excluded when equal to a context paragraph).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from nextpara.store.store import ParagraphStore

SPLITS = {"train": range(0, 8), "validation": range(8, 9), "test": range(9, 10)}


def split_of(doc_id: str) -> str:
    bucket = int(hashlib.md5(doc_id.encode("utf-8")).hexdigest(), 16) % 10
    return next(name for name, buckets in SPLITS.items() if bucket in buckets)


@dataclass
class Query:
    """Rows (into ParagraphSequences arrays) of up to L context paragraphs and the next one."""

    context: np.ndarray  # (n,) rows, oldest first
    target: int  # row


class ParagraphSequences:
    def __init__(self, store: ParagraphStore):
        self.ids, self.doc_ids, self.positions, hashes = store.paragraph_table()
        self.vectors = np.ascontiguousarray(store.vectors(self.ids))  # (N, D), row-aligned with ids
        self.row_of_id = {int(i): r for r, i in enumerate(self.ids)}
        # text classes: rows with identical text share a class id
        class_of: dict[str, int] = {}
        self.text_class = np.fromiter((class_of.setdefault(h, len(class_of)) for h in hashes), np.int64, len(hashes))
        order = np.argsort(self.text_class, kind="stable")
        bounds = np.flatnonzero(np.diff(self.text_class[order])) + 1
        self._class_rows = np.split(order, bounds)  # class id -> rows
        self.doc_rows: dict[str, np.ndarray] = {}
        start = 0
        for r in range(1, len(self.ids) + 1):
            if r == len(self.ids) or self.doc_ids[r] != self.doc_ids[start]:
                self.doc_rows[self.doc_ids[start]] = np.arange(start, r)
                start = r
        self.split = {d: split_of(d) for d in self.doc_rows}

    def __len__(self) -> int:
        return len(self.ids)

    def split_rows(self, split: str) -> np.ndarray:
        """Every row of the split's documents, in store order."""
        return np.concatenate([rows for doc, rows in self.doc_rows.items() if self.split[doc] == split] or
                              [np.zeros(0, np.int64)])

    def same_text_rows(self, rows: np.ndarray) -> np.ndarray:
        """Every row whose text equals the text of one of ``rows``."""
        return np.unique(np.concatenate([self._class_rows[c] for c in np.unique(self.text_class[rows])]))

    def queries(self, split: str, max_context: int, min_context: int = 1, limit: int | None = None,
                seed: int = 0) -> list[Query]:
        """All (context -> next) pairs of a split's documents; a seeded sample of ``limit`` if given."""
        out = []
        for doc, rows in self.doc_rows.items():
            if self.split[doc] != split:
                continue
            for t in range(min_context, len(rows)):
                out.append(Query(context=rows[max(0, t - max_context):t], target=int(rows[t])))
        if limit is not None and limit < len(out):
            pick = np.sort(np.random.default_rng(seed).choice(len(out), size=limit, replace=False))
            out = [out[i] for i in pick]
        return out
