"""CLI commands over the model: ``train``, ``eval``.

Only argparse is imported at module level; each command imports what it needs when run.
"""

from __future__ import annotations

import argparse

from nextpara.store.cli import add_data_dir


def register(sub: argparse._SubParsersAction) -> None:
    from dataclasses import fields

    p = sub.add_parser("train", help="train the attention reranker on a built store; saves model.safetensors there",
                       description="Phase 1 trains the query head (full softmax over the store), phase 2 the scorer "
                                   "on FAISS-mined candidate lists; early stopping on validation MRR@10.")
    add_data_dir(p)
    from .train_config import TrainConfig

    for f in fields(TrainConfig):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                       help=f"(default {f.default})")
    p.add_argument("--d-model", type=int, default=None, help="model width (default from RerankerConfig)")
    p.add_argument("--layers", type=int, default=None, help="context encoder layers")
    p.add_argument("--word-candidates", type=int, default=None,
                   help="stage-1 candidates from the word index per source (last paragraph's words, whole context's); "
                        "0: vectors only (default from RerankerConfig)")
    p.add_argument("--no-lexical", action="store_true",
                   help="score from the vectors alone, without the word overlap of the texts")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="evaluate baselines and the trained model on the test split (the protocol of docs/evaluation.md)")
    add_data_dir(p)
    p.add_argument("--queries", type=int, default=2000, help="test queries sampled (default 2000)")
    p.add_argument("--context-length", type=int, default=4, help="L for the main table (default 4)")
    p.add_argument("--latency-queries", type=int, default=100, help="queries timed one at a time (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="write the results as JSON here")
    p.add_argument("--plot", default=None, metavar="DIR", help="write recall@k and attention heatmap PNGs here")
    p.set_defaults(func=cmd_eval)


def cmd_train(args: argparse.Namespace) -> int:
    from dataclasses import fields

    from .train_config import TrainConfig
    from .training import train

    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    model_cfg = {k: v for k, v in {"d_model": args.d_model, "n_context_layers": args.layers,
                                   "word_candidates": args.word_candidates}.items() if v is not None}
    if args.no_lexical:
        model_cfg["lexical"] = False
    meta = train(args.data_dir, model_cfg, cfg, quiet=args.quiet)
    v = meta["metrics"]["validation"]
    print(f"trained model {meta['model_version']} in {meta['training']['seconds']}s: validation MRR@10 {v['mrr@10']:.4f}, "
          f"Recall@1 {v['recall@1']:.4f}, stage-1 recall {v['stage1_recall']:.3f}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .eval_report import markdown_table, run_evaluation

    result = run_evaluation(args.data_dir, n_queries=args.queries, context_length=args.context_length,
                            output=args.output, plot_dir=args.plot, latency_queries=args.latency_queries, seed=args.seed)
    c = result["config"]
    print(f"{c['queries']} test queries, L={c['context_length']}, {c['paragraphs']} paragraphs indexed, "
          f"model {c['model_version']}\n")
    print(markdown_table(result))
    for path in result.get("plots", []):
        print(f"wrote {path}")
    return 0


