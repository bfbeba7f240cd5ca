"""Where bench scripts put what they measured: bench/results/NAME.json and NAME.md, and the terminal.

Every script saves through ``save`` (``from bench.record import save, stamp``); the scripts run as
modules from the repository root (``python -m bench.speed.grpc_latency ...``), so ``bench`` is a package.
"""

from __future__ import annotations

import json
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


def save(name: str, record: dict, markdown: str) -> None:
    """Write ``record`` to bench/results/NAME.json and ``markdown`` (the table the script reports) to
    bench/results/NAME.md, and print the markdown."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print("\n" + markdown)


def rss_bytes(pid: int | str = "self", field: str = "VmRSS") -> int:
    """Resident memory of a process (this one by default), from /proc; ``field="VmHWM"``: its peak."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(f"{field}:"))


def module_name(script: str) -> str:
    """``bench.speed.grpc_latency`` for the path of bench/speed/grpc_latency.py (a script's ``__file__``)."""
    path = Path(script).resolve().with_suffix("")
    return ".".join(("bench", *path.relative_to(BENCH).parts))


def stamp(script: str) -> dict:
    """The command that ran (``python -m`` the script, given as its ``__file__``, with its arguments), the
    date, the machine and its CPU, and the commit, for a record."""
    import os
    import shlex
    import subprocess
    import sys
    import time

    try:  # the code that ran: the commit, and whether the tree had changes beyond it
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=BENCH, capture_output=True, text=True,
                                timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"command": " ".join(["python", "-m", module_name(script), *map(shlex.quote, sys.argv[1:])]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{os.cpu_count()} cores",
            **({"cpu": cpu} if (cpu := cpu_model()) else {}), **({"commit": commit} if commit else {})}


def cpu_model() -> str:
    """The CPU's model name and whether it has bfloat16 instructions, from /proc/cpuinfo ("" where there is none):
    the machines these scripts run on change from day to day, and so does their speed."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    bf16 = "bfloat16 instructions" if flags & {"avx512_bf16", "amx_bf16"} else "no bfloat16 instructions"
    return f"{name}, {bf16}" if name else ""


def argument_parser(doc: str, script: str):
    """A script's argument parser: its docstring as the help text, ``python -m bench.GROUP.NAME`` as its name."""
    import argparse

    return argparse.ArgumentParser(prog=f"python -m {module_name(script)}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def store_parser(doc: str, script: str):
    """The argument parser of a probe over a built, trained store: --data-dir and --queries (per split)."""
    parser = argument_parser(doc, script)
    parser.add_argument("--data-dir", required=True, help="a built and trained store (read only)")
    parser.add_argument("--queries", type=int, default=2000, help="queries per split (default 2000)")
    return parser


def add_stores(parser) -> None:
    """``--store NAME=DIR``, repeatable: the built stores a script measures, by name (read them with ``stores``)."""
    parser.add_argument("--store", action="append", default=[], metavar="NAME=DIR",
                        help="a built store and its name in the table (repeatable)")


def stores(parser, args, required: bool = True) -> list[tuple[str, str]]:
    """The (NAME, DIR) pairs of ``--store``; a usage error for a malformed one, or for none when ``required``."""
    pairs = [spec.partition("=")[::2] for spec in args.store]
    for spec, (_, path) in zip(args.store, pairs):
        if not path:
            parser.error(f"--store {spec}: give NAME=DIR")
    if required and not pairs:
        parser.error("give --store NAME=DIR at least once")
    return pairs
