"""Word overlap as scorer features: TF-IDF cosines between a candidate's text and the context's.

Embeddings say "same topic"; the words a paragraph shares with the context (names, identifiers,
terms of one document) say much better "same document", and the next paragraph is nearly always
in the context's document. bench/lexical_probe.py measured it on PEPs before the model used it:
adding tfidf cosines to the trained model's scores by hand raised validation MRR@10 from 0.130 to
0.150. Content only (DESIGN.md): the features come from the texts, never from a doc_id or position.

Tokens are lower-cased runs of two or more word characters, hashed (crc32) into ``N_BUCKETS``
buckets, so the vocabulary is a fixed-size IDF vector that the checkpoint stores as a tensor (no
pickled vocabulary). Term weight (1 + log tf) * idf, rows L2-normalised. IDF comes from the
training store; a token in fewer than two of its paragraphs weighs nothing (it cannot link two of
them), nor does a token first seen after training.

Features per candidate (``n_features(L)`` = L + 2): the cosine to each context paragraph
(right-aligned like the context, 0 for padding or a paragraph without text), the cosine to the
whole context (the normalised sum of its rows), and 1 if both sides had text, else 0. A caller
that gives raw vectors has no text: the flag is 0 and the model scores from the vectors alone
(training hides the text of some queries so that it learns to).
"""

from __future__ import annotations

import re
import threading
import zlib
from collections import OrderedDict
from typing import Sequence

import numpy as np
from scipy import sparse

N_BUCKETS = 1 << 18
TOKEN = re.compile(r"\w\w+")
CACHE_SIZE = 20_000  # texts whose hashed counts are kept (a PEPs-sized corpus has 44K paragraphs)


def n_features(max_context: int) -> int:
    return max_context + 2


def token_counts(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct token buckets of a text and their sublinear counts 1 + log(tf)."""
    tokens = TOKEN.findall(text.lower())
    if not tokens:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    hashed = np.fromiter((zlib.crc32(t.encode("utf-8")) for t in tokens), np.int64, len(tokens)) % N_BUCKETS
    buckets, counts = np.unique(hashed, return_counts=True)
    return buckets, (1.0 + np.log(counts)).astype(np.float32)


class Lexicon:
    def __init__(self, idf: np.ndarray):
        if idf.shape != (N_BUCKETS,):
            raise ValueError(f"an IDF vector has {N_BUCKETS} buckets, got shape {idf.shape}")
        self.idf = np.asarray(idf, np.float32)
        self._cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def fit(cls, texts: Sequence[str]) -> "Lexicon":
        df = np.zeros(N_BUCKETS, np.int64)
        for text in texts:
            df[token_counts(text)[0]] += 1
        idf = np.log((1 + len(texts)) / (1 + df)) + 1.0
        idf[df < 2] = 0.0
        return cls(idf.astype(np.float32))

    def _counts(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        counts = token_counts(text)
        with self._lock:
            self._cache[text] = counts
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return counts

    def matrix(self, texts: Sequence[str | None]) -> sparse.csr_matrix:
        """(n, N_BUCKETS) L2-normalised TF-IDF rows; a None or wordless text is a zero row."""
        cols, vals, indptr = [], [], [0]
        for text in texts:
            b, w = self._counts(text) if text else (np.zeros(0, np.int64), np.zeros(0, np.float32))
            w = w * self.idf[b]
            norm = float(np.sqrt((w * w).sum()))
            keep = w > 0 if norm > 0 else np.zeros(len(w), bool)
            cols.append(b[keep])
            vals.append(w[keep] / max(norm, 1e-12))
            indptr.append(indptr[-1] + int(keep.sum()))
        data = np.concatenate(vals).astype(np.float32) if vals else np.zeros(0, np.float32)
        indices = np.concatenate(cols) if cols else np.zeros(0, np.int64)
        return sparse.csr_matrix((data, indices, np.asarray(indptr)), shape=(len(texts), N_BUCKETS))


def features(context: sparse.csr_matrix, candidates: sparse.csr_matrix, max_context: int) -> np.ndarray:
    """(K, max_context + 2) features of K candidate rows against a context's rows (oldest first)."""
    L = max_context
    context = context[-L:]
    n, K = context.shape[0], candidates.shape[0]
    out = np.zeros((K, n_features(L)), np.float32)
    if K == 0 or n == 0:
        return out
    out[:, L - n:L] = (candidates @ context.T).toarray()
    whole = np.asarray(context.sum(axis=0)).ravel()
    norm = np.linalg.norm(whole)
    if norm == 0:  # no context paragraph has text: nothing to compare, the flag stays 0
        return out
    out[:, L] = candidates @ (whole / norm)
    out[:, L + 1] = np.diff(candidates.indptr) > 0
    return out
