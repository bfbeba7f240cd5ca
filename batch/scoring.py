"""Scoring a chunk of rows with a Predictor: the one code path of the in-process and Ray engines.

All the rows with candidates go through one ``rerank_batch`` call and all the rows without through one
``predict_next_batch`` call, exactly as the service's Rerank and PredictNext do; a row with a bad item
gets its error back in its place (``return_errors``) and becomes an error row, the others go on.
"""

from __future__ import annotations

from nextpara.attention_core.predictor import Predictor
from nextpara.errors import NextparaError

from .rows import Row, error_output, predict_output, rerank_output


def score_rows(predictor: Predictor, rows: list[Row], with_text: bool = True) -> list[dict]:
    """One output row per input row, in order."""
    outputs: list[dict | None] = [error_output(row, row.error) if row.error is not None else None for row in rows]
    rerank = [i for i, row in enumerate(rows) if row.error is None and row.candidates is not None]
    predict = [i for i, row in enumerate(rows) if row.error is None and row.candidates is None]
    results = predictor.rerank_batch([rows[i].context for i in rerank], [rows[i].candidates for i in rerank],
                                     return_errors=True) if rerank else []
    for i, result in zip(rerank, results):
        outputs[i] = (error_output(rows[i], str(result)) if isinstance(result, NextparaError) else
                      rerank_output(rows[i], result.order, result.scores, result.context_dropped))
    results = predictor.predict_next_batch([rows[i].context for i in predict], [rows[i].top_k for i in predict],
                                           return_errors=True) if predict else []
    for i, result in zip(predict, results):
        outputs[i] = (error_output(rows[i], str(result)) if isinstance(result, NextparaError) else
                      predict_output(rows[i], result.predictions, result.context_dropped, with_text))
    return outputs  # type: ignore[return-value]
