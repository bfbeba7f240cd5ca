"""Train the general model: one reranker over a mixture of genres, for stores with no model of their own.

    python -m bench.quality.train_general --work DIR --store peps=DIR --store narrative=DIR \\
        --store builtin=DIR [--leave-out NAME] [--per-corpus-queries N] [--scorer fast] [--option NAME[=false]] [--install [start]]
        [--eval [--eval-queries N]]

Each ``--store`` is a built MiniLM store of one corpus (``nextpara build --corpus PEPS.jsonl
--data-dir DIR``; ``nextpara build --data-dir DIR`` for the built-in docs). Their paragraphs and vectors are
copied, without embedding anything again, into one mixture store in ``--work`` (doc_ids keep the
split rule of docs/evaluation.md: a document's split is the same in the mixture as in its own store).
Training reads only the mixture's training split, at most ``--per-corpus-queries`` queries of each
corpus (a seeded sample: no genre outweighs the others), with each corpus's word weights fitted on its
own training documents; the checkpoint carries no word weights (``word_weights`` "store": the store it
serves supplies them, attention_core/general.py).

``--leave-out NAME`` trains without that corpus and, with ``--eval``, runs the evaluation protocol on
the left-out corpus's own store with it (``nextpara eval --model``): the zero-shot figure. Without
``--leave-out``, ``--eval`` runs it on every corpus's store. ``--install`` writes the checkpoint to
attention_core/general.safetensors and its version to served.py (GENERAL_VERSION: the model that serves a
store without its own); ``--install start`` to general_start.safetensors (START_VERSION: where ``nextpara train``
starts). The two shipped today are this script's ``--option list_norm`` and default recipes (general.py says why;
both checkpoints were put in place by hand, which ``--install`` and ``--install start`` do).
Records: bench/results/general_model.json (one entry per variant) and .md.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from bench.record import RESULTS, argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
NAME = "general_model"
SERVED_PY = Path(__file__).resolve().parents[2] / "attention_core" / "served.py"  # where the shipped hashes are


def document_spans(src) -> tuple[np.ndarray, dict[str, tuple[int, int]]]:
    """A store's paragraph ids (in doc_id, position order) and each document's (start, end) rows among them."""
    ids, doc_ids, _, _ = src.paragraph_table()
    bounds = [0] + [r for r in range(1, len(ids)) if doc_ids[r] != doc_ids[r - 1]] + [len(ids)]
    return ids, {doc_ids[a]: (a, b) for a, b in zip(bounds, bounds[1:])}


def copy_documents(src, dest, ids: np.ndarray, spans: dict[str, tuple[int, int]], keep: list[str]) -> None:
    """Copy the documents ``keep`` of store ``src`` (texts and vectors, nothing embedded again) into store ``dest``."""
    from nextpara.store.corpus import Document

    rows = np.concatenate([np.arange(*spans[d]) for d in keep]) if keep else np.zeros(0, np.int64)
    texts = [p.text for p in src.get_paragraphs([int(i) for i in ids[rows]])]
    vectors = src.vectors(ids[rows])
    at, docs, vecs = 0, [], []
    for d in keep:
        n = spans[d][1] - spans[d][0]
        docs.append(Document(d, texts[at:at + n]))
        vecs.append(vectors[at:at + n])
        at += n
    for s in range(0, len(docs), 200):
        dest.add_documents(docs[s:s + 200], vecs[s:s + 200])


def mixture_store(work: Path, stores: dict[str, Path]):
    """Copy every paragraph (text, vector) of ``stores`` into one store in ``work``; returns doc_id -> corpus."""
    from nextpara.store.store import open_store

    corpus_of: dict[str, str] = {}
    dest = None
    for name, path in stores.items():
        with open_store(path, readonly=True) as src:
            if dest is None:
                dest = open_store(work, embedder_name=src.embedder_name, dim=src.dim, embedder_spec=src.embedder_spec)
            ids, spans = document_spans(src)
            for doc in spans:
                if corpus_of.get(doc, name) != name:
                    raise SystemExit(f"doc_id {doc!r} is in both {corpus_of[doc]} and {name}")
                corpus_of[doc] = name
            copy_documents(src, dest, ids, spans, list(spans))
            print(f"{name}: {len(spans)} documents, {len(ids)} paragraphs from {path}", flush=True)
    dest.snapshot()
    dest.close()
    return corpus_of


def train_mixture(work: Path, corpus_of: dict[str, str], per_corpus: int, scorer: str = "full", seed: int = 0,
                  options: dict[str, bool] | None = None):
    from nextpara.attention_core.model_config import SCORERS, RerankerConfig
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.attention_core.training import Trainer
    from nextpara.store.store import open_store

    store = open_store(work, readonly=True)
    seq = ParagraphSequences(store)
    names = sorted(set(corpus_of.values()))
    groups = np.array([names.index(corpus_of[d]) for d in seq.doc_ids])
    cfg = TrainConfig(seed=seed)
    trainer = Trainer(store, seq, RerankerConfig(embed_dim=store.dim, max_context=cfg.max_context, **SCORERS[scorer],
                                                     **(options or {})), cfg,
                      quiet=True, idf_groups=groups)
    rng = np.random.default_rng(seed)
    kept, counts = [], {}
    for g, name in enumerate(names):  # at most per_corpus queries of each corpus
        mine = [q for q in trainer.train_q if groups[q.target] == g]
        pick = sorted(rng.choice(len(mine), size=min(per_corpus, len(mine)), replace=False))
        kept += [mine[i] for i in pick]
        counts[name] = {"documents": sum(1 for d in corpus_of.values() if d == name),
                        "paragraphs": int((groups == g).sum()), "train_queries": len(pick)}
    trainer.train_q = kept
    result = trainer.fit()
    return store, trainer.model, result, counts


def model_options(specs: list[str], scorer: str) -> tuple[dict[str, bool], str]:
    """``--option`` values (NAME or NAME=true, NAME=false) as model config changes, and their words for the variant's
    name. Each must be a boolean RerankerConfig field the scorer does not set, moved away from its default."""
    from dataclasses import fields

    from nextpara.attention_core.model_config import SCORERS, RerankerConfig

    switches = {f.name: f.default for f in fields(RerankerConfig)
                if isinstance(f.default, bool) and f.name not in SCORERS[scorer]}
    options, label = {}, ""
    for spec in specs:
        name, _, value = spec.partition("=")
        if name not in switches or value not in ("", "true", "false"):
            raise SystemExit(f"--option {spec}: give NAME or NAME=false, NAME a boolean model option not set by the "
                             f"{scorer} scorer: one of {', '.join(sorted(switches))}")
        options[name] = value != "false"
        if options[name] == switches[name]:
            raise SystemExit(f"--option {spec}: {name} is {str(switches[name]).lower()} by default already")
        label += f", {name}" if options[name] else f", without {name}"
    try:  # a combination the model refuses, refused before the mixture store is built
        RerankerConfig(**SCORERS[scorer], **options)
    except ValueError as e:
        raise SystemExit(f"--option {' '.join(specs)}: {e}") from e
    return options, label


INSTALL = {"serve": ("GENERAL_CHECKPOINT", "GENERAL_VERSION"), "start": ("START_CHECKPOINT", "START_VERSION")}


def install(path: Path, version: str, slot: str = "serve") -> Path:
    """Ship the checkpoint at ``path`` as the general model that serves (``slot`` "serve") or as the fine-tuning
    start ("start"): the file served.py names, beside it in this repository, and its version in served.py's
    constant."""
    from nextpara.attention_core import served

    checkpoint, constant = INSTALL[slot]
    target = SERVED_PY.with_name(getattr(served, checkpoint).name)
    target.write_bytes(path.read_bytes())
    text = SERVED_PY.read_text()
    SERVED_PY.write_text(re.sub(rf'^{constant} = "[0-9a-f]*"', f'{constant} = "{version}"', text, flags=re.M))
    return target


def markdown(record: dict) -> str:
    lines = ["# The general model: zero-shot and shipped", "",
             "Test split, L = 4, a seeded sample of 2,000 queries (all of a smaller corpus's) unless the variant says "
             "otherwise; Recall@1 and MRR@10 with 95% intervals. \"left out\": trained without that corpus and "
             "evaluated on it (zero-shot).", "",
             "| variant | corpus evaluated | queries | B1 R@1 | general R@1 | B1 MRR@10 | general MRR@10 | stage 1 | command |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for variant, entry in record.items():
        for corpus, ev in entry.get("eval", {}).items():
            b1, full = ev["methods"]["B1"], ev["methods"]["full"]

            def ci(m, k):
                return f"{m[k]:.3f} [{m[k + '_ci'][0]:.3f}, {m[k + '_ci'][1]:.3f}]"
            lines.append(f"| {variant} | {corpus} | {ev['config']['queries']:,} | {ci(b1, 'recall@1')} | {ci(full, 'recall@1')} | {ci(b1, 'mrr@10')} | "
                         f"{ci(full, 'mrr@10')} | {full['stage1_recall']:.3f} | `{entry['command']}` |")
    lines += ["", "Training per variant (corpora, queries, seconds, validation on the mixture):", ""]
    for variant, entry in record.items():
        v = entry["validation"]
        corpora = ", ".join(f"{name} ({c['documents']} documents, {c['paragraphs']:,} paragraphs, {c['train_queries']:,} "
                            "training queries)" for name, c in entry["corpora"].items())
        lines.append(f"- {variant}: {corpora}; {entry['seconds']:,.0f} s; validation MRR@10 {v['mrr@10']:.4f}, "
                     f"R@1 {v['recall@1']:.4f}; model {entry['model_version']} ({entry['date']})"
                     + (f"; {entry['note']}" if entry.get("note") else ""))
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argument_parser(__doc__, __file__)
    p.add_argument("--work", required=True, help="an empty or earlier work dir: the mixture store and checkpoint go here")
    p.add_argument("--store", action="append", required=True, metavar="NAME=DIR", help="a built store of one corpus")
    p.add_argument("--leave-out", default=None, help="train without this corpus (a --store NAME)")
    p.add_argument("--per-corpus-queries", type=int, default=10000)
    p.add_argument("--scorer", choices=("full", "fast"), default="full",
                   help="the scorer configuration (nextpara train --scorer); default full")
    p.add_argument("--option", action="append", default=[], metavar="NAME[=false]",
                   help="a boolean model option (model_config.py RerankerConfig) away from its default: NAME turns one on, "
                        "NAME=false turns one off (e.g. bilinear_last, list_norm=false); repeatable")
    p.add_argument("--install", nargs="?", const="serve", choices=sorted(INSTALL), default=None,
                   help="ship the result: as attention_core/general.safetensors, the model that serves a store "
                        "without its own (--install), or as general_start.safetensors, where nextpara train starts "
                        "(--install start)")
    p.add_argument("--eval", action="store_true", help="run the evaluation protocol with it (see above)")
    p.add_argument("--eval-queries", type=int, default=2000,
                   help="test queries per evaluation, a seeded sample (default 2000, as nextpara eval); 0: every one")
    args = p.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("nextpara").setLevel(logging.INFO)
    from nextpara.attention_core.checkpoint import save_checkpoint
    from nextpara.attention_core.eval_report import run_evaluation
    from nextpara.attention_core.general import WORD_WEIGHTS_FROM_STORE

    stores = dict(s.split("=", 1) for s in args.store)
    if args.leave_out and args.leave_out not in stores:
        raise SystemExit(f"--leave-out {args.leave_out}: not one of the --store names {sorted(stores)}")
    if args.leave_out and args.install:
        raise SystemExit("--install ships the model trained on every corpus: not with --leave-out")
    if args.install == "start" and (args.option or args.scorer != "full"):
        raise SystemExit("--install start: where nextpara train starts must have its default configuration (the full "
                         "scorer, no --option), or every training would start from scratch")
    train_on = {n: Path(d) for n, d in stores.items() if n != args.leave_out}
    variant = f"without {args.leave_out}" if args.leave_out else "all"
    if args.per_corpus_queries != 10000:
        variant += f", at most {args.per_corpus_queries:,} training queries per corpus"
    if args.scorer != "full":
        variant += f", {args.scorer} scorer"
    options, label = model_options(args.option, args.scorer)
    variant += label
    if args.eval and args.eval_queries != 2000:
        variant += f", {args.eval_queries} test queries" if args.eval_queries else ", every test query"
    started = stamp(__file__)  # the command, date and commit as the run starts (a later commit may land meanwhile)
    work = Path(args.work)
    if (work / "store").exists():
        raise SystemExit(f"{work / 'store'} exists: give an empty --work (the mixture is built there from the --store dirs)")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    corpus_of = mixture_store(work / "store", train_on)
    store, model, result, counts = train_mixture(work / "store", corpus_of, args.per_corpus_queries, args.scorer,
                                                 options=options)
    meta = {"embedder": {"name": store.embedder_name, "dim": store.dim}, "word_weights": WORD_WEIGHTS_FROM_STORE,
            "corpora": counts, "left_out": args.leave_out, "metrics": {"validation": result["validation"]},
            "training": {k: v for k, v in result.items() if k != "validation"}}
    store.close()
    checkpoint = work / "general.safetensors"
    meta = save_checkpoint(checkpoint, model, meta)
    path = RESULTS / f"{NAME}.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    entry = {**started, "corpora": counts, "seconds": round(time.perf_counter() - t0, 1),
             "validation": result["validation"], "model_version": meta["model_version"], "eval": {}}
    if args.install:
        entry["installed"] = str(install(checkpoint, meta["model_version"], args.install).relative_to(SERVED_PY.parents[1]))
    if args.eval:
        for name in [args.leave_out] if args.leave_out else list(stores):
            ev = run_evaluation(stores[name], model=str(checkpoint), latency_queries=20,
                                n_queries=args.eval_queries or 10**9)
            entry["eval"][name] = {k: ev[k] for k in ("methods", "context_length", "config")}
    if result.get("memory_boost") is not None:  # (trainings since the transition memory fit its weight, 0 included)
        variant += f", transition memory {result['memory_boost']:g}"
    record[variant] = entry
    save(NAME, record, markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
