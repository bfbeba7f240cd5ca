"""Stage 1: candidate generation, the same code for training, evaluation and serving.

Candidates are the union of two FAISS searches: the model's query vector (the predicted next
paragraph) and the last context paragraph's own neighbours, each ``n`` deep, merged in that
order without duplicates. Excluded ids (the context and every paragraph with identical text)
are filtered out by the store's search, which still gives every row ``n`` results from one batched
FAISS call for many queries.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from nextpara.store.store import ParagraphStore


def search_excluding(store: ParagraphStore, queries: np.ndarray, n: int, exclude: Sequence[set[int]]) -> list[list[int]]:
    """Top-n ids per query row, never one of that row's excluded ids; one batched FAISS call."""
    _, ids = store.search(queries, n, exclude)
    return [[int(i) for i in row if i >= 0] for row in ids]


def generate_candidates(store: ParagraphStore, query_vectors: np.ndarray, last_vectors: np.ndarray,
                        exclude: Sequence[set[int]], n: int) -> list[np.ndarray]:
    """For each row: candidate paragraph ids, query-head results first, then the last paragraph's neighbours."""
    by_query = search_excluding(store, query_vectors, n, exclude)
    by_last = search_excluding(store, last_vectors, n, exclude)
    return [np.asarray(list(dict.fromkeys(a + b)), dtype=np.int64) for a, b in zip(by_query, by_last)]
