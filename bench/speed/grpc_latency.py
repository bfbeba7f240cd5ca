"""PredictNext latency through gRPC against the in-process Predictor on the same store.

    python -m bench.speed.grpc_latency --data-dir /tmp/peps-bench [--seconds 10] [--output NAME]

Starts `nextpara serve --read-only` as a separate process on 127.0.0.1 (NEXTPARA_* settings in the
environment apply to it, e.g. NEXTPARA_WORKERS and NEXTPARA_THREADS), then measures, for contexts
given as stored ids and as texts (4 paragraphs of a test document each): the in-process
Predictor.predict_next one call at a time, and PredictNext through gRPC at concurrency 1, 8,
16 and 32 (one client per thread). Every measurement uses contexts no earlier one used, so text
contexts always pay for embedding (no embedding-cache hits); warm-up calls (which load the
embedding model) are outside both the latencies and the QPS window.
Prints a table, writes bench/results/grpc_latency.{json,md} (or NAME.{json,md}).
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time

import numpy as np

from bench.record import argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def contexts_from(data_dir: str, n: int):
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    with open_store(data_dir, readonly=True) as store:
        seq = ParagraphSequences(store)
        queries = [q for q in seq.queries("test", 4, min_context=4, limit=n, seed=3)]
        ids = [[int(seq.ids[r]) for r in q.context] for q in queries]
        texts = [[p.text for p in store.get_paragraphs(c)] for c in ids]
    return ids, texts


def percentiles(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "calls": len(ms)}


def in_process(data_dir, contexts, seconds, warmup):
    from nextpara.attention_core.predictor import Predictor

    predictor = Predictor.open(data_dir)
    predictor.predict_next(warmup, top_k=10)  # loads the embedding model
    times, start, i = [], time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        predictor.predict_next(contexts[i % len(contexts)], top_k=10)
        times.append((time.perf_counter() - t0) * 1000)
        i += 1
    predictor.close()
    return {**percentiles(times), "qps": round(len(times) / (time.perf_counter() - start), 1)}


def through_grpc(address, contexts, concurrency, seconds, warmup):
    from nextpara.client import Client

    times: list[float] = []
    lock = threading.Lock()
    started = threading.Barrier(concurrency + 1)
    window = {}

    def worker(k):
        local = []
        with Client(address, timeout=60) as c:
            c.predict_next(warmup, top_k=10)
            started.wait()
            i = k
            while time.perf_counter() < window["stop"]:
                t0 = time.perf_counter()
                c.predict_next(contexts[i % len(contexts)], top_k=10)
                local.append((time.perf_counter() - t0) * 1000)
                i += concurrency
        with lock:
            times.extend(local)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    window["stop"] = time.perf_counter() + seconds + 1e9  # set for real once every worker is warm
    started.wait()
    start = time.perf_counter()
    window["stop"] = start + seconds
    for t in threads:
        t.join()
    return {**percentiles(times), "qps": round(len(times) / (time.perf_counter() - start), 1)}


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--output", default="grpc_latency", help="results name under bench/results/")
    args = parser.parse_args()
    from nextpara.server.process import ServerProcess

    ids, texts = contexts_from(args.data_dir, 2000)
    slices = iter(range(0, 2000, 200))  # a fresh 200 contexts per measurement

    def fresh(pool):
        s = next(slices)
        return pool[s:s + 200]

    results = {"in_process": {"ids": in_process(args.data_dir, fresh(ids), args.seconds, texts[-1]),
                              "texts": in_process(args.data_dir, fresh(texts), args.seconds, texts[-1])}, "grpc": {}}
    with ServerProcess.local(args.data_dir, "--read-only", metrics=False) as server:
        for kind, contexts in (("ids", ids), ("texts", texts)):
            results["grpc"][kind] = {str(c): through_grpc(server.address, fresh(contexts), c, args.seconds, texts[-1])
                                     for c in (1, 8, 16, 32)}
    record = {**stamp(__file__), "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
              "results": results}
    lines = [f"# PredictNext latency ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"Machine: {record['machine']}; server and clients share it.", "",
             "| path | context | concurrency | p50 ms | p99 ms | QPS |", "| --- | --- | --- | --- | --- | --- |"]
    for kind in ("ids", "texts"):
        r = results["in_process"][kind]
        lines.append(f"| in-process | {kind} | 1 | {r['p50_ms']} | {r['p99_ms']} | {r['qps']} |")
        for c, r in results["grpc"][kind].items():
            lines.append(f"| gRPC | {kind} | {c} | {r['p50_ms']} | {r['p99_ms']} | {r['qps']} |")
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
