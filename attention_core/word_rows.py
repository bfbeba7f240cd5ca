"""The word rows of stored paragraphs, kept by id in flat arrays: what the reranker reads for every candidate.

A paragraph's weighted row (lexical.Lexicon.weigh) is computed once per process, from its text read once; ids are
never reused, so a row never goes stale. Rows live in two arenas (their buckets and their weights, one after the other)
and an index sorted by id (where each row starts, how long it is), so taking the rows of a batch's 50,000 candidates
is a binary search and two gathers, in C: no per-id Python, no dictionary, no list of small arrays to concatenate.

Readers take no lock: a put builds the next index (and, when the arenas are full, larger arenas) and publishes it in
one assignment; what a reader already holds stays valid, since a put only writes past the end of what any published
index points to. Past ``limit`` rows, the oldest half is dropped (the arenas compacted to the newer half), but never a
row the call that adds rows is about to take.
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
        if not found.all():
            missing = np.unique(ids[~found])
            texts = read_texts(missing.tolist())
            if texts:
                index = self._put({i: self.weigh(t) for i, t in texts.items()}, keep=ids[found])
                at, found = self._find(index, ids)
        length = np.where(found, index.length[at], 0)
        indptr = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(length, out=indptr[1:])
        take = np.repeat(index.start[at] - indptr[:-1], length) + np.arange(indptr[-1])  # each entry's arena slot
        if indptr[-1] < 2**31:
            indptr = indptr.astype(np.int32)  # as the buckets: scipy would otherwise copy them to int64
        return sparse.csr_matrix((index.weights[take], index.buckets[take], indptr),
                                 shape=(len(ids), self.n_columns)), found

    def _put(self, rows: dict[int, Row], keep: np.ndarray) -> _Index:
        """Add ``rows``; a compaction keeps ``keep`` (the other rows the caller is about to take) with the newest."""
        with self._lock:
            index = self._index
            new_ids = np.fromiter(rows, np.int64, len(rows))
            keep = ~self._find(index, new_ids)[1]  # another thread may have put some meanwhile
            new_ids = new_ids[keep]
            new_rows = [rows[i] for i in new_ids.tolist()]
            length = np.fromiter((len(b) for b, _ in new_rows), np.int64, len(new_rows))
            if len(index.ids) + len(new_ids) > self.limit:
                index = self._compact(index, self.limit // 2, keep)
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
        """The newest ``n`` rows and those of ``keep``, in new arenas of their own."""
        newest = np.zeros(len(index.ids), bool)
        newest[np.argsort(-index.order, kind="stable")[:n]] = True
        newest[np.searchsorted(index.ids, keep)] = True  # every id of ``keep`` is in the index
        newest = np.flatnonzero(newest)  # positions, still in id order
        length = index.length[newest]
        fill = int(length.sum())
        start = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
        take = np.repeat(index.start[newest] - start, length) + np.arange(fill)
        size = max(2 * fill, 1 << 16)
        buckets, weights = np.zeros(size, np.int32), np.zeros(size, np.float32)
        buckets[:fill], weights[:fill] = index.buckets[take], index.weights[take]
        return _Index(index.ids[newest], start, length, index.order[newest], buckets, weights, fill)

