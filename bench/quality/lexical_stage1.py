"""Probe: how much stage-1 candidate recall would a word-overlap (TF-IDF) search add to the FAISS one?

    python -m bench.quality.lexical_stage1 --data-dir /tmp/peps-bench

Stage-1 recall caps every reranker (0.59 at ~150 candidates on PEPs). On validation and test queries
(L = 4; context and identical texts excluded, as in the protocol of docs/evaluation.md) it measures
the recall of the model's candidates (query head + last paragraph, 100 each), of the TF-IDF search
by the last paragraph's words and by the whole context's, and of their unions. Nothing here is used by the
product yet: it says whether an inverted index over the store is worth building.
Writes bench/results/lexical_stage1.{md,json}.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    args = parser.parse_args()

    from nextpara.attention_core.checkpoint import load_checkpoint
    from nextpara.attention_core.lexical import Lexicon
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.attention_core.served import CHECKPOINT
    from nextpara.store.store import open_store

    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    corpus = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    lexicon = Lexicon.fit(corpus)
    words = lexicon.matrix(corpus)  # (N, buckets), the product's own hashed TF-IDF rows
    model, meta = load_checkpoint(Path(args.data_dir) / CHECKPOINT, store.embedder_name, store.dim)
    pipeline = RerankPipeline(model, store, 100)

    def top_rows(query_rows, excluded: np.ndarray, n: int) -> np.ndarray:
        q = np.asarray(query_rows.sum(axis=0)).ravel()
        scores = words @ (q / max(np.linalg.norm(q), 1e-12))
        scores[excluded] = -np.inf
        top = np.argpartition(-scores, n)[:n]
        return top[np.argsort(-scores[top])]

    out: dict = {}
    for split, seed in (("validation", 1), ("test", 0)):
        qs = seq.queries(split, 4, limit=args.queries, seed=seed)
        excluded = [seq.same_text_rows(q.context) for q in qs]
        ids, _ = pipeline.candidates([seq.vectors[q.context] for q in qs],
                                     [set(seq.ids[e].tolist()) for e in excluded])
        model_rows = [{seq.row_of_id[int(i)] for i in r} for r in ids]
        hits: dict[str, list[bool]] = {}
        for q, e, m in zip(qs, excluded, model_rows):
            target = seq.text_class[q.target]
            last = top_rows(words[q.context[-1:]], e, 100)
            whole = top_rows(words[q.context], e, 100)
            sets = {"model (query head + last, 100 each)": m, "words of the last paragraph, 50": set(last[:50]),
                    "words of the last paragraph, 100": set(last), "words of the context, 100": set(whole),
                    "model + words of the last, 50": m | set(last[:50]),
                    "model + words of the last and of the context, 50 each": m | set(last[:50]) | set(whole[:50])}
            for name, rows in sets.items():
                hits.setdefault(name, []).append(bool(np.isin(seq.text_class[list(rows)], target).any()))
                hits.setdefault(name + " (size)", []).append(len(rows))
        out[split] = {name: float(np.mean(v)) for name, v in hits.items()}
        print(split, {k: round(v, 3) for k, v in out[split].items()}, flush=True)

    stamp = record.stamp(__file__)
    names = [k for k in out["test"] if not k.endswith("(size)")]
    lines = ["| candidates | validation recall | test recall | mean list size |", "| --- | --- | --- | --- |"]
    lines += [f"| {k} | {out['validation'][k]:.3f} | {out['test'][k]:.3f} | {out['test'][k + ' (size)']:.0f} |" for k in names]
    record.save("lexical_stage1", {**stamp, "model": meta["model_version"], "queries": args.queries, "recall": out},
                f"# Stage-1 recall with a word-overlap search ({stamp['date']})\n\nCommand: `{stamp['command']}`; "
                f"model {meta['model_version']}; {args.queries} queries per split, L = 4.\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
