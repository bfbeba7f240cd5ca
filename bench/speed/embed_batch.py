"""Embedding throughput against the embedder's batch size and precision, for calls of the sizes the service makes.

    python -m bench.speed.embed_batch [--corpus PATH] [--paragraphs 1200]

sentence-transformers sorts a call's texts by length and cuts them into batches of ``batch_size``; every
text of a batch is padded to the longest, and attention costs the square of that length. So the batch size
trades padding against matrix size. The bundled MiniLM embeds a seeded sample of PEPs paragraphs: in calls of
4 (one PredictNext with four new texts), 64 (a coalesced batch of 16 such calls) and one call of all the
rest (a build), at batch sizes 4 to 64, each after a warm-up, in float32 and under bfloat16 autocast (the
embedder's opt-in NEXTPARA_BF16=1, store/embedders.py). Paragraphs/s per cell, the largest
difference of any vector from the float32 batch-32 vectors (padding must not change what a text embeds to), and
for bfloat16 the smallest cosine to them. Prints a table, writes bench/results/embed_batch.{json,md}.
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
    from nextpara.store.embedders import cpu_has_bf16, make_embedder

    texts = sample_paragraphs(args.corpus, args.paragraphs + 32, seed=1)
    warm, texts = texts[:32], texts[32:]
    embedder = make_embedder("minilm")
    embedder.embed(warm)
    calls = {"4": [texts[j:j + 4] for j in range(0, 128, 4)], "64": [texts[j:j + 64] for j in range(128, 384, 64)],
             "all": [texts[384:]]}
    rows, vectors = {}, {}
    for precision in ("float32", "bfloat16"):
        embedder.bf16 = precision == "bfloat16"
        embedder.embed(warm)
        for bs in BATCH_SIZES:
            embedder.batch_size = bs
            key = f"{precision} {bs}"
            rows[key] = {}
            for name, pieces in calls.items():
                t0 = time.perf_counter()
                out = [embedder.embed(p) for p in pieces]
                rows[key][name] = round(sum(len(p) for p in pieces) / (time.perf_counter() - t0), 1)
                if name == "all":
                    vectors[key] = out[0]
            print(key, rows[key], flush=True)
    ref = vectors["float32 32"]
    drift = {key: float(np.abs(v - ref).max()) for key, v in vectors.items()}
    cos = {key: float((v * ref).sum(1).min()) for key, v in vectors.items()}
    record = {**stamp(__file__), "torch_threads": torch.get_num_threads(), "paragraphs": len(texts),
              "cpu_has_bf16": cpu_has_bf16(), "paragraphs_per_second": rows,
              "max_abs_difference_from_float32_batch_32": drift, "min_cosine_to_float32_batch_32": cos}
    lines = [f"# Embedding throughput by batch size and precision ({record['date']})", "",
             f"Command: `{record['command']}`", "",
             f"{record['machine']}, torch threads {record['torch_threads']}, CPU with bfloat16 instructions: "
             f"{record['cpu_has_bf16']}; bundled MiniLM; {len(texts)} PEPs paragraphs (seeded sample). Paragraphs/s "
             f"for calls of 4 texts (32 calls), of 64 (4 calls), and one call of {len(calls['all'][0])}.", "",
             "| precision, batch size | calls of 4 | calls of 64 | one call | largest vector difference from float32 "
             "batch 32 | smallest cosine to it |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {key} | {r['4']} | {r['64']} | {r['all']} | {drift[key]:.1e} | {cos[key]:.6f} |"
              for key, r in rows.items()]
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
