"""Stage-1 recall against the number of candidates, for each candidate source and their unions.

    python -m bench.quality.stage1_recall --data-dir /tmp/peps-bench [--queries 2000]

On validation and test queries (L = 4; the context and every identical text excluded, as in the
protocol of docs/evaluation.md) it measures how often the target is among the candidates of: the
model's query vector (``head``), the last paragraph's vector (``last``), the store's word index
(SQLite FTS5, bm25) searched with the last paragraph's words (``words-last``), with the whole
context's (``words-context``) and with the last paragraph's last sentence alone (``words-seam``: the
words where it meets the next paragraph), each at depths 25 to 500, and unions of them, with the mean
union size; and the best N of the first four by reciprocal-rank fusion (sum over sources of 1 / (60 + rank)).
Two more sources come from the training documents' transitions (attention_core/transitions.py): ``memory``, the
nearest of the store's transition memory's predicted next vector (the last paragraph plus the steps of the training
paragraphs nearest it), which stage 1 serves for a model with a memory weight; and ``memory-2``, a probe of the same
prediction keyed by the last two context paragraphs (a training transition votes by its two paragraphs' cosines to
the context's last two, the one before the last weighted ``--pair-weight``), so that a transition is found by the
sequence it ends rather than by its last paragraph alone; and ``memory-head``, a probe keyed by the model's query
vector instead (a nearest-neighbour language model's keys are its context representations): each training query's
query vector q_i is a key, the step to its target t_i - q_i its value, and a query's prediction is its own q plus
the steps of the K training queries whose q_i are nearest, weighted as transitions.py weighs them, normalised: the
head corrected by where it erred on contexts like this one. And ``blend A``: the query vector and the memory's
prediction in one vector, normalize(q + A p), searched in the head's place. And ``backward``, the transitions read
the other way: every stored paragraph's predicted predecessor r(c) (bench/quality/successor_memory.py:
backward_predictions, a training paragraph's own transition left out), searched by the last context paragraph, so a
candidate is found by where its predecessor would lie. All are fused with the others too.
The model is the store's own, else the general model. It also times the word searches. No model is trained
here: it says which sources and depths are worth a reranker's time. Writes bench/results/NAME.{md,json}
(``--output``, default stage1_recall).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from nextpara.attention_core.lexical import last_sentence

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEPTHS = (25, 50, 100, 200, 300, 500)
UNIONS = {  # name -> depth of each source
    "head 100 + last 100 (today)": {"head": 100, "last": 100},
    "head 100 + last 100 + words-last 50": {"head": 100, "last": 100, "words-last": 50},
    "head 100 + last 100 + words-last 50 + words-context 50": {"head": 100, "last": 100, "words-last": 50,
                                                              "words-context": 50},
    "head 75 + last 50 + words-last 25 + words-context 50": {"head": 75, "last": 50, "words-last": 25,
                                                            "words-context": 50},
    "head 100 + last 50 + words-last 50 + words-context 100": {"head": 100, "last": 50, "words-last": 50,
                                                              "words-context": 100},
    "head 200 + last 100 + words-last 100 + words-context 100": {"head": 200, "last": 100, "words-last": 100,
                                                                "words-context": 100},
    "head 100 + last 100 + words-seam 50": {"head": 100, "last": 100, "words-seam": 50},
    "head 100 + last 100 + words-seam 25 + words-context 25": {"head": 100, "last": 100, "words-seam": 25,
                                                              "words-context": 25},
    "head 100 + last 100 + words-seam 50 + words-context 50": {"head": 100, "last": 100, "words-seam": 50,
                                                              "words-context": 50},
}
MEMORY_UNIONS = {
    "head 100 + last 100 + memory 50": {"head": 100, "last": 100, "memory": 50},
    "head 100 + last 100 + memory-2 50": {"head": 100, "last": 100, "memory-2": 50},
    "head 100 + last 100 + memory 50 + memory-2 50": {"head": 100, "last": 100, "memory": 50, "memory-2": 50},
    "head 100 + last 50 + memory 100": {"head": 100, "last": 50, "memory": 100},
    "head 100 + memory 100": {"head": 100, "memory": 100},
    "head 100 + last 100 + memory 50 + words-last 50 + words-context 50": {
        "head": 100, "last": 100, "memory": 50, "words-last": 50, "words-context": 50},
    "head 100 + last 100 + memory 50 + memory-2 50 + words-context 50": {
        "head": 100, "last": 100, "memory": 50, "memory-2": 50, "words-context": 50},
    "head 100 + last 100 + memory-head 50": {"head": 100, "last": 100, "memory-head": 50},
    "memory-head 100 + last 100": {"memory-head": 100, "last": 100},
    "head 50 + memory-head 100 + last 100": {"head": 50, "memory-head": 100, "last": 100},
    "head 100 + last 100 + memory 50 + memory-head 50": {"head": 100, "last": 100, "memory": 50, "memory-head": 50},
    "blend 0.5 100 + last 100": {"blend 0.5": 100, "last": 100},
    "blend 1 100 + last 100": {"blend 1": 100, "last": 100},
    "blend 0.5 100 + last 100 + memory 50": {"blend 0.5": 100, "last": 100, "memory": 50},
    "blend 1 100 + last 100 + memory 50": {"blend 1": 100, "last": 100, "memory": 50},
    "head 100 + last 100 + backward 50": {"head": 100, "last": 100, "backward": 50},
    "head 100 + last 100 + memory 50 + backward 50": {"head": 100, "last": 100, "memory": 50, "backward": 50},
}
BLENDS = (0.5, 1.0)
FUSED_SOURCES = ("head", "last", "words-last", "words-context")
FUSIONS = {"four": FUSED_SOURCES, "five, with memory": FUSED_SOURCES + ("memory",),
           "six, with memory and memory-2": FUSED_SOURCES + ("memory", "memory-2"),
           "head, last, memory, memory-2": ("head", "last", "memory", "memory-2"),
           "five, with memory-head": FUSED_SOURCES + ("memory-head",),
           "six, with memory and memory-head": FUSED_SOURCES + ("memory", "memory-head"),
           "six, with memory-head and backward": FUSED_SOURCES + ("memory-head", "backward")}


FUSED = (100, 150, 200, 300)  # candidates kept by reciprocal-rank fusion
RRF_K = 60  # the usual constant of reciprocal-rank fusion


def fused(lists: dict, i: int, n: int, sources: tuple[str, ...] = FUSED_SOURCES) -> list[int]:
    """The ``n`` ids of query ``i`` with the highest sum over ``sources`` of 1 / (RRF_K + rank)."""
    score: dict[int, float] = {}
    for source in (lists[name] for name in sources):
        for rank, x in enumerate(list(source[i])):
            if x >= 0:
                score[int(x)] = score.get(int(x), 0.0) + 1.0 / (RRF_K + rank)
    return sorted(score, key=score.__getitem__, reverse=True)[:n]


def recall(seq, lists: dict, targets: list, depths: dict[str, int] | list) -> tuple[float, float]:
    """(how often the target's text is among the union of each source's first ``depths[source]``, or among the ids of
    ``depths`` when it is a list (per query: the ids kept by fusion), mean union size)."""
    hits, sizes = [], []
    for i, target in enumerate(targets):
        ids = (depths[i] if isinstance(depths, list) else
               {int(x) for name, n in depths.items() for x in list(lists[name][i])[:n] if x >= 0})
        rows = [seq.row_of_id[x] for x in ids]
        hits.append(bool(rows) and bool((seq.text_class[rows] == target).any()))
        sizes.append(len(ids))
    return float(np.mean(hits)), float(np.mean(sizes))


def pair_memory(seq, pair_weight: float):
    """The probe's memory keyed by two paragraphs: for each training transition (a, b -> c) of the split rule's
    training documents, the key (w a, b) / sqrt(1 + w^2) and the step c - b; a query's (w prev, last) / sqrt(1 + w^2)
    finds the transitions whose two paragraphs are nearest its last two (a one-paragraph context repeats its last).
    Returns predict(contexts) -> (B, D) unit vectors, the last paragraph plus the K nearest steps weighted as
    transitions.py weighs them (transitions.vote)."""
    import faiss
    from nextpara.attention_core import transitions

    triples = seq.queries("train", 2, min_context=2)
    scale = 1.0 / np.sqrt(1.0 + pair_weight ** 2)

    def key(prev: np.ndarray, last: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.concatenate([pair_weight * prev, last], axis=1) * scale, dtype=np.float32)

    a, b = (seq.vectors[[q.context[j] for q in triples]] for j in (0, 1))
    steps = seq.vectors[[q.target for q in triples]] - b
    index = faiss.IndexFlatIP(2 * seq.vectors.shape[1])
    index.add(key(a, b))

    def predict(contexts: list[np.ndarray]) -> np.ndarray:
        last = np.stack([c[-1] for c in contexts])
        prev = np.stack([c[-2] if len(c) > 1 else c[-1] for c in contexts])
        sims, rows = index.search(key(prev, last), transitions.K)
        return transitions.vote(last, sims, rows, steps).astype(np.float32)

    return predict


def blend(q: np.ndarray, p: np.ndarray, a: float) -> np.ndarray:
    """normalize(q + a p) per row: the query vector moved toward the memory's prediction."""
    v = q + a * p
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def head_memory(seq, pipeline):
    """The probe's memory keyed by the model's query vectors (the module's docstring, ``memory-head``): returns
    predict(contexts, q) -> (B, D) unit vectors."""
    import faiss
    from nextpara.attention_core import transitions

    train = seq.queries("train", 4)
    keys = np.ascontiguousarray(pipeline.query_vectors([seq.vectors[t.context] for t in train]), dtype=np.float32)
    steps = seq.vectors[[t.target for t in train]] - keys
    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(keys)

    def predict(q: np.ndarray) -> np.ndarray:
        q = np.ascontiguousarray(q, dtype=np.float32)
        sims, rows = index.search(q, transitions.K)
        return transitions.vote(q, sims, rows, steps).astype(np.float32)

    return predict


