"""Probe: which cheap signals beside the trained model tell the *next* paragraph from its neighbours?

    python -m bench.quality.seam_probe --data-dir /tmp/peps-bench [--queries 4000] [--output NAME]
        [--word-candidates 50] [--memory-candidates N] [--memory-boost W] [--variants 'memory_cos;memory']

On the trained model's own validation lists (L = 4, context as stored vectors and texts), stage 1 widened
with the word index (the last paragraph's words and the whole context's, 50 each), it fits a small
listwise model over the model's score plus feature groups and reports, by 2-fold cross-validation over
validation *documents* (the test split is not touched), MRR@10, Recall@1 and direction accuracy (among
queries whose list holds the target: the target above every other candidate of its own document). The
groups, all from content (docs/evaluation.md):

- ``ranks``: 1 / (1 + rank) of the candidate in each stage-1 source (query head, last paragraph's
  vector, the last paragraph's words, the context's words), 0 where a source did not return it.
- ``seam``: TF-IDF cosines (the model's own IDF) where two paragraphs meet: the candidate's first
  sentence against the last context paragraph's last sentence and against the whole last paragraph, the
  whole candidate against that last sentence; and backwards, the candidate's last sentence against the
  first context paragraph's first sentence (a candidate that *precedes* the context).
- ``shape``: the candidate's length in tokens (log) and whether it ends with a colon or a question mark.
- ``novel``: what the last paragraph adds to the context: the TF-IDF cosine between the candidate and the last
  paragraph's words that no earlier context paragraph has (the thread the next paragraph should take up, where an
  earlier paragraph of the document shares only the document's words), and the share of the candidate's weight on
  words the context does not have.
- ``depth``: how far into its document a paragraph reads, from its vector alone: a ridge regression from the
  embedding to the relative position (0 first, 1 last), fitted on the *training* documents' paragraphs; the
  candidate's predicted depth minus the last context paragraph's, and the candidate's own. Positions train it;
  only vectors feed it (docs/evaluation.md).
- ``pool``: where the candidate stands among the other candidates (what the pool density feature starts): its
  largest cosine to any other candidate, the cosine to the last context paragraph minus that, and log(1 + the
  number of candidates closer to it than the last context paragraph is). A paragraph next to the context has the
  last context paragraph among its nearest; a far paragraph of the same document has its own neighbours closer.
- ``prf``: the cosine to the model's own top 10, weighted by a softmax of their scores (the candidate itself left
  out): pseudo-relevance feedback inside the list.
- ``local``: word overlap weighted by the *list's* IDF instead of the corpus's: a word most of the candidates
  share (the document's names and terms, when the list is mostly the context's document) weighs little, one few
  of them have weighs most; the cosine of the candidate with the last context paragraph and with the whole
  context under those weights. Near paragraphs share the local words, far ones only the document's.

- ``memory``: the transition memory's prediction (attention_core/transitions.py) read with how sure it is: the
  candidate's cosine to the predicted next vector p, the cosine of the key nearest the last context paragraph (near 1:
  a transition seen before, often boilerplate another document repeats), their product, and 1 / (1 + the candidate's
  rank by cos(c, p) in the list). The served model adds one constant times cos(c, p) to every list
  (``memory_boost``, in the model's score here); the group asks whether a weight that depends on the nearest key's
  cosine ranks better; ``memory_cos``, the cosine to p alone, asks how much of that a weight refitted on these
  lists gives. ``--memory-candidates N`` adds p's N nearest to the lists (their union with the other sources: stage
  1 serves up to N of p's nearest that the others did not find, so a little more than this adds).

The document id of a candidate is read only to compute direction accuracy, never as a feature.
"""

from __future__ import annotations

import os
import sys
import time
import zlib

import numpy as np
from nextpara.attention_core.lexical import first_sentence, last_sentence
from scipy import sparse

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")

GROUPS = {"ranks": slice(0, 4), "seam": slice(4, 8), "shape": slice(8, 11), "novel": slice(11, 13), "depth": slice(13, 15),
          "pool": slice(15, 18), "prf": slice(18, 19), "local": slice(19, 21), "memory": slice(21, 25),
          "memory_cos": slice(21, 22)}
N_COLUMNS = 25
VARIANTS = [(), ("ranks",), ("seam",), ("shape",), ("novel",), ("ranks", "seam"), ("ranks", "seam", "shape"),
            ("depth",), ("novel", "depth"), ("ranks", "seam", "shape", "novel", "depth")]


