"""Probe: does a memory of the training documents' transitions find and rank the next paragraph?

    python -m bench.quality.successor_memory --data-dir DIR [--model PATH] [--queries 2000] [--k 16]
        [--temperature 0.05] [--offset [--mixture TAU]] [--max-key-cosine C] [--backward [--forward W]] [--add 50]
        [--output NAME]

The query head learns one smooth map from a context to where its next paragraph lies. A memory keeps the
transitions themselves, as a k-nearest-neighbour language model keeps its training text: every (paragraph, next
paragraph) pair of the training split's documents, keyed by the first one's vector. For a query, the k keys nearest
its last context paragraph vote, by softmax(cosine / temperature), for their successors' vectors; their weighted sum
(normalised) is a predicted next vector p, and a candidate's cosine to p is one more signal. Only content is read
at query time (a vector's nearest keys), never a candidate's doc_id or position; the positions are read only to
make the memory from training documents, as training reads them. On the validation split (L = 4, the context as
stored vectors and texts; the test split is not touched, docs/evaluation.md), before any training:

- stage 1: the target among p's nearest N, beside the last paragraph's nearest N (B1's list), and among the
  served list with p's ``--add`` nearest added ("served": the model's stage 1 without the memory, whose weight the
  probe sets to 0; the product's stage 1 now adds p's nearest itself, candidates.py, as the widened list does);
- ranking: B1 (the last paragraph's 500 nearest) plus beta * cos(c, p), and the model's scores plus beta * cos(c, p)
  on its own list and on the list with p's nearest added; each change from beta = 0 with a paired bootstrap interval.

``--backward`` reads the transitions the other way: each candidate c's predicted predecessor r(c) (the training
successors nearest c vote for their steps back; backward_predictions), and ranks by beta * cos(last, r(c)) instead. It
asks a different question (does c look like what follows paragraphs like the last one?), one that may tell the next
paragraph from the one after it, whose predicted predecessor is the next paragraph rather than the last.

``--mixture TAU`` (with ``--offset``) keeps the k predictions apart instead of averaging them: each key's own
p_j = normalize(last + its step), and a candidate's term TAU * log sum_j w_j exp(cos(c, p_j) / TAU), as a
nearest-neighbour language model mixes its neighbours' distributions rather than their vectors. Where the neighbours'
transitions go different ways, the mean p lies between them, near none of the paragraphs that follow; the mixture
scores a candidate by the transitions it matches. Its rows are added beside the mean's, each also paired with the
mean's at the same beta.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench import record
from bench.quality.ensemble import first_hit, load_member
from bench.quality.hubness import B1_DEPTH, b1_lists, paired_table
from bench.quality.lists import candidate_rows, model_scores

os.environ.setdefault("HF_HUB_OFFLINE", "1")

B1_BETAS = (0.0, 0.25, 0.5, 1.0, 2.0)  # cosine units
MODEL_BETAS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)  # the model's score units (logits)
DEPTHS = (50, 100, 200, 500)


def memory_predictions(seq, queries, k: int, temperature: float, offset: bool,
                       max_key_cosine: float = 2.0, parts: bool = False) -> tuple:
    """(p per query, mean cosine of the nearest key): the training documents' successors of the k keys nearest
    each query's last context paragraph, weighted by softmax(cosine / temperature), normalised; with ``offset``,
    the last paragraph plus the weighted steps (successor - key) instead. Keys at or above ``max_key_cosine`` to the
    last paragraph are left out (how much of the memory's use is boilerplate found again). With ``parts`` (and
    ``offset``) also (log weights (Q, k), each key's own prediction normalize(last + step), (Q, k, D))."""
    import faiss

    pairs = seq.queries("train", 1)
    keys = np.ascontiguousarray(seq.vectors[[q.context[-1] for q in pairs]])
    values = seq.vectors[[q.target for q in pairs]]
    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    sims, rows = index.search(np.ascontiguousarray(seq.vectors[[q.context[-1] for q in queries]]), k + 64)
    order = np.argsort(sims >= max_key_cosine, axis=1, kind="stable")[:, :k]  # the k best below the bound
    sims, rows = np.take_along_axis(sims, order, 1), np.take_along_axis(rows, order, 1)
    w = np.exp((sims - sims[:, :1]) / temperature)
    w /= w.sum(axis=1, keepdims=True)
    last = seq.vectors[[q.context[-1] for q in queries]]
    p = np.einsum("qk,qkd->qd", w, values[rows] - keys[rows]) + last if offset else np.einsum("qk,qkd->qd", w, values[rows])
    out = (p / np.linalg.norm(p, axis=1, keepdims=True), float(sims[:, 0].mean()))
    if not parts:
        return out
    each = last[:, None, :] + values[rows] - keys[rows]
    return (*out, np.log(np.maximum(w, 1e-30)), each / np.linalg.norm(each, axis=2, keepdims=True))


def backward_predictions(seq, k: int, temperature: float) -> np.ndarray:
    """(N, D): for every stored row, where its predecessor would lie by the training documents' transitions read
    backwards: the k training successors nearest the row vote, by softmax(cosine / temperature), for their steps back
    to their predecessors, added to the row's vector and normalised. A training row's own transition is left out (it
    would name its predecessor exactly), so every row is predicted from other documents' transitions."""
    import faiss

    pairs = seq.queries("train", 1)
    before, after = np.asarray([q.context[-1] for q in pairs]), np.asarray([q.target for q in pairs])
    keys = np.ascontiguousarray(seq.vectors[after])
    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)
    sims, found = index.search(np.ascontiguousarray(seq.vectors), k + 1)
    own = after[found] == np.arange(len(seq.vectors))[:, None]
    order = np.argsort(own, axis=1, kind="stable")[:, :k]  # the k best that are not the row's own transition
    sims, found = np.take_along_axis(sims, order, 1), np.take_along_axis(found, order, 1)
    w = np.exp((sims - sims[:, :1]) / temperature)
    w /= w.sum(axis=1, keepdims=True)
    r = seq.vectors + np.einsum("nk,nkd->nd", w, seq.vectors[before][found] - keys[found])
    return r / np.linalg.norm(r, axis=1, keepdims=True)


