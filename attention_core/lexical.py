"""Word overlap as scorer features: TF-IDF cosines between a candidate's text and the context's.

Embeddings say "same topic"; the words a paragraph shares with the context (names, identifiers,
terms of one document) say much better "same document", and the next paragraph is nearly always
in the context's document. bench/quality/lexical_probe.py measured it on PEPs before the model used it:
adding tfidf cosines to the trained model's scores by hand raised validation MRR@10 from 0.130 to
0.150. Content only (docs/evaluation.md): the features come from the texts, never from a doc_id or position.

Tokens are lower-cased runs of two or more word characters, hashed (crc32) into ``N_BUCKETS``
buckets, so the vocabulary is a fixed-size IDF vector that the checkpoint stores as a tensor (no
pickled vocabulary). Term weight (1 + log tf) * idf, rows L2-normalised. IDF comes from the
training split's texts (smooth: log((1 + n) / (1 + df)) + 1), so a token first seen after training,
or only in validation and test documents, weighs the most (log(1 + n) + 1, above any token it saw):
the names and terms of a new document link its paragraphs, as they would for any document added
later, and the evaluation treats test documents exactly so.

Features per candidate (``n_features(L)`` = L + 2): the cosine to each context paragraph
(right-aligned like the context, 0 for padding or a paragraph without text), the cosine to the
whole context (the normalised sum of its rows), and 1 if both sides had text, else 0. A caller
that gives raw vectors has no text: the flag is 0 and the model scores from the vectors alone
(training hides the text of some queries so that it learns to).

With ``novel`` (a model config's ``novel_words``; ``n_features(L, True)`` = L + 4), two more: the cosine to
what the last paragraph *adds*, its row without the words any earlier context paragraph has (the thread the
next paragraph takes up, where an earlier paragraph of the document shares only the document's words), and
the share of the candidate's weight on words the context does not have. Stacked on the general model by a
small fitted MLP they moved PEPs' validation R@1 0.084 -> 0.090, overlapping intervals
(bench/results/seam_probe_novel_peps.md); trained into the model (bench/quality/experiments.py, variant
``novel``) they did not move it: validation R@1 0.100 and MRR@10 0.158 against the default's 0.105 and 0.158
the same day (bench/results/experiments.md). Off by default; kept, tested, for corpora where they may pay.

With ``seam`` (a model config's ``seam_feature``; one more feature, the last): the cosine to the last context
paragraph's *last sentence*, where it meets the next paragraph: the name a story has just introduced, the question
just asked, the term just defined. The whole last paragraph's row dilutes those few words among all of its others.
Sentences end at ., ! or ? (with any closing quotes or brackets) followed by white space: no list of abbreviations,
nothing fitted to one corpus's formatting.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np
from scipy import sparse

from .word_rows import StoredWordRows

N_BUCKETS = 1 << 18
TOKEN = re.compile(r"\w\w+")
SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+")  # ., ! or ?, closing quotes/brackets, then space
CACHE_SIZE = 20_000  # callers' texts whose weighted rows are kept
ID_CACHE_SIZE = 250_000  # stored paragraphs whose rows are kept (~0.5 KB each; PEPs has 44K paragraphs)
EMPTY_ROW = (np.zeros(0, np.int32), np.zeros(0, np.float32))
WORDS_KEPT = 1 << 20  # document_frequencies: words whose bucket is kept, buckets found before they are added up


def n_features(max_context: int, novel: bool = False, seam: bool = False) -> int:
    return max_context + 2 + (2 if novel else 0) + (1 if seam else 0)


def first_sentence(text: str) -> str:
    return SENTENCE_END.split(text.strip(), maxsplit=1)[0]


def last_sentence(text: str) -> str:
    return SENTENCE_END.split(text.strip())[-1]  # (a stripped text ends in no white space: the last part has words)


def seam_texts(context_texts: Sequence[Sequence[str | None]]) -> list[str | None]:
    """Per context, its last item's last sentence (None for a raw vector or an empty context)."""
    return [last_sentence(texts[-1]) if len(texts) and texts[-1] else None for texts in context_texts]


