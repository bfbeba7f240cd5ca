"""``nextpara eval``: the evaluation protocol of docs/evaluation.md, exactly.

* Queries come from test documents (split 9 of ``md5(doc_id) % 10``), a seeded sample of
  ``n_queries`` targets; the index holds every paragraph of the corpus (all splits).
* The context (up to L preceding paragraphs) is given as text and embedded by the store's
  embedder. The context paragraphs and every paragraph with identical text are excluded from
  the results; a result whose text equals the target's counts as a hit.
* Only content is used to score (B3's successor step is the baseline's definition).
* Methods: B1 cosine to the last paragraph; B2 cosine to the mean of the context; B3
  successors of the last paragraph's nearest neighbours; B4 a ridge-regression linear map
  [last; mean] -> next, fitted on the train split; the model's query head alone; the full
  pipeline (query head + last paragraph's neighbours, reranked by attention).
* Metrics: Recall@1, Recall@10, MRR@10 with 95% bootstrap intervals, stage-1 candidate recall,
  latency per query (one query at a time, embedding included, on the first ``latency_queries``; each
  query's context is embedded once and that time counts in every method's latency).
* Context-length ablation (L = 1, 2, 4, 8): the excluded set is the same 8 preceding paragraphs
  at every L, so only what the model reads changes. Each length after the first also gets the change from the
  length before it (Recall@1 and MRR@10, ``change``), with a paired bootstrap interval: the same queries at both
  lengths, so a difference of a few thousandths can be told from noise, which the separate intervals cannot.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from .candidates import search_excluding
from .metrics import NO_HIT, paired_gain, summarize
from .sequences import ParagraphSequences, Query

log = logging.getLogger(__name__)
N_STAGE1 = 100  # depth of each single-source search; also the stage-1 recall depth
ABLATION_LENGTHS = (1, 2, 4, 8)


def check_settings(n_queries: int | None = None, context_length: int | None = None,
                   latency_queries: int | None = None) -> None:
    """InvalidInputError naming the setting the protocol cannot run with: no queries, a context length outside 1 to
    max(ABLATION_LENGTHS) (a query holds at most that many context paragraphs), no query to time (None: not given)."""
    from nextpara.errors import InvalidInputError

    longest = max(ABLATION_LENGTHS)
    for name, value, low, high in (("queries (--queries)", n_queries, 1, None),
                                   ("the context length (--context-length)", context_length, 1, longest),
                                   ("latency queries (--latency-queries)", latency_queries, 1, None)):
        if value is not None and (value < low or (high is not None and value > high)):
            within = (f"between {low} and {high} (the context paragraphs a query holds)" if high is not None
                      else f"at least {low}")
            raise InvalidInputError(f"{name} must be {within}, got {value}")


def _embed(embedder, texts: list[str], quiet: bool) -> np.ndarray:
    """``texts`` embedded a chunk at a time, a progress bar counting them (one call gave no sign of life for minutes)."""
    from nextpara.progress import progress_bar
    from nextpara.store.ingest import embed_in_chunks

    with progress_bar(total=len(texts), desc="embed contexts", unit="para", quiet=quiet) as bar:
        return embed_in_chunks(embedder, texts, bar.update)


class Evaluation:
    def __init__(self, store, seq: ParagraphSequences, embedder, pipeline=None, n_queries: int = 2000,
                 context_length: int = 4, seed: int = 0, split: str = "test", quiet: bool = True):
        """``split`` "validation" is for training's own checks (guard.py); the protocol's figures are "test". Unless
        ``quiet``, embedding the contexts' texts (minutes on a large store) shows a progress bar on a terminal."""
        check_settings(n_queries, context_length)
        self.store, self.seq, self.embedder, self.pipeline = store, seq, embedder, pipeline
        self.L = context_length
        self.targets = seq.queries(split, max(ABLATION_LENGTHS), limit=n_queries, seed=seed)
        if not self.targets:
            from nextpara.errors import FailedPreconditionError

            raise FailedPreconditionError(
                f"the {split} split of {store.data_dir} holds no queries: a query is a paragraph with one before it, in "
                f"a document of that split, and documents fall into the splits by a hash of their doc_id "
                f"(docs/evaluation.md); this store has {store.count_documents()} documents")
        rows = sorted({int(r) for q in self.targets for r in q.context})
        texts = store_texts(store, seq, rows)
        if embedder is None:  # a store of precomputed vectors, or the guard's figures: the stored vectors
            # (said as what is done, not as a lack: the guards of build and train pass None on purpose, and a log of
            # "no text embedder for MiniLM" after every build read as a broken installation)
            log.info("contexts given as their stored vectors (%s), not embedded again from their texts",
                     store.embedder_name)
            vecs = seq.vectors[rows]
        else:
            log.info("embedding %d context paragraphs as text", len(rows))
            vecs = _embed(embedder, texts, quiet) if rows else np.zeros((0, store.dim), np.float32)
        self.text_vec = dict(zip(rows, vecs))
        self.text = dict(zip(rows, texts))  # the context is given as text: the model may compare its words
        self._b4 = None
        self._embedded: list[tuple[np.ndarray, float]] = []  # see embedded()

    # ---- helpers ---------------------------------------------------------------------
    def context(self, q: Query, L: int) -> np.ndarray:
        return np.stack([self.text_vec[int(r)] for r in q.context[-L:]])

    def context_texts(self, q: Query, L: int) -> list[str | None]:
        return [self.text.get(int(r)) for r in q.context[-L:]]

    def exclude_ids(self, q: Query, L: int) -> set[int]:
        return set(self.seq.ids[self.seq.same_text_rows(q.context[-L:])].tolist())

    def ranks(self, ranked_ids: list[np.ndarray], queries: list[Query] | None = None) -> np.ndarray:
        """1-based rank of each query's first hit (a result whose text equals its target's), NO_HIT if none;
        ``queries`` default to every test query."""
        out = []
        for ids, q in zip(ranked_ids, self.targets if queries is None else queries):
            classes = self.seq.text_class[[self.seq.row_of_id[int(i)] for i in ids]] if len(ids) else np.zeros(0, int)
            hits = np.flatnonzero(classes == self.seq.text_class[q.target])
            out.append(int(hits[0]) + 1 if len(hits) else NO_HIT)
        return np.asarray(out)

    def b4_map(self) -> np.ndarray:
        """Ridge regression W: [last; mean] -> next, on (up to 20,000) training queries."""
        if self._b4 is None:
            train = self.seq.queries("train", self.L, limit=20000, seed=1)
            X = np.stack([np.concatenate([self.seq.vectors[q.context[-1]], self.seq.vectors[q.context].mean(0)]) for q in train])
            Y = self.seq.vectors[[q.target for q in train]]
            self._b4 = np.linalg.solve(X.T @ X + 1.0 * np.eye(X.shape[1]), X.T @ Y)
        return self._b4

    # ---- methods: each returns ranked ids per query (stage-1 list = its first N_STAGE1) ----
    def method_vectors(self, name: str, contexts: list[np.ndarray]) -> np.ndarray:
        if name == "B1":
            q = np.stack([c[-1] for c in contexts])
        elif name == "B2":
            q = np.stack([c.mean(0) for c in contexts])
        elif name == "B4":
            q = np.stack([np.concatenate([c[-1], c.mean(0)]) for c in contexts]) @ self.b4_map()
        elif name == "head":
            q = self.pipeline.query_vectors(contexts)
        else:
            raise ValueError(name)
        return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)

    def run(self, name: str, queries: list[Query], L: int, exclude_len: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(ranked ids, stage-1 candidate ids) per query, reading L paragraphs, excluding the last exclude_len."""
        contexts = [self.context(q, L) for q in queries]
        return self._rank(name, contexts, [self.exclude_ids(q, exclude_len) for q in queries],
                          [self.context_texts(q, L) for q in queries])

    def _rank(self, name: str, contexts: list[np.ndarray], exclude: list[set[int]], texts: list[list[str | None]]):
        if name in ("B1", "B2", "B4", "head"):
            lists = search_excluding(self.store, self.method_vectors(name, contexts), N_STAGE1, exclude)
            lists = [np.asarray(l, np.int64) for l in lists]
            return lists, lists
        if name == "B3":
            return self.successors(contexts, exclude)
        if name == "full":
            ranked = [s.ids for s in self.pipeline.retrieve(contexts, exclude, texts)]  # exactly what serving runs
            return ranked, ranked
        raise ValueError(name)

    def successors(self, contexts, exclude):
        neighbours = search_excluding(self.store, np.stack([c[-1] for c in contexts]), N_STAGE1, exclude)
        ranked = []
        for nbrs, ex in zip(neighbours, exclude):
            out = []
            for pid in nbrs:
                r = self.seq.row_of_id[pid] + 1
                if r < len(self.seq) and self.seq.doc_ids[r] == self.seq.doc_ids[r - 1]:
                    nxt = int(self.seq.ids[r])
                    if nxt not in ex and nxt not in out:
                        out.append(nxt)
            ranked.append(np.asarray(out, np.int64))
        return ranked, ranked

    def embedded(self, n: int) -> list[tuple[np.ndarray, float]]:
        """The first ``n`` queries' contexts embedded one query at a time: (vectors, milliseconds) each. Every
        method reads the same embedding, so it is timed once and its time is part of each method's latency."""
        if len(self._embedded) < n:
            for q in self.targets[len(self._embedded):n]:
                t0 = time.perf_counter()
                vecs = self.embedder.embed(self.context_texts(q, self.L)) if self.embedder else self.context(q, self.L)
                self._embedded.append((vecs, (time.perf_counter() - t0) * 1000))
        return self._embedded[:n]

    def latency(self, name: str, n: int) -> dict:
        """Per-query latency, one query at a time: embedding the context text, then the method's ranking."""
        times = []
        for q, (vecs, embed_ms) in zip(self.targets, self.embedded(n)):
            t0 = time.perf_counter()
            self._rank(name, [vecs], [self.exclude_ids(q, self.L)], [self.context_texts(q, self.L)])
            times.append(embed_ms + (time.perf_counter() - t0) * 1000)
        return {"latency_ms_mean": float(np.mean(times)), "latency_ms_p95": float(np.percentile(times, 95))}

    def evaluate(self, latency_queries: int = 100) -> dict:
        check_settings(latency_queries=latency_queries)  # (the rest was checked when the queries were drawn)
        methods = ["B1", "B2", "B3", "B4"] + (["head", "full"] if self.pipeline else [])
        results, curves = {}, {}
        for name in methods:
            ranked, stage1 = self.run(name, self.targets, self.L, self.L)
            ranks = self.ranks(ranked)
            stage1_hit = self.ranks(stage1) < NO_HIT
            results[name] = {**summarize(ranks), "stage1_recall": float(stage1_hit.mean()),
                             "stage1_candidates": float(np.mean([len(s) for s in stage1])),
                             **self.latency(name, latency_queries)}
            curves[name] = [float((ranks <= k).mean()) for k in range(1, 101)]
            log.info("%s: %s", name, {k: round(v, 4) for k, v in results[name].items() if isinstance(v, float)})
        return {"methods": results, "context_length": self.length_ablation(), "recall_curves": curves,
                "model_max_context": self.pipeline.max_context if self.pipeline else None}  # what the model reads

    def length_ablation(self) -> dict:
        """Recall@1, MRR@10 and stage-1 recall per method (B1, B2, and the full pipeline if any) and context length,
        the same 8 preceding paragraphs excluded at every length; from the second length on, the paired change from
        the one before (``change``), over every query, with how many of them are given more paragraphs at this length
        (``queries_given_more``: a query whose target has fewer paragraphs before it gets the same context twice)."""
        ablation = {}
        # a query holds at most the paragraphs before its target: from one length to the next, only those with more
        # than the shorter length are given more (the others get the same context twice, a change of 0 in the mean)
        held = np.array([len(q.context) for q in self.targets])
        given_more = {b: int((held > a).sum()) for a, b in zip(ABLATION_LENGTHS[:-1], ABLATION_LENGTHS[1:])}
        for name in (["B1", "B2", "full"] if self.pipeline else ["B1", "B2"]):
            ablation[name], before = {}, None
            for L in ABLATION_LENGTHS:
                ranks = self.ranks(self.run(name, self.targets, L, max(ABLATION_LENGTHS))[0])
                s = summarize(ranks, n_boot=200)
                ablation[name][str(L)] = {"recall@1": s["recall@1"], "mrr@10": s["mrr@10"], "recall@1_ci": s["recall@1_ci"],
                                          "stage1_recall": float((ranks < NO_HIT).mean())}  # the target ranked at all
                if before is not None:  # what reading more paragraphs changed, on the same queries
                    ablation[name][str(L)]["change"] = {**paired_gain(before, ranks),
                                                        "queries_given_more": given_more[L],
                                                        "queries": len(self.targets)}
                before = ranks
        return ablation


def store_texts(store, seq: ParagraphSequences, rows: list[int]) -> list[str]:
    return [p.text for p in store.get_paragraphs([int(seq.ids[r]) for r in rows])]