def reweighted(m: sparse.csr_matrix, idf: np.ndarray) -> sparse.csr_matrix:
    """TF-IDF rows with their weights multiplied by ``idf`` (per bucket), L2-normalised again."""
    m = m.copy()
    m.data *= idf[m.indices]
    norms = np.sqrt(np.asarray(m.multiply(m).sum(1)).ravel())
    return sparse.diags(1.0 / np.maximum(norms, 1e-9)) @ m


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--output", default="seam_probe", help="results name under bench/results/")
    parser.add_argument("--word-candidates", type=int, default=50, help="per word source (0: vectors only)")
    parser.add_argument("--memory-candidates", type=int, default=0, help="p's nearest added to the lists (default 0)")
    parser.add_argument("--memory-boost", type=float, default=None, help="the model's memory weight in its scores "
                        "(default: its own)")
    parser.add_argument("--variants", help="groups to try, e.g. 'pool;local;pool+local' (default: the ten of "
                        "VARIANTS, which the earlier records ran)")
    args = parser.parse_args()
    variants = ([tuple(v.split("+")) if v else () for v in args.variants.split(";")] if args.variants else VARIANTS)
    if () not in variants:
        variants = [(), *variants]
    unknown = {g for v in variants for g in v} - GROUPS.keys()
    if unknown:
        parser.error(f"unknown groups {sorted(unknown)}; the groups are {sorted(GROUPS)}")

    import torch
    from nextpara.attention_core import lexical, transitions
    from nextpara.attention_core.candidates import search_excluding
    from nextpara.attention_core.general import served_model
    from nextpara.attention_core.metrics import hit_rank, paired_gain, summarize
    from nextpara.attention_core.model import NextParagraphModel
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    t0 = time.perf_counter()
    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    docs = np.asarray(seq.doc_ids)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    model, meta = served_model(store)  # the store's own model, else the general model
    if args.memory_boost is not None:
        model.cfg.memory_boost = args.memory_boost
    pipeline = RerankPipeline(model, store, 100)
    lexicon = pipeline.lexicon
    whole, first, last = (lexicon.matrix(texts), lexicon.matrix([first_sentence(t) for t in texts]),
                          lexicon.matrix([last_sentence(t) for t in texts]))
    n_tokens = np.array([len(lexical.TOKEN.findall(t)) for t in texts])
    print(f"loaded {len(seq)} paragraphs and their sentence rows, {time.perf_counter() - t0:.0f}s", flush=True)

    train_rows = seq.split_rows("train")
    doc_len = {d: len(r) for d, r in seq.doc_rows.items()}
    relative = np.array([seq.positions[r] / max(1, doc_len[seq.doc_ids[r]] - 1) for r in train_rows])
    X = seq.vectors[train_rows]
    weights = np.linalg.solve(X.T @ X + 1.0 * np.eye(X.shape[1]), X.T @ (relative - relative.mean()))
    depth = seq.vectors @ weights + relative.mean()  # every paragraph's predicted depth, from its vector alone
    qs = seq.queries("validation", 4, limit=args.queries, seed=1)
    ctx = [seq.vectors[q.context] for q in qs]
    exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in qs]
    query_vectors = pipeline.query_vectors(ctx)
    sources = [search_excluding(store, query_vectors, 100, exclude),
               search_excluding(store, np.stack([c[-1] for c in ctx]), 100, exclude)]
    memory = transitions.for_store(store).get()
    last_vectors = np.ascontiguousarray(np.stack([c[-1] for c in ctx]), dtype=np.float32)
    if not len(memory):
        raise SystemExit(f"{args.data_dir}: no training transitions to remember (the memory group needs them)")
    p_next = memory.predict(last_vectors)
    nearest_key = memory.index.search(last_vectors, 1)[0][:, 0]
    if args.word_candidates:
        ctx_texts = [[texts[r] for r in q.context] for q in qs]
        sources += [store.word_search([t[-1] for t in ctx_texts], args.word_candidates, exclude),
                    store.word_search([" ".join(t) for t in ctx_texts], args.word_candidates, exclude)]
    ranked_sources = list(sources)  # the ``ranks`` group's: the memory's candidates have none
    if args.memory_candidates:
        sources.append(search_excluding(store, p_next, args.memory_candidates, exclude))
    lists, feats = [], []
    for i, q in enumerate(qs):
        ids = list(dict.fromkeys(sum((s[i] for s in sources), [])))
        rows = np.asarray([seq.row_of_id[j] for j in ids], np.int64)
        f = np.zeros((len(rows), N_COLUMNS), np.float32)
        for s, source in enumerate(ranked_sources):
            rank = {j: k for k, j in enumerate(source[i])}
            f[:, s] = [1.0 / (1 + rank[j]) if j in rank else 0.0 for j in ids]
        c_last, c_first = q.context[-1], q.context[0]
        f[:, 4] = (first[rows] @ last[c_last].T).toarray().ravel()
        f[:, 5] = (first[rows] @ whole[c_last].T).toarray().ravel()
        f[:, 6] = (whole[rows] @ last[c_last].T).toarray().ravel()
        f[:, 7] = (last[rows] @ first[c_first].T).toarray().ravel()
        f[:, 8] = np.log1p(n_tokens[rows])
        f[:, 9] = [texts[r].rstrip().endswith(":") for r in rows]
        f[:, 10] = [texts[r].rstrip().endswith("?") for r in rows]
        f[:, 11:13] = lexical.features(whole[q.context], whole[rows], 4, novel=True)[:, -2:]  # the model's own
        f[:, 13] = depth[rows] - depth[c_last]
        f[:, 14] = depth[rows]
        v = torch.from_numpy(seq.vectors[rows])[None]  # (1, K, D): the model's own pool features
        to_last = v @ torch.from_numpy(seq.vectors[c_last])  # (1, K)
        pool = NextParagraphModel.pool(v, torch.ones(1, len(rows), dtype=torch.bool), to_last)
        f[:, 15:18] = torch.cat(pool[1:], -1)[0].numpy()
        w = whole[rows]
        buckets, df = np.unique(w.indices, return_counts=True)
        list_idf = np.full(lexical.N_BUCKETS, np.log(len(rows) + 1.0), np.float32)
        list_idf[buckets] = np.log((len(rows) + 1.0) / (1.0 + df))
        lw, lc = reweighted(w, list_idf), reweighted(whole[q.context], list_idf)
        f[:, 19] = (lw @ lc[-1].T).toarray().ravel()
        ctx_sum = np.asarray(lc.sum(0)).ravel()
        f[:, 20] = lw @ (ctx_sum / max(np.linalg.norm(ctx_sum), 1e-9))
        to_p = seq.vectors[rows] @ p_next[i]
        f[:, 21], f[:, 22], f[:, 23] = to_p, nearest_key[i], to_p * nearest_key[i]
        f[np.argsort(-to_p, kind="stable"), 24] = 1.0 / (1.0 + np.arange(len(rows)))
        lists.append(rows)
        feats.append(f)
    words = pipeline.lexical_features([[texts[r] for r in q.context] for q in qs], [[texts[r] for r in l] for l in lists])
    base, _, _ = pipeline.score(ctx, [seq.vectors[l] for l in lists], lexical_features=words)
    print(f"mined and scored {len(qs)} validation lists, {time.perf_counter() - t0:.0f}s", flush=True)
    for l, sc, f in zip(lists, base, feats):  # prf: the score-weighted top 10, the candidate itself left out
        v = seq.vectors[l]
        top = np.argsort(-sc, kind="stable")[:10]
        w = np.exp(sc[top] - sc[top].max())
        w /= w.sum()
        weight = np.zeros(len(l), np.float32)
        weight[top] = w
        centre = w @ v[top]  # (D,)
        others = centre[None, :] - weight[:, None] * v  # (K, D)
        f[:, 18] = (v * others).sum(1) / np.maximum(np.linalg.norm(others, axis=1), 1e-9)

    target_class = np.array([seq.text_class[q.target] for q in qs])
    in_list = np.array([np.isin(seq.text_class[l], c).any() for l, c in zip(lists, target_class)])
    fold = np.array([zlib.crc32(seq.doc_ids[q.target].encode()) % 2 for q in qs])  # by document: a fold never sees its own docs

    def ranked(scores: list[np.ndarray]):
        """(metrics with direction accuracy, each query's rank)."""
        ranks, direction = [], []
        for l, s, q, c, hit in zip(lists, scores, qs, target_class, in_list):
            order = l[np.argsort(-s, kind="stable")]
            ranks.append(hit_rank(seq.text_class[order[:10]], c))
            if hit:
                same_doc = (docs[order] == docs[q.target]) | (seq.text_class[order] == c)
                direction.append(seq.text_class[order[same_doc][0]] == c)
        out = summarize(np.array(ranks), n_boot=500)
        out["direction"] = float(np.mean(direction))
        return out, np.array(ranks)

    def fit(cols: np.ndarray, train: np.ndarray) -> torch.nn.Module:
        """A 16-unit MLP over [model score, features] added to the model score, listwise softmax over padded lists."""
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(len(cols) + 1, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
        opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-4)
        picks = [i for i in np.flatnonzero(train) if in_list[i]]
        K = max(len(lists[i]) for i in picks)
        x = torch.zeros(len(picks), K, len(cols) + 1)
        real = torch.zeros(len(picks), K, dtype=torch.bool)
        positive = torch.zeros(len(picks), K, dtype=torch.bool)
        for n, i in enumerate(picks):
            x[n, :len(lists[i])] = torch.from_numpy(np.column_stack([base[i], feats[i][:, cols]]))
            real[n, :len(lists[i])] = True
            positive[n, :len(lists[i])] = torch.from_numpy(seq.text_class[lists[i]] == target_class[i])
        for _ in range(300):
            logits = (x[..., 0] + net(x).squeeze(-1)).masked_fill(~real, float("-inf"))
            loss = (torch.logsumexp(logits, -1) - torch.logsumexp(logits.masked_fill(~positive, float("-inf")), -1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return net

    rows_out = []
    model_ranks = ranked(base)[1]  # every row's change is paired with the model's own ranking
    for groups in variants:
        cols = np.concatenate([np.arange(N_COLUMNS)[GROUPS[g]] for g in groups]).astype(int) if groups else np.zeros(0, int)
        if groups:
            scores: list = [None] * len(qs)
            for k in (0, 1):
                net = fit(cols, fold != k)
                with torch.no_grad():
                    for i in np.flatnonzero(fold == k):
                        x = torch.from_numpy(np.column_stack([base[i], feats[i][:, cols]]))
                        scores[i] = (x[:, 0] + net(x).squeeze(-1)).numpy()
        else:
            scores = base
        m, ranks = ranked(scores)
        m["gain"] = paired_gain(model_ranks, ranks, n_boot=500)
        name = " + ".join(("model",) + groups)
        rows_out.append({"features": name, **m})
        print(f"{name}: R@1 {m['recall@1']:.4f} MRR@10 {m['mrr@10']:.4f} direction {m['direction']:.3f} paired "
              f"{m['gain']['recall@1']:+.4f} {m['gain']['recall@1_ci']} {m['gain']['mrr@10']:+.4f} {m['gain']['mrr@10_ci']}",
              flush=True)

    stamp = record.stamp(__file__)
    about = (f"model {meta['model_version']} ({meta.get('source', 'trained')}), memory weight "
             f"{model.cfg.memory_boost:g}")
    lines = [f"# Seam probe: cheap signals beside the trained model ({stamp['date']})", "",
             f"Command: `{stamp['command']}`", "", f"Model: {about}; {len(qs)} validation queries (L = 4); stage-1 "
             f"recall {in_list.mean():.3f} with {np.mean([len(l) for l in lists]):.0f} candidates on average (query head "
             f"100, last paragraph 100, the word index {args.word_candidates} per source, the transition memory's p "
             f"{args.memory_candidates}). Each added group goes through a 16-unit MLP fitted listwise, 2-fold "
             "cross-validated by document; each change is paired with the model's ranking of the same queries.", "",
             "| features | R@1 | MRR@10 | direction accuracy | R@1 change, paired | MRR@10 change, paired |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows_out:
        g = r["gain"]
        lines.append(f"| {r['features']} | {r['recall@1']:.4f} [{r['recall@1_ci'][0]:.3f}, {r['recall@1_ci'][1]:.3f}] | "
                     f"{r['mrr@10']:.4f} | {r['direction']:.3f} | {g['recall@1']:+.4f} [{g['recall@1_ci'][0]:+.4f}, "
                     f"{g['recall@1_ci'][1]:+.4f}] | {g['mrr@10']:+.4f} [{g['mrr@10_ci'][0]:+.4f}, {g['mrr@10_ci'][1]:+.4f}] |")
    record.save(args.output, {**stamp, "model": about, "rows": rows_out, "queries": len(qs),
                              "stage1_recall": float(in_list.mean())}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
