"""Where training starts to pay: Recall@1 / MRR@10 against the amount of training text.

    python -m bench.quality.learning_curve --store peps=DIR --store narrative=DIR [--sizes 2000,5000,10000,20000]
        [--start peps=CHECKPOINT --start narrative=CHECKPOINT]

For each corpus (a built, full store of it) and each size, a slice store gets whole training documents
(a seeded shuffle, up to about SIZE paragraphs) and every validation document (early stopping); models
are trained on it from where `nextpara train` starts by default (attention_core/general.py: the general model's
fine-tuning start; until 4bce5e7 the general model itself, when the committed record was made) and from scratch
(`--from-scratch`), with the default configuration, and saved whatever the guard would say. Every model, the
general model that serves a store without its own, and B1 are then evaluated on the *full* store's test split (the protocol of
docs/evaluation.md at L = 4: the same queries and the same index for every row, only the training text
changes; contexts are given as their stored vectors and texts, not embedded again).

The general models shipped with the package saw these corpora's training documents, so its row, and the
fine-tuned rows that start from the fine-tuning start, are the start a user of one of these corpora gets, not what a new
corpus gets. ``--start NAME=CHECKPOINT`` adds, for corpus NAME, a general model that never saw it (one
``bench.quality.train_general --leave-out NAME`` wrote, WORK/general.safetensors; its metadata must say
so): its own row (zero-shot) and a third model per slice fine-tuned from it (train_flow.starting_point's
``start_model``, as ``bench.quality.experiments --start`` uses), which is what a user's new corpus gets.
Records: bench/results/learning_curve.{json,md}, and learning_curve.png (needs matplotlib).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from bench.record import RESULTS, argument_parser, save, stamp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
NAME = "learning_curve"


def slice_store(full: Path, dest: Path, size: int, seed: int = 0) -> int:
    """Training documents (seeded, up to ``size`` paragraphs) and every validation document of ``full``, copied
    with their vectors into ``dest``; returns the training paragraphs taken."""
    from nextpara.attention_core.sequences import split_of
    from nextpara.store.store import open_store

    from bench.quality.train_general import copy_documents, document_spans

    with open_store(full, readonly=True) as src:
        ids, spans = document_spans(src)
        train = [d for d in spans if split_of(d) == "train"]
        picked, taken = [], 0
        for i in np.random.default_rng(seed).permutation(len(train)):
            a, b = spans[train[i]]
            if taken + (b - a) > size and taken:
                continue
            picked.append(train[i])
            taken += b - a
            if taken >= size:
                break
        keep = picked + [d for d in spans if split_of(d) == "validation"]
        with open_store(dest, embedder_name=src.embedder_name, dim=src.dim, embedder_spec=src.embedder_spec) as out:
            copy_documents(src, out, ids, spans, keep)
            out.snapshot()
    return taken


def test_figures(full: Path, checkpoint: str | None) -> dict:
    """B1 (checkpoint None) or a checkpoint's full pipeline on the full store's test split, L = 4."""
    from nextpara.attention_core.evaluation import Evaluation
    from nextpara.attention_core.general import checkpoint_for_store, general_for_store
    from nextpara.attention_core.metrics import summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    with open_store(full, readonly=True) as store:
        seq = ParagraphSequences(store)
        ev = Evaluation(store, seq, None, None)  # contexts as their stored vectors: embedded once, at build
        method = "B1"
        if checkpoint:
            model, _ = general_for_store(store) if checkpoint == "general" else checkpoint_for_store(checkpoint, store)
            ev.pipeline, method = RerankPipeline(model, store), "full"
        ranked, _ = ev.run(method, ev.targets, ev.L, ev.L)
        return {k: v for k, v in summarize(ev.ranks(ranked)).items() if k in ("recall@1", "recall@1_ci", "mrr@10",
                                                                               "mrr@10_ci")}


def train_slice(store: Path, key: str, start_model: Path | None = None) -> tuple[str, float, str]:
    """`nextpara train`'s start and fit (train_flow.py) without its guard: every model is kept and measured.
    ``key``: "scratch", "finetuned" (from the shipped fine-tuning start, as `nextpara train`) or "finetuned_new" (from
    ``start_model``)."""
    from nextpara.attention_core.checkpoint import save_checkpoint
    from nextpara.attention_core.model_config import RerankerConfig
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.attention_core.train_flow import starting_point
    from nextpara.attention_core.training import Trainer
    from nextpara.store.store import open_store

    t0 = time.perf_counter()
    cfg = TrainConfig()
    path = store.parent / f"{key}.safetensors"
    with open_store(store, readonly=True) as s:
        mcfg = RerankerConfig(embed_dim=s.dim, max_context=cfg.max_context)
        state, start = starting_point(s, mcfg, key == "scratch", start_model)
        trainer = Trainer(s, ParagraphSequences(s), mcfg, cfg, quiet=True, init_state=state)
        result = trainer.fit()
        save_checkpoint(path, trainer.model, {"embedder": {"name": s.embedder_name, "dim": s.dim}, "started_from": start,
                                              "metrics": {"validation": result["validation"]}})
    return str(path), round(time.perf_counter() - t0, 1), start


KEYS = {"finetuned": "fine-tuned from the start", "scratch": "from scratch",
        "finetuned_new": "fine-tuned from the general model without this corpus"}


def markdown(record: dict) -> str:
    def f(m):
        return f"{m['recall@1']:.3f} [{m['recall@1_ci'][0]:.3f}, {m['recall@1_ci'][1]:.3f}] / {m['mrr@10']:.3f}" if m else ""

    new = any(entry.get("start") for entry in record["corpora"].values())  # the --start columns, if any corpus has one
    lines = ["# Learning curve: test Recall@1 [95%] / MRR@10 against training paragraphs", "",
             "Full store's test split, 2,000 queries, L = 4; each row trains on a slice of the training documents "
             "(with every validation document for early stopping). \"general\" is the shipped general model that serves "
             "(it saw these corpora's training documents); \"the start\", where `nextpara train` starts (the general "
             "model's fine-tuning start, attention_core/general.py)" + ("; \"general without\" one trained without the corpus (`--start`), "
                                                     "what a new corpus gets." if new else "."), "",
             "| corpus | training paragraphs | B1 | general model | fine-tuned from the start | from scratch | "
             + ("general without this corpus | fine-tuned from it | seconds (fine-tuned / scratch / from without) |" if new
                else "seconds (fine-tuned / scratch) |"),
             "| --- " * (9 if new else 7) + "|"]
    for corpus, entry in record["corpora"].items():
        for row in entry["rows"]:
            seconds = " / ".join(str(row["seconds"][k]) for k in KEYS if k in row["seconds"])
            lines.append(f"| {corpus} | {row['train_paragraphs']:,} | {f(entry['B1'])} | {f(entry['general'])} | "
                         f"{f(row['finetuned'])} | {f(row['scratch'])} | "
                         + (f"{f(entry.get('general_new'))} | {f(row.get('finetuned_new'))} | " if new else "")
                         + f"{seconds} |")
    starts = [f"{corpus}: model {entry['start']['model_version']} (`train_general --leave-out {entry['start']['left_out']}`)"
              for corpus, entry in record["corpora"].items() if entry.get("start")]
    return ("\n".join(lines) + (f"\n\nGeneral models without the corpus: {'; '.join(starts)}." if starts else "")
            + f"\n\nCommand: `{record['command']}` ({record['date']}).\n")


def plot(record: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(record["corpora"]), figsize=(6 * len(record["corpora"]), 4), squeeze=False)
    for ax, (corpus, entry) in zip(axes[0], record["corpora"].items()):
        x = [r["train_paragraphs"] for r in entry["rows"]]
        for key, label in KEYS.items():
            if all(key in r for r in entry["rows"]):
                ax.plot(x, [r[key]["mrr@10"] for r in entry["rows"]], marker="o", label=label.replace("this corpus", "it"))
        ax.axhline(entry["general"]["mrr@10"], linestyle="--", color="grey", label="shipped general model")
        if entry.get("general_new"):
            ax.axhline(entry["general_new"]["mrr@10"], linestyle="-.", color="grey", label="general model without it")
        ax.axhline(entry["B1"]["mrr@10"], linestyle=":", color="black", label="B1 (cosine)")
        ax.set(xscale="log", xlabel="training paragraphs", ylabel="test MRR@10", title=corpus)
        ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{NAME}.png", dpi=110)


def main() -> int:
    p = argument_parser(__doc__, __file__)
    p.add_argument("--store", action="append", required=True, metavar="NAME=DIR", help="a full built store of a corpus")
    p.add_argument("--start", action="append", default=[], metavar="NAME=CHECKPOINT",
                   help="a general model trained without corpus NAME (train_general --leave-out NAME)")
    p.add_argument("--sizes", default="2000,5000,10000,20000", help="training paragraphs per slice")
    p.add_argument("--work", default="/tmp/nextpara-learning-curve", help="slice stores go here (must not hold them yet)")
    args = p.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("nextpara").setLevel(logging.INFO)
    from nextpara.attention_core.served import read_checkpoint_meta
    from nextpara.errors import FailedPreconditionError

    def pairs(option: str, items: list[str]) -> dict[str, str]:
        names = [item.split("=", 1)[0] for item in items]
        bad = [item for item in items if "=" not in item] or [n for n in names if names.count(n) > 1]
        if bad:
            p.error(f"{option} takes NAME=PATH, each NAME once: {bad[0]!r}")
        return dict(item.split("=", 1) for item in items)

    stores, starts, meta = pairs("--store", args.store), pairs("--start", args.start), {}
    for corpus, path in starts.items():  # every start checked before any work: a wrong one would be labelled "never saw"
        if corpus not in stores:
            p.error(f"--start {corpus}=...: not one of the --store names {sorted(stores)}")
        try:
            meta[corpus] = read_checkpoint_meta(path)
        except (FailedPreconditionError, OSError) as e:
            p.error(f"--start {corpus}={path}: {e}")
        if meta[corpus].get("left_out") != corpus:
            p.error(f"--start {corpus}={path}: not a general model trained without {corpus} (its metadata says left out: "
                    f"{meta[corpus].get('left_out')}); train one with `bench.quality.train_general --leave-out {corpus}`")
    try:
        sizes = [int(size) for size in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes {args.sizes!r}: comma-separated whole numbers")
    if len(set(sizes)) != len(sizes) or min(sizes) < 1:
        p.error(f"--sizes {args.sizes!r}: each size once, each at least 1")
    for corpus in stores:  # before any work: a rerun into the same --work would mix two runs' slices
        for size in sizes:
            if (Path(args.work) / f"{corpus}-{size}" / "store").exists():
                raise SystemExit(f"{Path(args.work) / f'{corpus}-{size}'} exists: remove {args.work} first")
    record = {**stamp(__file__), "corpora": {}}
    for corpus, full in stores.items():
        entry = {"B1": test_figures(Path(full), None), "general": test_figures(Path(full), "general"), "rows": []}
        start = Path(starts[corpus]) if corpus in starts else None
        if start is not None:
            entry["start"] = {"model_version": meta[corpus]["model_version"], "left_out": corpus}
            entry["general_new"] = test_figures(Path(full), str(start))
        for size in sizes:
            store = Path(args.work) / f"{corpus}-{size}" / "store"
            taken = slice_store(Path(full), store, size)
            row = {"size": size, "train_paragraphs": taken, "seconds": {}, "started_from": {}}
            for key in [k for k in KEYS if k != "finetuned_new" or start is not None]:
                path, seconds, begun = train_slice(store, key, start if key == "finetuned_new" else None)
                row[key], row["seconds"][key], row["started_from"][key] = test_figures(Path(full), path), seconds, begun
                print(f"{corpus} {taken} {key}: {row[key]}", flush=True)
            entry["rows"].append(row)
            record["corpora"][corpus] = entry
            save(NAME, record, markdown(record))  # after each row: a long run keeps what it finished
    plot(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
