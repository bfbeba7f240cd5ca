"""Where a PredictNext's time goes, stage by stage, in-process and through gRPC.

    python -m bench.speed.profile_request --data-dir /tmp/peps-bench [--queries 200] [--output NAME]

Workloads, each ``--queries`` calls after as many warm-up calls of the same kind (a serving process is warm: its
caches hold what recent calls touched, and every stored paragraph's word row, which a server computes in the
background once it has loaded; the script does that first, in-process, and waits for the server's): ``ids`` (four
stored paragraph ids), ``text`` (four texts the process has not seen), ``growing`` (a document's last four paragraphs
as text, advancing by one paragraph per call: a writing tool's calls), ``batch16`` (sixteen id contexts in one
predict_next_batch, as the server's coalescer hands them over; times are per call of 16). For each: the mean time per
stage, as the pipeline reports it (pipeline.STAGES, plus "embed" for texts; "resolve" is the rest: reading the
context's rows, checks, answer objects), and the p50 / p95 of the whole call. Through gRPC: the p50 of PredictNext by
ids at concurrency 1 against ``nextpara serve`` on 127.0.0.1. The reference, in the same run: sentence-transformers'
``util.semantic_search`` of the last paragraph's stored vector over all stored vectors (B1, no model), one query at a
time. Writes bench/results/NAME.{md,json} (default profile_request).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

import numpy as np

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def warm_predictor(data_dir: str, n: int):
    """(predictor, ids, windows): a Predictor of ``data_dir`` using every core, its word rows computed as a server
    computes them once loaded; the store's paragraph ids in (doc_id, position) order; and 2 x ``n`` (or fewer)
    seeded contexts of four consecutive stored ids of one document, as the speed scripts call PredictNext with."""
    from nextpara.attention_core.pipeline import use_threads
    from nextpara.attention_core.predictor import Predictor

    predictor = Predictor.open(data_dir)
    use_threads(os.cpu_count() or 1)
    predictor.pipeline.warm_word_rows()
    ids, docs, _, _ = predictor.store.paragraph_table()
    rng = np.random.default_rng(0)
    starts = [int(s) for s in rng.choice(len(ids) - 40, size=4 * n, replace=False) if docs[s] == docs[s + 4]][:2 * n]
    return predictor, ids, [[int(i) for i in ids[s:s + 4]] for s in starts]


def semantic_search_p50_ms(store, ids: np.ndarray, lasts: np.ndarray) -> float:
    """The reference of the speed scripts: the p50 of sentence-transformers' ``util.semantic_search`` (top 10) of one
    vector of ``lasts`` at a time over the store's vectors of ``ids`` (B1 with no model), in milliseconds."""
    import torch
    from sentence_transformers import util

    corpus = torch.from_numpy(store.vectors(ids))
    times = []
    for v in lasts:
        t0 = time.perf_counter()
        util.semantic_search(torch.from_numpy(v[None]), corpus, top_k=10)
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


