"""End to end on one corpus: build, train, evaluate (the protocol of docs/evaluation.md); writes
bench/results/NAME.{md,json} and the plots in bench/results/NAME_plots/, NAME being the corpus file's stem
(peps, narrative) or "builtin".

    python -m bench.quality.end_to_end --data-dir /tmp/peps-bench            # PEPs, all three steps
    python -m bench.quality.end_to_end --data-dir /tmp/peps-bench --reuse    # keep an existing store / model
    python -m bench.quality.end_to_end --corpus NOVELS.jsonl --data-dir /tmp/narrative
    python -m bench.quality.end_to_end --corpus builtin --data-dir /tmp/builtin

The store is built with the embedding cache off, so the build time is real model time.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from bench.record import BENCH, RESULTS, argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEFAULT_CORPUS = BENCH.parents[1] / "shared" / "corpora" / "peps.jsonl"


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--reuse", action="store_true", help="skip build/train when the store/model exist")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--output", default=None, help="results name under bench/results/ (default: the corpus's name)")
    args = parser.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("nextpara").setLevel(logging.INFO)
    from nextpara.attention_core.eval_report import markdown_table, run_evaluation
    from nextpara.attention_core.served import CHECKPOINT, read_checkpoint_meta
    from nextpara.attention_core.train_flow import train
    from nextpara.store.ingest import build

    data = Path(args.data_dir)
    name = args.output or ("builtin" if args.corpus == "builtin" else Path(args.corpus).stem)
    record: dict = {**stamp(__file__),
                    "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"}
    previous = RESULTS / f"{name}.json"
    if not (args.reuse and (data / "paragraphs.sqlite").exists()):
        t0 = time.perf_counter()
        report = build(args.corpus, data, use_cache=False, quiet=True)
        record["build"] = {"seconds": round(time.perf_counter() - t0, 1), "paragraphs": report.paragraphs_written,
                           "embed_seconds": round(report.embed_seconds, 1),
                           "paragraphs_per_second": round(report.paragraphs_per_second, 1)}
    elif previous.exists():  # keep the last measured build, saying when it was
        earlier = json.loads(previous.read_text())
        if "build" in earlier:
            record["build"] = {**earlier["build"], "measured": earlier["build"].get("measured", earlier["date"])}
    if not (args.reuse and (data / CHECKPOINT).exists()):
        t0 = time.perf_counter()
        outcome = train(data, quiet=True)
        meta = outcome.meta
        record["train"] = {"seconds": round(time.perf_counter() - t0, 1), "model_version": meta["model_version"],
                           "validation": meta["metrics"]["validation"], "started_from": meta["started_from"],
                           "served": outcome.served, "guard": outcome.line}
    else:
        meta = read_checkpoint_meta(data / CHECKPOINT)
        if meta.get("kind") == "cosine":  # the guard found plain cosine best (general.cosine_model): nothing trained
            record["train"] = {"seconds": 0, "model_version": meta["model_version"],
                               "validation": meta["metrics"]["guard"]["B1"], "reused": True, "guard": meta["line"]}
        else:
            record["train"] = {"seconds": meta["training"]["seconds"], "model_version": meta["model_version"],
                               "validation": meta["metrics"]["validation"], "reused": True}
    result = run_evaluation(data, n_queries=args.queries, output=None, plot_dir=str(RESULTS / f"{name}_plots"))
    record["eval"] = result
    lines = [f"# {name} end to end ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"Machine: {record['machine']}", ""]
    if "build" in record:
        b = record["build"]
        when = f" (measured {b['measured']}, store reused since)" if "measured" in b else ""
        lines += [f"Build: {b['paragraphs']} paragraphs in {b['seconds']} s "
                  f"(embedding {b['embed_seconds']} s, {b['paragraphs_per_second']} paragraphs/s){when}.", ""]
    t = record["train"]
    reused = (" (plain cosine, chosen earlier by the guard, reused)" if t.get("reused") and "guard" in t else
              " (trained earlier, reused)" if t.get("reused") else "")
    lines += [f"Train: model {t['model_version']} in {t['seconds']} s{reused}; validation MRR@10 "
              f"{t['validation']['mrr@10']:.4f}" + (f"; trained {t['started_from']}" if "started_from" in t else "")
              + (f"; guard: {t['guard']}" if "guard" in t else "") + ".", "",
              f"Eval: {result['config']['queries']} test queries, L = {result['config']['context_length']}, "
              f"{result['config']['paragraphs']} paragraphs indexed.", "", markdown_table(result), ""]
    save(name, record, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
