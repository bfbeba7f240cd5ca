"""Does reading more context help the model that serves each store? The protocol's context-length ablation, paired.

    python -m bench.quality.context_length --store peps=DIR --store narrative=DIR --store builtin=DIR
        [--model general|PATH] [--queries N] [--split test|validation] [--output NAME]

For each store, the full pipeline of the model that serves it (or ``--model``: "general", or a checkpoint's path),
exactly as ``nextpara eval`` runs its ablation (docs/evaluation.md): the same test queries (``--split validation``:
validation queries, for a choice to be made on them) read L = 1, 2, 4 and 8 preceding paragraphs, given as text,
with the same 8 preceding paragraphs excluded at every L, so only what the model reads changes. Reported per store:
Recall@1, MRR@10 and stage-1 recall (the target among the candidates at all) at each L, and each step's change (1 to
2, 2 to 4, 4 to 8) with its paired 95% bootstrap interval (the same queries at both lengths). A step whose interval
holds 0 is not told from noise by these queries. ``--cross`` takes the step from 4 to 8 apart: the candidates
found reading 8 paragraphs reranked reading 4, and those found reading 4 reranked reading 8, each against L = 4
(paired). Prints a table, writes bench/results/NAME.{json,md} (default
context_length).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench.record import add_stores, argument_parser, save, stamp, stores

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def crossed(ev, store, short: int = 4, long: int = 8) -> dict:
    """Paired changes from reading ``short`` paragraphs for both stages: the candidates found reading ``long``,
    reranked reading ``short``; those found reading ``short``, reranked reading ``long``; which stage a change of
    context length moves."""
    from nextpara.attention_core.metrics import paired_gain

    pipe, seq, queries = ev.pipeline, ev.seq, ev.targets
    exclude = [ev.exclude_ids(q, max(short, long)) for q in queries]

    def ranks(find: int, read: int):
        texts = [ev.context_texts(q, find) for q in queries]
        ids, _ = pipe.candidates([ev.context(q, find) for q in queries], exclude, context_texts=texts)
        cand_texts = [[p.text for p in store.get_paragraphs([int(i) for i in row])] for row in ids]
        vectors = [seq.vectors[[seq.row_of_id[int(i)] for i in row]] for row in ids]
        read_texts = [ev.context_texts(q, read) for q in queries]
        ranked = pipe.rank([ev.context(q, read) for q in queries], ids, vectors,
                           pipe.lexical_features(read_texts, cand_texts))
        return ev.ranks([s.ids for s in ranked])

    base = ranks(short, short)  # the ablation's own L = short, by this path: checked against it by ablation()
    return {f"found at {long}, reranked at {short}": paired_gain(base, ranks(long, short)),
            f"found at {short}, reranked at {long}": paired_gain(base, ranks(short, long)),
            "baseline": {"recall@1": float((base == 1).mean()), "mrr@10": float(np.where(base <= 10, 1 / base, 0).mean())}}


def ablation(path: str, model: str | None, queries: int, split: str, cross: bool = False) -> dict:
    """The full pipeline's ablation on one store: {"model", "queries", "lengths": {L: figures, with "change"}}, and
    with ``cross`` "crossed": crossed()."""
    from nextpara.attention_core.eval_report import evaluation_parts
    from nextpara.attention_core.evaluation import Evaluation
    from nextpara.errors import FailedPreconditionError
    from nextpara.store.store import open_store

    with open_store(path, readonly=True) as store:
        seq, embedder, pipeline, meta = evaluation_parts(store, model)
        if pipeline is None:
            raise FailedPreconditionError(f"no model serves {path}: nothing to ablate")
        ev = Evaluation(store, seq, embedder, pipeline, n_queries=queries, split=split)
        lengths = ev.length_ablation()["full"]
        out = {"model": f"{meta['model_version']} ({meta['source']})", "queries": len(ev.targets),
               "paragraphs": len(seq), "lengths": lengths}
        if cross:
            out["crossed"] = crossed(ev, store)
            base, four = out["crossed"]["baseline"], lengths["4"]
            if abs(base["recall@1"] - four["recall@1"]) > 1e-9 or abs(base["mrr@10"] - four["mrr@10"]) > 1e-9:
                raise RuntimeError(f"{path}: L = 4 by the crossing's path ({base}) differs from the ablation's "
                                   f"({four}): the crossings would be measured against another baseline")
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__, __file__)
    add_stores(parser)
    parser.add_argument("--model", default=None, help='"general" or a checkpoint path (default: what serves each store)')
    parser.add_argument("--queries", type=int, default=2000, help="queries per store (default 2000)")
    parser.add_argument("--split", choices=("test", "validation"), default="test", help="default test")
    parser.add_argument("--cross", action="store_true", help="also rerank L = 8's candidates reading 4 paragraphs, "
                        "and L = 4's reading 8 (which stage a longer context moves)")
    parser.add_argument("--output", default="context_length", help="results name (default context_length)")
    args = parser.parse_args(argv)
    rows = []
    for name, path in stores(parser, args):
        t0 = time.perf_counter()
        rows.append({"corpus": name, "data_dir": path, **ablation(path, args.model, args.queries, args.split,
                                                                  args.cross)})
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    record = stamp(__file__)
    lengths = list(rows[0]["lengths"])
    steps = list(zip(lengths[:-1], lengths[1:]))

    from nextpara.attention_core.eval_report import signed

    lines = [f"# Context length, paired ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"The full pipeline on each store's {args.split} split, the same queries at every L (the same 8 preceding "
             "paragraphs excluded at every L); a step's interval is the paired 95% bootstrap interval of its change.",
             "", "| corpus | model | queries | " + " | ".join(f"R@1 L={L}" for L in lengths) + " | "
             + " | ".join(f"R@1 change {a} to {b}" for a, b in steps) + " |",
             "| --- | --- | --- |" + " --- |" * (len(lengths) + len(steps))]
    for r in rows:
        by_len = r["lengths"]
        lines.append(f"| {r['corpus']} | {r['model']} | {r['queries']:,} | "
                     + " | ".join(f"{by_len[L]['recall@1']:.3f}" for L in lengths) + " | "
                     + " | ".join(signed(by_len[b]["change"], "recall@1") for _, b in steps) + " |")
    lines += ["", "| corpus | " + " | ".join(f"stage-1 recall L={L}" for L in lengths) + " |",
              "| --- |" + " --- |" * len(lengths)]
    lines += [f"| {r['corpus']} | " + " | ".join(f"{r['lengths'][L]['stage1_recall']:.3f}" for L in lengths) + " |"
              for r in rows]
    lines += ["", "| corpus | " + " | ".join(f"MRR@10 L={L}" for L in lengths) + " | "
              + " | ".join(f"MRR@10 change {a} to {b}" for a, b in steps) + " |",
              "| --- |" + " --- |" * (len(lengths) + len(steps))]
    for r in rows:
        by_len = r["lengths"]
        lines.append(f"| {r['corpus']} | " + " | ".join(f"{by_len[L]['mrr@10']:.3f}" for L in lengths) + " | "
                     + " | ".join(signed(by_len[b]["change"], "mrr@10") for _, b in steps) + " |")
    if args.cross:
        kinds = [k for k in rows[0]["crossed"] if k != "baseline"]
        lines += ["", "Each stage apart: the paired change from L = 4 (found and reranked reading 4) when one stage reads 8.",
                  "", "| corpus | " + " | ".join(f"R@1 change, {k}" for k in kinds) + " | "
                  + " | ".join(f"MRR@10 change, {k}" for k in kinds) + " |", "| --- |" + " --- |" * (2 * len(kinds))]
        lines += [f"| {r['corpus']} | " + " | ".join(signed(r["crossed"][k], "recall@1") for k in kinds) + " | "
                  + " | ".join(signed(r["crossed"][k], "mrr@10") for k in kinds) + " |" for r in rows]
    save(args.output, {**record, "split": args.split, "rows": rows}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
