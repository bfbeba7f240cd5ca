"""Training experiments on a built store (PEPs unless ``--corpus`` says otherwise), judged on the validation split only.

    python -m bench.quality.experiments --data-dir /tmp/peps-bench [--corpus NAME] [--keep DIR]
        [--start LABEL=PATH] NAME [NAME ...]

Each named variant trains into a scratch copy of the store's model file, from scratch, or for the ``ft_`` variants
from where ``nextpara train`` starts (attention_core/general.py: the general model's fine-tuning start, which until
4bce5e7 was the general model itself; fine-tuning schedules; ``--start LABEL=PATH``: from another
general model's checkpoint, such as one ``bench.quality.train_general --leave-out`` trained without this
corpus, the entry named ``NAME@LABEL``), and
records its validation metrics (the pipeline's MRR@10 / Recall@1 / stage-1 recall on 1,000
validation queries) and training time in bench/results/experiments.json, one entry per variant
(a rerun replaces that variant's entry; on another corpus than PEPs the entry is ``CORPUS:NAME``), with their table in bench/results/experiments.md; the
test split is left for `nextpara eval` on the chosen default (docs/evaluation.md). Negative
results stay in the record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from bench.record import RESULTS, argument_parser, save

os.environ.setdefault("HF_HUB_OFFLINE", "1")
NAME = "experiments"

FAST = {"n_scorer_layers": 0, "candidate_tokens": False}  # `--scorer fast`, written out: a record keeps its meaning
VARIANTS = {
    "default": ({}, {}),
    "phase1x8": ({}, {"phase1_epochs": 8}),
    "no_query_loss_in_phase2": ({}, {"phase2_query_weight": 0.0}),
    "wide384": ({"d_model": 384, "n_heads": 6}, {}),
    "deep3": ({"n_context_layers": 3}, {}),
    "lr3e-4": ({}, {"lr": 3e-4, "phase1_epochs": 6}),
    "candidates50": ({}, {"n_candidates": 50}),
    "list1": ({"n_list_layers": 1}, {}),
    "list2": ({"n_list_layers": 2}, {}),
    "list1_d128": ({"n_list_layers": 1, "d_model": 128}, {}),
    "d128": ({"d_model": 128}, {}),
    "p2lr3e-4": ({}, {"phase2_lr": 3e-4}),  # from here on the default width is 128
    "p2lr3e-4_x8": ({}, {"phase2_lr": 3e-4, "phase2_epochs": 8, "patience": 3}),
    "novel": ({"novel_words": True}, {}),  # word features of what the last paragraph adds (lexical.py)
    # cheaper scorers (the throughput work): the K x K pool density off; then no cross-attention or candidate token
    "no_density": ({"pool_density": False}, {}),
    "features_only": ({"n_scorer_layers": 0, "candidate_tokens": False, "pool_density": False}, {}),
    "fast_density": (FAST, {}),  # the features-only MLP with the density
    "full": ({}, {}),  # the default scorer under its own name: the reference of a same-day fast_density run
    # deeper stage 1 when scoring is cheap: candidates per vector source (query head, last paragraph), 100 by default
    "fast_c150": (FAST, {"n_candidates": 150}),
    "fast_c200": (FAST, {"n_candidates": 200}),
    # the word index beside the vectors (candidates.py): 50 per word source (the last paragraph's words, the whole
    # context's), trained and validated with them; bench/results/stage1_recall_seam_*.md measured what they add
    "words50": ({"word_candidates": 50}, {}),
    # the seam read in words (lexical.py, candidates.py): the cosine to the last paragraph's last sentence as a
    # feature, alone and with 50 candidates from the word index for that sentence; seam_synthetic measured it first
    "seam_feature": ({"seam_feature": True}, {}),
    "seam50": ({"seam_feature": True, "seam_candidates": 50}, {}),
    # where a candidate stands among the others of its list (model.py: NextParagraphModel.pool); the seam probe's
    # ``pool`` group beside the general model first (bench/results/seam_probe_pool_peps.md)
    "pool_nb": ({"pool_neighbours": True}, {}),
    "fast_pool_nb": ({**FAST, "pool_neighbours": True}, {}),
    # a locality signal in training: the target and the paragraphs just after it against the rest of the list
    "near3": ({}, {"near_weight": 0.5, "near_window": 3}),
    "near3_w1": ({}, {"near_weight": 1.0, "near_window": 3}),
    # a learned last^T W candidate term (model.py: bilinear_last); bench.quality.seam_windows's bilinear reader first
    "bilinear": ({"bilinear_last": True}, {}),
    # the default again from another seed: a second member for an ensemble (bench.quality.ensemble); the seed also
    # draws the validation sample where a split has more than TrainConfig.val_queries (not on the built-in docs)
    "seed1": ({}, {"seed": 1}),
    # fine-tuning from ``nextpara train``'s default start: schedules gentler than scratch's. Until
    # 2026-12-02 fine-tuning ran phase 1 for phase1_epochs (6), then none (finetune_phase1_epochs 0, the default
    # since, but for an hour and a half that afternoon when the trial, ft_auto, was); so these say which they ran
    "ft_auto": ({}, {"finetune_phase1_epochs": 6, "finetune_head": "auto"}),  # head epochs kept only if validation
    #                                                                            stage-1 recall clearly rises
    "ft_p1x6": ({}, {"finetune_phase1_epochs": 6, "finetune_head": "train"}),  # the fine-tuning default before
    "ft_lr3e-4": ({}, {"lr": 3e-4, "finetune_phase1_epochs": 6, "finetune_head": "train"}),
    "ft_p1x2_lr3e-4": ({}, {"lr": 3e-4, "finetune_phase1_epochs": 2, "finetune_head": "train"}),
    "ft_p1x2_lr1e-4": ({}, {"lr": 1e-4, "finetune_phase1_epochs": 2, "finetune_head": "train"}),
    "ft_p1x0": ({}, {"finetune_phase1_epochs": 0}),  # the default: the general model's head kept
    "ft_p1x1": ({}, {"finetune_phase1_epochs": 1, "finetune_head": "train"}),
    "ft_p1x2": ({}, {"finetune_phase1_epochs": 2, "finetune_head": "train"}),
    # shrink and perturb: start from a mix of the general model's weights and a fresh initialisation
    "ft_shrink0.5": ({}, {"init_shrink": 0.5}),  # below 1, phase 1 runs phase1_epochs (6)
    "ft_shrink0.8": ({}, {"init_shrink": 0.8}),
    # every similarity and word feature also as its z-score in its list (model.py: list_norm); from scratch, and
    # fine-tuned from a general model trained with it (--start: the shipped fine-tuning start has it off, so without
    # --start these train from scratch, and say so in started_from; the general model that serves has it)
    "list_norm": ({"list_norm": True}, {}),
    "ft_list_norm": ({"list_norm": True}, {"finetune_phase1_epochs": 0}),
    "ft_no_list_norm": ({"list_norm": False}, {"finetune_phase1_epochs": 0}),  # ft_p1x0, the option named
    # the same pair from another seed: is the built-in docs' loss with list_norm the option's or one run's?
    "ft_list_norm_seed1": ({"list_norm": True}, {"finetune_phase1_epochs": 0, "seed": 1}),
    "ft_no_list_norm_seed1": ({"list_norm": False}, {"finetune_phase1_epochs": 0, "seed": 1}),
}


def fine_tune(name: str) -> bool:
    """The ``ft_`` variants start from a general model; the others from scratch."""
    return name.startswith("ft_")


def markdown(record: dict) -> str:
    lines = ["# Training experiments (validation split, 1,000 queries)", "",
             "One row per variant, in the order first run; changes are from the default of the day. PEPs unless the",
             "name says `CORPUS:`; `ft_` variants start where `nextpara train` does, the general model's fine-tuning start",
             "(before 4bce5e7 the general model itself; `@LABEL`: from another general model, see `started_from` in the",
             ".json), the others from scratch.", "",
             "| variant | changes | date | training s | stage-1 recall | R@1 | MRR@10 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in record.items():
        model_cfg, train_cfg = VARIANTS.get(name.split(":")[-1].split("@")[0], (r["model_config"], {}))
        changes = r.get("note") or ", ".join(f"{k} {v}" for k, v in {**model_cfg, **train_cfg}.items()) or "none"
        if r.get("head_trial"):  # finetune_head auto: what its trial of head epochs found
            h = r["head_trial"]
            found = (f"stage-1 {h['start_stage1_recall']:.3f} -> {h['best_stage1_recall']:.3f} at epoch {h['best_epoch']}"
                     if h["best_epoch"] else f"stage-1 {h['start_stage1_recall']:.3f}, no epoch raised it")
            changes += f" (head epochs: {found}, {'kept' if h['kept'] == 'trained' else 'start kept'})"
        v = r["validation"]
        lines.append(f"| `{name}` | {changes} | {r.get('date', '')} | {r['seconds']} | {v['stage1_recall']:.3f} | "
                     f"{v['recall@1']:.4f} | {v['mrr@10']:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--corpus", default="peps", help="the store's corpus, for the record's names (default peps)")
    parser.add_argument("--keep", default=None, metavar="DIR", help="copy each variant's model to DIR/NAME.safetensors")
    parser.add_argument("--start", default=None, metavar="LABEL=PATH",
                        help="the ft_ variants start from this general model's checkpoint (one bench.quality."
                             "train_general wrote: --leave-out for a corpus it never saw) instead of the shipped "
                             "one; their entries are named NAME@LABEL")
    parser.add_argument("names", nargs="+", choices=sorted(VARIANTS))
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("nextpara").setLevel(logging.INFO)
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.attention_core.train_flow import train

    label, _, start_model = (args.start or "").partition("=")
    if args.start and not (re.fullmatch(r"[A-Za-z0-9_-]+", label) and start_model):
        parser.error(f"--start {args.start}: give LABEL=PATH, the label of letters, digits, _ and -")
    if args.start and not any(fine_tune(n) for n in args.names):
        parser.error("--start is where the ft_ variants start: name one")
    path = RESULTS / f"{NAME}.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    for name in args.names:
        model_cfg, train_cfg = VARIANTS[name]
        with tempfile.TemporaryDirectory(dir=Path(args.data_dir).parent) as tmp:
            scratch = Path(tmp) / "store"
            scratch.mkdir()
            for f in Path(args.data_dir).iterdir():  # share the store read-only; the model goes to scratch
                if f.name not in ("model.safetensors", "write.lock"):
                    (scratch / f.name).symlink_to(f.resolve())
            key = name if args.corpus == "peps" else f"{args.corpus}:{name}"
            if fine_tune(name) and label:
                key += f"@{label}"
            t0 = time.perf_counter()
            cfg = TrainConfig(**train_cfg)
            # saved whatever the guard says: the variant's own validation figures are the record
            meta = train(scratch, model_cfg, cfg, quiet=True, from_scratch=not fine_tune(name), force=True,
                         start_model=Path(start_model) if fine_tune(name) and start_model else None).meta
            seconds = round(time.perf_counter() - t0, 1)
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(scratch / "model.safetensors", Path(args.keep) / f"{key.split(':')[-1]}.safetensors")
        v = meta["metrics"]["validation"]
        record[key] = {"model_config": model_cfg, "train_config": asdict(cfg), "seconds": seconds,
                        "validation": v, "history": meta["training"]["history"], "started_from": meta["started_from"],
                        **({"head_trial": meta["training"]["head_trial"]} if meta["training"].get("head_trial") else {}),
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        save(NAME, record, markdown(record))  # after each variant: a long run keeps what it finished
    return 0


if __name__ == "__main__":
    sys.exit(main())
