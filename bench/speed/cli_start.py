"""Seconds from starting a `nextpara` command to its exit, for commands that only read a store or refuse their input.

    python -m bench.speed.cli_start --data-dir DIR [--before PYTHON] [--runs 7] [--output NAME]

Times, each as a new process (Python start-up and imports included): `nextpara info` on a built store, `nextpara
train` on a missing store and with settings no model can have (both refused, exit 2), and two references: `nextpara
--help` (start-up and the parser: the floor of any command) and `python -c "import torch"` (what a command that
imports torch pays on top). ``--before`` runs the same commands with another installation's Python (say, the
virtualenv of a checkout of an earlier commit), in the same run, alternated round by round with this one, so the two
columns share the machine's speed of the moment. Prints a table and writes bench/results/NAME.{json,md}
(default cli_start): the median of ``--runs`` runs per command and installation.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.record import argument_parser, save, stamp


def commands(data_dir: str, missing: str) -> dict[str, list[str]]:
    return {"info": ["-m", "nextpara", "info", "--data-dir", data_dir],
            "train, no store (refused)": ["-m", "nextpara", "train", "--data-dir", missing],
            "train --d-model 30 (refused)": ["-m", "nextpara", "train", "--data-dir", data_dir, "--d-model", "30"],
            "reference: nextpara --help": ["-m", "nextpara", "--help"],
            "reference: import torch": ["-c", "import torch"]}


def timed(python: str, args: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = subprocess.run([python, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd="/")
    return time.perf_counter() - t0, r.returncode


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store (read only)")
    parser.add_argument("--before", default=None, help="another installation's python to time beside this one")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--output", default="cli_start")
    args = parser.parse_args()
    pythons = {"this commit": sys.executable, **({"before": args.before} if args.before else {})}
    with tempfile.TemporaryDirectory(prefix="nextpara-nostore-") as missing:
        cmds = commands(str(Path(args.data_dir).resolve()), str(Path(missing) / "nothing"))
        seconds = {(p, c): [] for p in pythons for c in cmds}
        exits = {}
        for _ in range(args.runs):
            for p, python in pythons.items():
                for c, cmd in cmds.items():
                    s, rc = timed(python, cmd)
                    seconds[p, c].append(s)
                    exits[p, c] = rc
    median = {k: round(statistics.median(v), 3) for k, v in seconds.items()}
    head = "| command | exit | " + " | ".join(f"{p}: s (median of {args.runs})" for p in pythons)
    st = stamp(__file__)
    lines = ["# `nextpara` commands that read a store or refuse their input: seconds to exit", "",
             f"`{st['command']}` on {st['date']}, {st['machine']}, commit {st.get('commit', '?')}; each command a new "
             "process, the installations alternated round by round.",
             "", head + (" | this commit / before |" if args.before else " |"),
             "| --- | --- | " + " | ".join("---" for _ in pythons) + (" | --- |" if args.before else " |")]
    for c in cmds:
        row = f"| {c} | {exits['this commit', c]} | " + " | ".join(f"{median[p, c]:.2f}" for p in pythons)
        if args.before:
            row += f" | {median['this commit', c] / median['before', c]:.2f}x"
        lines.append(row + " |")
    record = {**st, "data_dir": args.data_dir, "pythons": pythons, "runs": args.runs,
              "seconds": {p: {c: seconds[p, c] for c in cmds} for p in pythons},
              "median": {p: {c: median[p, c] for c in cmds} for p in pythons},
              "exit": {p: {c: exits[p, c] for c in cmds} for p in pythons}}
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