def main() -> int:
    parser = record.store_parser(__doc__, __file__)
    parser.add_argument("--output", default="stage1_recall", help="name of the result files (default stage1_recall)")
    parser.add_argument("--max-terms", type=int, default=None, help="word queries keep this many rarest terms "
                        "(default: store/word_index.py's MAX_TERMS)")
    parser.add_argument("--max-doc-fraction", type=float, default=None, help="... that occur in at most this fraction "
                        "of the paragraphs (default: MAX_DOC_FRACTION)")
    parser.add_argument("--pair-weight", type=float, default=0.5, help="memory-2: the weight of the paragraph "
                        "before the last in a transition's key (default 0.5)")
    args = parser.parse_args()
    from nextpara.attention_core import transitions
    from nextpara.store import word_index

    if args.max_terms is not None:
        word_index.MAX_TERMS = args.max_terms
    if args.max_doc_fraction is not None:
        word_index.MAX_DOC_FRACTION = args.max_doc_fraction

    from nextpara.attention_core.general import served_model
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    store = open_store(args.data_dir, readonly=True)
    if not store.words.available:
        raise SystemExit(f"{args.data_dir} has no word index yet: open it once for writing (e.g. nextpara build) first")
    seq = ParagraphSequences(store)
    model, meta = served_model(store)
    pipeline = RerankPipeline(model, store)
    memory, memory2 = transitions.for_store(store).get(), pair_memory(seq, args.pair_weight)
    if not len(memory):
        raise SystemExit(f"{args.data_dir}: no training transitions to remember (the memory's sources need them)")
    memory_head = head_memory(seq, pipeline)
    from bench.quality.successor_memory import backward_predictions, nearest_rows

    predecessors = backward_predictions(seq, transitions.K, transitions.TEMPERATURE)
    deepest = max(DEPTHS)
    out: dict = {"sources": {}, "unions": {}, "seconds_per_query": {}}
    for split, seed in (("validation", 1), ("test", 0)):
        qs = seq.queries(split, 4, limit=args.queries, seed=seed)
        exclude = [set(seq.ids[seq.same_text_rows(q.context)].tolist()) for q in qs]
        texts = {int(r): p.text for r, p in zip(
            sorted({int(r) for q in qs for r in q.context}),
            store.get_paragraphs([int(seq.ids[r]) for r in sorted({int(r) for q in qs for r in q.context})]))}
        contexts = [seq.vectors[q.context] for q in qs]
        q = pipeline.query_vectors(contexts)
        p_next = memory.predict(np.stack([c[-1] for c in contexts]))
        lists = {"head": store.search(q, deepest, exclude)[1],
                 "memory-head": store.search(memory_head(q), deepest, exclude)[1],
                 **{f"blend {a:g}": store.search(blend(q, p_next, a), deepest, exclude)[1] for a in BLENDS},
                 "last": store.search(np.stack([c[-1] for c in contexts]), deepest, exclude)[1],
                 "memory": store.search(p_next, deepest, exclude)[1],
                 "backward": [seq.ids[r] for r in nearest_rows(seq, qs, np.stack([c[-1] for c in contexts]), deepest,
                                                               predecessors)],
                 "memory-2": store.search(memory2(contexts), deepest, exclude)[1]}
        for name, query_texts in (("words-last", [texts[int(q.context[-1])] for q in qs]),
                                  ("words-context", [" ".join(texts[int(r)] for r in q.context) for q in qs]),
                                  ("words-seam", [last_sentence(texts[int(q.context[-1])]) for q in qs])):
            t0 = time.perf_counter()
            lists[name] = store.word_search(query_texts, deepest, exclude)
            out["seconds_per_query"].setdefault(name, {})[split] = (time.perf_counter() - t0) / len(qs)
        targets = [seq.text_class[q.target] for q in qs]

        for name in lists:
            out["sources"].setdefault(name, {})[split] = {str(n): recall(seq, lists, targets, {name: n})[0] for n in DEPTHS}
        for name, depths in {**UNIONS, **MEMORY_UNIONS}.items():
            r, size = recall(seq, lists, targets, depths)
            out["unions"].setdefault(name, {})[split] = {"recall": r, "size": size}
        for sources in FUSIONS.values():
            ranked = [fused(lists, i, max(FUSED), sources) for i in range(len(qs))]
            for n in FUSED:
                r, size = recall(seq, lists, targets, [row[:n] for row in ranked])
                out["unions"].setdefault(f"fused top {n} (reciprocal rank, {', '.join(sources)}; {deepest} deep)",
                                         {})[split] = {"recall": r, "size": size}
        print(split, {k: v[split] for k, v in out["unions"].items()}, flush=True)

    stamp = record.stamp(__file__)
    lines = ["Recall of each source alone (validation / test):", "",
             "| source | " + " | ".join(f"top {n}" for n in DEPTHS) + " |", "| --- |" + " --- |" * len(DEPTHS)]
    lines += [f"| {name} | " + " | ".join(f"{v['validation'][str(n)]:.3f} / {v['test'][str(n)]:.3f}" for n in DEPTHS) + " |"
              for name, v in out["sources"].items()]
    lines += ["", "Unions:", "", "| candidates | validation recall | test recall | mean size (test) |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {v['validation']['recall']:.3f} | {v['test']['recall']:.3f} | {v['test']['size']:.0f} |"
              for name, v in out["unions"].items()]
    ms = {k: round(1000 * np.mean(list(v.values())), 2) for k, v in out["seconds_per_query"].items()}
    lines += ["", f"Word search time per query, {deepest} deep (SQLite FTS5 bm25, one thread): "
              + ", ".join(f"{k} {v} ms" for k, v in ms.items()) + "."]
    settings = {"max_terms": word_index.MAX_TERMS, "max_doc_fraction": word_index.MAX_DOC_FRACTION}
    record.save(args.output, {**stamp, "model": meta["model_version"], "queries": args.queries, "word_index": settings,
                              "memory": {"transitions": len(memory), "k": transitions.K,
                                         "temperature": transitions.TEMPERATURE, "pair_weight": args.pair_weight},
                              **out},
                f"# Stage-1 recall against the number of candidates ({stamp['date']})\n\nCommand: `{stamp['command']}`; "
                f"model {meta['model_version']}; {args.queries} queries per split, L = 4; word index queries keep "
                f"their {settings['max_terms']} rarest terms in at most {settings['max_doc_fraction']:.0%} of the "
                f"paragraphs; memory: {len(memory):,} training transitions, k = {transitions.K}, "
                f"temperature {transitions.TEMPERATURE}, memory-2's weight of the paragraph before the last "
                f"{args.pair_weight}.\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
