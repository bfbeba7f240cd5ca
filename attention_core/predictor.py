"""Predictor: the in-process API that the server and batch jobs call.

``predict_next(context, top_k)`` retrieves and reranks; ``rerank(context, candidates)`` scores
caller-given candidates. Each context or candidate item is a text, a stored paragraph id
(``int``) or a raw vector (a sequence of floats of the store's dimension). Text is embedded by
the store's embedder (with an in-memory cache); ids use their stored vectors. The model also
compares the words of texts (given, or stored for ids and retrieved candidates); a raw vector has
none, so it is scored from the vectors alone.

Excluded from predictions: the context paragraphs given as ids, every stored paragraph whose
text equals a context paragraph's text (given as text or id), and documents the caller
excludes. A raw-vector context item excludes nothing, since it has no text.
A context longer than the model reads keeps its most recent paragraphs; the result says how
many were dropped. Errors name the item: ``context[2]: unknown paragraph id 99``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, Union

import numpy as np
from nextpara.errors import InvalidInputError, NotFoundError
from nextpara.store.embedders import Embedder, embedder_for_store
from nextpara.store.store import ParagraphStore, open_store

from .checkpoint import CHECKPOINT, load_checkpoint
from .pipeline import RerankPipeline

ContextItem = Union[str, int, Sequence[float], np.ndarray]
MAX_TOP_K = 1000
MAX_ITEMS = 10_000


@dataclass
class Prediction:
    paragraph_id: int
    doc_id: str
    position: int
    text: str
    score: float  # the reranker's score (higher is better)
    retrieval_score: float  # cosine to the model's query vector


@dataclass
class PredictionResult:
    predictions: list[Prediction]
    model_version: str
    index_version: int
    context_used: int  # context paragraphs the model read
    context_dropped: int = 0  # oldest paragraphs dropped because the context was longer than the model reads
    attention: list[list[float]] | None = None  # (heads, context_used) for the top prediction


@dataclass
class RerankResult:
    order: list[int]  # indices into the given candidates, best first
    scores: list[float]  # score of each candidate in ``order``
    model_version: str
    index_version: int
    context_used: int
    context_dropped: int = 0


@dataclass
class _Resolved:
    vectors: np.ndarray  # (n, D)
    exclude: set[int] = field(default_factory=set)
    dropped: int = 0
    texts: list[str | None] = field(default_factory=list)  # per item: its text, None for a raw vector


def _all_vectors(items: list, dim: int) -> np.ndarray | None:
    """(n, dim) unit float32 vectors when every item is a valid vector, else None (the item loop then names the fault)."""
    if not all(isinstance(item, (list, tuple, np.ndarray)) for item in items):
        return None
    try:
        arr = np.asarray(items, dtype=np.float64)
    except (ValueError, TypeError):
        return None
    if arr.ndim != 2 or arr.shape[1] != dim or not np.isfinite(arr).all():
        return None
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if not norms.all():
        return None
    return (arr / norms).astype(np.float32)


class Predictor:
    def __init__(self, store: ParagraphStore, pipeline: RerankPipeline, meta: dict, embedder: Embedder,
                 embed_cache_size: int = 4096):
        self.store, self.pipeline, self.meta, self.embedder = store, pipeline, meta, embedder
        # called with (stage, seconds) for "embed", "search" and "rerank": the server's latency histograms
        self.observe: Callable[[str, float], None] = lambda stage, seconds: None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = embed_cache_size
        self._cache_lock = threading.Lock()

    @classmethod
    def open(cls, data_dir: str | Path, readonly: bool = True, n_candidates: int = 100, **embedder_options) -> "Predictor":
        store = open_store(data_dir, readonly=readonly)
        try:
            return cls.from_store(store, n_candidates, **embedder_options)
        except BaseException:
            store.close()
            raise

    @classmethod
    def from_store(cls, store: ParagraphStore, n_candidates: int = 100, embedder: Embedder | None = None,
                   **embedder_options) -> "Predictor":
        """A predictor over an open store with the checkpoint in its data dir (FailedPreconditionError if none)."""
        model, meta = load_checkpoint(Path(store.data_dir) / CHECKPOINT, store.embedder_name, store.dim)
        embedder = embedder or embedder_for_store(store.embedder_spec, store.embedder_name, store.dim, **embedder_options)
        return cls(store, RerankPipeline(model, store, n_candidates), meta, embedder)

    @property
    def model_version(self) -> str:
        return self.meta["model_version"]

    @property
    def max_context(self) -> int:
        return self.pipeline.max_context

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Predictor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- input resolution ---------------------------------------------------------------
    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        """Vectors of texts, through the in-memory LRU cache; the model runs outside the lock."""
        if not texts:
            return np.zeros((0, self.store.dim), np.float32)
        with self._cache_lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}
            for t in found:
                self._cache.move_to_end(t)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            t0 = time.perf_counter()
            vecs = self.embedder.embed(missing)
            self.observe("embed", time.perf_counter() - t0)
            found.update(zip(missing, vecs))
            with self._cache_lock:
                self._cache.update(zip(missing, vecs))
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return np.stack([found[t] for t in texts])

    def resolve(self, items: Sequence[ContextItem], where: str, keep_last: int | None = None) -> _Resolved:
        """Vectors for items (text, id or vector) and the ids they exclude; errors name ``where[i]``."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) and not isinstance(items, np.ndarray):
            raise InvalidInputError(f"{where} must be a list of items, got {type(items).__name__}")
        if len(items) == 0:
            raise InvalidInputError(f"{where} is empty: give at least one paragraph")
        if len(items) > MAX_ITEMS:
            raise InvalidInputError(f"{where} has {len(items)} items, at most {MAX_ITEMS}")
        dropped = max(0, len(items) - keep_last) if keep_last else 0
        offset = dropped
        items = list(items)[dropped:]
        dim = self.store.dim
        fast = _all_vectors(items, dim)
        if fast is not None:  # the common batch-job case: every item a valid vector, converted in one go
            return _Resolved(vectors=fast, dropped=dropped, texts=[None] * len(fast))
        vectors = np.zeros((len(items), dim), np.float32)
        texts: dict[int, str] = {}
        ids: dict[int, int] = {}
        for i, item in enumerate(items):
            at = f"{where}[{i + offset}]"
            if isinstance(item, str):
                if not item.strip():
                    raise InvalidInputError(f"{at}: empty text")
                texts[i] = item
            elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                ids[i] = int(item)
            elif isinstance(item, (Sequence, np.ndarray)) and not isinstance(item, bytes):
                vec = np.asarray(item, dtype=np.float64).ravel() if len(item) else np.zeros(0)
                if vec.shape[0] != dim:
                    raise InvalidInputError(f"{at}: vector of dimension {vec.shape[0]}, this store's embedder "
                                            f"{self.store.embedder_name} has dimension {dim}")
                if not np.isfinite(vec).all():
                    raise InvalidInputError(f"{at}: vector has a NaN or infinite value")
                norm = np.linalg.norm(vec)
                if norm == 0:
                    raise InvalidInputError(f"{at}: vector is all zeros")
                vectors[i] = vec / norm
            else:
                raise InvalidInputError(f"{at}: expected a text, a paragraph id or a vector, got {type(item).__name__}")
        exclude: set[int] = set()
        known = dict(texts)  # item -> its text: given, or stored for an id
        if ids:
            missing = self.store.missing_ids(list(ids.values()))
            if missing:
                i = next(i for i, pid in ids.items() if pid in missing)
                raise NotFoundError(f"{where}[{i + offset}]: unknown paragraph id {ids[i]}"
                                    + (f" ({len(missing) - 1} more unknown)" if len(missing) > 1 else ""))
            paragraphs = self.store.get_paragraphs(list(ids.values()))
            known.update(zip(ids, (p.text for p in paragraphs)))
            vectors[list(ids)] = self.store.vectors(list(ids.values()))
            exclude.update(ids.values())
            exclude.update(self.store.ids_with_text([p.text for p in paragraphs]).tolist())
        if texts:
            vectors[list(texts)] = self._embed_texts(list(texts.values()))
            exclude.update(self.store.ids_with_text(texts.values()).tolist())
        return _Resolved(vectors=vectors, exclude=exclude, dropped=dropped, texts=[known.get(i) for i in range(len(items))])

    @staticmethod
    def _check_top_k(top_k: int) -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or not 1 <= top_k <= MAX_TOP_K:
            raise InvalidInputError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")

    # ---- API --------------------------------------------------------------------------
    def predict_next(self, context: Sequence[ContextItem], top_k: int = 10, candidates: Sequence[ContextItem] | None = None,
                     include_attention: bool = False, exclude_doc_ids: Sequence[str] = ()) -> PredictionResult:
        """The ``top_k`` most likely next paragraphs for ``context``; from ``candidates`` if given."""
        if candidates is not None:
            return self._predict_among(context, top_k, candidates)
        return self.predict_next_batch([context], top_k, include_attention, exclude_doc_ids)[0]

    def predict_next_batch(self, contexts: Sequence[Sequence[ContextItem]], top_k: int = 10,
                           include_attention: bool = False, exclude_doc_ids: Sequence[str] = ()) -> list[PredictionResult]:
        """predict_next for many contexts at once: one FAISS call and batched scoring."""
        self._check_top_k(top_k)
        resolved = [self.resolve_context(c) for c in contexts]
        return self.predict_resolved(resolved, [top_k] * len(resolved), include_attention, exclude_doc_ids)

    def resolve_context(self, context: Sequence[ContextItem]) -> _Resolved:
        return self.resolve(context, "context", keep_last=self.max_context)

    def predict_resolved(self, resolved: list[_Resolved], top_ks: Sequence[int], include_attention: bool = False,
                         exclude_doc_ids: Sequence[str] = ()) -> list[PredictionResult]:
        """The ranking step of predict_next for contexts already resolved (batch jobs resolve row by row
        so that one bad row becomes an error row instead of failing the batch)."""
        if not resolved:
            return []
        excluded_docs = set(self.store.ids_of_documents(exclude_doc_ids).tolist()) if exclude_doc_ids else set()
        index_version = self.store.generation
        contexts = [r.vectors for r in resolved]
        t0 = time.perf_counter()
        cand_ids, _ = self.pipeline.candidates(contexts, [r.exclude | excluded_docs for r in resolved])
        cand_vecs = [self.store.vectors(ids) for ids in cand_ids]
        t1 = time.perf_counter()
        scored = self.pipeline.rank(contexts, cand_ids, cand_vecs, need_weights=include_attention,
                                    context_texts=[r.texts for r in resolved])
        self.observe("search", t1 - t0)
        self.observe("rerank", time.perf_counter() - t1)
        results = []
        for r, s, top_k in zip(resolved, scored, top_ks):
            top = s.ids[:top_k]
            paragraphs = self.store.get_paragraphs(top.tolist()) if len(top) else []
            preds = [Prediction(p.id, p.doc_id, p.position, p.text, float(sc), float(rs))
                     for p, sc, rs in zip(paragraphs, s.scores, s.retrieval_scores)]
            attention = None
            if include_attention and s.attention is not None:
                attention = s.attention[:, -len(r.vectors):].tolist()
            results.append(PredictionResult(preds, self.model_version, index_version, len(r.vectors), r.dropped, attention))
        return results

    def _predict_among(self, context, top_k, candidates) -> PredictionResult:
        self._check_top_k(top_k)
        result = self.rerank(context, candidates)
        stored = {i: int(c) for i, c in enumerate(candidates) if isinstance(c, (int, np.integer)) and not isinstance(c, bool)}
        paragraphs = {p.id: p for p in self.store.get_paragraphs(list(stored.values()))}
        preds = []
        for idx, score in zip(result.order[:top_k], result.scores):
            c = candidates[idx]
            if idx in stored:
                p = paragraphs[stored[idx]]
                preds.append(Prediction(p.id, p.doc_id, p.position, p.text, score, float("nan")))
            else:
                preds.append(Prediction(-1, "", 0, c if isinstance(c, str) else "", score, float("nan")))
        return PredictionResult(preds, result.model_version, result.index_version, result.context_used, result.context_dropped)

    def rerank(self, context: Sequence[ContextItem], candidates: Sequence[ContextItem]) -> RerankResult:
        return self.rerank_batch([context], [candidates])[0]

    def rerank_batch(self, contexts: Sequence[Sequence[ContextItem]],
                     candidate_lists: Sequence[Sequence[ContextItem]]) -> list[RerankResult]:
        """Score caller-given candidates for each context; one batched model call."""
        if len(contexts) != len(candidate_lists):
            raise InvalidInputError(f"{len(contexts)} contexts but {len(candidate_lists)} candidate lists")
        ctx = [self.resolve_context(c) for c in contexts]
        cands = [self.resolve(c, "candidates") for c in candidate_lists]
        return self.rerank_resolved(ctx, cands)

    def rerank_resolved(self, ctx: list[_Resolved], cands: list[_Resolved]) -> list[RerankResult]:
        """The scoring step of rerank for inputs already resolved."""
        if not ctx:
            return []
        index_version = self.store.generation
        t0 = time.perf_counter()
        lexical = self.pipeline.lexical_features([r.texts for r in ctx], [c.texts for c in cands])
        scores, _, _ = self.pipeline.score([r.vectors for r in ctx], [c.vectors for c in cands], lexical_features=lexical)
        self.observe("rerank", time.perf_counter() - t0)
        out = []
        for r, sc in zip(ctx, scores):
            order = np.argsort(-sc, kind="stable")
            out.append(RerankResult(order.tolist(), sc[order].tolist(), self.model_version,
                                    index_version, len(r.vectors), r.dropped))
        return out
