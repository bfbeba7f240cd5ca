"""Batch reranking throughput: batched scoring across rows against one query at a time.

    python -m bench.speed.batch_speed --data-dir /tmp/peps-bench [--rows 2048]

Rows are PEPs test-split queries: L = 8 context paragraphs and the first 100 stage-1 candidates
the pipeline itself retrieves for them, given as vectors (lists of floats, as a JSON row
carries them) unless a measurement says stored ids. Measured on the same trained Predictor:

* ``loop``: ``Predictor.rerank(context, candidates)`` one row at a time;
* ``batched``: ``score_rows`` (the in-process and Ray engines' scoring) over chunks of 512 rows;
* ``batched, arrays``: the same with each row's vectors given as float32 arrays instead of lists;
* ``batched, ids``: the same with each row's items given as stored paragraph ids (vectors from memory, word rows from
  the lexicon's cache by id after the warm-up);
* ``model``: the model's forward pass alone on ready tensors, batch 256 (the ceiling);
* ``job, ids``: ``nextpara rerank-batch`` end to end in-process on a JSON Lines file whose rows
  give the context and candidates as stored ids (reading, parsing, writing included), the rows
  ``--job-repeat`` times over, 4 by default: a job reads and tokenises each stored paragraph it meets once, and a long
  job over a store meets each many times, so this times one cold pass over the rows and three with every word row
  cached (earlier records, before the option, timed one cold pass);
* ``job, vectors``: the same with every item a 384-float vector in the JSON;
* ``job, Parquet``: the same rows as a Parquet file whose context and candidates columns are lists of float32
  vectors (Arrow hands them to NumPy, no Python floats), written with pyarrow's defaults (snappy, dictionary);
* ``job, vectors32``: the JSON vectors rows with each number as float32's shortest text (what orjson writes for a
  float32 array, and about as long as the numbers an embeddings API sends), half the bytes of Python's float64 text;
* ``read, ...``: each job's input read and checked alone, as the job reads it, without scoring: the floor that
  parsing sets under each job's rate;
* ``reference``: sentence-transformers' ``util.semantic_search`` of each row's last context vector over its
  100 candidate vectors (B1: cosine, no model), row after row: the simplest thing a
  user could do instead, measured in the same run, so each figure also has a ratio to it.

A job's rate is the one it reports (its own reading, scoring and writing; the process start and the model load
are outside it).

Prints a table, writes bench/results/batch_speed.{json,md}.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.record import argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def make_rows(predictor, n: int, L: int = 8, K: int = 100):
    """(context ids, candidate ids) for n test queries with exactly L context paragraphs and K candidates."""
    from nextpara.attention_core.sequences import ParagraphSequences

    seq = ParagraphSequences(predictor.store)
    queries = seq.queries("test", L, min_context=L, limit=n, seed=5)
    contexts = [seq.vectors[q.context] for q in queries]
    exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in queries]
    read = predictor.pipeline.stored_texts(sorted({int(seq.ids[r]) for q in queries for r in q.context}))  # one read
    texts = [[read[int(seq.ids[r])] for r in q.context] for q in queries]
    cand_ids, _ = predictor.pipeline.candidates(contexts, exclude, K, context_texts=texts)  # stage 1 as served
    keep = [i for i, c in enumerate(cand_ids) if len(c) >= K]
    ctx_ids = [[int(seq.ids[r]) for r in queries[i].context] for i in keep]
    return ctx_ids, [cand_ids[i][:K].tolist() for i in keep]


def rate(fn, rows: int, min_seconds: float = 3.0) -> float:
    fn()  # warm-up
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        fn()
        n += rows
    return n / (time.perf_counter() - start)


def job_rate(data_dir: str, path: Path, out: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "nextpara", "-q", "rerank-batch", str(path), str(out), "--data-dir",
                        data_dir, "--overwrite"], capture_output=True, text=True, check=True)
    line = r.stdout.strip().splitlines()[-1]
    rows = int(line.split("rerank-batch: ")[1].split()[0])
    return rows / float(line.split(" in ")[1].split("s,")[0]), time.perf_counter() - t0


def read_rate(path: Path) -> float:
    """Rows/s of reading and checking a job's input alone (batch.rows: read_raw and parse_row, as the job does)."""
    from nextpara.batch.rows import parse_row, read_raw

    start, n = time.perf_counter(), 0
    for line, raw in read_raw(path):
        parse_row(line, raw, 10)
        n += 1
    return n / (time.perf_counter() - start)


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--rows", type=int, default=2048, help="rows for the batched measurements (default 2048)")
    parser.add_argument("--loop-rows", type=int, default=200, help="rows for the one-at-a-time loop (default 200)")
    parser.add_argument("--job-repeat", type=int, default=4,
                        help="the ids job's file holds the rows this many times (default 4): see above")
    parser.add_argument("--output", default="batch_speed", help="results name under bench/results/")
    args = parser.parse_args()
    import orjson
    import torch
    from nextpara.attention_core.pipeline import pad_candidates, pad_contexts
    from nextpara.attention_core.predictor import Predictor
    from nextpara.batch.rows import Row
    from nextpara.batch.scoring import score_rows

    predictor = Predictor.open(args.data_dir)
    store = predictor.store
    ctx_ids, cand_ids = make_rows(predictor, args.rows)
    as_lists = lambda ids: store.vectors(ids).tolist()  # noqa: E731 - a vector as a JSON row carries it
    rows = [Row(line=i + 1, id=i, context=as_lists(c), candidates=as_lists(k), top_k=10)
            for i, (c, k) in enumerate(zip(ctx_ids, cand_ids))]
    print(f"{len(rows)} rows: L = 8 context vectors, 100 candidate vectors each; torch threads {torch.get_num_threads()}",
          flush=True)

    loop_rows = rows[:args.loop_rows]
    results = {}
    results["loop"] = rate(lambda: [predictor.rerank(r.context, r.candidates) for r in loop_rows], len(loop_rows))
    print(f"loop     {results['loop']:8.0f} rows/s", flush=True)

    def batched():
        for s in range(0, len(rows), 512):
            score_rows(predictor, rows[s:s + 512])

    results["batched"] = rate(batched, len(rows))
    print(f"batched  {results['batched']:8.0f} rows/s", flush=True)

    arrays = [Row(line=r.line, id=r.id, context=store.vectors(c), candidates=store.vectors(k), top_k=10)
              for r, c, k in zip(rows, ctx_ids, cand_ids)]

    def batched_arrays():
        for s in range(0, len(arrays), 512):
            score_rows(predictor, arrays[s:s + 512])

    results["batched_arrays"] = rate(batched_arrays, len(arrays))
    print(f"arrays   {results['batched_arrays']:8.0f} rows/s", flush=True)

    id_rows = [Row(line=r.line, id=r.id, context=c, candidates=k, top_k=10) for r, c, k in zip(rows, ctx_ids, cand_ids)]

    def batched_ids():
        for s in range(0, len(id_rows), 512):
            score_rows(predictor, id_rows[s:s + 512])

    results["batched_ids"] = rate(batched_ids, len(id_rows))
    print(f"ids      {results['batched_ids']:8.0f} rows/s", flush=True)

    model = predictor.pipeline.model
    x, m = pad_contexts([store.vectors(c) for c in ctx_ids[:256]], model.cfg.max_context)
    c, cm = pad_candidates([store.vectors(k) for k in cand_ids[:256]])
    with torch.inference_mode():
        results["model"] = rate(lambda: model(x, m, c, cm), len(x))
    print(f"model    {results['model']:8.0f} rows/s", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        ids_path, vec_path = Path(tmp) / "ids.jsonl", Path(tmp) / "vectors.jsonl"
        ids_path.write_text("".join(json.dumps({"id": i, "context": c, "candidates": k}) + "\n"
                                    for i, (c, k) in enumerate(zip(ctx_ids * args.job_repeat,
                                                                   cand_ids * args.job_repeat))))
        vec_path.write_text("".join(json.dumps({"id": r.id, "context": r.context, "candidates": r.candidates}) + "\n"
                                    for r in rows[:512]))
        import pyarrow as pa
        import pyarrow.parquet as pq

        def vector_lists(cells):  # rows of (n, dim) float32 arrays -> list<fixed_size_list<float32, dim>>
            flat = pa.FixedSizeListArray.from_arrays(pa.array(np.concatenate(cells).ravel(), pa.float32()), store.dim)
            return pa.ListArray.from_arrays(pa.array(np.cumsum([0, *(len(c) for c in cells)]), pa.int32()), flat)

        pq_path = Path(tmp) / "vectors.parquet"
        pq.write_table(pa.table({"id": pa.array([r.id for r in arrays], pa.int64()),
                                 "context": vector_lists([r.context for r in arrays]),
                                 "candidates": vector_lists([r.candidates for r in arrays])}), pq_path)
        vec32_path = Path(tmp) / "vectors32.jsonl"  # the same rows, each number as float32's shortest text
        vec32_path.write_bytes(b"".join(orjson.dumps({"id": r.id, "context": r.context, "candidates": r.candidates},
                                                     option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)
                                        for r in arrays[:512]))
        files = {"ids": ids_path, "vectors": vec_path, "vectors32": vec32_path, "parquet": pq_path}
        for name, path in files.items():  # what the job's input costs before any scoring
            results[f"read_{name}"] = read_rate(path)
            print(f"read {name:10} {results[f'read_{name}']:8.0f} rows/s", flush=True)
        for name, path in files.items():
            results[f"job_{name}"], _ = job_rate(args.data_dir, path, Path(tmp) / "out.jsonl")
            print(f"job {name:10} {results[f'job_{name}']:8.0f} rows/s", flush=True)

    from sentence_transformers import util

    def reference():
        for s in range(0, len(arrays), 512):
            for r in arrays[s:s + 512]:
                util.semantic_search(torch.from_numpy(r.context[-1:]), torch.from_numpy(r.candidates), top_k=10)

    results["reference"] = rate(reference, len(arrays))
    print(f"reference {results['reference']:8.0f} rows/s", flush=True)

    speedup = results["batched"] / results["loop"]
    record = {
        **stamp(__file__),
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, torch threads "
                   f"{torch.get_num_threads()}",
        "model": {"version": predictor.model_version, **{k: getattr(model.cfg, k) for k in ("d_model", "n_heads",
                  "n_context_layers", "n_scorer_layers", "n_list_layers", "candidate_tokens", "pool_density")}},
        "rows": len(rows), "job_repeat": args.job_repeat, "job_ids_rows": len(rows) * args.job_repeat,
        "context_length": 8, "candidates": 100,
        "rows_per_second": {k: round(v, 1) for k, v in results.items()},
        "batched_over_loop": round(speedup, 2),
        "batched_arrays_over_loop": round(results["batched_arrays"] / results["loop"], 2),
        "targets": {"batched_over_loop >= 10": speedup >= 10, "batched >= 5000 rows/s": results["batched"] >= 5000,
                    "job ids >= 5000 rows/s": results["job_ids"] >= 5000,
                    "job Parquet >= 5000 rows/s": results["job_parquet"] >= 5000,
                    "job JSON vectors >= 500 rows/s": results["job_vectors"] >= 500,
                    "job JSON float32-text vectors >= 500 rows/s": results["job_vectors32"] >= 500},
    }
    labels = {"loop": "Predictor.rerank, one row at a time", "batched": "score_rows over chunks of 512 (the engines' path)",
              "batched_arrays": "the same, vectors given as float32 arrays instead of lists",
              "batched_ids": "the same, stored ids instead of vectors (word rows from the cache by id)",
              "model": "model forward alone, batch 256 (ceiling)", "job_ids": "rerank-batch job, ids in JSON",
              "read_ids": "reading and checking the ids job's input alone (no scoring)",
              "read_vectors": "the same, the JSON vectors job's (numbers as Python writes float64: 17 digits)",
              "read_vectors32": "the same, JSON vectors as float32's shortest text (9-10 digits, as orjson writes them)",
              "read_parquet": "the same, the Parquet job's",
              "job_vectors": "rerank-batch job, vectors in JSON", "job_parquet": "rerank-batch job, Parquet float32 vectors",
              "job_vectors32": "rerank-batch job, vectors in JSON as float32's shortest text",
              "reference": "reference: util.semantic_search of the last context vector over the row's candidates"}
    table = ["| measurement | rows/s | / reference |", "| --- | --- | --- |"]
    table += [f"| {labels[k]} | {v:,.0f} | {v / results['reference']:.2f}x |" for k, v in results.items()]
    md = (f"# Batch reranking throughput\n\n`{record['command']}` on {record['date']}, {record['machine']}; model "
          f"{record['model']}.\n\n{len(rows)} PEPs test queries, L = 8 context paragraphs and 100 stage-1 candidates "
          f"each, as vectors unless said (the ids job: the {len(rows):,} rows {args.job_repeat} times over, {len(rows) * args.job_repeat:,} rows).\n\n"
          + "\n".join(table) + f"\n\nbatched / loop: {speedup:.1f}x. Targets: {record['targets']}\n")
    save(args.output, record, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
