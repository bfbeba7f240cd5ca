"""Vector index at scale: every index type the store offers, on 100K and 1M vectors of 384 and 1536 dims.

    python -m bench.speed.index_scale                      # the full matrix, about 13 minutes on 2 cores
    python -m bench.speed.index_scale --sizes 100000 --dims 384

The vectors are synthetic but shaped like real sentence embeddings. Real ones (the bundled
MiniLM on PEPs) share a mean direction (norm 0.36), spread anisotropically (covariance
eigenvalues falling roughly as i^-1), and gather in documents and topics. So each vector is
``mean + z`` normalised, where ``z`` is a sum of Gaussian draws in that anisotropic space
(random orientation, total variance 0.87 as on PEPs, eigenvalues falling as i^-0.9: PEPs' fall
about as i^-1.1 over the first 300, and 0.9 matched its neighbour cosines better): one shared
by the point's topic (~2,000 points), subtopic (~100), "document" (~10) and pair (2), and one
of its own. At 43,588 points this gives the cosine to the 1st / 2nd / 10th / 50th / 100th /
1,000th neighbour as 0.72 / 0.66 / 0.57 / 0.52 / 0.49 / 0.40 against PEPs' 0.74 / 0.69 / 0.61 /
0.52 / 0.49 / 0.36, and is a little harder for HNSW than PEPs and a little easier for IVF (see
``--real-data-dir``). Queries are further points of the same distribution, not in the index. Seeded.

With ``--real-data-dir DIR`` (a built PEPs store) the same index types are also measured on
its real vectors, 300 of them held out as queries, as a check on the synthetic data.

Each index is built by the store's own code (``VectorIndex.build`` on ``choose_index``) and
searched with ``VectorIndex.search`` for the top 100, as stage 1 does. Measured: build time,
resident memory the index adds, p50/p99 latency of single queries and of batches of 64, and
recall@100 against exact search. Then a sweep of the search-time knob (HNSW efSearch, IVF
nprobe) on the built index. Prints tables, writes bench/results/index_scale.{json,md}.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import numpy as np

from bench.record import argument_parser, rss_bytes, save, stamp

# (share of the variance, points per group) of the nested groups; the rest is each point's own
LEVELS = ((0.20, 2000), (0.12, 100), (0.18, 10), (0.17, 2))
MEAN_NORM, SPECTRUM_SLOPE, TOTAL_VARIANCE = 0.36, 0.9, 0.87
K = 100
SWEEP = {"hnsw": ("efSearch", (128, 256, 512)), "ivf": ("nprobe", (8, 16, 32, 64, 128))}


def clustered(n: int, d: int, seed: int = 0, chunk: int = 65_536) -> np.ndarray:
    """``n`` unit vectors shaped like sentence embeddings (see the module docstring), chunk by chunk."""
    rng = np.random.default_rng(seed)
    scale = np.arange(1, d + 1, dtype=np.float64) ** -SPECTRUM_SLOPE
    scale = np.sqrt(scale * TOTAL_VARIANCE / scale.sum()).astype(np.float32)
    rotation = np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32)
    mean = rng.standard_normal(d).astype(np.float32)
    mean *= MEAN_NORM / np.linalg.norm(mean)
    leaf = rng.permutation(n)
    shared = [rng.standard_normal((-(-n // size), d), dtype=np.float32) for _, size in LEVELS]
    own_w = np.float32(np.sqrt(1 - sum(w for w, _ in LEVELS)))
    out = np.empty((n, d), np.float32)
    for s in range(0, n, chunk):
        pos = leaf[s:s + chunk]
        z = own_w * rng.standard_normal((len(pos), d), dtype=np.float32)
        for (w, size), g in zip(LEVELS, shared):
            z += np.float32(np.sqrt(w)) * g[pos // size]
        x = mean + (z * scale) @ rotation.T
        out[s:s + len(pos)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def timed(fn, max_calls: int, max_seconds: float) -> tuple[list[float], list]:
    ms, out, start = [], [], time.perf_counter()
    for i in range(max_calls):
        t0 = time.perf_counter()
        out.append(fn(i))
        ms.append((time.perf_counter() - t0) * 1000)
        if time.perf_counter() - start > max_seconds:
            break
    return ms, out


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(f[f >= 0], t)) / len(t) for f, t in zip(found, truth)]))


def pct(ms: list[float], p: float) -> float:
    return round(float(np.percentile(ms, p)), 3)


def measure(index, queries: np.ndarray, truth: np.ndarray, args) -> dict:
    single_ms, single = timed(lambda i: index.search(queries[i:i + 1], K)[1][0], len(queries), args.seconds)
    batches = [queries[s:s + 64] for s in range(0, len(queries) - 63, 64)] or [queries]
    batch_ms, _ = timed(lambda i: index.search(batches[i % len(batches)], K), 3 * len(batches), args.seconds)
    return {"single_p50_ms": pct(single_ms, 50), "single_p99_ms": pct(single_ms, 99), "single_calls": len(single_ms),
            "batch64_p50_ms": pct(batch_ms, 50), "batch64_p99_ms": pct(batch_ms, 99), "batch64_calls": len(batch_ms),
            "recall_at_100": round(recall(np.array(single), truth[:len(single)]), 4)}


def synthetic_cell(n: int, d: int, kinds: list[str], args) -> dict:
    t0 = time.perf_counter()
    data = clustered(n + args.queries, d, seed=args.seed)
    print(f"\n{n:,} x {d}: generated in {time.perf_counter() - t0:.0f} s", flush=True)
    return measure_cell("synthetic", data[:n], np.ascontiguousarray(data[n:]), kinds, args)


def real_cell(data_dir: str, kinds: list[str], args) -> dict:
    from nextpara.store.store import open_store

    with open_store(data_dir, readonly=True) as store:
        vectors = store.vectors(store.paragraph_table()[0])
    held = np.zeros(len(vectors), bool)
    held[np.random.default_rng(args.seed).choice(len(vectors), 300, replace=False)] = True
    print(f"\nreal vectors of {data_dir}: {len(vectors):,} x {vectors.shape[1]}", flush=True)
    return measure_cell(f"real: {Path(data_dir).name}", vectors[~held], vectors[held], kinds, args)


def measure_cell(label: str, vectors: np.ndarray, queries: np.ndarray, kinds: list[str], args) -> dict:
    import faiss
    from nextpara.store.vector_index import VectorIndex, choose_index

    n, d = vectors.shape
    ids = np.arange(n, dtype=np.int64)
    exact = faiss.IndexFlatIP(d)
    exact.add(vectors)
    scores, truth = exact.search(queries, K)
    del exact
    cell = {"data": label, "n": n, "dim": d, "indexes": {},
            "neighbour_cosines": {f"rank_{r}": round(float(scores[:, r - 1].mean()), 3) for r in (1, 2, 10, 50, 100)}}
    print(f"  neighbour cosines of the queries: {cell['neighbour_cosines']}", flush=True)
    for kind in kinds:
        gc.collect()
        before = rss_bytes()
        t0 = time.perf_counter()
        index = VectorIndex.build(choose_index(kind, n), d, ids, vectors)
        build_s = time.perf_counter() - t0
        row = {"factory": index.choice.factory, "params": dict(index.choice.params), "build_seconds": round(build_s, 1),
               "memory_bytes": rss_bytes() - before, **measure(index, queries, truth, args)}
        print(f"  {kind:5s} {row}", flush=True)
        if kind in SWEEP:
            knob, values = SWEEP[kind]
            default, row["sweep"] = index.choice.params[knob], []
            for v in values:
                index.choice.params[knob] = v
                ms, found = timed(lambda i, index=index: index.search(queries[i:i + 1], K)[1][0], len(queries), args.seconds / 2)
                row["sweep"].append({knob: v, "single_p50_ms": pct(ms, 50), "recall_at_100": round(recall(np.array(found), truth[:len(found)]), 4)})
                print(f"        {knob}={v}: {row['sweep'][-1]}", flush=True)
            index.choice.params[knob] = default
        cell["indexes"][kind] = row
        index = None  # free it before the next one is built
    return cell


def markdown(record: dict) -> str:
    lines = [f"# Vector index at scale\n\n`{record['command']}` on {record['date']}, {record['machine']}, "
             f"{record['seconds']:.0f} s in all. Clustered synthetic unit vectors (bench/speed/index_scale.py says how they are "
             f"made), {record['queries']} held-out queries, top {K}; recall@100 against exact search; memory = resident "
             "memory the index added.\n",
             "| data | N | dim | index | factory | build s | memory MB | single p50 ms | single p99 ms | batch-64 p50 ms | "
             "batch-64 p99 ms | recall@100 |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cell in record["cells"]:
        for kind, r in cell["indexes"].items():
            lines.append(f"| {cell['data']} | {cell['n']:,} | {cell['dim']} | {kind} | `{r['factory']}` {r['params'] or ''} | {r['build_seconds']} | "
                         f"{r['memory_bytes'] / 2**20:,.0f} | {r['single_p50_ms']} | {r['single_p99_ms']} | "
                         f"{r['batch64_p50_ms']} | {r['batch64_p99_ms']} | {r['recall_at_100']} |")
    lines += ["", "Search-time knob on the same indexes (single queries):", "",
              "| data | N | dim | index | setting | p50 ms | recall@100 |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for cell in record["cells"]:
        for kind, r in cell["indexes"].items():
            for s in r.get("sweep", []):
                knob = next(k for k in s if k not in ("single_p50_ms", "recall_at_100"))
                lines.append(f"| {cell['data']} | {cell['n']:,} | {cell['dim']} | {kind} | {knob} {s[knob]} | {s['single_p50_ms']} | {s['recall_at_100']} |")
    lines += ["", "Mean cosine of the queries to their k-th nearest neighbour:", ""]
    lines += [f"- {c['data']} {c['n']:,} x {c['dim']}: {c['neighbour_cosines']}" for c in record["cells"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated corpus sizes")
    parser.add_argument("--dims", default="384,1536", help="comma-separated dimensions")
    parser.add_argument("--kinds", default="flat,hnsw,ivf", help="index types (as `nextpara build --index` takes)")
    parser.add_argument("--queries", type=int, default=200, help="held-out queries per cell")
    parser.add_argument("--seconds", type=float, default=15.0, help="time cap for each latency loop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real-data-dir", default=None, help="also measure on the real vectors of this store")
    parser.add_argument("--output", default="index_scale", help="name under bench/results/")
    args = parser.parse_args()
    import faiss

    start = time.perf_counter()
    kinds = args.kinds.split(",")
    cells = [real_cell(args.real_data_dir, kinds, args)] if args.real_data_dir else []
    cells += [synthetic_cell(int(n), int(d), kinds, args) for n in args.sizes.split(",") for d in args.dims.split(",")]
    record = {**stamp(__file__),
              "machine": f"{os.cpu_count()} cores, FAISS {faiss.__version__} with {faiss.omp_get_max_threads()} threads",
              "queries": args.queries, "seconds": time.perf_counter() - start, "cells": cells}
    save(args.output, record, markdown(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
