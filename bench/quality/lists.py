"""The served pipeline's stage-1 lists and the model's scores for a split's queries, as the probes read them."""

from __future__ import annotations

import numpy as np


def scored_lists(pipeline, seq, texts: list[str], queries, chunk: int = 256):
    """(candidate rows per query, model scores per query): stage 1 exactly as serving makes it (the context as stored
    vectors and texts, its paragraphs and their copies excluded), then the model with its word features."""
    lists, scores = [], []
    for s in range(0, len(queries), chunk):
        part = queries[s:s + chunk]
        ctx = [seq.vectors[q.context] for q in part]
        ctx_texts = [[texts[r] for r in q.context] for q in part]
        exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in part]
        ids, _ = pipeline.candidates(ctx, exclude, context_texts=ctx_texts)
        rows = [np.asarray([seq.row_of_id[int(j)] for j in l], np.int64) for l in ids]
        words = pipeline.lexical_features(ctx_texts, [[texts[r] for r in l] for l in rows],
                                          [[int(j) for j in l] for l in ids])
        lists += rows
        scores += pipeline.score(ctx, [seq.vectors[l] for l in rows], lexical_features=words)[0]
    return lists, scores
