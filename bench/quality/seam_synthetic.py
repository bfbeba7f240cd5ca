"""Can the model read the seam when nothing else tells? A synthetic corpus whose next paragraph is recognisable
only from the words where two paragraphs meet.

    python -m bench.quality.seam_synthetic --work DIR [--docs 200] [--output NAME]

Each of ``--docs`` documents (at most 409: the names run out beyond) has 10 paragraphs; each paragraph is two
sentences of 7 words drawn at random from 210 common English nouns (three in a document's first paragraph), between
a first sentence that names what the previous paragraph's last one introduced ("Kalomi was mentioned again.") and a
last sentence that introduces a new made-up name of three syllables ("Then someone named Zotura arrived."). A name
is used by one paragraph and the next (a document's last name by its last paragraph only); the names are built from
16 syllables, so their word pieces recur all over the corpus and sentence embeddings see little of them. Only the
words at the seam say which paragraph comes next.

The script writes the corpus into DIR/seam (made anew; DIR itself is left alone), builds it (`nextpara build`'s
code, the bundled MiniLM), and for each configuration trains a model from scratch on the store's training split
(small: width 64, one context layer, 2 query-head epochs and up to 8 scorer epochs, early-stopped on validation) and
runs the evaluation protocol on its test split (every test query, L = 4):

* ``vectors``: the model without word features (`nextpara train --no-lexical`);
* ``words``: the default model, with the word-overlap features (TF-IDF cosines of the candidate's words to each
  context paragraph's, attention_core/lexical.py);
* ``words+index``: the same, with stage-1 candidates from the word index too (`--word-candidates 20`);
* ``seam``: the default model with the seam feature too (the cosine to the last paragraph's last sentence; `nextpara
  train --seam 0`);
* ``seam+index``: with the word index's 20 best for that sentence among the candidates too (`--seam 20`).

Beside them, the general model (never trained on this corpus) and B1. Reports Recall@1, MRR@10, stage-1 recall
and the seconds of training and evaluating each; writes bench/results/NAME.{json,md} (default seam_synthetic).
tests/test_seam.py runs a smaller one (``build_store``, ``train_and_evaluate``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from bench.record import argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
WORDS = """time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point home water
room mother area money story fact month lot right study book eye job word business issue side kind head house
service friend father power hour game line end member law car city community name president team minute idea
kid body information back parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education foot boy age policy process music market
sense nation plan college interest death experience effect use class control care field development role effort
rate heart drug show leader light voice wife police mind price report decision son view relationship town road
arm difference value building action model season society tax director position player record paper space
ground form event official matter center couple site project activity star table need court oil situation cost
industry figure street image phone data picture practice piece land product doctor wall patient worker news test
movie north love support technology step baby computer type attention film tree source organization hair window
evidence population chance approach""".split()
SYLLABLES = ["ka", "lo", "mi", "ra", "tu", "ve", "zo", "ni", "pe", "su", "dri", "gan", "tor", "bel", "quin", "fa"]
CONFIGS = {"vectors": {"lexical": False}, "words": {}, "words+index": {"word_candidates": 20},
           "seam": {"seam_feature": True}, "seam+index": {"seam_feature": True, "seam_candidates": 20}}
SMALL = {"d_model": 64, "n_heads": 4, "n_context_layers": 1}
PARAGRAPHS = 10
MAX_DOCS = len(SYLLABLES) ** 3 // PARAGRAPHS  # distinct names of three syllables, one per paragraph


def corpus(n_docs: int, n_paragraphs: int = PARAGRAPHS, seed: int = 0) -> list[dict]:
    if n_docs * n_paragraphs > len(SYLLABLES) ** 3:
        raise ValueError(f"{n_docs} documents of {n_paragraphs} paragraphs need more names than "
                         f"{len(SYLLABLES) ** 3}: at most {MAX_DOCS} documents")
    rng = np.random.default_rng(seed)
    names: set[str] = set()
    while len(names) < n_docs * n_paragraphs:
        names.add("".join(rng.choice(SYLLABLES, 3)).capitalize())
    pool = sorted(names)
    rng.shuffle(pool)

    def filler() -> str:
        return " ".join(rng.choice(WORDS, 7)).capitalize() + "."

    docs = []
    for d in range(n_docs):
        paragraphs, previous = [], None
        for p in range(n_paragraphs):
            name = pool[d * n_paragraphs + p]
            first = f"{previous} was mentioned again." if previous else filler()
            paragraphs.append(" ".join([first, filler(), filler(), f"Then someone named {name} arrived."]))
            previous = name
        docs.append({"doc_id": f"seam-{d}", "title": f"Seam {d}", "paragraphs": paragraphs})
    return docs


def build_store(directory: Path, n_docs: int) -> Path:
    """Write ``corpus(n_docs)`` into ``directory`` (made if missing) and build it into its ``store`` (`nextpara
    build`'s code); returns the store's path."""
    from nextpara.store.ingest import build

    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "seam.jsonl", "w") as f:
        f.writelines(json.dumps(doc) + "\n" for doc in corpus(n_docs))
    build(str(directory / "seam.jsonl"), directory / "store", quiet=True)
    return directory / "store"


def figures(result: dict, method: str) -> dict:
    m = result["methods"][method]
    return {"recall@1": round(m["recall@1"], 3), "recall@1_ci": [round(x, 3) for x in m["recall@1_ci"]],
            "mrr@10": round(m["mrr@10"], 3), "stage1_recall": round(m["stage1_recall"], 3)}


def train_and_evaluate(store: Path, model_cfg: dict | None = None, model: str | None = None) -> dict:
    """The protocol's result (eval_report.run_evaluation) on every test query of ``store``: of ``model`` (as
    `nextpara eval --model`) or, with ``model_cfg``, of a small model trained from scratch with those changes, which
    then serves the store."""
    from nextpara.attention_core.eval_report import run_evaluation
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.attention_core.train_flow import train

    if model_cfg is not None:
        outcome = train(store, {**SMALL, **model_cfg},
                        TrainConfig(phase1_epochs=2, phase2_epochs=8, batch_size=64, val_queries=200),
                        quiet=True, from_scratch=True, force=True)
        if outcome.meta is None or not outcome.served:
            raise RuntimeError(f"training did not produce the served model: {outcome.line}")
    return run_evaluation(store, n_queries=100_000, context_length=4, latency_queries=5, model=model)


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--work", required=True, help="a directory for the corpus and the store (in DIR/seam, made anew)")
    parser.add_argument("--docs", type=int, default=200, help=f"documents (default 200, at most {MAX_DOCS})")
    parser.add_argument("--output", default="seam_synthetic", help="results name under bench/results/")
    args = parser.parse_args()
    if not 1 <= args.docs <= MAX_DOCS:
        parser.error(f"--docs must be from 1 to {MAX_DOCS}, got {args.docs}")
    work = Path(args.work) / "seam"
    shutil.rmtree(work, ignore_errors=True)
    store = build_store(work, args.docs)

    general = train_and_evaluate(store, model="general")
    rows = {"B1": {**figures(general, "B1"), "seconds": None},
            "general model": {**figures(general, "full"), "seconds": None}}
    for name, changes in CONFIGS.items():
        start = time.perf_counter()
        result = train_and_evaluate(store, changes)
        rows[name] = {**figures(result, "full"), "seconds": round(time.perf_counter() - start, 1)}
        print(name, rows[name], flush=True)
    record = {**stamp(__file__), "docs": args.docs, "queries": general["config"]["queries"], "results": rows}
    lines = [f"# A corpus readable only at the seam ({record['date']})", "", f"Command: `{record['command']}`", "",
             f"{args.docs} synthetic documents of 10 paragraphs ({args.docs * 10} paragraphs, MiniLM); test split, every "
             f"query ({record['queries']}), L = 4; models trained from scratch (width 64, one context layer, 2 + up "
             "to 8 epochs); seconds: training and evaluation.", "",
             "| model | Recall@1 [95%] | MRR@10 | stage-1 recall | seconds |", "| --- | --- | --- | --- | --- |"]
    for name, r in rows.items():
        interval = f"[{r['recall@1_ci'][0]:.3f}, {r['recall@1_ci'][1]:.3f}]"
        lines.append(f"| {name} | {r['recall@1']:.3f} {interval} | {r['mrr@10']:.3f} | {r['stage1_recall']:.3f} | "
                     f"{r['seconds'] if r['seconds'] else '-'} |")
    save(args.output, record, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
