"""The served pipeline's stage-1 lists and the model's scores for a split's queries, as the probes read them."""

from __future__ import annotations

import numpy as np


def _contexts(seq, texts: list[str], part):
    """(context vectors, context texts) of some queries: the context as stored vectors and texts."""
    return [seq.vectors[q.context] for q in part], [[texts[r] for r in q.context] for q in part]


def candidate_rows(pipeline, seq, texts: list[str], queries, chunk: int = 256) -> list[np.ndarray]:
    """Stage 1 exactly as serving makes it: candidate rows (into ``seq``) per query."""
    lists = []
    for s in range(0, len(queries), chunk):
        part = queries[s:s + chunk]
        ctx, ctx_texts = _contexts(seq, texts, part)
        exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in part]  # its paragraphs and copies
        ids, _ = pipeline.candidates(ctx, exclude, context_texts=ctx_texts)
        lists += [np.asarray([seq.row_of_id[int(j)] for j in l], np.int64) for l in ids]
    return lists


def model_scores(pipeline, seq, texts: list[str], queries, lists: list[np.ndarray], chunk: int = 256) -> list[np.ndarray]:
    """The pipeline's model's scores of given candidate rows per query, with its own word features."""
    scores = []
    for s in range(0, len(queries), chunk):
        ctx, ctx_texts = _contexts(seq, texts, queries[s:s + chunk])
        rows = lists[s:s + chunk]
        words = pipeline.lexical_features(ctx_texts, [[texts[r] for r in l] for l in rows],
                                          [[int(seq.ids[r]) for r in l] for l in rows])
        scores += pipeline.score(ctx, [seq.vectors[l] for l in rows], lexical_features=words)[0]
    return scores


def scored_lists(pipeline, seq, texts: list[str], queries, chunk: int = 256):
    """(candidate rows per query, model scores per query): stage 1 exactly as serving makes it, then the model with
    its word features."""
    lists = candidate_rows(pipeline, seq, texts, queries, chunk)
    return lists, model_scores(pipeline, seq, texts, queries, lists, chunk)
