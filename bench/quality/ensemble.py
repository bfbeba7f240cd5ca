"""Probe: do two trained rerankers, their scores added, rank better than either alone?

    python -m bench.quality.ensemble --data-dir DIR --member NAME=PATH --member NAME=general [--queries 2000]
        [--output NAME]

Each member is a checkpoint file (say a model kept by `bench.quality.experiments --keep DIR`) or ``general``,
the shipped general model fitted to the store's words as serving does. On the validation split (L = 4, the
context as stored vectors and texts; the test split is not touched, docs/evaluation.md), every member makes
its own stage-1 list exactly as serving would and scores it: the "alone" rows. The ensemble's score is the plain
sum of the members' scores (no weight fitted: the members are trained by the same listwise softmax, so their
scores are comparable), on the first member's list and on the union of the members' lists (each query head finds
its own candidates). A score depends on the whole list it is in (the pool-density feature), so every list is
scored as a list of its own. Reported: stage-1 recall, Recall@1 and MRR@10 with 95% bootstrap intervals, and for
each row the paired bootstrap interval of its difference from the first member alone (the same queries resampled
for both, so it is far tighter than the gap between two separate intervals). The cost: one more query encoding,
search and forward pass per member.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench import record
from bench.quality.lists import candidate_rows, model_scores

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def first_hit(rows: np.ndarray, scores: np.ndarray, text_class: np.ndarray, target: int) -> int:
    """1-based rank of the first candidate with the target's text under ``scores``; NO_HIT if none."""
    from nextpara.attention_core.metrics import hit_rank

    return hit_rank(text_class[rows[np.argsort(-scores, kind="stable")]], target)


def load_member(spec: str, store):
    """(name, model, meta) of ``NAME=PATH`` or ``NAME=general``."""
    from nextpara.attention_core.general import checkpoint_for_store, general_for_store

    name, _, where = spec.partition("=")
    if not where:
        raise SystemExit(f"--member {spec!r}: expected NAME=PATH or NAME=general")
    model, meta = general_for_store(store) if where == "general" else checkpoint_for_store(where, store)
    model.eval()
    return name, model, meta


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--member", action="append", required=True, help="NAME=PATH (a checkpoint) or NAME=general; "
                                                                        "two or more, the first is the reference")
    parser.add_argument("--output", default=None, help="results name under bench/results/ (default ensemble_<store>)")
    args = parser.parse_args()
    if len(args.member) < 2:
        parser.error("give two or more --member")
    from pathlib import Path

    from nextpara.attention_core.metrics import paired_gain, summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    members = [load_member(spec, store) for spec in args.member]
    pipelines = [RerankPipeline(model, store, 100) for _, model, _ in members]
    qs = seq.queries("validation", 4, limit=args.queries, seed=1)
    targets = [seq.text_class[q.target] for q in qs]
    t0 = time.perf_counter()
    own = [candidate_rows(p, seq, texts, qs) for p in pipelines]
    union = [np.asarray(list(dict.fromkeys(np.concatenate(ls).tolist())), np.int64) for ls in zip(*own)]
    alone = [model_scores(p, seq, texts, qs, lists) for p, lists in zip(pipelines, own)]
    on_first = [alone[0]] + [model_scores(p, seq, texts, qs, own[0]) for p in pipelines[1:]]
    on_union = [model_scores(p, seq, texts, qs, union) for p in pipelines]
    seconds = time.perf_counter() - t0

    def ranking(lists, member_scores, model: str | None = None) -> dict:
        scores = [np.sum(s, axis=0) for s in zip(*member_scores)]
        return {"ranks": np.asarray([first_hit(l, s, seq.text_class, t) for l, s, t in zip(lists, scores, targets)]),
                "recall": float(np.mean([(seq.text_class[l] == t).any() for l, t in zip(lists, targets)])),
                "size": float(np.mean([len(l) for l in lists])), **({"model": model} if model else {})}

    rankings = {f"{name} alone": ranking(lists, [sc], meta["model_version"])
                for (name, _, meta), lists, sc in zip(members, own, alone)}
    rankings[f"sum on {members[0][0]}'s list"] = ranking(own[0], on_first)
    rankings["sum on the union"] = ranking(union, on_union)
    reference = rankings[f"{members[0][0]} alone"]["ranks"]
    out = {}
    for label, r in rankings.items():
        out[label] = {**summarize(r["ranks"]), "stage1_recall": r["recall"], "candidates": r["size"],
                      **({"model": r["model"]} if "model" in r else {}),
                      "gain_over_first": paired_gain(reference, r["ranks"])}
    stamp = record.stamp(__file__)
    lines = [f"# Two rerankers summed ({stamp['date']})", "", f"Command: `{stamp['command']}`", "",
             f"Store {args.data_dir} ({len(seq):,} paragraphs); {len(qs):,} validation queries, L = 4; members "
             + ", ".join(f"{n} ({m['model_version']})" for n, _, m in members)
             + f"; stage 1 and scoring of every list took {seconds:.0f} s.", "",
             "| ranking | candidates | stage-1 recall | R@1 | MRR@10 | R@1 gain over the first alone (paired) | "
             "MRR@10 gain |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label, m in out.items():
        g = m["gain_over_first"]
        lines.append(f"| {label} | {m['candidates']:.0f} | {m['stage1_recall']:.3f} | {m['recall@1']:.3f} "
                     f"[{m['recall@1_ci'][0]:.3f}, {m['recall@1_ci'][1]:.3f}] | {m['mrr@10']:.4f} "
                     f"[{m['mrr@10_ci'][0]:.4f}, {m['mrr@10_ci'][1]:.4f}] | "
                     f"{g['recall@1']:+.3f} [{g['recall@1_ci'][0]:+.3f}, {g['recall@1_ci'][1]:+.3f}] | "
                     f"{g['mrr@10']:+.4f} [{g['mrr@10_ci'][0]:+.4f}, {g['mrr@10_ci'][1]:+.4f}] |")
    name = args.output or f"ensemble_{Path(args.data_dir).name}"
    record.save(name, {**stamp, "queries": len(qs), "members": {n: m["model_version"] for n, _, m in members},
                       "seconds": seconds, "rankings": out}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
