"""Time from starting `nextpara serve` to its SERVING line, on a copy of a trained store.

    python -m bench.speed.serve_start --data-dir /tmp/peps-bench

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
    parser.add_argument("--data-dir", required=True, help="a built and trained store; it is copied, not changed")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from nextpara.server.process import ServerProcess
    from nextpara.store.store import open_store

    with tempfile.TemporaryDirectory(prefix="nextpara-start-") as work:
        data = Path(work) / "store"
        shutil.copytree(args.data_dir, data, ignore=shutil.ignore_patterns("write.lock"))
        with open_store(data, readonly=True) as store:
            info = store.info()
        seconds = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            server = ServerProcess.local(data, "--grace-seconds", "1", require_model=False).start()
            seconds.append(round(time.perf_counter() - t0, 2))
            server.stop()
    record = {**stamp(__file__), "paragraphs": info["paragraphs"], "index": info["index"]["factory"],
              "seconds_to_serving": seconds}
    md = (f"# `nextpara serve`: start to SERVING\n\n`{record['command']}` on {record['date']}, {record['machine']}: "
          f"{info['paragraphs']:,} paragraphs, index `{record['index']}`, trained model.\n\n"
          "| run | seconds to SERVING |\n| --- | --- |\n" + "".join(f"| {i + 1} | {s} |\n" for i, s in enumerate(seconds)))
    save("serve_start", record, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
