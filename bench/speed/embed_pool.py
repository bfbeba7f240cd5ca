"""Would two embedding processes build the built-in corpus faster than one? (`make run`'s first start is mostly MiniLM.)

    python -m bench.speed.embed_pool [--every 3] [--rounds 2] [--chunk 256]

The same texts (every ``--every``-th distinct paragraph of the built-in corpus) embedded two ways, alternated
``--rounds`` times in one run so that the machine's mood falls on both:

* **one process**: the bundled MiniLM as a build runs it today, in this process, torch on every core (the model
  loaded beforehand, as a server has it);
* **two processes**: a pool of as many processes as cores (spawned), torch on one thread each, handed chunks of
  ``--chunk`` texts in turn; its time includes starting the processes, their imports and their model loads, which a
  build would pay every time.

Prints a table, writes bench/results/embed_pool.{json,md}: seconds and paragraphs/s per round, the ratio of the
medians, and the largest difference of any vector between the two (batching and threads may move the last bits).
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np

from bench.record import argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
_embedder, _ready = None, 0.0  # a pool process's model, and when it was loaded (time.time())


def _start_worker() -> None:
    global _embedder, _ready
    import torch
    from nextpara.store.embedders import make_embedder

    torch.set_num_threads(1)
    _embedder = make_embedder("minilm")
    _embedder.embed(["warm"])  # loads the model
    _ready = time.time()


def _embed(texts: list[str]) -> tuple[np.ndarray, int, float]:
    return _embedder.embed(texts), os.getpid(), _ready


def in_pool(texts: list[str], processes: int, chunk: int) -> tuple[np.ndarray, float]:
    """The vectors, and the seconds until the last process had its model loaded (its start-up)."""
    started = time.time()
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn"), initializer=_start_worker) as pool:
        parts = list(pool.map(_embed, [texts[s:s + chunk] for s in range(0, len(texts), chunk)]))
    ready = {pid: at for _, pid, at in parts}
    return np.concatenate([v for v, _, _ in parts]), round(max(ready.values()) - started, 1)


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--every", type=int, default=3, help="embed every N-th distinct paragraph of the corpus")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=256, help="texts per task handed to a pool process")
    parser.add_argument("--output", default="embed_pool", help="name under bench/results/")
    args = parser.parse_args()
    import torch
    from nextpara.store.builtin_corpus import builtin_documents
    from nextpara.store.embedders import make_embedder

    texts = list(dict.fromkeys(p for doc in builtin_documents() for p in doc.paragraphs))[::args.every]
    processes = len(os.sched_getaffinity(0))
    embedder = make_embedder("minilm")
    embedder.embed(texts[:8])  # loads the model
    seconds: dict[str, list[float]] = {"one process": [], f"{processes} processes": []}
    vectors, start_up = {}, []
    for r in range(args.rounds):
        for mode in seconds:
            t0 = time.perf_counter()
            if mode == "one process":
                vectors[mode] = embedder.embed(texts)
            else:
                vectors[mode], ready = in_pool(texts, processes, args.chunk)
                start_up.append(ready)
            seconds[mode].append(round(time.perf_counter() - t0, 1))
            print(f"round {r + 1}, {mode}: {seconds[mode][-1]} s, {len(texts) / seconds[mode][-1]:.1f} paragraphs/s",
                  flush=True)
    one, pool = (statistics.median(s) for s in seconds.values())
    a, b = vectors.values()
    record = {**stamp(__file__), "texts": len(texts), "torch_threads_one_process": torch.get_num_threads(),
              "processes": processes, "chunk": args.chunk, "seconds": seconds,
              "pool_start_up_seconds": start_up,
              "paragraphs_per_second": {m: [round(len(texts) / x, 1) for x in s] for m, s in seconds.items()},
              "speedup_of_medians": round(one / pool, 3), "max_abs_difference": float(np.abs(a - b).max()),
              "min_cosine": float((a * b).sum(1).min())}
    lines = [f"# Embedding the built-in corpus in one process or {processes}", "",
             f"`{record['command']}` on {record['date']}, {record['machine']}: {len(texts):,} distinct paragraphs of "
             f"the built-in corpus (one in {args.every}), the bundled MiniLM. One process runs torch on "
             f"{record['torch_threads_one_process']} threads with the model loaded; the pool's time includes starting "
             f"its {processes} processes (1 torch thread each) and loading the model in each. Rounds alternate.", "",
             "| round | " + " | ".join(f"{m}: s (paragraphs/s)" for m in seconds) + " |",
             "| --- | " + " | ".join("---" for _ in seconds) + " |"]
    lines += [f"| {r + 1} | " + " | ".join(f"{s[r]} ({len(texts) / s[r]:.1f})" for s in seconds.values()) + " |"
              for r in range(args.rounds)]
    lines += ["", f"The pool's processes had their models loaded {', '.join(map(str, start_up))} s after it "
              f"started (by round). The pool takes {pool / one:.2f}x the time of one process (medians; speedup "
              f"{record['speedup_of_medians']}x). Largest difference of any vector between the two: "
              f"{record['max_abs_difference']:.1e} (smallest cosine {record['min_cosine']:.6f})."]
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
