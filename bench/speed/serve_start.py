"""Time from starting `nextpara serve` to its SERVING line, on a copy of a built store, or on first use.

    python -m bench.speed.serve_start --data-dir /tmp/peps-bench
    python -m bench.speed.serve_start --first-run

``--first-run`` is what `make run` does on a new machine: `nextpara serve` with no data dir, the default
store (NEXTPARA_DATA_DIR) and the embedding cache (NEXTPARA_CACHE_DIR) both empty temporary directories,
so the built-in corpus is read, embedded and indexed from nothing, and the general model serves it (no training).
Writes bench/results/serve_first_run.{json,md}, with a reference from the same run: how long MiniLM alone would take
to embed the corpus's distinct texts (its rate on every 10th paragraph of the corpus), since embedding is most of it.

Each run starts a new process (Python start-up and imports included) through
nextpara.server.process.ServerProcess, waits for the log line that says SERVING, then stops it
with SIGTERM. The page cache is warm after the first run.
Prints a table, writes bench/results/serve_start.{json,md}.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.record import argument_parser, save, stamp


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", help="a built store (trained or served by the general model); it is copied, not changed")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--first-run", action="store_true", help="time `nextpara serve` with an empty default store")
    args = parser.parse_args()
    from nextpara.server.process import ServerProcess

    if args.first_run:
        return first_run(ServerProcess)
    if not args.data_dir:
        parser.error("--data-dir is required (or --first-run)")
    from nextpara.attention_core.served import describe_served
    from nextpara.store.store import open_store

    with tempfile.TemporaryDirectory(prefix="nextpara-start-") as work:
        data = Path(work) / "store"
        shutil.copytree(args.data_dir, data, ignore=shutil.ignore_patterns("write.lock"))
        with open_store(data, readonly=True) as store:
            info, served = store.info(), describe_served(store)
        model = {"trained": "its own trained model", "general": "the general model (no model of its own)"}.get(
            served["source"], f"no model ({served.get('reason', '')})")
        seconds = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            server = ServerProcess.local(data, "--grace-seconds", "1", require_model=False).start()
            seconds.append(round(time.perf_counter() - t0, 2))
            server.stop()
    record = {**stamp(__file__), "paragraphs": info["paragraphs"], "index": info["index"]["factory"], "model": model,
              "seconds_to_serving": seconds}
    md = (f"# `nextpara serve`: start to SERVING\n\n`{record['command']}` on {record['date']}, {record['machine']}: "
          f"{info['paragraphs']:,} paragraphs, index `{record['index']}`, {model}.\n\n"
          "| run | seconds to SERVING |\n| --- | --- |\n" + "".join(f"| {i + 1} | {s} |\n" for i, s in enumerate(seconds)))
    save("serve_start", record, md)
    return 0


def first_run(server_process) -> int:
    from nextpara.store.store import open_store

    with tempfile.TemporaryDirectory(prefix="nextpara-first-") as work:
        env = {"NEXTPARA_DATA_DIR": str(Path(work) / "data"), "NEXTPARA_CACHE_DIR": str(Path(work) / "cache")}
        t0 = time.perf_counter()
        server = server_process(["--address", "127.0.0.1:0", "--metrics-address", "", "--grace-seconds", "1"], env=env,
                                start_timeout=900).start()  # require_model: the general model must serve it
        seconds = round(time.perf_counter() - t0, 1)
        server.stop()
        served = next(line for line in server.log.splitlines() if "SERVING on" in line).strip()
        built = next(line for line in server.log.splitlines() if "paragraphs written" in line).strip()
        with open_store(env["NEXTPARA_DATA_DIR"], readonly=True) as store:
            paragraphs = store.info()["paragraphs"]  # as stored
    rate, distinct = embedding_reference()
    alone = round(distinct / rate, 1)
    record = {**stamp(__file__), "seconds_to_serving": seconds, "serving_line": served, "build_line": built,
              "reference": {"minilm_paragraphs_per_s": rate, "corpus_paragraphs": paragraphs, "distinct_texts": distinct,
                            "embedding_alone_s": alone}}
    md = (f"# `nextpara serve` on first use: empty default store and cache to SERVING\n\n`{record['command']}` on "
          f"{record['date']}, {record['machine']}: the built-in corpus read, embedded and indexed, then served by "
          f"the general model.\n\nReference in the same run: MiniLM "
          f"alone embeds {rate} of the corpus's paragraphs a second (every 10th, in one call), so embedding the "
          f"{distinct:,} distinct texts of the store's {paragraphs:,} paragraphs (the cache embeds a text once) alone "
          f"would take {alone} s; SERVING took {seconds / alone:.2f}x that.\n\n"
          f"| seconds to SERVING | the build's log line | SERVING's log line |\n| --- | --- | --- |\n"
          f"| {seconds} | `{built}` | `{served}` |\n")
    save("serve_first_run", record, md)
    return 0


def embedding_reference() -> tuple[float, int]:
    """Paragraphs/s MiniLM alone embeds on this machine (every 10th paragraph of the built-in corpus in one call, the
    model loaded beforehand), and the number of distinct texts in the corpus."""
    from nextpara.store.builtin_corpus import builtin_documents
    from nextpara.store.embedders import make_embedder

    paragraphs = [p for doc in builtin_documents() for p in doc.paragraphs]
    sample = paragraphs[::10]
    embedder = make_embedder()
    embedder.embed(sample[:8])  # loads the model
    t0 = time.perf_counter()
    embedder.embed(sample)
    return round(len(sample) / (time.perf_counter() - t0), 1), len(set(paragraphs))


if __name__ == "__main__":
    raise SystemExit(main())
