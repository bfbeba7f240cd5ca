"""The two-stage pipeline: query vector -> stage-1 candidates (FAISS, the word index for models trained with it, and
the transition memory's prediction for a model with a memory weight: candidates.py) -> attention scores (plus the
memory's term: transitions.py).

One implementation shared by the Predictor (serving), training's validation and evaluation,
so that what is measured is what is served. Inputs are lists of per-query arrays (ragged);
batching pads them into the model's right-aligned (B,L,D) / (B,K,D) tensors.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from nextpara.errors import FailedPreconditionError, Reason
from nextpara.store.store import ParagraphStore
from nextpara.store.tables import Paragraph
from scipy import sparse

from . import lexical, transitions
from .candidates import generate_candidates
from .model import NextParagraphModel

SCORE_BATCH = 256
STAGES = ("encode", "memory", "search", "rows", "word_features", "model", "answer")  # of retrieve(), as observed


class Laps:
    """Calls ``observe(stage, seconds since the previous lap)`` at each lap."""

    def __init__(self, observe):
        self.observe, self.t = observe, time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self.observe(stage, now - self.t)
        self.t = now


def use_threads(n: int) -> None:
    """Let torch and FAISS (OpenMP) each use ``n`` threads in this process. Callers that run several scorings
    at once (server workers, Ray actors on one node) give each a share of the cores: spinning OpenMP threads on
    an oversubscribed core slow everything down."""
    import faiss

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def pad_contexts(contexts: list[np.ndarray], L: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-aligned (B,L,D) context tensor and (B,L) mask; longer contexts keep their last L."""
    B, D = len(contexts), contexts[0].shape[1]
    x = np.zeros((B, L, D), np.float32)
    mask = np.zeros((B, L), bool)
    for i, c in enumerate(contexts):
        c = c[-L:]
        x[i, L - len(c):] = c
        mask[i, L - len(c):] = True
    return torch.from_numpy(x), torch.from_numpy(mask)


def pad_candidates(candidates: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,K,D) rows per query (any trailing width D), zero-padded to the longest list, and the (B,K) mask."""
    K = max(1, max(len(c) for c in candidates))
    B, D = len(candidates), candidates[0].shape[1]
    x = np.zeros((B, K, D), np.float32)
    mask = np.zeros((B, K), bool)
    for i, c in enumerate(candidates):
        x[i, :len(c)] = c
        mask[i, :len(c)] = True
    return torch.from_numpy(x), torch.from_numpy(mask)


@dataclass
class Scored:
    """One query's candidates ranked best first."""

    ids: np.ndarray  # paragraph ids
    scores: np.ndarray  # model scores
    retrieval_scores: np.ndarray  # cosine to the query vector
    attention: np.ndarray | None = None  # (heads, L) cross-attention of the top candidate over the context
    paragraphs: list[Paragraph] | None = None  # the stored rows of ``ids``, in that order (retrieve only)


