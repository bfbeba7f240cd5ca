"""Seconds from starting a `nextpara` command to its exit, for commands that only read a store or refuse their input.

    python -m bench.speed.cli_start --data-dir DIR [--before PYTHON] [--runs 7] [--output NAME]

Times, each as a new process (Python start-up and imports included): `nextpara info` on a built store, `nextpara
train` on a missing store and with settings no model can have (both refused, exit 2), and two references: `nextpara
--help` (start-up and the parser: the floor of any command) and `python -c "import torch"` (what a command that
imports torch pays on top). ``--before`` runs the same commands with another installation's Python (say, the
virtualenv of a checkout of an earlier commit, whose ``git describe`` the record names), in the same run, alternated
round by round with this one (and which of the two goes first alternates), so the two columns share the machine's
speed of the moment. The refused `train` names a real store: an installation that did not refuse settings no model
can have would train there. Prints a table and writes bench/results/NAME.{json,md} (default cli_start): each
command's exit codes (one, or "mixed") and the median of ``--runs`` runs per command and installation.
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
    r = subprocess.run([python, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd="/", timeout=300)
    return time.perf_counter() - t0, r.returncode


def installed_commit(python: str) -> str:
    """``git describe --always --dirty`` of the checkout that ``python``'s nextpara is installed from (an editable
    install, as `make` makes), or "" where it is not a git checkout."""
    where = subprocess.run([python, "-c", "import os, nextpara.attention_core as a; "
                            "print(os.path.dirname(os.path.dirname(a.__file__)))"], capture_output=True, text=True)
    if where.returncode != 0:
        return ""
    r = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=where.stdout.strip(), capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store (read only)")
    parser.add_argument("--before", default=None, help="another installation's python to time beside this one")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--output", default="cli_start")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    st = stamp(__file__)  # the date the run started
    pythons = {"this commit": sys.executable, **({"before": args.before} if args.before else {})}
    commits = {p: installed_commit(python) for p, python in pythons.items()}
    with tempfile.TemporaryDirectory(prefix="nextpara-nostore-") as missing:
        cmds = commands(str(Path(args.data_dir).resolve()), str(Path(missing) / "nothing"))
        seconds = {(p, c): [] for p in pythons for c in cmds}
        exits = {(p, c): [] for p in pythons for c in cmds}
        order = list(pythons)
        for _ in range(args.runs):
            for p in order:
                for c, cmd in cmds.items():
                    s, rc = timed(pythons[p], cmd)
                    seconds[p, c].append(s)
                    exits[p, c].append(rc)
            order.reverse()  # neither installation always runs first
    median = {k: round(statistics.median(v), 3) for k, v in seconds.items()}

    def exit_of(p: str, c: str) -> str:
        codes = sorted(set(exits[p, c]))
        return str(codes[0]) if len(codes) == 1 else "mixed: " + "/".join(map(str, codes))

    names = {p: f"{p} ({commits[p]})" if commits[p] else p for p in pythons}
    lines = ["# `nextpara` commands that read a store or refuse their input: seconds to exit", "",
             f"`{st['command']}` started {st['date']}, {st['machine']}; each command a new process, the installations "
             "alternated round by round (which goes first alternates too).", "",
             "| command | " + " | ".join(f"{names[p]}: exit, s (median of {args.runs})" for p in pythons)
             + (" | this commit / before |" if args.before else " |"),
             "| --- | " + " | ".join("---" for _ in pythons) + (" | --- |" if args.before else " |")]
    for c in cmds:
        row = f"| {c} | " + " | ".join(f"{exit_of(p, c)}, {median[p, c]:.2f}" for p in pythons)
        if args.before:
            row += f" | {median['this commit', c] / median['before', c]:.2f}x"
        lines.append(row + " |")
    record = {**st, "data_dir": args.data_dir, "pythons": pythons, "installed_commits": commits, "runs": args.runs,
              "seconds": {p: {c: seconds[p, c] for c in cmds} for p in pythons},
              "median": {p: {c: median[p, c] for c in cmds} for p in pythons},
              "exit": {p: {c: exits[p, c] for c in cmds} for p in pythons}}
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
