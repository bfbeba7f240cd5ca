"""Reranker cost: the attention model against a text cross-encoder, in one run.

    python -m bench.speed.rerank_speed --data-dir /tmp/peps-bench

One query = L = 8 context paragraphs and 100 candidates (PEPs test queries and their stage-1
candidates, as bench/speed/batch_speed.py picks them). Measured in-process on the store's trained model:

* ``attention, one query``: p50 / p99 of the model's forward pass for one query on ready tensors,
  and of ``Predictor.rerank`` with the vectors given (input checks and ranking included);
* ``attention, batch 256``: queries per second with 256 queries per forward pass;
* ``cross-encoder``: sentence-transformers' ``CrossEncoder`` built on the bundled all-MiniLM-L6-v2
  weights (its classification head untrained: this compares cost, not quality) scoring the same
  100 (context, candidate) text pairs per query, the context being the 8 paragraphs joined.

Prints a table, writes bench/results/rerank_speed.{json,md}.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench.record import argument_parser, save, stamp
from bench.speed.batch_speed import make_rows

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def timings(fn, n: int) -> list[float]:
    fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def summary(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "queries_per_second": round(1000 / float(np.mean(ms)), 1), "calls": len(ms)}


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--cross-encoder-queries", type=int, default=10)
    args = parser.parse_args()
    import torch
    from nextpara.attention_core.pipeline import pad_candidates, pad_contexts
    from nextpara.attention_core.predictor import Predictor
    from nextpara.store.embedders import bundled_minilm_path

    predictor = Predictor.open(args.data_dir)
    store, model = predictor.store, predictor.pipeline.model
    ctx_ids, cand_ids = make_rows(predictor, args.queries)
    ctx = [store.vectors(c) for c in ctx_ids]
    cands = [store.vectors(k) for k in cand_ids]
    results = {}
    with torch.inference_mode():
        one = iter(range(10**9))

        def forward_one():
            i = next(one) % len(ctx)
            x, m = pad_contexts([ctx[i]], model.cfg.max_context)
            c, cm = pad_candidates([cands[i]])
            model(x, m, c, cm)

        results["attention_forward_one"] = summary(timings(forward_one, 500))
        two = iter(range(10**9))

        def rerank_one():
            i = next(two) % len(ctx)
            predictor.rerank(ctx[i], cands[i])

        results["attention_rerank_one"] = summary(timings(rerank_one, 500))
        four = iter(range(10**9))

        def rerank_ids_one():  # stored ids: texts read from SQLite, word features computed (cached texts after a pass)
            i = next(four) % len(ctx)
            predictor.rerank(ctx_ids[i], cand_ids[i])

        results["attention_rerank_ids_one"] = summary(timings(rerank_ids_one, 500))
        x, m = pad_contexts(ctx[:256], model.cfg.max_context)
        c, cm = pad_candidates(cands[:256])
        ms = timings(lambda: model(x, m, c, cm), 10)
        results["attention_batch_256"] = {**summary(ms), "queries_per_second": round(256_000 / float(np.mean(ms)), 1)}
    for k, v in results.items():
        print(f"{k:28s} {v}", flush=True)

    from sentence_transformers import CrossEncoder

    cross = CrossEncoder(bundled_minilm_path(), num_labels=1, device="cpu")
    texts = {p.id: p.text for p in store.get_paragraphs(sorted({i for c in ctx_ids + cand_ids for i in c}))}
    pairs = [[(" ".join(texts[i] for i in c), texts[j]) for j in k] for c, k in zip(ctx_ids, cand_ids)]
    three = iter(range(10**9))
    results["cross_encoder_one"] = summary(timings(lambda: cross.predict(pairs[next(three) % len(pairs)], batch_size=100,
                                                                       show_progress_bar=False),
                                                   args.cross_encoder_queries))
    print(f"{'cross_encoder_one':28s} {results['cross_encoder_one']}", flush=True)

    record = {**stamp(__file__),
              "machine": f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}",
              "model": {"version": predictor.model_version, "d_model": model.cfg.d_model},
              "query": {"context_length": 8, "candidates": 100}, "results": results,
              "target_one_query_p50_ms_le_2": results["attention_forward_one"]["p50_ms"] <= 2.0}
    labels = {"attention_forward_one": "attention model, one query, forward pass on ready tensors",
              "attention_rerank_one": "attention model, one query, Predictor.rerank with vectors",
              "attention_rerank_ids_one": "attention model, one query, Predictor.rerank with stored ids (texts read, word overlap)",
              "attention_batch_256": "attention model, 256 queries per forward pass",
              "cross_encoder_one": "MiniLM cross-encoder, one query = 100 (context, candidate) pairs"}
    rows = ["| measurement | p50 ms | p99 ms | queries/s |", "| --- | --- | --- | --- |"]
    rows += [f"| {labels[k]} | {v['p50_ms']} | {v['p99_ms']} | {v['queries_per_second']:,} |" for k, v in results.items()]
    md = (f"# Reranker cost\n\n`{record['command']}` on {record['date']}, {record['machine']}, model "
          f"{record['model']}; one query = L = 8 context paragraphs and 100 candidates (PEPs test queries).\n\n"
          + "\n".join(rows) + "\n\nFor batch 256, p50/p99 are per forward pass of 256 queries.\n")
    save("rerank_speed", record, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
