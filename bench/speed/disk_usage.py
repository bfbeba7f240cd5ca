"""Disk per paragraph of a store as `nextpara build` writes it today, file by file.

    python -m bench.speed.disk_usage --corpus PEPS.jsonl [--index auto]

Builds the corpus into a temporary data dir with the MiniLM embedder (the embedding cache makes a
rebuild of a corpus embedded before take a minute or two), then counts every file of the store:
paragraphs.sqlite (texts, vectors: the truth; the word index), its write-ahead log, and the
snapshot's files (ids.npy, vectors.npy, and index.faiss for any index but flat: a flat index is
built from vectors.npy on load, store/snapshot.py). The trained model is not counted (one file per
store, 3 MB). Prints a table, writes bench/results/disk_usage.{json,md}.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.record import argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def file_sizes(data_dir: Path) -> dict[str, int]:
    """Bytes of each file the store counts as its own (the model excluded), by name relative to ``data_dir``."""
    found = {}
    for p in sorted(data_dir.rglob("*")):
        if p.is_file() and p.name not in ("model.safetensors", "write.lock"):
            found[str(p.relative_to(data_dir))] = p.stat().st_size
    return found


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--corpus", required=True, help="a JSON Lines corpus, or builtin")
    parser.add_argument("--index", default="auto")
    args = parser.parse_args()
    from nextpara.store.store import open_store

    with tempfile.TemporaryDirectory(prefix="nextpara-disk-") as tmp:
        data = Path(tmp) / "store"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nextpara", "build", "--corpus", args.corpus, "--data-dir", str(data),
                        "--index", args.index], check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        with open_store(data, readonly=True) as store:
            info = store.info()
        sizes = file_sizes(data)
    n = info["paragraphs"]
    record = {**stamp(__file__), "corpus": args.corpus, "paragraphs": n, "dim": info["dim"],
              "index": info["index"]["factory"], "build_seconds": round(seconds, 1), "files": sizes,
              "bytes_per_paragraph": round(sum(sizes.values()) / n, 1)}
    rows = "\n".join(f"| `{name}` | {size:,} | {size / n:,.0f} |" for name, size in sizes.items())
    md = (f"# Disk per paragraph\n\n`{record['command']}` on {record['date']}, {record['machine']}"
          f"{', commit ' + record['commit'] if record.get('commit') else ''}: {n:,} paragraphs of "
          f"{record['dim']} dims, index `{record['index']}`, built in {record['build_seconds']} s.\n\n"
          f"**{record['bytes_per_paragraph']:,.0f} bytes per paragraph.**\n\n"
          "| file | bytes | per paragraph |\n| --- | --- | --- |\n" + rows + "\n")
    print(md)
    save("disk_usage", record, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
