"""What a `rerank-batch` job of vectors in JSON gains from how its rows are read: arrays early, a reader thread.

    python -m bench.speed.batch_reader --data-dir /tmp/peps-bench [--rows 2048] [--repeat 2] [--output NAME]

Writes a JSON Lines file of ``--rows`` PEPs test queries (L = 8 context vectors and 100 candidate vectors each,
numbers as Python writes them: ~0.9 MB a row) and runs the job over it (``batch.job.run_job``, chunks of 512 rows,
as ``nextpara rerank-batch`` does) with three readers, in turn, ``--repeat`` times, on one Predictor:

* ``none``: the rows as parsed, read between chunks (the in-process engine before ``scoring.vectors_as_arrays``);
* ``arrays``: each row's lists of vectors made one float32 array as it is read (the engine now);
* ``thread``: that, by a thread one chunk ahead of the scoring (``read_ahead`` below: tried, and not kept, as
  its figure here shows: parsing holds the GIL, and the scoring leaves no core idle to overlap it with).

``none`` and ``thread`` are reference points defined here, not options of the product. Reports rows/s (the best
and every run of each), each against ``none``, and whether the three OUTPUT files are the same bytes. Writes
bench/results/NAME.{json,md} (default batch_reader).
"""

from __future__ import annotations

import json
import os
import platform
import queue
import tempfile
import threading
import time
from pathlib import Path

from bench.record import argument_parser, save, stamp
from bench.speed.batch_speed import make_rows

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CHUNK = 512


def read_ahead(chunks):
    """``chunks`` in order, read by a thread one ahead of the consumer (what ``thread`` measures)."""
    ready: queue.Queue = queue.Queue(maxsize=1)

    def reader() -> None:
        for chunk in chunks:
            ready.put(chunk)
        ready.put(None)

    threading.Thread(target=reader, daemon=True).start()
    while (chunk := ready.get()) is not None:
        yield chunk


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--rows", type=int, default=2048, help="rows of the job (default 2048: four chunks)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each reader, interleaved (default 2)")
    parser.add_argument("--output", default="batch_reader", help="results name under bench/results/")
    args = parser.parse_args()
    from nextpara.attention_core.predictor import Predictor
    from nextpara.batch.engines import chunked
    from nextpara.batch.job import run_job
    from nextpara.batch.scoring import score_rows, vectors_as_arrays

    predictor = Predictor.open(args.data_dir)
    store = predictor.store
    ctx_ids, cand_ids = make_rows(predictor, args.rows)

    class Engine:  # run_job's engine interface, scoring as the in-process engine does, read by ``chunks``
        name = "in-process"

        def __init__(self, chunks):
            self.chunks = chunks

        def run(self, rows):
            for chunk in self.chunks(rows):
                yield score_rows(predictor, chunk, True)

    readers = {"none": lambda rows: chunked(rows, CHUNK),
               "arrays": lambda rows: chunked(map(vectors_as_arrays, rows), CHUNK),
               "thread": lambda rows: read_ahead(chunked(map(vectors_as_arrays, rows), CHUNK))}
    runs: dict[str, list[float]] = {name: [] for name in readers}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "vectors.jsonl"
        with open(src, "w") as f:
            for i, (c, k) in enumerate(zip(ctx_ids, cand_ids)):
                f.write(json.dumps({"id": i, "context": store.vectors(c).tolist(),
                                    "candidates": store.vectors(k).tolist()}) + "\n")
        print(f"{len(ctx_ids)} rows, {src.stat().st_size / 1e6:.0f} MB", flush=True)
        for _ in range(args.repeat):
            for name, chunks in readers.items():
                start = time.perf_counter()
                summary = run_job(src, Path(tmp) / f"out-{name}.jsonl", Engine(chunks), overwrite=True, quiet=True)
                runs[name].append(round(summary.rows / (time.perf_counter() - start), 1))
                print(f"{name:7} {runs[name][-1]:7.1f} rows/s", flush=True)
        outputs = {name: (Path(tmp) / f"out-{name}.jsonl").read_bytes() for name in readers}
    identical = len(set(outputs.values())) == 1  # the same numbers in the same chunks: the same bytes
    best = {name: max(r) for name, r in runs.items()}
    record = {**stamp(__file__), "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
              "rows": len(ctx_ids), "chunk_rows": CHUNK, "model": predictor.model_version, "runs": runs, "best": best,
              "identical_outputs": identical}
    lines = [f"# How a batch job reads its rows ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"{record['machine']}; a JSON Lines job of {len(ctx_ids)} PEPs rows of vectors (L = 8, 100 candidates), "
             f"chunks of {CHUNK}, model {predictor.model_version}; runs interleaved, best of {args.repeat}.", "",
             f"The three jobs' OUTPUT files are byte for byte the same: {identical}.", "",
             "| reader | rows/s (best) | every run | / none |", "| --- | --- | --- | --- |"]
    for name in readers:
        lines.append(f"| {name} | {best[name]:,.1f} | {', '.join(map(str, runs[name]))} | "
                     f"{best[name] / best['none']:.2f}x |")
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
