"""Scoring a chunk of rows with a Predictor: the one code path of the in-process and Ray engines.

All the rows with candidates go through one ``rerank_batch`` call and all the rows without through one
``predict_next_batch`` call, exactly as the service's Rerank and PredictNext do; a row with a bad item
gets its error back in its place (``return_errors``) and becomes an error row, the others go on.

``vectors_as_arrays``, which the in-process engine applies to each row as it is read, makes a row's lists of
vectors one float32 array: the form Parquet rows arrive in, ~8x smaller than Python floats, and the numbers
and messages the scorer would make from the lists. A JSON job of vector rows runs 1.4-1.7x with it
(bench/speed/batch.md, Batch reranking throughput).
"""

from __future__ import annotations

import numpy as np
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


def vectors_as_arrays(row: Row) -> Row:
    """The row with each item list made only of equally long vectors (lists of numbers) as one (items, dim) float32
    array: the conversion the scorer would make (``unit_rows``), made early, so that it is the same numbers and a bad
    vector gets the same message. A list it cannot convert (texts or ids among the vectors, vectors of different
    lengths, an integer beyond float64's range) stays as it is, for the scorer to take or name."""
    if row.error is None:
        row.context, row.candidates = _as_array(row.context), _as_array(row.candidates)
    return row


def _as_array(items):
    if type(items) is not list or not items or not all(type(item) is list for item in items):
        return items
    try:
        arr = np.asarray(items, dtype=np.float32)
    except (ValueError, TypeError, OverflowError):
        return items
    return arr if arr.ndim == 2 and arr.shape[1] else items
