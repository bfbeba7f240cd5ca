"""Embedding throughput against the embedder's batch size, for calls of the sizes the service makes.

    python -m bench.speed.embed_batch [--corpus PATH] [--paragraphs 1200]

sentence-transformers sorts a call's texts by length and cuts them into batches of ``batch_size``; every
text of a batch is padded to the longest, and attention costs the square of that length. So the batch size
trades padding against matrix size. The bundled MiniLM embeds a seeded sample of PEPs paragraphs: in calls of
4 (one PredictNext with four new texts), 64 (a coalesced batch of 16 such calls) and one call of all the
rest (a build), at batch sizes 4 to 64, each after a warm-up. Paragraphs/s per cell, and the largest
difference of any vector from the batch-32 vectors (padding must not change what a text embeds to).
Prints a table, writes bench/results/embed_batch.{json,md}.
"""

from __future__ import annotations

import os
import time

import numpy as np

from bench.record import argument_parser, save, stamp
from bench.speed.embed_speed import DEFAULT_CORPUS, sample_paragraphs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
BATCH_SIZES = (4, 8, 16, 32, 64)


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--paragraphs", type=int, default=1200)
    parser.add_argument("--output", default="embed_batch", help="name under bench/results/")
    args = parser.parse_args()
    import torch
    from nextpara.store.embedders import make_embedder

    texts = sample_paragraphs(args.corpus, args.paragraphs + 32, seed=1)
    warm, texts = texts[:32], texts[32:]
    embedder = make_embedder("minilm")
    embedder.embed(warm)
    calls = {"4": [texts[j:j + 4] for j in range(0, 128, 4)], "64": [texts[j:j + 64] for j in range(128, 384, 64)],
             "all": [texts[384:]]}
    rows, vectors = {}, {}
    for bs in BATCH_SIZES:
        embedder.batch_size = bs
        rows[bs] = {}
        for name, pieces in calls.items():
            t0 = time.perf_counter()
            out = [embedder.embed(p) for p in pieces]
            rows[bs][name] = round(sum(len(p) for p in pieces) / (time.perf_counter() - t0), 1)
            if name == "all":
                vectors[bs] = out[0]
        print(bs, rows[bs], flush=True)
    drift = {bs: float(np.abs(vectors[bs] - vectors[32]).max()) for bs in BATCH_SIZES}
    record = {**stamp(__file__), "torch_threads": torch.get_num_threads(), "paragraphs": len(texts),
              "paragraphs_per_second": rows, "max_abs_difference_from_batch_32": drift}
    lines = [f"# Embedding throughput by batch size ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"{record['machine']}, torch threads {record['torch_threads']}; bundled MiniLM; {len(texts)} PEPs "
             "paragraphs (seeded sample). Paragraphs/s for calls of 4 texts (32 calls), of 64 (4 calls), and one "
             f"call of {len(calls['all'][0])}.", "",
             "| batch size | calls of 4 | calls of 64 | one call | largest vector difference from batch 32 |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {bs} | {r['4']} | {r['64']} | {r['all']} | {drift[bs]:.1e} |" for bs, r in rows.items()]
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