def words(text: str) -> list[str]:
    """A text's tokens, in order: lower-cased runs of two or more word characters."""
    return TOKEN.findall(text.lower())


def bucket(token: str) -> int:
    """A token's bucket: crc32 modulo N_BUCKETS."""
    return zlib.crc32(token.encode("utf-8")) % N_BUCKETS


def token_counts(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct token buckets of a text and their sublinear counts 1 + log(tf)."""
    tokens = words(text)
    if not tokens:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    buckets, counts = np.unique(np.fromiter(map(bucket, tokens), np.int64, len(tokens)), return_counts=True)
    return buckets, (1.0 + np.log(counts)).astype(np.float32)


def document_frequencies(texts: Sequence[str], words_kept: int = WORDS_KEPT) -> np.ndarray:
    """(N_BUCKETS,) int64: in how many of ``texts`` each bucket occurs; the buckets of token_counts(text), each text's
    counted once. A distinct word is hashed once, not at every occurrence: a general model fits its IDF on the whole
    store at every load (general.py), and this count takes about 0.4x the time of token_counts per text on PEPs
    (bench/results/idf_fit.md). Memory stays bounded on large stores: the words' buckets are forgotten past
    ``words_kept`` words, the buckets found added up every ``words_kept``."""
    df = np.zeros(N_BUCKETS, np.int64)
    bucket_of: dict[str, int] = {}
    found: list[int] = []
    for text in texts:
        buckets = set()
        for word in set(words(text)):
            b = bucket_of.get(word)
            if b is None:
                if len(bucket_of) >= words_kept:
                    bucket_of.clear()
                b = bucket_of[word] = bucket(word)
            buckets.add(b)
        found.extend(buckets)
        if len(found) >= words_kept:
            df += np.bincount(np.asarray(found, np.int64), minlength=N_BUCKETS)
            found.clear()
    return df + np.bincount(np.asarray(found, np.int64), minlength=N_BUCKETS)


class Lexicon:
    """The IDF vector and the weighted rows it makes: of texts (a caller's context, cached by text) and of stored
    paragraphs (kept by paragraph id in flat arrays, word_rows.py: ids are never reused, so a stored paragraph is read
    and tokenised once per process, not once per query)."""

    def __init__(self, idf: np.ndarray):
        if idf.shape != (N_BUCKETS,):
            raise ValueError(f"an IDF vector has {N_BUCKETS} buckets, got shape {idf.shape}")
        self.idf = np.asarray(idf, np.float32)
        self._cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()
        self.stored = StoredWordRows(self.weigh, N_BUCKETS, ID_CACHE_SIZE)
        # the rows of stored paragraphs' last sentences (the seam feature's), kept by id as well, filled only by a
        # model with the seam feature: a context by ids reads its last paragraph's text once per process, not per call
        self.stored_seams = StoredWordRows(lambda text: self.weigh(last_sentence(text)), N_BUCKETS, ID_CACHE_SIZE)

    @classmethod
    def fit(cls, texts: Sequence[str]) -> "Lexicon":
        df = document_frequencies(texts)
        # smooth IDF; a word the fitted texts never saw gets the highest weight (it is rarer than any they saw), so a
        # document added after training links its paragraphs by the names and terms only it uses
        idf = np.log((1 + len(texts)) / (1 + df)) + 1.0
        return cls(idf.astype(np.float32))

    def weigh(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The text's L2-normalised TF-IDF row as (buckets, weights)."""
        b, tf = token_counts(text)
        w = tf * self.idf[b]
        keep = w > 0
        norm = float(np.sqrt((w[keep] ** 2).sum()))
        return (b[keep].astype(np.int32), (w[keep] / norm).astype(np.float32)) if norm > 0 else EMPTY_ROW

    def _cached(self, cache: OrderedDict, keys: Sequence) -> dict:
        """The cached rows among ``keys``, each marked most recently used; one lock for all."""
        out = {}
        with self._lock:
            for key in keys:
                hit = cache.get(key)
                if hit is not None:
                    cache.move_to_end(key)
                    out[key] = hit
        return out

    def _put(self, cache: OrderedDict, rows: dict, limit: int) -> None:
        with self._lock:
            cache.update(rows)
            while len(cache) > limit:
                cache.popitem(last=False)

    def row(self, text: str | None) -> tuple[np.ndarray, np.ndarray]:
        """The weighted row of a caller's text (cached by text); None or a wordless text: an empty row."""
        if not text:
            return EMPTY_ROW
        row = self._cached(self._cache, [text]).get(text)
        if row is None:
            row = self.weigh(text)
            self._put(self._cache, {text: row}, CACHE_SIZE)
        return row

    def matrix(self, texts: Sequence[str | None]) -> sparse.csr_matrix:
        """(n, N_BUCKETS) L2-normalised TF-IDF rows; a None or wordless text is a zero row."""
        return stack([self.row(text) for text in texts])

    def uncached(self, ids: np.ndarray) -> np.ndarray:
        """The ids among ``ids`` whose rows are not kept yet (a binary search)."""
        return self.stored.uncached(ids)

    def stored_rows(self, ids: np.ndarray, read_texts: Callable[[list[int]], dict[int, str]]
                    ) -> tuple[sparse.csr_matrix, np.ndarray]:
        """(rows of stored paragraphs by id, in the order of ``ids``, as a CSR matrix; found per id).
        ``read_texts(ids)`` is called once, for the ids not kept yet; an id it does not return (a paragraph deleted
        since its id was found) gets an empty row and found False (word_rows.StoredWordRows: kept in flat arrays, up
        to ID_CACHE_SIZE paragraphs, the oldest half forgotten past that)."""
        return self.stored.rows(ids, read_texts)


def empty_rows(n: int) -> sparse.csr_matrix:
    """(n, N_BUCKETS) rows without words."""
    return sparse.csr_matrix((n, N_BUCKETS), dtype=np.float32)


def stack(rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> sparse.csr_matrix:
    """(n, N_BUCKETS) CSR matrix of rows given as (buckets, weights)."""
    indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(b) for b, _ in rows], out=indptr[1:])
    indices = np.concatenate([b for b, _ in rows]) if rows else np.zeros(0, np.int32)
    data = np.concatenate([w for _, w in rows]) if rows else np.zeros(0, np.float32)
    return sparse.csr_matrix((data, indices, indptr), shape=(len(rows), N_BUCKETS))


def features(context: sparse.csr_matrix, candidates: sparse.csr_matrix, max_context: int,
             novel: bool = False, seam: sparse.csr_matrix | None = None) -> np.ndarray:
    """(K, n_features(max_context, novel, seam is not None)) features of K candidate rows against a context's rows
    (oldest first); ``seam``: the one row of its last paragraph's last sentence."""
    return features_many([context], candidates, [candidates.shape[0]], max_context, novel, seam=seam)[0]


Context = sparse.csr_matrix | Sequence[tuple[np.ndarray, np.ndarray]] | None  # its rows, oldest first


def context_matrix(contexts: Sequence[Context]) -> tuple[sparse.csr_matrix, np.ndarray]:
    """(every context's rows, query after query, oldest first; rows per query) from contexts given one by one (a
    CSR matrix of its rows, a list of (buckets, weights) rows, or None: no rows)."""
    sizes = np.fromiter((0 if ctx is None else ctx.shape[0] if sparse.issparse(ctx) else len(ctx) for ctx in contexts),
                        np.int64, len(contexts))
    parts = [ctx if sparse.issparse(ctx) else stack(ctx) for ctx, n in zip(contexts, sizes) if n]
    return (sparse.vstack(parts, format="csr") if parts else stack([])), sizes


def features_many(contexts: Sequence[Context] | sparse.csr_matrix, candidates: sparse.csr_matrix,
                  sizes: Sequence[int], max_context: int, novel: bool = False,
                  context_sizes: Sequence[int] | None = None, seam: sparse.csr_matrix | None = None
                  ) -> list[np.ndarray]:
    """features() for many queries. ``candidates`` holds every query's candidate rows, query after query
    (``sizes[i]`` rows for query i; a candidate without words is an empty row). Contexts come one per query (a CSR
    matrix of its rows, oldest first, a list of them as (buckets, weights) (Lexicon.row), or None: raw vectors, no
    words) or, with ``context_sizes``, as one CSR matrix of every query's rows, query after query (``context_sizes[i]``
    rows for query i, 0 for none). A query whose context has no words gets zeros. ``seam``: one row per query, its
    last context paragraph's last sentence (an empty row: none), for the seam feature (the last column).

    The whole batch in a few array operations: every (query, bucket) that a query's context has becomes one row of a
    small table (its weight in each context paragraph, right-aligned, and in the whole context); each candidate
    non-zero finds its query's row for its bucket (_table_rows), and one sparse product sums them per candidate. (One
    sparse product of every candidate against every context would be quadratic: seconds for a rerank-batch chunk of
    512 rows.)"""
    L, F = max_context, n_features(max_context, novel, seam is not None)
    at = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # query q's rows: at[q]:at[q + 1]
    if at[-1] != candidates.shape[0]:
        raise ValueError(f"{candidates.shape[0]} candidate rows for queries of {at[-1]} candidates in all")
    if context_sizes is None:
        contexts, context_sizes = context_matrix(contexts)
    context_sizes = np.asarray(context_sizes, np.int64)
    if len(context_sizes) != len(sizes) or context_sizes.sum() != contexts.shape[0]:
        raise ValueError(f"{contexts.shape[0]} context rows for {len(sizes)} queries of {context_sizes.sum()} "
                         f"context rows in all ({len(context_sizes)} sizes)")
    if seam is not None and seam.shape[0] != len(sizes):
        raise ValueError(f"{seam.shape[0]} seam rows for {len(sizes)} queries")
    out = np.zeros((at[-1], F), np.float32)
    table, keys = _context_table(contexts, context_sizes, L, novel, seam)
    if len(keys):
        indptr, indices = candidates.indptr, candidates.indices
        query = np.repeat(np.arange(len(sizes), dtype=np.int64), np.diff(at))  # (rows,): each row's query
        where = _table_rows(keys, len(sizes), indptr[at], indices)  # per candidate non-zero: its query's table row
        table = np.vstack([table, np.zeros((1, table.shape[1]), np.float32)])  # ... or this zero row: a miss
        matched = sparse.csr_matrix((candidates.data, where, indptr.astype(where.dtype)),
                                    shape=(at[-1], len(table)))  # (rows, keys + 1)
        sums = np.asarray(matched @ table)  # (rows, width)
        context_key = np.append(table[:-1, :L].any(1), False)  # per table row: a context word (not a seam row's alone)
        has_context = np.zeros(len(sizes), bool)
        has_context[keys[context_key[:-1]] // N_BUCKETS] = True
        worded = (np.diff(indptr) > 0) & has_context[query]  # words on both sides
        out[:, :L + 1] = sums[:, :L + 1]
        out[:, L + 1] = worded
        if novel:
            out[:, L + 2] = sums[:, L + 1]
            hit = np.where(context_key[where], candidates.data * candidates.data, 0.0)  # weight² on context words
            known = np.bincount(np.repeat(np.arange(at[-1]), np.diff(indptr)), weights=hit, minlength=at[-1])
            out[:, L + 3] = np.maximum(0.0, 1.0 - known)  # candidate rows have norm 1
        if seam is not None:
            out[:, F - 1] = sums[:, -1]
        out[~worded] = 0.0  # no words on one side: no overlap, and the flag 0
    return [out[a:b] for a, b in zip(at[:-1], at[1:])]


def _table_rows(keys: np.ndarray, n_queries: int, starts: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Per candidate non-zero (``indices``, query q's from ``starts[q]`` to ``starts[q + 1]``): the row of ``keys``
    (``query * N_BUCKETS + bucket``, ascending) for its query and bucket, ``len(keys)`` if its query's context lacks
    the bucket.
    One dense bucket -> row array, filled with a query's buckets, read by its candidates' non-zeros and cleared again:
    a gather per non-zero. It replaced a binary search of every non-zero among the whole batch's keys (the word
    features of a batch of 16 PEPs queries: 8.6 -> 4.1 ms, bench/speed/README.md, Serving latency)."""
    index = np.int32 if len(keys) < 2**31 - 1 else np.int64
    where = np.full(len(indices), len(keys), index)
    first = np.searchsorted(keys, np.arange(n_queries + 1, dtype=np.int64) * N_BUCKETS)  # q's: first[q]:first[q + 1]
    row_of_bucket = np.full(N_BUCKETS, len(keys), index)
    for q in np.flatnonzero(np.diff(first)).tolist():
        a, b, s, e = first[q], first[q + 1], starts[q], starts[q + 1]
        if s == e:
            continue
        buckets = keys[a:b] - q * N_BUCKETS
        row_of_bucket[buckets] = np.arange(a, b)
        where[s:e] = row_of_bucket[indices[s:e]]
        row_of_bucket[buckets] = len(keys)
    return where


def _context_table(contexts: sparse.csr_matrix, context_sizes: np.ndarray, L: int, novel: bool,
                   seam: sparse.csr_matrix | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(table (U, width), keys (U,)): a row per (query, bucket) of the queries' contexts (their last L rows; every
    query's rows in one CSR matrix, ``context_sizes[q]`` of them for query q), keyed ``query * N_BUCKETS + bucket`` in
    ascending order. Columns 0..L-1 the bucket's weight in each context row, right-aligned; L in the whole context (the
    normalised sum of its rows); with ``novel``, L + 1 in what the last row adds (its row without the words of any
    earlier context row, normalised), L + 2 one; with ``seam`` (a row per query), the last column its weight in the
    query's seam row."""
    width = L + (3 if novel else 1) + (1 if seam is not None else 0)
    n_rows = contexts.shape[0]
    row_query = np.repeat(np.arange(len(context_sizes), dtype=np.int64), context_sizes)  # (rows,): each row's query
    from_end = np.cumsum(context_sizes)[row_query] - 1 - np.arange(n_rows)  # 0 for each query's last row
    nnz = np.diff(contexts.indptr)
    query, column = np.repeat(row_query, nnz), np.repeat(L - 1 - from_end, nnz)
    weight = contexts.data.astype(np.float32)
    key = query * N_BUCKETS + contexts.indices
    real = (weight > 0) & (column >= 0)  # the last L rows; a stored zero (not made by Lexicon.weigh) is no word
    query, column, weight, key = query[real], column[real], weight[real], key[real]
    seam_key, seam_weight = np.zeros(0, np.int64), np.zeros(0, np.float32)
    if seam is not None:
        seam_query = np.repeat(np.arange(seam.shape[0], dtype=np.int64), np.diff(seam.indptr))
        seam_key, seam_weight = seam_query * N_BUCKETS + seam.indices, seam.data.astype(np.float32)
        seam_key, seam_weight = seam_key[seam_weight > 0], seam_weight[seam_weight > 0]
    if not len(key) and not len(seam_key):
        return np.zeros((0, width), np.float32), np.zeros(0, np.int64)
    keys, row = np.unique(np.concatenate([key, seam_key]), return_inverse=True)
    row, seam_row = row[:len(key)], row[len(key):]
    table = np.zeros((len(keys), width), np.float32)
    table[row, column] = weight  # a bucket occurs once in a row
    if seam is not None:
        table[seam_row, width - 1] = seam_weight
    whole = np.bincount(row, weights=weight, minlength=len(keys))
    owner = keys // N_BUCKETS
    norm = np.sqrt(np.bincount(owner, weights=whole * whole))  # > 0 for every query with context words
    table[:, L] = whole / np.maximum(norm[owner], 1e-30)
    if novel:
        last = column == L - 1
        earlier = np.zeros(len(keys), bool)
        earlier[row[~last]] = True
        added = np.where(earlier[row[last]], 0.0, weight[last])
        added_norm = np.sqrt(np.bincount(query[last], weights=added * added, minlength=norm.shape[0]))[query[last]]
        table[row[last], L + 1] = added / np.maximum(added_norm, 1e-30)  # all zero where the last row adds nothing
        table[:, L + 2] = 1.0
    return table, keys
