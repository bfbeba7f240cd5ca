"""What the transition memory costs: making it, a prediction from it, and a whole call with it.

    python -m bench.speed.memory_cost --data-dir DIR [--queries 300] [--output memory_cost]

On a built store served by a model with a memory weight (the general model's, or a trained one's; the memory itself
is the model-independent part, attention_core/transitions.py):

- making: ``TransitionMemory.from_store`` three times (the median; the keys, and the bytes of its keys and steps), as a
  server's warm-up does once and a writer's store again in the background after a write;
- a prediction: ``predict`` of ``--queries`` last paragraphs, one at a time and 256 at a time, by the memory a store
  of this size gets (an HNSW graph above transitions.EXACT_UP_TO keys) and by an exact search of the same keys; how
  many of the exact search's K nearest keys the graph finds, and the cosine between the two predictions;
- a whole call: ``predict_next`` by four stored ids, with the memory (its prediction, its candidates in stage 1 and
  its term in the scores) and without it (the same predictor, the two alternating call by call), p50 and p95;
- the reference, in the same run: sentence-transformers' ``util.semantic_search`` of one stored vector over the
  store (B1, no model), p50.

Writes bench/results/NAME.{md,json}.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench import record
from bench.speed.profile_request import semantic_search_p50_ms, warm_predictor

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def per_query_ms(fn, lasts: np.ndarray, batch: int) -> float:
    t0 = time.perf_counter()
    for s in range(0, len(lasts), batch):
        fn(lasts[s:s + batch])
    return 1000 * (time.perf_counter() - t0) / len(lasts)


def main() -> int:
    parser = record.argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store, served by a model with a memory weight")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--output", default="memory_cost")
    args = parser.parse_args()

    from nextpara.attention_core import transitions

    n = args.queries
    predictor, ids, windows = warm_predictor(args.data_dir, n)
    pipeline, store = predictor.pipeline, predictor.store
    if pipeline.memory is None:
        raise SystemExit(f"{args.data_dir}: its model ({predictor.model_version}) has no transition memory weight")
    lasts = store.vectors([w[-1] for w in windows[:n]])

    makes = []
    for _ in range(3):
        t0 = time.perf_counter()
        graph = transitions.TransitionMemory.from_store(store)
        makes.append(time.perf_counter() - t0)
    exact_up_to, transitions.EXACT_UP_TO = transitions.EXACT_UP_TO, 1 << 62
    try:
        exact = transitions.TransitionMemory.from_store(store)
    finally:
        transitions.EXACT_UP_TO = exact_up_to
    k = min(transitions.K, len(graph))
    _, found = graph.index.search(lasts, k)
    _, truth = exact.index.search(lasts, k)
    key_recall = float(np.mean([len(np.intersect1d(f, t)) / k for f, t in zip(found, truth)]))
    agreement = float(np.mean(np.sum(graph.predict(lasts) * exact.predict(lasts), axis=1)))
    predict = {f"{name}, batch {b}": per_query_ms(memory.predict, lasts, b)
               for name, memory in (("graph" if len(graph) > exact_up_to else "exact (the store's)", graph),
                                    ("exact", exact)) for b in (1, 256)}

    memory, calls = pipeline.memory, {"with the memory": [], "without": []}
    for w in windows[:n]:  # warm-up, both ways
        for on in (memory, None):
            pipeline.memory = on
            predictor.predict_next(w)
    for w in windows[n:]:
        for name in calls:
            pipeline.memory = memory if name == "with the memory" else None
            t0 = time.perf_counter()
            predictor.predict_next(w)
            calls[name].append(1000 * (time.perf_counter() - t0))
    pipeline.memory = memory
    whole = {name: {"p50_ms": float(np.median(t)), "p95_ms": float(np.percentile(t, 95))} for name, t in calls.items()}

    reference = semantic_search_p50_ms(store, ids, lasts)
    model = predictor.model_version
    predictor.close()

    stamp = record.stamp(__file__)
    nbytes = graph.steps.nbytes * 2  # the steps, and the keys (as many float32s, in the index)
    added = whole["with the memory"]["p50_ms"] - whole["without"]["p50_ms"]
    lines = [f"# What the transition memory costs ({stamp['date']})", "", f"Command: `{stamp['command']}`", "",
             f"Store: {len(ids)} paragraphs, model {model} (memory weight {pipeline.model.cfg.memory_boost:g}); "
             f"{stamp['machine']}. Reference: sentence-transformers' `util.semantic_search` of one vector over the "
             f"store (B1, no model), p50 {reference:.2f} ms.", "",
             f"- making it: {len(graph)} training transitions, keys and steps {nbytes / 1e6:.1f} MB; "
             f"{np.median(makes):.2f} s (median of 3: {', '.join(f'{t:.2f}' for t in makes)})",
             f"- the graph's keys against an exact search's: {key_recall:.3f} of the {k} nearest found; cosine between "
             f"the two predictions {agreement:.4f}", "",
             "| prediction of | ms per query | / reference |", "| --- | --- | --- |"]
    lines += [f"| {name} | {ms:.3f} | {ms / reference:.3f}x |" for name, ms in predict.items()]
    lines += ["", "| predict_next by 4 ids | p50 ms | p95 ms | p50 / reference |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['p50_ms'] / reference:.2f}x |"
              for name, r in whole.items()]
    lines += ["", f"The memory (its prediction, candidates and term) adds {added:+.2f} ms to a call's p50 ({n} calls "
                  "each way, alternating)."]
    record.save(args.output, {**stamp, "paragraphs": len(ids), "model": model, "transitions": len(graph),
                              "bytes": nbytes, "make_seconds": makes, "key_recall": key_recall,
                              "prediction_cosine": agreement, "predict_ms_per_query": predict, "predict_next": whole,
                              "reference_semantic_search_p50_ms": reference}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
