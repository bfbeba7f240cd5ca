"""Store at scale: build a store of N synthetic paragraphs, then time opening it and measure its size.

    python -m bench.speed.store_load                          # 1,000,000 paragraphs of 384 dims, index auto
    python -m bench.speed.store_load --paragraphs 100000 --dim 1536

The vectors come from bench/speed/index_scale.py's generator, given to the store as precomputed
vectors through the same ``add_documents`` path a build uses (documents of 10 paragraphs, short
texts), then one snapshot. Measured: build (write) time, snapshot time and the snapshot's peak resident
memory (above the process's before it: the index it builds, and no copy of it on the way to its file), disk bytes per paragraph
(``nextpara info``'s figure), and the time and resident memory of opening the store read-only
(what ``nextpara serve`` does first): the snapshot's vectors are memory-mapped, the FAISS index
read from its file, and the ids checked against SQLite. Opened three times; the page cache is
warm after the first. Prints a table, writes bench/results/store_load.{json,md}.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.record import argument_parser, rss_bytes, save, stamp
from bench.speed.index_scale import clustered


def build(data: Path, n: int, dim: int, index: str, seed: int) -> dict:
    from nextpara.store.corpus import Document
    from nextpara.store.store import open_store

    vectors = clustered(n, dim, seed=seed)
    per_doc, batch_docs = 10, 1000
    t0 = time.perf_counter()
    with open_store(data, embedder_name="synthetic", dim=dim, embedder_spec="precomputed:synthetic", index=index) as store:
        for start in range(0, n, per_doc * batch_docs):
            docs, vecs = [], []
            for s in range(start, min(n, start + per_doc * batch_docs), per_doc):
                k = min(per_doc, n - s)
                docs.append(Document(doc_id=f"doc-{s // per_doc}", title="",
                                     paragraphs=[f"Paragraph {p} of synthetic document {s // per_doc}." for p in range(k)]))
                vecs.append(vectors[s:s + k])
            store.add_documents(docs, vecs)
        write_s = time.perf_counter() - t0
        before = reset_peak_rss()
        t1 = time.perf_counter()
        name = store.snapshot()
        snapshot_s = time.perf_counter() - t1
        peak = rss_bytes(field="VmHWM") - before
        info = store.info()
        files = {p.name: p.stat().st_size for p in (data / name).iterdir()}
    return {"write_seconds": round(write_s, 1), "snapshot_seconds": round(snapshot_s, 1),
            "snapshot_peak_rss_added_mb": round(peak / 2**20, 1),
            "snapshot_files_mb": {k: round(v / 2**20, 1) for k, v in files.items()}, "info": info}


def reset_peak_rss() -> int:
    """Reset this process's peak resident size to its current one (Linux: /proc/self/clear_refs) and return it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss_bytes()


def open_times(data: Path, repeats: int) -> list[dict]:
    from nextpara.store.store import open_store

    out = []
    for _ in range(repeats):
        before = rss_bytes()
        t0 = time.perf_counter()
        store = open_store(data, readonly=True)
        seconds = time.perf_counter() - t0
        out.append({"open_seconds": round(seconds, 2), "rss_added_mb": round((rss_bytes() - before) / 2**20, 1),
                    "index": store.index.choice.factory})
        store.close()
        del store
    return out


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--paragraphs", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--index", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nextpara-store-") as work:
        data = Path(work) / "store"
        built = build(data, args.paragraphs, args.dim, args.index, args.seed)
        print(built, flush=True)
        opens = open_times(data, 3)
        print(opens, flush=True)
        shutil.rmtree(data)
    info = built.pop("info")
    record = {**stamp(__file__),
              "paragraphs": args.paragraphs, "dim": args.dim, "index": info["index"]["factory"],
              "bytes_per_paragraph": info["disk_bytes_per_paragraph"], **built, "opens": opens}
    md = (f"# Store at scale\n\n`{record['command']}` on {record['date']}, {record['machine']}: "
          f"{args.paragraphs:,} synthetic paragraphs of {args.dim} dims, index `{record['index']}`.\n\n"
          "| measurement | value |\n| --- | --- |\n"
          f"| write (add_documents, 1,000 documents of 10 paragraphs per transaction) | {built['write_seconds']} s |\n"
          f"| snapshot (index build + files) | {built['snapshot_seconds']} s |\n"
          f"| snapshot's peak resident memory above the store's before it | {built['snapshot_peak_rss_added_mb']:,} MB "
          f"(files written, MB: {', '.join(f'{k} {v:,}' for k, v in sorted(built['snapshot_files_mb'].items()))}) |\n"
          f"| disk per paragraph | {record['bytes_per_paragraph']:,.0f} bytes |\n"
          + "".join(f"| open read-only, run {i + 1} | {o['open_seconds']} s, +{o['rss_added_mb']} MB resident |\n"
                    for i, o in enumerate(opens)))
    save("store_load", record, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
