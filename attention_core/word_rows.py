"""The word rows of stored paragraphs, kept by id in flat arrays: what the reranker reads for every candidate.

A paragraph's weighted row (lexical.Lexicon.weigh) is computed once per process, from its text read once; ids are
never reused, so a row never goes stale. Rows live in two arenas (their buckets and their weights, one after the other)
and an index sorted by id (where each row starts, how long it is), so taking the rows of a batch's 50,000 candidates
is a binary search and two gathers, in C: no per-id Python, no dictionary, no list of small arrays to concatenate.

Readers take no lock: a put builds the next index (and, when the arenas are full, larger arenas) and publishes it in
one assignment; what a reader already holds stays valid, since a put only writes past the end of what any published
index points to. Past ``limit`` rows, the oldest half is dropped (the arenas compacted to the newer half); a call that
adds rows takes those it had found from the index it read then, and a put keeps the rows it was given through its
compaction, so a compaction meanwhile costs no call a row it asked for.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import sparse

Row = tuple[np.ndarray, np.ndarray]  # (buckets int32, weights float32)


@dataclass(frozen=True)
class _Index:
    ids: np.ndarray  # (n,) int64, ascending
    start: np.ndarray  # (n,) int64: where each row's entries start in the arenas
    length: np.ndarray  # (n,) int64
    order: np.ndarray  # (n,) int64: when each row was put (higher is newer)
    buckets: np.ndarray  # arena, int32; entries past ``fill`` belong to no published row yet
    weights: np.ndarray  # arena, float32
    fill: int  # arena entries in use


def _empty_index(capacity: int = 1 << 16) -> _Index:
    none = np.zeros(0, np.int64)
    return _Index(none, none, none, none, np.zeros(capacity, np.int32), np.zeros(capacity, np.float32), 0)


class StoredWordRows:
    def __init__(self, weigh: Callable[[str], Row], n_columns: int, limit: int):
        self.weigh, self.n_columns, self.limit = weigh, n_columns, limit
        self._index = _empty_index()
        self._puts = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._index.ids)

    def _find(self, index: _Index, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in the index, found) per id."""
        if not len(index.ids):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
        at = np.minimum(np.searchsorted(index.ids, ids), len(index.ids) - 1)
        return at, index.ids[at] == ids

    def uncached(self, ids: np.ndarray) -> np.ndarray:
        """The ids among ``ids`` whose rows are not kept."""
        ids = np.asarray(ids, np.int64)
        return ids[~self._find(self._index, ids)[1]]

    def rows(self, ids: np.ndarray, read_texts: Callable[[list[int]], dict[int, str]]
             ) -> tuple[sparse.csr_matrix, np.ndarray]:
        """(CSR matrix of the rows of ``ids``, in that order, duplicates allowed; found (n,) bool). ``read_texts(ids)``
        is called once, with the sorted ids not kept yet; an id it does not return (a paragraph deleted since its id
        was found) gets an empty row and found False, and is not kept."""
        ids = np.asarray(ids, np.int64)
        index = self._index
        at, found = self._find(index, ids)
        rows = self._gather(index, at, found)
        if found.all():
            return rows, found
        texts = read_texts(np.unique(ids[~found]).tolist())
        if not texts:
            return rows, found
        # the rows found above come from the index read then (its arenas stay valid: a put compacts into new ones),
        # the others from the one this put publishes
        new = self._put({i: self.weigh(t) for i, t in texts.items()})
        at, added = self._find(new, ids)
        added &= ~found
        if not found.any():
            return self._gather(new, at, added), added
        return rows + self._gather(new, at, added), found | added

    def _gather(self, index: _Index, at: np.ndarray, found: np.ndarray) -> sparse.csr_matrix:
        """The rows at positions ``at`` of ``index`` where ``found``, empty rows elsewhere."""
        length = np.zeros(len(at), np.int64)
        start = np.zeros(len(at), np.int64)
        if len(index.ids):
            length[found], start[found] = index.length[at[found]], index.start[at[found]]
        indptr, take = _spans(start, length)
        return sparse.csr_matrix((index.weights[take], index.buckets[take], indptr), shape=(len(at), self.n_columns))

    def _put(self, rows: dict[int, Row]) -> _Index:
        """Add ``rows``; those another thread has put meanwhile are kept as they are, through a compaction too (the
        caller is about to take them from the index this returns)."""
        with self._lock:
            index = self._index
            given = np.fromiter(rows, np.int64, len(rows))
            at, present = self._find(index, given)
            new_ids = given[~present]
            new_rows = [rows[i] for i in new_ids.tolist()]
            length = np.fromiter((len(b) for b, _ in new_rows), np.int64, len(new_rows))
            if len(index.ids) + len(new_ids) > self.limit:
                index = self._compact(index, self.limit // 2, at[present])
            need = index.fill + int(length.sum())
            buckets, weights = index.buckets, index.weights
            if need > len(buckets):  # larger arenas; readers keep the ones they hold
                size = max(need, 2 * len(buckets))
                buckets, weights = np.zeros(size, np.int32), np.zeros(size, np.float32)
                buckets[:index.fill], weights[:index.fill] = index.buckets[:index.fill], index.weights[:index.fill]
            start = index.fill + np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
            if new_rows:
                buckets[index.fill:need] = np.concatenate([b for b, _ in new_rows])
                weights[index.fill:need] = np.concatenate([w for _, w in new_rows])
            self._puts += 1
            ids = np.concatenate([index.ids, new_ids])
            sort = np.argsort(ids, kind="stable")
            self._index = _Index(ids[sort], np.concatenate([index.start, start])[sort],
                                 np.concatenate([index.length, length])[sort],
                                 np.concatenate([index.order, np.full(len(new_ids), self._puts)])[sort],
                                 buckets, weights, need)
            return self._index

    @staticmethod
    def _compact(index: _Index, n: int, keep: np.ndarray) -> _Index:
        """The newest ``n`` rows and those at positions ``keep``, in new arenas of their own."""
        kept = np.zeros(len(index.ids), bool)
        kept[np.argsort(-index.order, kind="stable")[:n]] = True
        kept[keep] = True
        newest = np.flatnonzero(kept)  # positions, still in id order
        length = index.length[newest]
        indptr, take = _spans(index.start[newest], length)
        fill = int(indptr[-1])
        size = max(2 * fill, 1 << 16)
        buckets, weights = np.zeros(size, np.int32), np.zeros(size, np.float32)
        buckets[:fill], weights[:fill] = index.buckets[take], index.weights[take]
        return _Index(index.ids[newest], indptr[:-1].astype(np.int64), length, index.order[newest], buckets, weights,
                      fill)


def _spans(start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indptr of rows of ``length`` entries each, the arena slot of every entry: row r's run from ``start[r]``), in
    C: a repeat and a range. indptr is int32 where it fits, as the buckets (scipy would copy them to int64 else)."""
    indptr = np.zeros(len(length) + 1, np.int64)
    np.cumsum(length, out=indptr[1:])
    take = np.repeat(start - indptr[:-1], length) + np.arange(indptr[-1])
    return (indptr.astype(np.int32) if indptr[-1] < 2**31 else indptr), take
