"""Where the top answer goes wrong: a breakdown of the served model's misses on the validation split.

    python -m bench.quality.failures --data-dir DIR [--queries 2000] [--output NAME]

For each validation query (L = 4, the serving pipeline: stage 1 then the model), the top answer is one of:
the target (a hit); a paragraph of the context's own document *after* the target (the model read the
thread but jumped ahead); one of that document *before* the context (at least 5 paragraphs before the
target: the context's 4 and their copies are excluded, as in the protocol's main table); a paragraph of
another document; or the target never reached the model (stage 1). Beside it, two oracles
applied to the model's own ranking (documents and positions read here for the yardstick only, never by
the product, docs/evaluation.md): keep only the context's document's candidates, and keep only those
after the context. The second is what reading direction perfectly would be worth to this model.
Prints a table; writes bench/results/NAME.{json,md} (default failures_<store dir name>).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from bench import record
from bench.quality.lists import scored_lists

os.environ.setdefault("HF_HUB_OFFLINE", "1")
KINDS = ("hit", "same document, after the target", "same document, before the context", "another document",
         "target not among the candidates")


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--output", default=None, help="results name under bench/results/")
    args = parser.parse_args()
    from nextpara.attention_core.general import served_model
    from nextpara.attention_core.metrics import summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    docs, pos = np.asarray(seq.doc_ids), np.asarray(seq.positions)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    model, meta = served_model(store)
    pipeline = RerankPipeline(model, store, 100)
    qs = seq.queries("validation", 4, limit=args.queries, seed=1)
    counts = dict.fromkeys(KINDS, 0)
    behind: list[int] = []  # how far after the target a same-document top answer is
    oracle_rank = {"same document": [], "after the context": []}
    lists, scores = scored_lists(pipeline, seq, texts, qs)
    for q, l, sc in zip(qs, lists, scores):
        target = seq.text_class[q.target]
        order = l[np.argsort(-sc, kind="stable")]
        hit = seq.text_class[order] == target
        same = docs[order] == docs[q.target]
        for name, keep in (("same document", same | hit), ("after the context", (same & (pos[order] > pos[q.context[-1]])) | hit)):
            found = np.flatnonzero(hit[keep][:10])
            oracle_rank[name].append(int(found[0]) + 1 if len(found) else 10**9)
        if not hit.any():
            counts["target not among the candidates"] += 1
        elif hit[0]:
            counts["hit"] += 1
        elif same[0]:
            after = pos[order[0]] > pos[q.target]
            counts["same document, after the target" if after else "same document, before the context"] += 1
            if after:
                behind.append(int(pos[order[0]] - pos[q.target]))
        else:
            counts["another document"] += 1
    n = len(qs)
    oracles = {name: summarize(np.array(r), n_boot=500) for name, r in oracle_rank.items()}
    steps = np.bincount(np.minimum(behind, 6), minlength=7)[1:] if behind else np.zeros(6, int)
    stamp = record.stamp(__file__)
    about = f"model {meta['model_version']} ({meta.get('source', 'trained')})"
    lines = [f"# Where the top answer goes wrong ({stamp['date']})", "", f"Command: `{stamp['command']}`", "",
             f"Store {args.data_dir} ({len(seq):,} paragraphs), served {about}; {n:,} validation queries, L = 4.", "",
             "| top answer | share of queries |", "| --- | --- |"]
    lines += [f"| {k} | {counts[k] / n:.3f} |" for k in KINDS]
    lines += ["", "A same-document answer after the target is k paragraphs after it: " +
              ", ".join(f"k = {k}: {c}" for k, c in zip(["1", "2", "3", "4", "5", "6+"], steps)) + ".", "",
              "The model's ranking restricted by an oracle (yardsticks only):", "",
              "| restricted to | R@1 | MRR@10 |", "| --- | --- | --- |",
              f"| none (the product) | {counts['hit'] / n:.3f} | - |",
              *(f"| {name} | {m['recall@1']:.3f} [{m['recall@1_ci'][0]:.3f}, {m['recall@1_ci'][1]:.3f}] | {m['mrr@10']:.3f} |"
                for name, m in oracles.items())]
    name = args.output or f"failures_{Path(args.data_dir).name}"
    record.save(name, {**stamp, "model": about, "queries": n, "shares": {k: v / n for k, v in counts.items()},
                       "after_target_steps": steps.tolist(), "oracles": oracles}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
