"""Where bench scripts put what they measured: bench/results/NAME.json and NAME.md, and the terminal."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def save(name: str, record: dict, markdown: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print("\n" + markdown)


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process (this one by default), from /proc."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def stamp(script: str) -> dict:
    """The command that ran (this script and its arguments), the date and the machine, for a record."""
    import os
    import sys
    import time

    return {"command": " ".join(["python", f"bench/{script}", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{os.cpu_count()} cores"}


def store_parser(doc: str):
    """The argument parser of a probe over a built, trained store: --data-dir and --queries (per split)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="a built and trained store (read only)")
    parser.add_argument("--queries", type=int, default=2000, help="queries per split (default 2000)")
    return parser
