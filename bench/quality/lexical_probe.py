"""Probe: does word overlap between texts add to what the embeddings and the trained model know?

    python -m bench.quality.lexical_probe --data-dir /tmp/peps-bench [--output NAME]

Content only (docs/evaluation.md): TF-IDF cosine between a candidate's text and the context's texts is
computed from the words, never from a candidate's doc_id or position. On the model's own stage-1
lists (validation and test queries, L = 4, context as stored vectors), it compares the trained
model's ranking with the model's score plus a * tfidf(last, candidate) + b * tfidf(context, candidate),
a and b picked on validation, reported on test; and the same on B1's top 200 with cosine instead of
the model. Writes bench/results/lexical_probe.{md,json} (or NAME.{md,json}).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--output", default="lexical_probe", help="results name under bench/results/")
    args = parser.parse_args()

    from nextpara.attention_core.checkpoint import load_checkpoint
    from nextpara.attention_core.metrics import hit_rank, summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.attention_core.served import CHECKPOINT
    from nextpara.store.store import open_store
    from sklearn.feature_extraction.text import TfidfVectorizer

    t0 = time.perf_counter()
    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    texts = dict(store._db.execute("SELECT id, text FROM paragraphs"))
    corpus = [texts[int(i)] for i in seq.ids]
    tfidf = TfidfVectorizer(sublinear_tf=True, token_pattern=r"(?u)\b\w\w+\b", min_df=2, dtype=np.float32).fit(corpus)
    lex = tfidf.transform(corpus)  # (N, V) rows L2-normalised
    model, meta = load_checkpoint(Path(args.data_dir) / CHECKPOINT, store.embedder_name, store.dim)
    pipeline = RerankPipeline(model, store, 100)
    print(f"loaded {len(seq)} paragraphs, vocabulary {lex.shape[1]}, {time.perf_counter() - t0:.0f}s", flush=True)

    def lists(split: str):
        qs = seq.queries(split, 4, limit=args.queries, seed=0 if split == "test" else 1)
        ctx = [seq.vectors[q.context] for q in qs]
        exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in qs]
        ctx_texts = [[corpus[r] for r in q.context] for q in qs]
        ids, _ = pipeline.candidates(ctx, exclude, context_texts=ctx_texts)
        rows = [np.asarray([seq.row_of_id[int(i)] for i in r], np.int64) for r in ids]
        words = pipeline.lexical_features(ctx_texts, [[corpus[i] for i in r] for r in rows])
        model_scores, _, _ = pipeline.score(ctx, [seq.vectors[r] for r in rows], lexical_features=words)
        feats = []
        for q, r, s in zip(qs, rows, model_scores):
            cand = lex[r]
            last = (cand @ lex[q.context[-1]].T).toarray().ravel()
            whole = lex[q.context].sum(0)
            whole = np.asarray(whole / max(np.linalg.norm(whole), 1e-9)).ravel()
            ctx_cos = np.asarray(cand @ whole).ravel()
            cos_last = seq.vectors[r] @ seq.vectors[q.context[-1]]
            feats.append((seq.text_class[r], seq.text_class[q.target], s, cos_last, last, ctx_cos))
        return feats

    def evaluate(feats, base: int, a: float, b: float) -> dict:
        """Rank each list by feature ``base`` (2 model score, 3 cosine to last) + a tfidf(last) + b tfidf(context)."""
        ranks = [hit_rank(f[0][np.argsort(-(f[base] + a * f[4] + b * f[5]), kind="stable")][:10], f[1]) for f in feats]
        return summarize(np.array(ranks), n_boot=1000)

    val, test = lists("validation"), lists("test")
    print(f"mined and scored {len(val)} validation and {len(test)} test lists, {time.perf_counter() - t0:.0f}s", flush=True)
    rows = []
    for base, name, grid in ((2, "model score", (0, 1, 2, 4, 8, 16)), (3, "cosine to last", (0, 0.1, 0.2, 0.3, 0.5, 1.0))):
        best = max(itertools.product(grid, grid), key=lambda ab: evaluate(val, base, *ab)["mrr@10"])
        for a, b in ((0, 0), best):
            v, t = evaluate(val, base, a, b), evaluate(test, base, a, b)
            rows.append({"base": name, "a_tfidf_last": a, "b_tfidf_context": b, "validation": v, "test": t})
            print(f"{name} + {a} tfidf(last) + {b} tfidf(context): validation MRR@10 {v['mrr@10']:.4f}, "
                  f"test R@1 {t['recall@1']:.4f} {t['recall@1_ci']} MRR@10 {t['mrr@10']:.4f}", flush=True)
    lines = ["| score | a | b | val MRR@10 | test R@1 | test MRR@10 |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        t = r["test"]
        lines.append(f"| {r['base']} | {r['a_tfidf_last']} | {r['b_tfidf_context']} | {r['validation']['mrr@10']:.4f} | "
                     f"{t['recall@1']:.3f} [{t['recall@1_ci'][0]:.3f}, {t['recall@1_ci'][1]:.3f}] | {t['mrr@10']:.3f} |")
    stamp = record.stamp(__file__)
    about = f"model {meta['model_version']} ({'with' if model.cfg.lexical else 'without'} word-overlap features)"
    record.save(args.output, {**stamp, "model": about, "rows": rows, "vocabulary": lex.shape[1], "queries": args.queries},
                f"# Lexical probe: TF-IDF overlap on the model's stage-1 lists ({stamp['date']})\n\n"
                f"Command: `{stamp['command']}`\n\nModel: {about}.\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
