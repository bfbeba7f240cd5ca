"""What padding an exact scan's query rows saves (store/vector_table.py: scan_rows).

    python -m bench.speed.scan_rows --data-dir DIR [--queries 300] [--output scan_rows]

torch's CPU matrix product of the stored vectors by a few query columns takes its time by their number, not in
proportion to it. On a built store whose index is flat (scanned exactly, as every store below the size that
chooses another index is), in one run, each measurement alternating call by call between the scan as it is
(``PAD_SCAN_ROWS`` on: the query rows padded with zero rows to scan_rows' number) and without the padding:

- the product alone (the stored vectors by n query columns, n = 1 to 64), median ms, so the rule can be read
  against the kernel's own steps;
- ``store.search`` of n stored vectors, 150 deep, each row excluding 5 ids (as stage 1 excludes a context), median ms;
- ``predict_next`` by four stored ids and ``predict_next_batch`` of sixteen such contexts, p50 and p95;
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
PRODUCT_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 24, 26, 28, 31, 32, 42, 45, 47, 48, 64)
SEARCH_ROWS = (1, 2, 3, 4, 6, 9, 12, 15, 16, 24, 45, 48)


def alternating(fn, args: list, reps: int) -> dict[str, list[float]]:
    """ms per call of ``fn(arg)`` with the padding and without it, alternating call by call over ``args`` (cycled)."""
    from nextpara.store import vector_table

    times: dict[str, list[float]] = {"padded": [], "not padded": []}
    try:
        for r in range(reps):
            for name in times:
                vector_table.PAD_SCAN_ROWS = name == "padded"
                t0 = time.perf_counter()
                fn(args[r % len(args)])
                times[name].append(1000 * (time.perf_counter() - t0))
    finally:
        vector_table.PAD_SCAN_ROWS = True
    return times


def main() -> int:
    parser = record.argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store with a flat (exact) index")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--output", default="scan_rows")
    args = parser.parse_args()

    import torch
    from nextpara.store.vector_table import scan_rows

    n = args.queries
    predictor, ids, windows = warm_predictor(args.data_dir, n)
    store = predictor.store
    table = store.vector_table
    if not table.index.is_flat:
        raise SystemExit(f"{args.data_dir}: its index ({table.index.choice.factory}) is not scanned exactly")
    rng = np.random.default_rng(0)
    stored = table.vectors
    vectors = torch.from_numpy(stored)

    def product(rows: int):
        def run(at: int) -> None:
            q = np.zeros((scan_rows(rows), stored.shape[1]), np.float32)
            q[:rows] = stored[at:at + rows]
            vectors @ torch.from_numpy(q).T
        return run

    def search(rows: int):
        def run(at: int) -> None:
            store.search(stored[at:at + rows], 150, [set(int(i) for i in ids[at + 100:at + 105])] * rows)
        return run

    offsets = [int(x) for x in rng.integers(0, len(ids) - 200, size=50)]
    products = {rows: alternating(product(rows), offsets, 60) for rows in PRODUCT_ROWS}
    searches = {rows: alternating(search(rows), offsets, 60) for rows in SEARCH_ROWS}
    for w in windows[:n]:  # warm-up
        predictor.predict_next(w)
    calls = {"predict_next by 4 ids": alternating(predictor.predict_next, windows[n:], n),
             "predict_next_batch of 16": alternating(
                 predictor.predict_next_batch, [windows[j:j + 16] for j in range(0, 2 * n - 16, 16)], max(20, n // 8))}
    reference = semantic_search_p50_ms(store, ids, store.vectors([w[-1] for w in windows[:n]]))
    model = predictor.model_version
    predictor.close()

    def med(t: dict[str, list[float]]) -> dict[str, float]:
        return {name: float(np.median(v)) for name, v in t.items()}

    stamp = record.stamp(__file__)
    lines = [f"# What padding an exact scan's query rows saves ({stamp['date']})", "", f"Command: `{stamp['command']}`",
             "", f"Store: {len(ids)} paragraphs x {stored.shape[1]} dims, flat index, model {model}; {stamp['machine']}. "
             f"Reference: sentence-transformers' `util.semantic_search` of one vector over the store (B1, no model), "
             f"p50 {reference:.2f} ms. Each pair alternates call by call.", "",
             "| query rows | scanned as | product, padded ms | not padded ms | search 150 deep, padded ms | not padded ms |",
             "| --- | --- | --- | --- | --- | --- |"]
    for rows in PRODUCT_ROWS:
        p = med(products[rows])
        s = med(searches[rows]) if rows in searches else None
        lines.append(f"| {rows} | {scan_rows(rows)} | {p['padded']:.2f} | {p['not padded']:.2f} | "
                     + (f"{s['padded']:.2f} | {s['not padded']:.2f} |" if s else "- | - |"))
    lines += ["", "| call | padded p50 ms | not padded p50 ms | padded p95 | not padded p95 | padded p50 / reference |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, t in calls.items():
        p50, p95 = med(t), {k: float(np.percentile(v, 95)) for k, v in t.items()}
        lines.append(f"| {name} | {p50['padded']:.2f} | {p50['not padded']:.2f} | {p95['padded']:.2f} | "
                     f"{p95['not padded']:.2f} | {p50['padded'] / reference:.2f}x |")
    record.save(args.output, {**stamp, "paragraphs": len(ids), "model": model,
                              "product_ms": {str(r): med(t) for r, t in products.items()},
                              "search_ms": {str(r): med(t) for r, t in searches.items()},
                              "calls_p50_ms": {k: med(t) for k, t in calls.items()},
                              "calls_p95_ms": {k: {n: float(np.percentile(v, 95)) for n, v in t.items()}
                                               for k, t in calls.items()},
                              "reference_semantic_search_p50_ms": reference}, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
