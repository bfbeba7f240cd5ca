"""Scoring a chunk of rows with a Predictor: the one code path of the in-process and Ray engines.

Each row is resolved on its own (a bad row becomes an error row, the others go on); then all the
rows with candidates are scored in one batched model call, and all the rows without go through
one batched retrieval + rerank, exactly as the service's Rerank and PredictNext do.
"""

from __future__ import annotations

from nextpara.attention_core.predictor import Predictor
from nextpara.errors import InvalidInputError, NotFoundError

from .rows import Row, error_output, predict_output, rerank_output


def score_rows(predictor: Predictor, rows: list[Row], with_text: bool = True) -> list[dict]:
    """One output row per input row, in order."""
    outputs: list[dict | None] = [None] * len(rows)
    rerank_at, rerank_ctx, rerank_cands = [], [], []
    predict_at, predict_ctx = [], []
    for i, row in enumerate(rows):
        if row.error is not None:
            outputs[i] = error_output(row, row.error)
            continue
        try:
            context = predictor.resolve_context(row.context)
            if row.candidates is not None:
                rerank_cands.append(predictor.resolve(row.candidates, "candidates"))
                rerank_ctx.append(context)
                rerank_at.append(i)
            else:
                predict_ctx.append(context)
                predict_at.append(i)
        except (InvalidInputError, NotFoundError) as e:
            outputs[i] = error_output(row, str(e))
    for i, result in zip(rerank_at, predictor.rerank_resolved(rerank_ctx, rerank_cands)):
        outputs[i] = rerank_output(rows[i], result.order, result.scores, result.context_dropped)
    top_ks = [rows[i].top_k for i in predict_at]
    for i, result in zip(predict_at, predictor.predict_resolved(predict_ctx, top_ks)):
        outputs[i] = predict_output(rows[i], result.predictions, result.context_dropped, with_text)
    return outputs  # type: ignore[return-value]
