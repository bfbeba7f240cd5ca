"""Probe: do two trained rerankers, their scores added, rank better than either alone?

    python -m bench.quality.ensemble --data-dir DIR --member NAME=PATH --member NAME=general [--queries 2000]
        [--output NAME]

Each member is a checkpoint file (say a model kept by `bench.quality.experiments --keep DIR`) or ``general``,
the shipped general model fitted to the store's words as serving does. On the validation split (L = 4, the
context as stored vectors and texts; the test split is not touched, docs/evaluation.md), every member makes
its own stage-1 list exactly as serving would; the ensemble's list is their union (each member's query head
finds its own candidates) and its score the plain sum of the members' scores (no weight fitted: the members
are trained by the same listwise softmax, so their scores are logits on one scale). Reported: stage-1
recall, Recall@1 and MRR@10 with 95% bootstrap intervals for each member alone (its own list), the sum on the
first member's list (what a second scorer alone adds) and on the union, and the paired bootstrap interval of
the union sum's difference from the first member (the same queries resampled for both, so it is far tighter
than the gap between two separate intervals). The cost: one more query encoding, search and forward pass
per member.
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


def paired_gain(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean of b - a per query for Recall@1 and MRR@10, with a 95% bootstrap interval over queries."""
    from nextpara.attention_core.metrics import per_query

    pa, pb = per_query(a), per_query(b)
    picks = np.random.default_rng(seed).integers(0, len(a), size=(n_boot, len(a)))
    out = {}
    for name in ("recall@1", "mrr@10"):
        d = pb[name] - pa[name]
        boots = d[picks].mean(axis=1)
        out[name] = float(d.mean())
        out[f"{name}_ci"] = [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]
    return out


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

    from nextpara.attention_core.metrics import summarize
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
    on_union = [model_scores(p, seq, texts, qs, union) for p in pipelines]
    seconds = time.perf_counter() - t0
    pos = [{int(r): i for i, r in enumerate(u)} for u in union]

    def ranks(lists, scores) -> np.ndarray:
        return np.asarray([first_hit(l, s, seq.text_class, t) for l, s, t in zip(lists, scores, targets)])

    def recall(lists) -> float:
        return float(np.mean([np.isin(seq.text_class[l], [t]).any() for l, t in zip(lists, targets)]))

    def restrict(scores_on_union, lists):  # a member's union scores, on another list
        return [s[[p[int(r)] for r in l]] for s, p, l in zip(scores_on_union, pos, lists)]

    rows: dict[str, dict] = {}
    for (name, _, meta), lists, sc in zip(members, own, on_union):
        rows[f"{name} alone"] = {"ranks": ranks(lists, restrict(sc, lists)), "recall": recall(lists),
                                 "size": float(np.mean([len(l) for l in lists])), "model": meta["model_version"]}
    summed = [np.sum(s, axis=0) for s in zip(*on_union)]
    first = own[0]
    rows[f"sum on {members[0][0]}'s list"] = {"ranks": ranks(first, restrict(summed, first)), "recall": recall(first),
                                             "size": float(np.mean([len(l) for l in first]))}
    rows["sum on the union"] = {"ranks": ranks(union, summed), "recall": recall(union),
                                "size": float(np.mean([len(l) for l in union]))}
    reference = rows[f"{members[0][0]} alone"]["ranks"]
    out = {}
    for label, r in rows.items():
        out[label] = {**summarize(r["ranks"]), "stage1_recall": r["recall"], "candidates": r["size"],
                      **({"model": r["model"]} if "model" in r else {}),
                      "gain_over_first": paired_gain(reference, r["ranks"])}
    stamp = record.stamp(__file__)
    lines = [f"# Two rerankers summed ({stamp['date']})", "", f"Command: `{stamp['command']}`", "",
             f"Store {args.data_dir} ({len(seq):,} paragraphs); {len(qs):,} validation queries, L = 4; members "
             + ", ".join(f"{n} ({m['model_version']})" for n, _, m in members)
             + f"; stage 1 and scoring of every list took {seconds:.0f} s.", "",
             "| ranking | candidates | stage-1 recall | R@1 | MRR@10 | R@1 gain over the first (paired) | MRR@10 gain |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label, m in out.items():
        g = m["gain_over_first"]
        lines.append(f"| {label} | {m['candidates']:.0f} | {m['stage1_recall']:.3f} | {m['recall@1']:.3f} "
                     f"[{m['recall@1_ci'][0]:.3f}, {m['recall@1_ci'][1]:.3f}] | {m['mrr@10']:.4f} | "
                     f"{g['recall@1']:+.3f} [{g['recall@1_ci'][0]:+.3f}, {g['recall@1_ci'][1]:+.3f}] | "
                     f"{g['mrr@10']:+.4f} [{g['mrr@10_ci'][0]:+.4f}, {g['mrr@10_ci'][1]:+.4f}] |")
    name = args.output or f"ensemble_{Path(args.data_dir).name}"
    record.save(name, {**stamp, "queries": len(qs), "members": {n: m["model_version"] for n, _, m in members},
                       "seconds": seconds, "rankings": out}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
