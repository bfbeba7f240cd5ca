"""Probe: does a fine-tuned reranker rank better with its weights pulled back toward the general model's?

    python -m bench.quality.interpolate --data-dir DIR [--model PATH] [--alphas 0,0.25,0.5,0.75,1]
        [--queries 2000] [--output NAME]

Weight interpolation ("WiSE-FT", Wortsman et al. 2022): the weights alpha * fine-tuned + (1 - alpha) * start, between
the start and the end of one fine-tuning run; the paper found such a blend more robust than either end where the
data differ from what fine-tuning saw, and it costs nothing at serving time. ``--model``: the fine-tuned checkpoint (default: the store's own ``model.safetensors``, which must have been
fine-tuned from the shipped fine-tuning start, attention_core/general.py: until 4bce5e7 the general model itself).
Only learned parameters are interpolated; the buffers the store fits (the word weights, the word-overlap boost) are
the fine-tuned model's at every alpha, so alpha 0 is the start's weights with the fine-tuned model's word statistics,
not a general model as it serves a store. The boost was tuned
for alpha 1 on validation lists, and these are the guard's validation queries (guard.py: the same seed), so the
comparison leans toward alpha 1: a gain found here would need the test split to confirm it.

On the validation split (L = 4, contexts as stored vectors and texts, the serving code path: evaluation.py with
``split="validation"``, as training's guard runs it; the test split is not touched, docs/evaluation.md), each alpha
makes its own stage-1 lists and ranks them. Reported: stage-1 recall, Recall@1 and MRR@10 with 95% intervals, and
the paired bootstrap interval of each alpha's difference from the fine-tuned model (alpha 1). Prints a table,
writes bench/results/NAME.{json,md}.
"""

from __future__ import annotations

import os
import time

from bench import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def interpolated(general, tuned, alpha: float):
    """A copy of ``tuned`` whose parameters are alpha * tuned + (1 - alpha) * general; buffers stay ``tuned``'s."""
    import copy

    import torch

    model = copy.deepcopy(tuned)
    start = dict(general.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.mul_(alpha).add_(start[name], alpha=1.0 - alpha)
    return model.eval()


def main() -> int:
    parser = record.argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built store with a fine-tuned model (read only)")
    parser.add_argument("--model", help="the fine-tuned checkpoint (default: the store's own model.safetensors)")
    parser.add_argument("--alphas", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--output", default="interpolate")
    args = parser.parse_args()
    from pathlib import Path

    from nextpara.attention_core.evaluation import Evaluation
    from nextpara.attention_core.general import checkpoint_for_store, load_general
    from nextpara.attention_core.guard import GUARD_CONTEXT
    from nextpara.attention_core.metrics import NO_HIT, paired_gain, summarize
    from nextpara.attention_core.pipeline import RerankPipeline
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.attention_core.served import CHECKPOINT, START_CHECKPOINT
    from nextpara.store.store import open_store

    alphas = sorted({float(a) for a in args.alphas.split(",")} | {1.0})
    with open_store(args.data_dir, readonly=True) as store:
        seq = ParagraphSequences(store)
        tuned, meta = checkpoint_for_store(Path(args.model or Path(args.data_dir) / CHECKPOINT), store)
        general, general_meta = load_general(START_CHECKPOINT)  # where nextpara train starts
        if general_meta["model_version"] not in meta.get("started_from", ""):
            raise SystemExit(f"the model {meta['model_version']} was trained {meta.get('started_from')!r}, not from "
                             f"the fine-tuning start {general_meta['model_version']}: nothing to interpolate between")
        general.cfg.memory_boost = tuned.cfg.memory_boost  # (fitted after training: every blend ranks with the tuned
        if general.cfg != tuned.cfg:                       # model's transition memory weight)
            raise SystemExit("the two models' configurations differ")
        ev = Evaluation(store, seq, None, None, n_queries=args.queries, context_length=GUARD_CONTEXT, seed=0,
                        split="validation")
        rows, ranks = [], {}
        for alpha in alphas:
            t0 = time.perf_counter()
            ev.pipeline = RerankPipeline(interpolated(general, tuned, alpha), store)
            ranked, _ = ev.run("full", ev.targets, ev.L, ev.L)  # the full pipeline ranks its whole stage-1 list
            ranks[alpha] = ev.ranks(ranked)
            stage1 = float((ranks[alpha] < NO_HIT).mean())
            rows.append({"alpha": alpha, **summarize(ranks[alpha]), "stage1_recall": stage1,
                         "seconds": round(time.perf_counter() - t0, 1)})
            print(f"alpha {alpha}: MRR@10 {rows[-1]['mrr@10']:.4f} R@1 {rows[-1]['recall@1']:.3f} "
                  f"stage-1 {stage1:.3f}", flush=True)
        for row in rows:
            row["gain_over_fine_tuned"] = paired_gain(ranks[1.0], ranks[row["alpha"]])
    rec = {**record.stamp(__file__), "data_dir": str(args.data_dir), "paragraphs": len(seq),
           "queries": len(ev.targets), "fine_tuned": meta["model_version"], "general": general_meta["model_version"],
           "rows": rows}

    def ci(r: dict, m: str) -> str:
        return f"{r[m]:.4f} [{r[m + '_ci'][0]:.4f}, {r[m + '_ci'][1]:.4f}]"

    def gain(g: dict, m: str) -> str:
        return f"{g[m]:+.4f} [{g[m + '_ci'][0]:+.4f}, {g[m + '_ci'][1]:+.4f}]"

    md = (f"# Fine-tuned weights pulled toward their start's ({rec['date']})\n\nCommand: `{rec['command']}`\n\n"
          f"Store {args.data_dir} ({len(seq):,} paragraphs); {len(ev.targets):,} validation queries, L = {ev.L}; "
          f"fine-tuned {meta['model_version']} ({meta.get('started_from')}), start {general_meta['model_version']}. "
          "Alpha 1 is the fine-tuned model, alpha 0 the start's weights with the fine-tuned model's word statistics.\n\n"
          "| alpha | stage-1 recall | R@1 | MRR@10 | R@1 gain over alpha 1 (paired) | MRR@10 gain |\n"
          "| --- | --- | --- | --- | --- | --- |\n"
          + "".join(f"| {r['alpha']} | {r['stage1_recall']:.3f} | {ci(r, 'recall@1')} | {ci(r, 'mrr@10')} | "
                    f"{gain(r['gain_over_fine_tuned'], 'recall@1')} | {gain(r['gain_over_fine_tuned'], 'mrr@10')} |\n"
                    for r in rows))
    record.save(args.output, rec, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