def main() -> int:
    parser = record.argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built and trained store")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--output", default="profile_request")
    parser.add_argument("--no-grpc", action="store_true", help="in-process only")
    args = parser.parse_args()

    from nextpara.attention_core.pipeline import STAGES, use_threads
    from nextpara.attention_core.predictor import Predictor

    n = args.queries
    predictor = Predictor.open(args.data_dir)
    use_threads(os.cpu_count() or 1)
    predictor.pipeline.warm_word_rows()  # what the server does in the background once it has loaded
    store = predictor.store
    ids, docs, _, _ = store.paragraph_table()
    rng = np.random.default_rng(0)
    starts = [int(s) for s in rng.choice(len(ids) - 40, size=6 * n, replace=False) if docs[s] == docs[s + 4]]
    texts = {p.id: p.text for p in store.get_paragraphs([int(i) for s in starts for i in ids[s:s + 5]])}
    stages: dict[str, float] = defaultdict(float)
    predictor.observe = lambda stage, seconds: stages.__setitem__(stage, stages[stage] + seconds)

    def windows(k: int) -> list[list[int]]:
        return [[int(i) for i in ids[s:s + 4]] for s in starts[k * n:(k + 1) * n]]

    growing = []  # each document's paragraphs, four at a time, advancing by one; documents one after another
    for doc in dict.fromkeys(docs):
        rows = [int(i) for i, d in zip(ids, docs) if d == doc]
        growing += [rows[s:s + 4] for s in range(len(rows) - 3)]
        if len(growing) >= 2 * n:
            break
    doc_text = {p.id: p.text for p in store.get_paragraphs(sorted({i for w in growing for i in w}))}
    workloads = {
        "ids": (lambda w: predictor.predict_next(w), lambda k: windows(k)),
        "text": (lambda w: predictor.predict_next([texts[i] for i in w]), lambda k: windows(2 + k)),
        "growing": (lambda w: predictor.predict_next([doc_text[i] for i in w]),
                    lambda k: growing[k * n:(k + 1) * n]),
        "batch16": (lambda w: predictor.predict_next_batch(w), lambda k: [windows(k)[j:j + 16] for j in range(0, n, 16)]),
    }
    rows = {}
    for name, (call, calls) in workloads.items():
        for w in calls(0):  # warm-up
            call(w)
        stages.clear()
        times = []
        measured = calls(1)
        for w in measured:
            t0 = time.perf_counter()
            call(w)
            times.append(time.perf_counter() - t0)
        per_call = {k: 1000 * v / len(measured) for k, v in stages.items()}
        per_call["resolve"] = 1000 * np.mean(times) - sum(per_call.values())
        rows[name] = {"calls": len(measured), "p50_ms": 1000 * float(np.median(times)),
                      "p95_ms": 1000 * float(np.percentile(times, 95)), "stages_ms": per_call}
        print(name, {k: round(v, 2) for k, v in per_call.items()}, f"p50 {rows[name]['p50_ms']:.2f} ms", flush=True)

    reference = semantic_search_p50_ms(store, ids, store.vectors([w[-1] for w in windows(0)]))
    predictor.close()

    grpc_p50 = None
    if not args.no_grpc:
        from nextpara.client import Client
        from nextpara.server.process import ServerProcess
        from nextpara.server.warm_up import WORD_ROWS_READY

        with ServerProcess.local(args.data_dir, "--read-only") as server, Client(server.address) as client:
            if not server.wait_for(WORD_ROWS_READY, 120):
                raise SystemExit(f"the server did not log {WORD_ROWS_READY!r} within 120 s; its log ends:\n"
                                 f"{server.tail()}")
            for w in windows(0):
                client.predict_next(w)
            times = []
            for w in windows(1):
                t0 = time.perf_counter()
                client.predict_next(w)
                times.append(time.perf_counter() - t0)
            grpc_p50 = 1000 * float(np.median(times))

    stamp = record.stamp(__file__)
    order = ["embed", "resolve", *STAGES]
    lines = [f"# Where a PredictNext's time goes ({stamp['date']})", "", f"Command: `{stamp['command']}`", "",
             f"Store: {len(ids)} paragraphs, model {predictor.model_version}; {stamp['machine']}. Mean ms per call "
             "by stage; p50 / p95 of the whole call; the reference is sentence-transformers' `util.semantic_search`"
             f" of one vector over the store (B1, no model): p50 {reference:.2f} ms.", "",
             "| workload | " + " | ".join(order) + " | p50 | p95 | p50 / reference |", "| --- |" + " --- |" * (len(order) + 3)]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{r['stages_ms'].get(k, 0.0):.2f}" for k in order)
                     + f" | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['p50_ms'] / reference:.1f}x |")
    if grpc_p50 is not None:
        lines += ["", f"Through gRPC (`nextpara serve --read-only`, one client, concurrency 1), PredictNext by ids: "
                  f"p50 {grpc_p50:.2f} ms ({grpc_p50 / reference:.1f}x the reference)."]
    record.save(args.output, {**stamp, "paragraphs": len(ids), "model": predictor.model_version, "workloads": rows,
                              "reference_semantic_search_p50_ms": reference, "grpc_ids_p50_ms": grpc_p50},
                "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