class RerankPipeline:
    def __init__(self, model: NextParagraphModel, store: ParagraphStore, n_candidates: int = 100):
        if model.cfg.uses_word_index and not store.words.available:
            raise FailedPreconditionError(
                f"the model takes candidates from the word index, which {store.data_dir} does not have yet: open it "
                "once for writing (nextpara build, or nextpara serve without --read-only) to add it",
                reason=Reason.NO_WORD_INDEX)
        self.model = model.eval()
        self.store = store
        self.n_candidates = n_candidates
        self.lexicon = lexical.Lexicon(model.lexicon_idf.numpy()) if model.cfg.lexical else None
        self.memory = transitions.for_store(store) if model.cfg.memory_boost else None

    def memory_predictions(self, last: np.ndarray) -> np.ndarray | None:
        """(B, D) the transition memory's predicted next vectors for the queries' last context paragraphs (``last``,
        (B, D)); None for a model without it, or an empty memory (transitions.py)."""
        if self.memory is None or not len(last):
            return None
        return self.memory.get().predict(last)

    def memory_terms(self, p: np.ndarray | None, candidates: list[np.ndarray]) -> list[np.ndarray] | None:
        """Per query, what the transition memory adds to each candidate's score: ``memory_boost`` times its cosine to
        the query's predicted next vector (``p``, memory_predictions'; None: nothing)."""
        if p is None:
            return None
        boost = self.model.cfg.memory_boost
        return [boost * (c @ q) for c, q in zip(candidates, p)]

    @property
    def max_context(self) -> int:
        return self.model.cfg.max_context

    @torch.no_grad()
    def query_vectors(self, contexts: list[np.ndarray]) -> np.ndarray:
        out = []
        for s in range(0, len(contexts), 512):
            x, m = pad_contexts(contexts[s:s + 512], self.max_context)
            out.append(self.model.encode(x, m)[0].numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.cfg.embed_dim), np.float32)

    def candidates(self, contexts: list[np.ndarray], exclude: list[set[int]], n: int | None = None,
                   context_texts: list[list[str | None]] | None = None, words: list | None = None,
                   memory_vectors: np.ndarray | None = None):
        """Stage 1: (candidate ids per query, query vectors); ``context_texts`` for the word index's sources, or
        ``words``: their results already found (candidates.word_sources). ``memory_vectors``: predicted next vectors
        whose nearest join the candidates (transitions.CANDIDATES) in place of this store's memory's (the memory of
        the rows a training trained on); by default, a model with a memory weight adds its store memory's."""
        q = self.query_vectors(contexts)
        last = np.stack([c[-1] for c in contexts])
        p = self.memory_predictions(last) if memory_vectors is None else memory_vectors
        return self.stage1(q, last, p, exclude, n or self.n_candidates, context_texts, words=words), q

    def stage1(self, q: np.ndarray, last: np.ndarray, p: np.ndarray | None, exclude: list[set[int]], n: int,
               context_texts: list[list[str | None]] | None, allow: np.ndarray | None = None,
               words: list | None = None) -> list[np.ndarray]:
        """Candidate ids per query from its query vector ``q``, last context paragraph ``last``, the memory's
        prediction ``p`` (None: no memory) and the sources of words this model searches (candidates.py)."""
        cfg = self.model.cfg
        return generate_candidates(self.store, q, last, exclude, n, context_texts, cfg.word_candidates, allow, words,
                                   cfg.seam_candidates, memory_vectors=p, n_memory=transitions.CANDIDATES)

    def lexical_features(self, context_texts: list[list[str | None]], candidate_texts: list[list[str | None]],
                         candidate_ids: list[list[int | None]] | None = None,
                         context_ids: list[list[int | None]] | None = None) -> list[np.ndarray] | None:
        """Word-overlap features per query, (K_i, model.cfg.n_word_features); None if the model does not use them.
        A None text without an id (a raw vector given by the caller) counts as no text. An item with a stored id
        (``candidate_ids``, ``context_ids``: per item, None where it has none) takes its row from the lexicon's rows
        by id, as retrieval does (its text, if None, read from the store when the row is not kept yet; a paragraph
        deleted meanwhile has no words): a batch job that names stored paragraphs reads and tokenises each once, and
        a batch of lists of ids takes its rows in a few array operations."""
        if self.lexicon is None:
            return None
        L = self.max_context
        contexts, context_sizes, context_words = self._context_word_rows(context_texts, context_ids)
        candidates, sizes, candidate_words = self._word_rows(candidate_texts, candidate_ids)
        if not (context_words or candidate_words):  # raw vectors only: no words, what features_many gives
            return [np.zeros((len(ts), self.model.cfg.n_word_features), np.float32) for ts in candidate_texts]
        if contexts is None:
            contexts = lexical.empty_rows(int(context_sizes.sum()))
        if candidates is None:
            candidates = lexical.empty_rows(int(sizes.sum()))
        return lexical.features_many(contexts, candidates, sizes, L, self.model.cfg.novel_words,
                                     context_sizes=context_sizes, seam=self._seam_rows(context_texts, context_ids))

    def _seam_rows(self, context_texts: list[list[str | None]], context_ids: list | None) -> sparse.csr_matrix | None:
        """Per query, the word row of its last context item's last sentence (the seam feature's; an empty row for a
        raw vector), or None if the model has no seam feature. A stored item's row is kept by id (its text, when not
        given, read once per process), a caller's text's is weighed (cached by sentence)."""
        if not self.model.cfg.seam_feature:
            return None
        last_ids = [None if ids is None or not len(ids) else ids[-1] for ids in (context_ids or [None] * len(context_texts))]
        stored = [q for q, i in enumerate(last_ids) if i is not None]
        rows = [self.lexicon.row(t) if i is None else lexical.EMPTY_ROW
                for t, i in zip(lexical.seam_texts(context_texts), last_ids)]
        if stored:
            given = {int(last_ids[q]): context_texts[q][-1] for q in stored if context_texts[q][-1] is not None}
            by_id = self.lexicon.stored_seams.rows(np.asarray([last_ids[q] for q in stored], np.int64),
                                                   lambda missing: self._given_or_stored_texts(missing, given))[0]
            for k, q in enumerate(stored):
                rows[q] = (by_id[k].indices, by_id[k].data)
        return lexical.stack(rows)

    def _context_word_rows(self, context_texts: list[list[str | None]], context_ids: list | None
                           ) -> tuple[sparse.csr_matrix | None, np.ndarray, bool]:
        """_word_rows() of the contexts' last max_context items, the ones the model reads."""
        L = self.max_context
        if context_ids is not None:
            context_ids = [ids[-L:] if ids is not None else None for ids in context_ids]
        return self._word_rows([ts[-L:] for ts in context_texts], context_ids)

    def _word_rows(self, text_lists: list[list[str | None]], id_lists: list | None
                   ) -> tuple[sparse.csr_matrix | None, np.ndarray, bool]:
        """(every item's word row, list after list, or None if no item has a text or an id; items per list; whether
        any item has one). An id's row comes from the lexicon's stored rows (its text, when given, spares the read), a
        text's from its cache by text, a raw vector's is empty. Lists of ids only (int64 arrays, ResolvedItems.ids)
        take no per-item work."""
        sizes = np.fromiter(map(len, text_lists), np.int64, len(text_lists))
        if id_lists is None:
            id_lists = [None] * len(text_lists)
        if all(isinstance(ids, np.ndarray) for ids in id_lists):  # ids only
            stored_ids = np.concatenate(id_lists) if id_lists else np.zeros(0, np.int64)
            with_id = None
        else:
            ids = [i for ids, ts in zip(id_lists, text_lists) for i in (ids if ids is not None else [None] * len(ts))]
            with_id = np.fromiter((i is not None for i in ids), bool, len(ids))
            stored_ids = np.fromiter((i for i in ids if i is not None), np.int64, int(with_id.sum()))
        texts = [t for ts in text_lists for t in ts]
        if not len(stored_ids) and not any(texts):
            return None, sizes, False  # (the caller makes the empty rows, if it needs them)

        def read_texts(missing: list[int]) -> dict[int, str]:  # the texts given for ids spare their reads
            id_texts = texts if with_id is None else [t for t, has in zip(texts, with_id) if has]
            return self._given_or_stored_texts(missing, {i: t for i, t in zip(stored_ids.tolist(), id_texts)
                                                         if t is not None})

        by_id = self.lexicon.stored_rows(stored_ids, read_texts)[0]
        if with_id is None or with_id.all():
            return by_id, sizes, True
        others = lexical.stack([self.lexicon.row(t) for t, has in zip(texts, with_id) if not has])
        order = np.empty(len(texts), np.int64)  # where each item's row is in [by_id; others]
        order[with_id] = np.arange(len(stored_ids))
        order[~with_id] = len(stored_ids) + np.arange(len(texts) - len(stored_ids))
        return sparse.vstack([by_id, others], format="csr")[order], sizes, True

    def warm_word_rows(self, chunk: int = 1000, stop: threading.Event | None = None) -> int:
        """Read and weigh the word rows of the stored paragraphs not kept yet, ``chunk`` at a time: every paragraph of
        a store the lexicon can keep whole (lexical.ID_CACHE_SIZE), else the newest half of that many. What a server
        does in the background once it has loaded (server/warm_up.py, which logs how long it took), so that its queries
        find every candidate's row kept and read no text; a query that meets a row first computes it itself, as
        before. Stops early when ``stop`` is set; returns the rows kept."""
        if self.lexicon is None:
            return 0
        ids = self.store.vector_ids()
        if len(ids) > lexical.ID_CACHE_SIZE:  # the newest half of what the lexicon keeps: queries fill the rest
            ids = ids[-(lexical.ID_CACHE_SIZE // 2):]
        for s in range(0, len(ids), chunk):
            if stop is not None and stop.is_set():
                break
            todo = self.lexicon.uncached(ids[s:s + chunk])
            if len(todo):
                self.lexicon.stored_rows(todo, self.stored_texts)
        return len(self.lexicon.stored)

    def _given_or_stored_texts(self, missing: list[int], given: dict[int, str]) -> dict[int, str]:
        """The texts of the stored paragraphs among ``missing``: from ``given`` where it has them, the others read
        (stored_texts)."""
        got = self.stored_texts([i for i in missing if i not in given])
        return {i: given[i] if i in given else got[i] for i in missing if i in given or i in got}

    def stored_texts(self, ids: list[int]) -> dict[int, str]:
        """The texts of the stored paragraphs among ``ids`` (one read; a paragraph deleted meanwhile is left out)."""
        return {i: p.text for i, p in self.store.find_paragraphs(ids).items()} if ids else {}

    def uncached_words(self, ids: np.ndarray) -> np.ndarray:
        """The stored paragraphs among ``ids`` whose texts lexical_features would read (word rows not kept yet)."""
        return self.lexicon.uncached(ids) if self.lexicon is not None else ids[:0]

    def stored_lexical_features(self, context_texts: list[list[str | None]], sizes: Sequence[int],
                                candidates: sparse.csr_matrix, context_ids: list | None = None) -> list[np.ndarray]:
        """lexical_features() for stored candidates, from their rows (``Lexicon.stored_rows``: ``sizes[i]`` rows for
        query i, query after query), and contexts given as texts (the whole batch in one call:
        lexical.features_many); a context item with a stored id (``context_ids``, as in lexical_features) takes the
        row kept for that id instead of weighing its text again."""
        contexts, context_sizes, _ = self._context_word_rows(context_texts, context_ids)
        if contexts is None:  # raw vectors: no words
            contexts = lexical.empty_rows(int(context_sizes.sum()))
        return lexical.features_many(contexts, candidates, sizes, self.max_context, self.model.cfg.novel_words,
                                     context_sizes=context_sizes, seam=self._seam_rows(context_texts, context_ids))

    @torch.no_grad()
    def score(self, contexts: list[np.ndarray], candidates: list[np.ndarray], need_weights: bool = False,
              lexical_features: list[np.ndarray] | None = None):
        """Model scores per query (list of (K_i,) arrays), queries (B,D), attention per query (h,K_i,L) or None
        (not asked for, or a model without cross-attention).
        ``lexical_features``: per query (K_i, model.cfg.n_word_features), from lexical_features(); None: no texts."""
        scores, queries, attention = [], [], []
        for s in range(0, len(contexts), SCORE_BATCH):
            x, m = pad_contexts(contexts[s:s + SCORE_BATCH], self.max_context)
            c, cm = pad_candidates(candidates[s:s + SCORE_BATCH])
            lex = pad_candidates(lexical_features[s:s + SCORE_BATCH])[0] if lexical_features is not None else None
            out = self.model(x, m, c, cm, need_weights=need_weights, lexical_features=lex)
            p = self.memory_predictions(np.stack([ctx[-1] for ctx in contexts[s:s + SCORE_BATCH]]))
            memory = self.memory_terms(p, candidates[s:s + SCORE_BATCH])
            for i, cand in enumerate(candidates[s:s + SCORE_BATCH]):
                scores.append(out["scores"][i, :len(cand)].numpy() + (memory[i] if memory is not None else 0.0))
                if need_weights and out["attention"] is not None:
                    attention.append(out["attention"][i, :, :len(cand)].numpy())
            queries.append(out["query"].numpy())
        return scores, np.concatenate(queries), attention if need_weights and attention else None

    def rank(self, contexts: list[np.ndarray], candidate_ids: list[np.ndarray], candidate_vectors: list[np.ndarray],
             lexical_features: list[np.ndarray] | None = None) -> list[Scored]:
        """Rank given candidates (training's validation, which has their word features at hand)."""
        scores, queries, _ = self.score(contexts, candidate_vectors, False, lexical_features)
        out = []
        for i, (ids, vecs, sc) in enumerate(zip(candidate_ids, candidate_vectors, scores)):
            order = np.argsort(-sc, kind="stable")
            out.append(Scored(ids=np.asarray(ids)[order], scores=sc[order], retrieval_scores=(vecs @ queries[i])[order]))
        return out

    @torch.no_grad()
    def retrieve(self, contexts: list[np.ndarray], exclude: list[set[int]], context_texts: list[list[str | None]],
                 need_weights: bool = False, observe=lambda stage, seconds: None, keep: int | None = None,
                 allow: np.ndarray | None = None, context_ids: list | None = None, depth: int = 0) -> list[Scored]:
        """The serving path, for many queries at once: per chunk of SCORE_BATCH queries, the context is encoded
        once (its query vector searches, its states score), each source searched once for all queries, every
        candidate row read once, word features computed once, and one model call scores them all.

        A model that reads words gets every candidate's word row from the lexicon's cache (a stored paragraph's
        text is read and tokenised once per process); ``Scored.paragraphs`` holds the rows of each query's first ``keep``
        (all if None), read once for the batch. A candidate whose row has gone (a read-only replica whose writer
        deleted it since the replica loaded its index) is dropped, and the next one takes its place. ``allow``: the only ids any query may retrieve (a
        retrieval filter's, resolved by the store; None: any). ``observe(stage, seconds)`` gets the time of each
        stage of each chunk: STAGES, in that order. ``context_ids``: per query, each context item's stored id (None for
        a text or vector; ResolvedItems.ids), whose word row is then the one kept by id. ``depth``: each vector source
        searched at least this deep (a caller's top_k beyond n_candidates gets as many answers as the store holds)."""
        out: list[Scored] = []
        depth = max(self.n_candidates, depth)
        step = max(1, SCORE_BATCH * self.n_candidates // depth)  # deeper lists, fewer queries a chunk: the same memory
        for s in range(0, len(contexts), step):
            chunk, texts = contexts[s:s + step], context_texts[s:s + step]
            lap = Laps(observe)
            x, m = pad_contexts(chunk, self.max_context)
            query, states = self.model.encode(x, m)  # (B, D), (B, L, d)
            q = query.numpy()
            lap("encode")
            last = np.stack([c[-1] for c in chunk])  # (the last paragraph's search, and the transition memory's)
            p = self.memory_predictions(last)
            lap("memory")
            ids = self.stage1(q, last, p, exclude[s:s + step], depth, texts, allow)
            lap("search")
            lex, read = None, {}

            def read_texts(missing: list[int], read: dict = read) -> dict[int, str]:
                got = self.store.find_paragraphs(missing)
                read.update(got)
                return {i: p.text for i, p in got.items()}

            every = np.concatenate(ids) if ids else np.zeros(0, np.int64)  # the chunk's candidates, query after query
            kept = np.ones(len(every), bool)
            if self.lexicon is not None:  # word rows: read and tokenised once per paragraph, then kept by id
                words, kept = self.lexicon.stored_rows(every, read_texts)  # not found: deleted since it was found
            present, vectors = self.store.present_vectors(every[kept])  # ... or deleted since its row was kept
            kept[kept] = np.isin(every[kept], present)
            bounds = np.cumsum([0, *(len(row_ids) for row_ids in ids)])  # each query's slice of ``every``
            at = np.concatenate([[0], np.cumsum(kept)])[bounds]  # ... and of what is kept
            every = every[kept]
            words = words[np.flatnonzero(kept)] if self.lexicon is not None else None
            ids = [every[a:b] for a, b in zip(at[:-1], at[1:])]
            cand_vecs = [vectors[a:b] for a, b in zip(at[:-1], at[1:])]
            lap("rows")
            if self.lexicon is not None:
                lex = self.stored_lexical_features(texts, [len(row_ids) for row_ids in ids], words,
                                                   context_ids[s:s + step] if context_ids is not None else None)
                lap("word_features")
            c, cm = pad_candidates(cand_vecs)
            result = self.model.score(query, states, x, m, c, cm, need_weights,
                                      pad_candidates(lex)[0] if lex is not None else None)
            memory = self.memory_terms(p, cand_vecs)
            lap("model")
            ranked = []
            for i, (row_ids, vecs) in enumerate(zip(ids, cand_vecs)):
                sc = result["scores"][i, :len(row_ids)].numpy() + (memory[i] if memory is not None else 0.0)
                order = np.argsort(-sc, kind="stable")
                ranked.append(Scored(ids=row_ids[order], scores=sc[order], retrieval_scores=(vecs @ q[i])[order]))
            self._answer_rows(ranked, keep, read)
            if need_weights and result["attention"] is not None:  # the cross-attention of the top paragraph shown
                # (after any deleted one gave its place); a model with no scorer layer has none
                for i, (r, row_ids) in enumerate(zip(ranked, ids)):
                    if len(r.ids):
                        r.attention = result["attention"][i][:, int(np.flatnonzero(row_ids == r.ids[0])[0]), :].numpy()
            out += ranked
            lap("answer")
        return out

    def _answer_rows(self, ranked: list[Scored], keep: int | None, rows: dict[int, Paragraph]) -> None:
        """Set each query's ``paragraphs``: the stored rows of its first ``keep`` ids (all if None); ``rows`` holds those
        already read. A paragraph deleted since it was found (on a replica) is dropped from ``ids`` and the next one
        read in its place: only the rows shown are read, and more only when one has gone."""
        looked = [0] * len(ranked)  # per query: ids whose row has been looked for
        gone: set[int] = set()  # ids looked for and not found
        while True:
            want = [len(r.ids) if keep is None else min(keep, len(r.ids)) for r in ranked]
            todo = {int(i) for r, a, w in zip(ranked, looked, want) for i in r.ids[a:w]} - rows.keys() - gone
            if todo:
                rows.update(self.store.find_paragraphs(sorted(todo)))
                gone |= todo - rows.keys()
            again = False
            for n, (r, a, w) in enumerate(zip(ranked, looked, want)):
                lost = np.array([int(i) not in rows for i in r.ids[a:w]], bool)
                if lost.any():
                    keep_mask = np.ones(len(r.ids), bool)
                    keep_mask[a:w] = ~lost
                    r.ids, r.scores, r.retrieval_scores = r.ids[keep_mask], r.scores[keep_mask], r.retrieval_scores[keep_mask]
                    again = True
                looked[n] = w - int(lost.sum())
            if not again:
                break
        for r, shown in zip(ranked, looked):
            r.paragraphs = [rows[int(i)] for i in r.ids[:shown]]
