"""Probe: does discounting "hub" paragraphs (near to everything) rank the next paragraph higher?

    python -m bench.quality.hubness --data-dir DIR [--model PATH] [--queries 2000] [--k 10] [--output NAME]

In nearest-neighbour search some items are hubs: generic paragraphs close to many others, so they turn up near the
top of many lists whatever the query. Cross-domain similarity local scaling (CSLS) discounts each item by its mean
cosine to its own k nearest neighbours, r(c): a score s(q, c) - beta * r(c). The store's paragraphs are the queries'
space too (a context paragraph is one), so r(c) is the mean cosine of c's k nearest other stored paragraphs, computed
once per store (a build could keep it as a column). The model that serves reads a pool-density feature (a
candidate's similarity to the other candidates of its list), a local cousin of r(c); this probe asks whether the
store-wide r(c) adds anything, before any training: on the validation split (L = 4, the context as stored vectors
and texts; the test split is not touched, docs/evaluation.md), for cosine to the last paragraph (B1, over its 500
nearest) and for the model's scores on its own stage-1 list, at several beta. Each row's change from beta = 0 has a
paired bootstrap interval (the same queries resampled for both).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench import record
from bench.quality.ensemble import first_hit, load_member
from bench.quality.lists import scored_lists

os.environ.setdefault("HF_HUB_OFFLINE", "1")

B1_DEPTH = 500  # B1's list: the last paragraph's nearest, then rescored
B1_BETAS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)  # cosine units
MODEL_BETAS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)  # the model's score units (logits)


def hub_scores(vectors: np.ndarray, k: int) -> np.ndarray:
    """r(c) for every row: the mean cosine of its k nearest other rows (an identical vector counts once, as itself)."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    sims, rows = index.search(vectors, k + 1)
    own = rows == np.arange(len(vectors))[:, None]
    own[:, 0] |= ~own.any(axis=1)  # (a row whose copies outrank it: drop the first instead)
    return np.asarray([s[~o][:k].mean() for s, o in zip(sims, own)], np.float32)


def b1_lists(seq, queries, depth: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(rows, cosines) of the last context paragraph's ``depth`` nearest, its context's paragraphs and their copies
    excluded, as the protocol's B1."""
    import faiss

    index = faiss.IndexFlatIP(seq.vectors.shape[1])
    index.add(seq.vectors)
    last = np.stack([seq.vectors[q.context[-1]] for q in queries])
    sims, rows = index.search(last, depth + 64)
    out_rows, out_sims = [], []
    for q, r, s in zip(queries, rows, sims):
        keep = ~np.isin(r, seq.same_text_rows(q.context)) & (r >= 0)
        out_rows.append(r[keep][:depth])
        out_sims.append(s[keep][:depth])
    return out_rows, out_sims


def paired_table(rows: dict) -> list[str]:
    """Markdown lines of a table of rankings: each one's R@1 (interval) and MRR@10, and its paired change
    (``rows[label]["gain"]``, metrics.paired_gain)."""
    lines = ["| ranking | R@1 | MRR@10 | R@1 change, paired | MRR@10 change, paired |", "| --- | --- | --- | --- | --- |"]
    for label, m in rows.items():
        g = m["gain"]
        lines.append(f"| {label} | {m['recall@1']:.3f} [{m['recall@1_ci'][0]:.3f}, {m['recall@1_ci'][1]:.3f}] | "
                     f"{m['mrr@10']:.4f} | {g['recall@1']:+.3f} [{g['recall@1_ci'][0]:+.3f}, {g['recall@1_ci'][1]:+.3f}]"
                     f" | {g['mrr@10']:+.4f} [{g['mrr@10_ci'][0]:+.4f}, {g['mrr@10_ci'][1]:+.4f}] |")
    return lines


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--model", default="general", help="a checkpoint's path, or general (default): the model "
                                                            "whose scores are discounted")
    parser.add_argument("--k", type=int, default=10, help="neighbours in r(c) (default 10)")
    parser.add_argument("--output", default=None, help="results name under bench/results/ (default hubness_<store>)")
    args = parser.parse_args()
    from pathlib import Path

    from nextpara.attention_core.metrics import paired_gain, summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    t0 = time.perf_counter()
    hub = hub_scores(seq.vectors, args.k)
    hub_seconds = time.perf_counter() - t0
    _, model, meta = load_member(f"model={args.model}", store)
    pipeline = RerankPipeline(model, store, 100)
    qs = seq.queries("validation", 4, limit=args.queries, seed=1)
    targets = [seq.text_class[q.target] for q in qs]
    b1_rows, b1_sims = b1_lists(seq, qs, B1_DEPTH)
    m_rows, m_scores = scored_lists(pipeline, seq, texts, qs)

    def ranks(lists, scores, beta) -> np.ndarray:
        return np.asarray([first_hit(l, s - beta * hub[l], seq.text_class, t)
                           for l, s, t in zip(lists, scores, targets)])

    rows = {}
    for method, lists, scores, betas in (("B1", b1_rows, b1_sims, B1_BETAS), ("model", m_rows, m_scores, MODEL_BETAS)):
        reference = ranks(lists, scores, 0.0)
        for beta in betas:
            r = ranks(lists, scores, beta)
            rows[f"{method} beta {beta:g}"] = {**summarize(r), "gain": paired_gain(reference, r)}
    found = [l[seq.text_class[l] == t] for l, t in zip(m_rows, targets)]
    target_hub = float(np.mean([hub[f[0]] for f in found if len(f)]))
    stamp = record.stamp(__file__)
    lines = [f"# Hub discount, r(c) = mean cosine to a paragraph's {args.k} nearest ({stamp['date']})", "",
             f"Command: `{stamp['command']}`", "",
             f"Store {args.data_dir} ({len(seq):,} paragraphs; r(c) in {hub_seconds:.0f} s, mean {hub.mean():.3f}, "
             f"the targets the model's lists hold {target_hub:.3f}); {len(qs):,} validation queries, L = 4; model "
             f"{meta['model_version']}. Score: s(q, c) - beta * r(c).", "", *paired_table(rows)]
    name = args.output or f"hubness_{Path(args.data_dir).name}"
    record.save(name, {**stamp, "queries": len(qs), "k": args.k, "model": meta["model_version"],
                       "hub_mean": float(hub.mean()), "target_hub_mean": target_hub, "rankings": rows},
                "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
