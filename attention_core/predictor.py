"""Predictor: the in-process API that the server and batch jobs call.

Four calls, two operations: ``predict_next(context, top_k)`` retrieves from the store and reranks;
``rerank(context, candidates)`` scores caller-given candidates; ``predict_next_batch`` and
``rerank_batch`` do the same for many at once, as one batch all the way down. Items are texts,
stored paragraph ids or raw vectors, resolved by items.py, which also says what a context excludes.
A context longer than the model reads keeps its most recent paragraphs; the result says how many
were dropped. Errors name the item: ``context[2]: unknown paragraph id 99``. A retrieval takes a
``RetrievalFilter`` (nextpara.store.filters): the store resolves which paragraphs it allows, the search looks only
among them, and its min_score, max_per_document and distinct_texts apply to the reranked list.

A prediction reads each stored row at most once: the context's ids (vectors from memory, texts with one
SQLite query), the rows of candidates whose word rows the process has not cached yet (their text
feeds the word features), and the answer's rows (doc_id, position, text). A rerank by ids reads only the
texts of items whose word rows are not cached (once for the contexts, once for the candidates; their vectors
are in memory), and on a read-only replica checks the others' ids in SQLite. The context is encoded once: its
query vector searches and its states score (pipeline.py: ``RerankPipeline.retrieve``).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from nextpara.errors import InvalidInputError, NextparaError, Reason
from nextpara.store.embedders import Embedder
from nextpara.store.filters import RetrievalFilter, doc_id_list
from nextpara.store.store import ParagraphStore, open_store

from .general import served_model
from .items import EmbeddingLRU, Item, ItemResolver, ResolvedItems
from .pipeline import RerankPipeline

MAX_TOP_K = 1000


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


def check_top_k(top_k) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInputError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}", reason=Reason.OUT_OF_RANGE,
                                field="top_k", metadata={"min": 1, "max": MAX_TOP_K})


class Predictor:
    def __init__(self, store: ParagraphStore, pipeline: RerankPipeline, meta: dict, embedder: Embedder,
                 embed_cache_size: int = 4096):
        self.store, self.pipeline, self.meta, self.embedder = store, pipeline, meta, embedder
        self._embed = EmbeddingLRU(embedder.embed, store.dim, embed_cache_size)
        self._items = ItemResolver(store, self._embed)
        self.observe = lambda stage, seconds: None

    @property
    def observe(self) -> Callable[[str, float], None]:
        """Called with (stage, seconds) for "embed", each of pipeline.STAGES of a retrieval, and "rerank" (scoring
        given candidates): the server's latency histograms."""
        return self._observe

    @observe.setter
    def observe(self, fn: Callable[[str, float], None]) -> None:
        self._observe = fn
        self._embed.observe = lambda seconds: fn("embed", seconds)

    @classmethod
    def open(cls, data_dir, readonly: bool = True, n_candidates: int = 100, **embedder_options) -> "Predictor":
        store = open_store(data_dir, readonly=readonly)
        try:
            return cls.from_store(store, n_candidates, **embedder_options)
        except BaseException:
            store.close()
            raise

    @classmethod
    def from_store(cls, store: ParagraphStore, n_candidates: int = 100, embedder: Embedder | None = None,
                   **embedder_options) -> "Predictor":
        """A predictor over an open store with the model that serves it: the checkpoint in its data dir, else the
        general model (general.py); FailedPreconditionError if neither fits the store."""
        model, meta = served_model(store)
        embedder = embedder or store.query_embedder(**embedder_options)
        return cls(store, RerankPipeline(model, store, n_candidates), meta, embedder)

    @property
    def embeds_remotely(self) -> bool:
        """Its query texts are embedded over the network: a server embeds them ahead (``embed_ahead``), off the
        workers that serve other calls, so an endpoint that hangs holds no worker."""
        return getattr(self.embedder, "remote", False)  # (an embedder of the caller's may not say)

    def cached_texts(self, context: Sequence[Item], candidates: Sequence[Item] = ()) -> dict[str, np.ndarray] | None:
        """The vectors of the items' texts when every one is in this predictor's in-memory cache, else None."""
        return self._embed.cached([i for i in itertools.chain(context[-self.max_context:], candidates)
                                   if isinstance(i, str)])

    def embed_ahead(self, calls: Sequence[tuple[Sequence[Item], Sequence[Item]]]) -> list[dict[str, np.ndarray]]:
        """For each call's (context, candidates), the vectors of the texts it would embed (text -> vector), to pass as
        its ``embedded``; the calls' texts go to the embedder together, once each, through this predictor's in-memory
        cache. A list with a bad item gives none (its call refuses it before any embedding)."""
        wanted = [[*self._items.texts_of(context, "context", self.max_context),
                   *self._items.texts_of(candidates, "candidates")] for context, candidates in calls]
        texts = list(dict.fromkeys(itertools.chain.from_iterable(wanted)))
        vectors = dict(zip(texts, self._embed(texts)))
        return [{text: vectors[text] for text in call} for call in wanted]

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

    # ---- the API ----------------------------------------------------------------------
    def predict_next(self, context: Sequence[Item], top_k: int = 10, include_attention: bool = False,
                     exclude_doc_ids: Sequence[str] = (), filter: RetrievalFilter | None = None) -> PredictionResult:
        """The ``top_k`` stored paragraphs most likely to follow ``context`` (among those ``filter`` allows)."""
        return self.predict_next_batch([context], top_k, include_attention, exclude_doc_ids, filter=filter)[0]

    def rerank(self, context: Sequence[Item], candidates: Sequence[Item]) -> RerankResult:
        """``candidates`` ordered by how likely each is to follow ``context``."""
        return self.rerank_batch([context], [candidates])[0]

    def predict_next_batch(self, contexts: Sequence[Sequence[Item]], top_k: int | Sequence[int] = 10,
                           include_attention: bool = False, exclude_doc_ids: Sequence[str] = (),
                           return_errors: bool = False, filter: RetrievalFilter | None = None,
                           embedded: dict[str, np.ndarray] | None = None) -> list:
        """predict_next for many contexts: one resolution, one FAISS search per source, one read of the candidate
        rows, one model call. ``top_k`` is one number or one per context. With ``return_errors`` a context with a
        bad item gets its error (a NextparaError) in its place and the others are answered; otherwise it raises.
        ``filter`` (one for all the contexts) restricts what is retrieved and limits what is kept; ``exclude_doc_ids``
        adds to its deny-list. ``embedded``: vectors of the contexts' texts embedded already (``embed_ahead``)."""
        top_ks = list(top_k) if isinstance(top_k, (list, tuple, np.ndarray)) else [top_k] * len(contexts)
        if len(top_ks) != len(contexts):
            raise InvalidInputError(f"{len(contexts)} contexts but {len(top_ks)} top_k values")
        for k in top_ks:
            check_top_k(k)
        exclude_doc_ids = doc_id_list(exclude_doc_ids, "exclude_doc_ids")  # checked as the filter's deny-list is
        resolved = self._resolve(contexts, "context", self.max_context, return_errors, embedded=embedded)
        ok = [i for i, r in enumerate(resolved) if isinstance(r, ResolvedItems)]
        if not ok:
            return resolved
        f = filter or RetrievalFilter()
        allowed = self.store.resolve_filter(f, exclude_doc_ids)
        denied = set(allowed.deny.tolist()) if allowed.allow is None else set()  # else taken out of allow already
        index_version = self.store.index_generation
        # each source searched at least top_k deep; contexts of one depth scored together, so that a context's list (and
        # so its scores: a model may read a candidate against its list) never depends on another's top_k in the batch
        depth = {i: max(self.pipeline.n_candidates, top_ks[i]) for i in ok}
        scored = {}
        for d in sorted(set(depth.values())):
            group = [i for i in ok if depth[i] == d]
            scored.update(zip(group, self.pipeline.retrieve(
                [resolved[i].vectors for i in group], [resolved[i].exclude | denied for i in group],
                [resolved[i].texts for i in group], include_attention, self.observe,
                keep=None if f.drops_results else max(top_ks[i] for i in group), allow=allowed.allow,
                context_ids=[resolved[i].ids for i in group], depth=d)))
        out = list(resolved)
        for i, s in ((i, scored[i]) for i in ok):
            r, k = resolved[i], top_ks[i]
            shown = s.paragraphs
            kept = (f.select([p.doc_id for p in shown], s.scores[:len(shown)], k, [p.text for p in shown]) if f.limits
                    else range(min(k, len(shown))))
            preds = [Prediction(shown[j].id, shown[j].doc_id, shown[j].position, shown[j].text, float(s.scores[j]),
                                float(s.retrieval_scores[j])) for j in kept]
            attention = (s.attention[:, -len(r.vectors):].tolist() if include_attention and s.attention is not None and preds
                         else None)
            out[i] = PredictionResult(preds, self.model_version, index_version, len(r.vectors), r.dropped, attention)
        return out

    def rerank_batch(self, contexts: Sequence[Sequence[Item]], candidate_lists: Sequence[Sequence[Item]],
                     return_errors: bool = False, embedded: dict[str, np.ndarray] | None = None) -> list:
        """Score caller-given candidates for each context in one batched model call (``return_errors`` and
        ``embedded`` as in predict_next_batch)."""
        if len(contexts) != len(candidate_lists):
            raise InvalidInputError(f"{len(contexts)} contexts but {len(candidate_lists)} candidate lists")
        # no search; items by id: vectors from memory, word rows from the lexicon's cache (texts read only for the rows
        # not kept yet; the other ids checked in SQLite only on a replica whose writer has written since it loaded)
        words = self.pipeline.uncached_words
        ctx = self._resolve(contexts, "context", self.max_context, return_errors, exclusions=False, stored_texts=words,
                            embedded=embedded)
        cands = self._resolve(candidate_lists, "candidates", None, return_errors, exclusions=False, stored_texts=words,
                              embedded=embedded)
        out = [c if isinstance(c, NextparaError) else k for c, k in zip(ctx, cands)]
        ok = [i for i, r in enumerate(out) if isinstance(r, ResolvedItems)]
        if not ok:
            return out
        index_version = self.store.index_generation
        t0 = time.perf_counter()
        lexical = self.pipeline.lexical_features([ctx[i].texts for i in ok], [cands[i].texts for i in ok],
                                                 [cands[i].ids for i in ok], [ctx[i].ids for i in ok])
        scores, _, _ = self.pipeline.score([ctx[i].vectors for i in ok], [cands[i].vectors for i in ok],
                                           lexical_features=lexical)
        self.observe("rerank", time.perf_counter() - t0)
        for i, sc in zip(ok, scores):
            order = np.argsort(-sc, kind="stable")
            out[i] = RerankResult(order.tolist(), sc[order].tolist(), self.model_version, index_version,
                                  len(ctx[i].vectors), ctx[i].dropped)
        return out

    def _resolve(self, lists, where: str, keep_last: int | None, return_errors: bool, exclusions: bool = True,
                 stored_texts: bool | Callable[[np.ndarray], np.ndarray] = True,
                 embedded: dict[str, np.ndarray] | None = None) -> list:
        resolved = self._items.resolve_many(lists, where, keep_last, exclusions, stored_texts, embedded)
        if not return_errors:
            for r in resolved:
                if isinstance(r, NextparaError):
                    raise r
        return resolved
