"""Stage 1: candidate generation, the same code for training, evaluation and serving.

Candidates are the union of two FAISS searches (three with the transition memory's, below): the model's query vector (the predicted next
paragraph) and the last context paragraph's own neighbours, each ``n`` deep, and, for a model
trained with ``word_candidates``, two searches of the store's word index (SQLite FTS5, bm25): the
last paragraph's words and the whole context's, each ``n_words`` deep, and, for one trained with
``seam_candidates``, a search by the last paragraph's last sentence alone (``n_seam`` deep: the words where it
meets the next paragraph, which the whole paragraph's rarer words can crowd out); merged in that order
without duplicates; then, for a model with a transition memory (transitions.py), up to ``n_memory`` of the nearest
paragraphs of the memory's predicted next vector that no other source found. Word search finds what vectors miss: the names and terms a document repeats. Excluded ids (the context and every paragraph with identical text)
are filtered out by the store's search, which still gives every row ``n`` results from one batched
search for many queries; so are the ids a retrieval filter does not allow (``allow``, from
``store.resolve_filter``): every source searches only among them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from nextpara.store.store import ParagraphStore

from .lexical import seam_texts


def search_excluding(store: ParagraphStore, queries: np.ndarray, n: int, exclude: Sequence[set[int]],
                     allow: np.ndarray | None = None) -> list[list[int]]:
    """Top-n ids per query row, never one of that row's excluded ids, only ids of ``allow`` when given; one batched
    search."""
    _, ids = store.search(queries, n, exclude, allow)
    return [[int(i) for i in row if i >= 0] for row in ids]


def generate_candidates(store: ParagraphStore, query_vectors: np.ndarray, last_vectors: np.ndarray,
                        exclude: Sequence[set[int]], n: int, context_texts: Sequence[Sequence[str | None]] | None = None,
                        n_words: int = 0, allow: np.ndarray | None = None,
                        words: Sequence[Sequence[Sequence[int]]] | None = None, n_seam: int = 0,
                        memory_vectors: np.ndarray | None = None, n_memory: int = 0) -> list[np.ndarray]:
    """For each row: candidate paragraph ids, query-head results first, then the last paragraph's neighbours, then
    (with ``n_words`` and the context's texts) the word index's results for the last paragraph's words and for the
    whole context's, then (with ``n_seam``) for the last paragraph's last sentence. A context paragraph without text
    (a raw vector) adds no words. ``allow``: the only ids any source may return (None: any). ``words``: those word
    results already found, by word_sources() with the same ``n_words``, ``n_seam``, ``exclude`` and ``allow`` (in
    place of ``context_texts``): training mines the same queries' lists every epoch, and their word results do not
    change. ``memory_vectors``: (B, D) the memory's predicted next vectors, whose nearest ids not found already add up
    to ``n_memory`` per row (searched ``n + n_memory`` deep: they lie near the last paragraph's, which find many of
    them first)."""
    # the vector sources in one search: an exact search reads every stored vector once per call (memory-bound for a
    # few queries, compute-bound for a batch's), so query sets stacked cost less than separate searches
    # (bench/results/profile_request.md)
    remember = memory_vectors is not None and n_memory > 0
    stacked = [query_vectors, last_vectors, *([memory_vectors] if remember else [])]
    _, found = store.search(np.concatenate(stacked), n + (n_memory if remember else 0), list(exclude) * len(stacked),
                            allow)
    b = len(query_vectors)
    sources = [found[:b, :n], found[b:2 * b, :n]]
    if (n_words or n_seam) and words is None and context_texts is not None:
        words = word_sources(store, context_texts, n_words, exclude, allow, n_seam)
    if (n_words or n_seam) and words is not None:
        sources += list(zip(*words))  # per row (last's, whole's, seam's) -> per source
    merged = [first_seen(np.concatenate([np.asarray(ids, np.int64) for ids in lists])) for lists in zip(*sources)]
    if remember:
        for i, row in enumerate(found[2 * b:]):
            new = first_seen(row)
            merged[i] = np.concatenate([merged[i], new[~np.isin(new, merged[i])][:n_memory]])
    return merged


def word_sources(store: ParagraphStore, context_texts: Sequence[Sequence[str | None]], n_words: int,
                 exclude: Sequence[set[int]], allow: np.ndarray | None = None, n_seam: int = 0
                 ) -> list[list[list[int]]]:
    """Per row, the word index's results (lists of ids): with ``n_words``, up to that many for the last context
    paragraph's words, then for the whole context's; with ``n_seam``, up to that many for the last paragraph's last
    sentence."""
    searches = []
    if n_words:
        last = [texts[-1] if len(texts) else None for texts in context_texts]
        whole = [" ".join(t for t in texts if t) or None for texts in context_texts]
        searches += [store.word_search(last, n_words, exclude, allow), store.word_search(whole, n_words, exclude, allow)]
    if n_seam:
        searches.append(store.word_search(seam_texts(context_texts), n_seam, exclude, allow))
    return [list(row) for row in zip(*searches)] if searches else [[] for _ in context_texts]


def first_seen(ids: np.ndarray) -> np.ndarray:
    """The ids of ``ids`` that are not padding (-1), each once, in the order of its first occurrence."""
    ids = ids[ids >= 0]
    _, first = np.unique(ids, return_index=True)
    return ids[np.sort(first)]
