"""PredictNext latency through gRPC against the in-process Predictor on the same store.

    python -m bench.speed.grpc_latency --data-dir /tmp/peps-bench [--seconds 10] [--output NAME]

Starts `nextpara serve --read-only` as a separate process on 127.0.0.1 (NEXTPARA_* settings in the
environment apply to it, e.g. NEXTPARA_WORKERS and NEXTPARA_THREADS, and so do OpenMP's, e.g. OMP_WAIT_POLICY; the
record lists both), then measures three workloads of
4-paragraph contexts from test documents: ``ids`` (stored paragraph ids), ``texts`` (four texts no earlier
call sent: every call embeds four) and ``growing`` (a writing tool's calls: a document's last four paragraphs as
text, advancing by one paragraph per call, so each call repeats three texts of the previous one and embeds
one; a document is cut into stretches of 16 calls, each stretch sent by one client, the first call of a
stretch embedding four; the text workload ran first on the same server, and its cache of 4,096 texts may hold a
few of these documents' paragraphs). For each: the in-process Predictor.predict_next one call at a
time, and PredictNext through gRPC at concurrency 1, 8, 16 and 32 (one client per thread). Measurements use
contexts no earlier one used; warm-up calls (which load the embedding model) are outside both the latencies and the
QPS window, and so is the word rows' warm-up a server does once it has loaded (the script waits for its log line;
in-process, it runs it first). In the same run, two references: what MiniLM alone embeds on this machine
(paragraphs/s, the store's embedder over the text workload's paragraphs, 128 per call: the ceiling of the ``texts``
workload, which needs four per call), and sentence-transformers' ``util.semantic_search`` of one stored vector over the
store (B1, no model), p50. For each gRPC measurement, the cores the server process and the clients used over its
window (CPU seconds per second, from /proc), to tell whether the load
generator, which shares the machine, takes cores from the server.
Prints a table, writes bench/results/grpc_latency.{json,md} (or NAME.{json,md}).
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench.record import argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def contexts_from(data_dir: str, n: int):
    """(``n`` id contexts, text contexts, growing-document streams: runs of up to 16 successive text contexts of a
    document), from every document: no context is sent twice in a run (a repeat would hit the caches)."""
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    with open_store(data_dir, readonly=True) as store:
        seq = ParagraphSequences(store)
        queries = [q for split in ("train", "validation", "test")
                   for q in seq.queries(split, 4, min_context=4, limit=n, seed=3)]  # speed: any split will do
        queries = [queries[i] for i in np.random.default_rng(3).permutation(len(queries))[:n]]
        ids = [[int(seq.ids[r]) for r in q.context] for q in queries]
        texts, growing = [], []
        for rows in seq.doc_rows.values():
            if len(rows) >= 8:
                doc_texts = [p.text for p in store.get_paragraphs([int(seq.ids[r]) for r in rows])]
                texts += [doc_texts[j - 4:j] for j in range(4, len(doc_texts) + 1, 4)]  # no paragraph in two of them
                windows = [doc_texts[j - 4:j] for j in range(4, len(doc_texts) + 1)]
                growing += [windows[s:s + 16] for s in range(0, len(windows), 16)]  # a stretch of writing each
        texts = [texts[i] for i in np.random.default_rng(3).permutation(len(texts))]
    return ids, texts, growing


def percentiles(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "calls": len(ms)}


def in_process(data_dir, streams, seconds, warmup):
    """One call at a time, through the streams of contexts one after another."""
    from nextpara.attention_core.predictor import Predictor

    predictor = Predictor.open(data_dir)
    predictor.pipeline.warm_word_rows()  # what the server does in the background once it has loaded
    predictor.predict_next(warmup, top_k=10)  # loads the embedding model
    contexts = [c for stream in streams for c in stream]
    times, start, i = [], time.perf_counter(), 0
    while time.perf_counter() - start < seconds and i < len(contexts):
        t0 = time.perf_counter()
        predictor.predict_next(contexts[i], top_k=10)
        times.append((time.perf_counter() - t0) * 1000)
        i += 1
    predictor.close()
    return {**percentiles(times), "qps": round(len(times) / (time.perf_counter() - start), 1)}


def cpu_seconds(pid: int | str = "self") -> float | None:
    """User + system CPU seconds a process has used, all its threads: this one (the clients) or ``pid`` (the server),
    from /proc/PID/stat; None where there is no such file (not Linux, or the process has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cores(before: float | None, after: float | None, seconds: float) -> float | None:
    """CPU seconds per second between two cpu_seconds() readings; None if either is missing."""
    return None if before is None or after is None else round((after - before) / seconds, 2)


def through_grpc(address, streams, concurrency, seconds, warmup, server_pid=None):
    """``concurrency`` clients, client k calling with streams k, k + concurrency, ... in turn, each in order. Also the
    cores the server process (``server_pid``) and this one (the clients) used over the window."""
    from nextpara.client import Client

    times: list[float] = []
    ran_out: list[bool] = []  # a client that sent all its contexts before the window closed stops (no repeats)
    lock = threading.Lock()
    started = threading.Barrier(concurrency + 1)
    window = {}

    def worker(k):
        local = []
        mine = [c for stream in streams[k::concurrency] for c in stream]
        with Client(address, timeout=60) as c:
            c.predict_next(warmup, top_k=10)
            started.wait()
            i = 0
            while time.perf_counter() < window["stop"] and i < len(mine):
                t0 = time.perf_counter()
                c.predict_next(mine[i], top_k=10)
                local.append((time.perf_counter() - t0) * 1000)
                i += 1
        with lock:
            times.extend(local)
            ran_out.append(i == len(mine))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    window["stop"] = time.perf_counter() + seconds + 1e9  # set for real once every worker is warm
    started.wait()
    server_cpu, client_cpu = cpu_seconds(server_pid) if server_pid else None, cpu_seconds()
    start = time.perf_counter()
    window["stop"] = start + seconds
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    used = {"server_cores": cores(server_cpu, cpu_seconds(server_pid) if server_pid else None, took),
            "client_cores": cores(client_cpu, cpu_seconds(), took)}
    if any(ran_out):
        print(f"warning: {sum(ran_out)} of {concurrency} clients ran out of contexts before the window closed: use "
              "fewer --seconds", flush=True)
    return {**percentiles(times), "qps": round(len(times) / took, 1), "clients_out_of_contexts": sum(ran_out), **used}


def references(data_dir, texts, seconds):
    """(MiniLM paragraphs/s, util.semantic_search p50 ms of one stored vector over the store). MiniLM embeds the text
    workload's paragraphs 128 per call (what a coalesced batch of 32 four-paragraph calls hands it)."""
    import torch
    from nextpara.store.store import open_store
    from sentence_transformers import util

    with open_store(data_dir, readonly=True) as store:
        embedder = store.query_embedder()
        paragraphs = list(dict.fromkeys(t for c in texts for t in c))
        embedder.embed(paragraphs[:32])  # loads the model
        done, start, i = 0, time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            call = paragraphs[i % len(paragraphs):i % len(paragraphs) + 128]
            embedder.embed(call)
            done, i = done + len(call), i + 128
        ceiling = done / (time.perf_counter() - start)
        ids = store.paragraph_table()[0]
        corpus = torch.from_numpy(store.vectors(ids))
        times = []
        for v in corpus[:: max(1, len(ids) // 200)][:200]:
            t0 = time.perf_counter()
            util.semantic_search(v[None], corpus, top_k=10)
            times.append((time.perf_counter() - t0) * 1000)
    return round(ceiling, 1), round(float(np.median(times)), 2)


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--output", default="grpc_latency", help="results name under bench/results/")
    args = parser.parse_args()
    from nextpara.server.process import ServerProcess
    from nextpara.server.warm_up import WORD_ROWS_READY

    ids, texts, growing = contexts_from(args.data_dir, 20000)
    per = {"ids": len(ids) // 5, "texts": len(texts) // 5}  # a fresh fifth of the contexts per measurement
    slices = {kind: iter(range(0, n * 5, n)) for kind, n in per.items()}

    def fresh(kind):
        s = next(slices[kind])
        return [[c] for c in (ids if kind == "ids" else texts)[s:s + per[kind]]]  # streams of one context each

    growing_streams = iter(range(0, len(growing), max(1, len(growing) // 5)))

    def fresh_documents():
        s = next(growing_streams)
        return growing[s:s + max(1, len(growing) // 5)]

    kinds = {"ids": ("ids", fresh), "texts": ("texts", fresh), "growing": (None, lambda _: fresh_documents())}
    results = {"in_process": {kind: in_process(args.data_dir, pick(pool), args.seconds, texts[-1])
                              for kind, (pool, pick) in kinds.items()}, "grpc": {}}
    with ServerProcess.local(args.data_dir, "--read-only", metrics=False) as server:
        if not server.wait_for(WORD_ROWS_READY, 120):  # as a server up a few seconds: every word row kept
            raise SystemExit(f"the server did not log {WORD_ROWS_READY!r} within 120 s; its log ends:\n{server.tail()}")
        for kind, (pool, pick) in kinds.items():
            results["grpc"][kind] = {str(c): through_grpc(server.address, pick(pool), c, args.seconds, texts[-1],
                                                          server.pid) for c in (1, 8, 16, 32)}
    ceiling, reference = references(args.data_dir, texts, args.seconds)
    record = {**stamp(__file__), "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
              "settings": {k: v for k, v in os.environ.items() if k.startswith(("NEXTPARA_", "OMP_"))},
              "results": results, "minilm_paragraphs_per_second": ceiling, "semantic_search_p50_ms": reference}
    lines = [f"# PredictNext latency ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"Machine: {record['machine']}; server and clients share it. Settings from the environment (the server's, and "
             f"OMP_* the in-process runs' too): "
             f"{record['settings'] or 'none (the defaults)'}.", "",
             f"References in the same run: MiniLM alone embeds {ceiling} paragraphs/s (the `texts` workload embeds 4 "
             f"per call: {ceiling / 4:.1f} calls/s at most); `util.semantic_search` of one vector over the store: "
             f"p50 {reference} ms.", "",
             "Cores: CPU seconds per second of the window, of the server process and of the clients (this "
             "process's threads), from /proc; torch's threads spin between operations, so a server's figure counts "
             "their waiting too.", "",
             "| path | context | concurrency | p50 ms | p99 ms | QPS | p50 / semantic_search | cores: server / clients |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind in kinds:
        r = results["in_process"][kind]
        lines.append(f"| in-process | {kind} | 1 | {r['p50_ms']} | {r['p99_ms']} | {r['qps']} | "
                     f"{r['p50_ms'] / reference:.1f}x | |")
        for c, r in results["grpc"][kind].items():
            lines.append(f"| gRPC | {kind} | {c} | {r['p50_ms']} | {r['p99_ms']} | {r['qps']} | "
                         f"{r['p50_ms'] / reference:.1f}x | {r['server_cores'] if r['server_cores'] is not None else 'n/a'} / "
                         f"{r['client_cores'] if r['client_cores'] is not None else 'n/a'} |")
    short = [f"{kind} at {c}" for kind, levels in results["grpc"].items() for c, r in levels.items()
             if r["clients_out_of_contexts"]]
    if short:
        lines += ["", f"Clients ran out of fresh contexts before the window closed in: {', '.join(short)} (their QPS is "
                      "a floor)."]
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