def nearest_rows(seq, queries, vectors: np.ndarray, depth: int, table: np.ndarray | None = None) -> list[np.ndarray]:
    """Each vector's ``depth`` nearest stored rows, its query's context and the context's copies excluded; by their
    vectors, or by the rows of ``table`` (one per stored row) when given."""
    import faiss

    table = seq.vectors if table is None else table
    index = faiss.IndexFlatIP(table.shape[1])
    index.add(np.ascontiguousarray(table, dtype=np.float32))
    _, rows = index.search(np.ascontiguousarray(vectors, dtype=np.float32), depth + 64)
    return [r[~np.isin(r, seq.same_text_rows(q.context)) & (r >= 0)][:depth] for q, r in zip(queries, rows)]


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--model", default="general", help="a checkpoint's path, or general (default)")
    parser.add_argument("--k", type=int, default=16, help="memory keys that vote (default 16)")
    parser.add_argument("--temperature", type=float, default=0.05, help="softmax temperature of the votes (default "
                                                                        "0.05, cosine units)")
    parser.add_argument("--offset", action="store_true", help="predict the last paragraph plus its neighbours' steps "
                                                                "(successor - key), not their successors")
    parser.add_argument("--mixture", type=float, default=0.0, help="with --offset: also rank by the mixture of the "
                                                                    "k predictions at this temperature (0: not)")
    parser.add_argument("--max-key-cosine", type=float, default=2.0, help="leave out keys at least this near the last "
                                                                          "paragraph (default: none left out)")
    parser.add_argument("--backward", action="store_true", help="rank by each candidate's predicted predecessor's "
                                                                  "cosine to the last paragraph (backward_predictions)"
                                                                  ", not by the candidate's cosine to p")
    parser.add_argument("--forward", type=float, default=0.0, help="with --backward: the model's scores include "
                                                                    "this weight times cos(c, p), as served")
    parser.add_argument("--add", type=int, default=50, help="p's nearest added to the served list (default 50)")
    parser.add_argument("--output", default=None, help="results name under bench/results/ (default "
                                                       "successor_memory_<store>)")
    args = parser.parse_args()
    if args.mixture and (not args.offset or args.backward):
        parser.error("--mixture needs --offset, and not --backward")
    from pathlib import Path

    from nextpara.attention_core.metrics import paired_gain, summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    store = open_store(args.data_dir, readonly=True)
    seq = ParagraphSequences(store)
    texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
    _, model, meta = load_member(f"model={args.model}", store)
    model.cfg.memory_boost = 0.0  # the model's scores without the memory it may serve with: the probe adds its own
    pipeline = RerankPipeline(model, store, 100)
    qs = seq.queries("validation", 4, limit=args.queries, seed=1)
    targets = [seq.text_class[q.target] for q in qs]
    t0 = time.perf_counter()
    p, key_cosine, *parts = memory_predictions(seq, qs, args.k, args.temperature, args.offset,
                                               args.max_key_cosine, parts=bool(args.mixture))
    memory_ms = (time.perf_counter() - t0) * 1000 / len(qs)
    n_pairs = len(seq.queries("train", 1))

    def has(lists) -> float:
        return float(np.mean([np.isin(t, seq.text_class[l]) for l, t in zip(lists, targets)]))

    mem_lists = nearest_rows(seq, qs, p, max(DEPTHS))
    b1_rows, b1_sims = b1_lists(seq, qs, B1_DEPTH)
    stage1 = {f"{n}": {"last paragraph (B1)": has([r[:n] for r in b1_rows]), "memory p": has([r[:n] for r in mem_lists])}
              for n in DEPTHS}
    served = candidate_rows(pipeline, seq, texts, qs)
    widened = [np.concatenate([s, m[~np.isin(m, s)][:args.add]]) for s, m in zip(served, mem_lists)]
    stage1["served"] = {"size": float(np.mean([len(s) for s in served])), "recall": has(served),
                        "size widened": float(np.mean([len(w) for w in widened])), "recall widened": has(widened)}
    served_scores = model_scores(pipeline, seq, texts, qs, served)
    widened_scores = model_scores(pipeline, seq, texts, qs, widened)
    if args.backward and args.forward:  # the model as served with the memory (p: --offset), the backward term beside it
        served_scores, widened_scores = ([sc + args.forward * (seq.vectors[rows] @ pq) for rows, sc, pq in zip(lists, scores, p)]
                                         for lists, scores in ((served, served_scores), (widened, widened_scores)))

    if args.backward:
        back = backward_predictions(seq, args.k, args.temperature)
        lasts = seq.vectors[[q.context[-1] for q in qs]]

        def term(rows, i):
            return back[rows] @ lasts[i]
    else:
        def term(rows, i):
            return seq.vectors[rows] @ p[i]

    def mixture(rows, i):
        log_w, each = parts
        z = log_w[i][None, :] + (seq.vectors[rows] @ each[i].T) / args.mixture  # (n, k)
        top = z.max(axis=1)
        return args.mixture * (top + np.log(np.exp(z - top[:, None]).sum(axis=1)))

    def ranks(lists, scores, beta, by=None) -> np.ndarray:
        by = by or term
        return np.asarray([first_hit(l, s + beta * by(l, i), seq.text_class, t)
                           for i, (l, s, t) in enumerate(zip(lists, scores, targets))])

    rows = {}
    for method, lists, scores, betas in (("B1", b1_rows, b1_sims, B1_BETAS),
                                         ("model", served, served_scores, MODEL_BETAS),
                                         ("model, widened list", widened, widened_scores, MODEL_BETAS)):
        reference = ranks(served, served_scores, 0.0) if method.startswith("model") else ranks(lists, scores, 0.0)
        for beta in betas:
            r = ranks(lists, scores, beta)
            rows[f"{method} beta {beta:g}"] = {**summarize(r), "gain": paired_gain(reference, r)}
            if args.mixture and method.startswith("model") and beta:
                m = ranks(lists, scores, beta, mixture)
                rows[f"{method}, mixture beta {beta:g}"] = {**summarize(m), "gain": paired_gain(reference, m)}
                rows[f"{method}, mixture beta {beta:g}, against the mean's"] = {**summarize(m), "gain": paired_gain(r, m)}
    stamp = record.stamp(__file__)
    lines = [f"# Successor memory: the training documents' transitions as a predicted next vector ({stamp['date']})",
             "", f"Command: `{stamp['command']}`", "",
             f"Store {args.data_dir} ({len(seq):,} paragraphs; {n_pairs:,} training transitions in the memory, "
             f"{memory_ms:.2f} ms per query to predict; the nearest key's mean cosine {key_cosine:.3f}); "
             f"{len(qs):,} validation queries, L = 4; k = {args.k}, temperature {args.temperature:g}"
             f"{', p the last paragraph plus the steps' if args.offset else ''}"
             f"{f'; the mixture of the k predictions at temperature {args.mixture:g}' if args.mixture else ''}"
             f"{f', keys below cosine {args.max_key_cosine:g} only' if args.max_key_cosine <= 1 else ''}"
             f"{'; ranked by the backward memory: cos(last, r(c))' if args.backward else ''}"
             f"{f', the model with {args.forward:g} cos(c, p)' if args.backward and args.forward else ''}; model "
             f"{meta['model_version']}.", "", "Stage 1, the target among the nearest N:", "",
             "| N | the last paragraph's (B1) | p's |", "| --- | --- | --- |"]
    lines += [f"| {n} | {stage1[f'{n}']['last paragraph (B1)']:.3f} | {stage1[f'{n}']['memory p']:.3f} |"
              for n in DEPTHS]
    s = stage1["served"]
    lines += ["", f"The served list: {s['recall']:.3f} at {s['size']:.0f} candidates; with p's {args.add} nearest "
                  f"added: {s['recall widened']:.3f} at {s['size widened']:.0f}.", "",
              f"Ranking, score + beta * {'cos(last, r(c))' if args.backward else 'cos(c, p)'} (every change paired with beta 0 on the same list; the widened "
              "list's against the served list's model ranking):", "", *paired_table(rows)]
    name = args.output or f"successor_memory_{Path(args.data_dir).name}"
    record.save(name, {**stamp, "queries": len(qs), "k": args.k, "temperature": args.temperature, "add": args.add,
                       "offset": args.offset, "mixture": args.mixture, "backward": args.backward, "forward": args.forward, "max_key_cosine": args.max_key_cosine,
                       "model": meta["model_version"], "training_transitions": n_pairs, "memory_ms": memory_ms,
                       "key_cosine": key_cosine, "stage1": stage1, "rankings": rows},
                "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
