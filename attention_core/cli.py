"""CLI commands over the model: ``train``, ``eval``, ``info``, and the guard that follows the store's ``build``.

Only argparse is imported at module level; each command imports what it needs when run.
"""

from __future__ import annotations

import argparse
import sys

from nextpara.store.cli import add_data_dir, add_json


def register(sub: argparse._SubParsersAction) -> None:
    from dataclasses import fields

    p = sub.add_parser("train", help="train the attention reranker on a built store; saves model.safetensors there",
                       description="Phase 1 trains the query head (full softmax over the store; none when fine-tuning "
                                   "the general model's fine-tuning start, whose head is kept: --finetune-phase1-epochs, --finetune-head), "
                                   "phase 2 the "
                                   "scorer on FAISS-mined candidate lists; early stopping on validation MRR@10. Then "
                                   "the guard: on the validation split, the best of the new model, the model it would "
                                   "replace and plain cosine to the last paragraph (B1) serves; where B1 is at least "
                                   "as good as the new model and above the one that serves, the store ranks by cosine "
                                   "from then on.")
    add_data_dir(p)
    from .train_config import FINETUNE_HEAD, HELP, TrainConfig

    for f in fields(TrainConfig):  # each help says what the setting does: "(default 0)" alone read as none at all
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                       help=f"{HELP[f.name]} (default {f.default})",
                       **({"metavar": "{" + ",".join(FINETUNE_HEAD) + "}"} if f.name == "finetune_head" else {}))
    p.add_argument("--d-model", type=int, default=None, help="model width (default from RerankerConfig)")
    p.add_argument("--layers", type=int, default=None, help="context encoder layers")
    p.add_argument("--word-candidates", type=int, default=None,
                   help="stage-1 candidates from the word index per source (last paragraph's words, whole context's); "
                        "0: vectors only (default from RerankerConfig)")
    p.add_argument("--seam", type=int, default=None, metavar="N",
                   help="read the seam in words: each candidate's word overlap with the last context paragraph's last "
                        "sentence as a feature, and the word index's N best for that sentence among the candidates (0: "
                        "the feature alone). Off by default: bench/quality/README.md, Direction, says where it pays")
    p.add_argument("--scorer", choices=("full", "fast"), default="full",
                   help="full: the candidates attend to the context (default); fast: an MLP over the similarity and "
                        "word features alone, half the model's time, no attention weights (bench/speed/batch.md: its "
                        "accuracy). The general model is a full one: a fast model trains from scratch, and the guard "
                        "may keep the general model (--force serves the fast one)")
    p.add_argument("--no-lexical", action="store_true",
                   help="score from the vectors alone, without the word overlap of the texts")
    p.add_argument("--from-scratch", action="store_true",
                   help="start from random weights instead of the general model's fine-tuning start "
                        "(attention_core/general_start.safetensors)")
    p.add_argument("--force", action="store_true",
                   help="serve the new model even if it does not beat, on the validation split, the model it replaces "
                        "and cosine to the last paragraph")
    add_json(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("info", help="describe a store and the model that serves it: embedder, counts, index, disk use, "
                                    "model and its validation figures beside cosine's")
    add_data_dir(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("eval", help="evaluate baselines and the trained model on the test split (the protocol of docs/evaluation.md)")
    add_data_dir(p)
    p.add_argument("--queries", type=int, default=2000, help="test queries sampled (default 2000)")
    p.add_argument("--context-length", type=int, default=4, help="L for the main table, 1 to 8 (default 4)")
    p.add_argument("--latency-queries", type=int, default=100, help="queries timed one at a time (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="write the results as JSON here")
    p.add_argument("--plot", default=None, metavar="DIR", help="write recall@k and attention heatmap PNGs here")
    p.add_argument("--model", default=None, metavar="PATH|general",
                   help="evaluate this checkpoint, or the general model, instead of the one that serves the store")
    add_json(p)
    p.set_defaults(func=cmd_eval)

    # `build` is the store's command (store/cli.py, registered before this layer's): on a store with no model of its
    # own, this layer's guard of the general model follows it (build_guard.py)
    p = sub.choices["build"]
    p.description += (" Then, on a store with no model of its own, the guard: the general model and plain cosine to "
                      "the last paragraph (B1) on the validation split; where cosine scores clearly higher, the "
                      "store's model.safetensors becomes plain cosine (train_report.json holds the figures).")
    p.add_argument("--no-guard", action="store_true",
                   help="do not judge the general model against plain cosine on the validation split after the build "
                        "(by default a build of a store with no model of its own does, unless the last guard judged "
                        "the store as it is, and plain cosine serves it if it scores clearly above the general model)")
    p.set_defaults(func=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    import sys
    from dataclasses import asdict

    from nextpara.store.cli import print_build, run_build

    report = run_build(args)
    if args.no_guard:
        print_build(args, report)
        return 0
    from .build_guard import guard_general  # (torch and the model: not for --no-guard)

    if not args.json:  # the build's line first: its documents are committed whatever the guard meets
        print_build(args, report)
        sys.stdout.flush()
    guard = guard_general(report.data_dir)
    if args.json:
        print_build(args, report, {"guard": asdict(guard)})
    else:
        print(guard.line)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from dataclasses import fields

    from nextpara.errors import InvalidInputError
    from nextpara.store.data_dir import DataDir

    from .model_config import SCORERS, store_model_config
    from .train_config import TrainConfig

    settings = [f.name for f in fields(TrainConfig)]  # each one's flag: --NAME, hyphens for underscores
    try:
        cfg = TrainConfig(**{name: getattr(args, name) for name in settings})
    except ValueError as e:  # said with the flags' names, not the settings'
        raise InvalidInputError(as_flags(str(e), settings)) from e
    model_cfg = {**SCORERS[args.scorer], **{k: v for k, v in {"d_model": args.d_model, "n_context_layers": args.layers,
                                                              "word_candidates": args.word_candidates}.items()
                                            if v is not None}}
    if args.no_lexical:
        model_cfg["lexical"] = False
    if args.seam is not None:
        model_cfg.update(seam_feature=True, seam_candidates=args.seam)
    # no store, or settings no model can have: said before torch's imports (seconds), as training would say it
    try:
        store_model_config(DataDir.resolve(args.data_dir).facts().dim, cfg.max_context, model_cfg)
    except InvalidInputError as e:
        e.args = (as_flags(str(e), [*settings, "d_model", "word_candidates"]),)
        raise
    from .train_flow import train

    outcome = train(args.data_dir, model_cfg, cfg, quiet=args.quiet, from_scratch=args.from_scratch, force=args.force)
    meta = outcome.meta
    if args.json:  # model: the new model's metadata (None when nothing could be trained); served: it now serves;
        #           cosine_serves: plain cosine (B1) serves the store now, as its validation split preferred it
        import json

        print(json.dumps({"trained": meta is not None, "served": outcome.served, "cosine_serves": outcome.cosine,
                          "line": outcome.line, "model": meta},
                         indent=2, default=str))
        return 0 if meta is not None else 2
    if meta is None:  # the store cannot be trained on (no validation split): a script must not take it for success
        print(f"nextpara train: {outcome.line}", file=sys.stderr)
        return 2
    v = meta["metrics"]["validation"]
    print(f"trained model {meta['model_version']} {meta['started_from']} in {meta['training']['seconds']}s: "
          f"validation MRR@10 {v['mrr@10']:.4f}, Recall@1 {v['recall@1']:.4f}, stage-1 recall "
          f"{v['stage1_recall']:.3f} (early stopping's figures at the best epoch: contexts of up to "
          f"{cfg.max_context} paragraphs, the queries it stopped on, so they flatter the model; the "
          "guard below measures again)")
    print(outcome.line)
    return 0


def as_flags(message: str, names: list[str]) -> str:
    """``message`` with each setting's name among ``names`` written as its flag (phase2_epochs: --phase2-epochs)."""
    import re

    words = "|".join(sorted(map(re.escape, names), key=len, reverse=True))  # one pass: a flag is not rewritten again
    return re.sub(rf"(?<![\w-])({words})(?![\w-])", lambda m: "--" + m[1].replace("_", "-"), message)


def cmd_eval(args: argparse.Namespace) -> int:
    from .eval_report import markdown_table, run_evaluation

    result = run_evaluation(args.data_dir, n_queries=args.queries, context_length=args.context_length,
                            output=args.output, plot_dir=args.plot, latency_queries=args.latency_queries, seed=args.seed,
                            model=args.model, quiet=args.quiet)
    from .guard import MIN_JUDGED  # (torch is loaded by now)

    if result["config"]["queries"] < MIN_JUDGED:  # (intervals of [1.000, 1.000] from one query read as a certainty)
        print(f"nextpara eval: only {result['config']['queries']} test queries: too few for these figures, or their "
              f"intervals, to tell the methods apart (the guard judges nothing on fewer than {MIN_JUDGED})",
              file=sys.stderr)
    if args.json:  # the document --output writes
        import json

        print(json.dumps(result, indent=2))
        return 0
    c = result["config"]
    if c["model_source"] == "cosine":  # its rows below are B1's: "full pipeline (reranked)" alone read as a model's
        serves = (f"plain cosine (B1) serves it ({c['model_version']}): the query head and the full pipeline below rank "
                  "by cosine to the last paragraph, as B1 does\n")
    else:
        serves = (f"model {c['model_version']} ({c['model_source']})\n" if c["model_version"] else
                  "no model serves it: the baselines alone\n")
    print(f"{c['queries']} test queries, L={c['context_length']}, {c['paragraphs']} paragraphs indexed, " + serves)
    print(markdown_table(result))
    for path in result.get("plots", []):
        print(f"wrote {path}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    import json

    from nextpara.store.store import open_store

    from .served import describe_served, fmt

    with open_store(args.data_dir, readonly=True) as store:
        info = {**store.info(), "model": describe_served(store)}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    index, model, remote = info["index"], info["model"], info.get("embedder_options")
    params = ", ".join(f"{k}={v}" for k, v in index["params"].items())
    if model["source"] == "none":
        serves = f"none: {model['reason']}"
    elif model["source"] == "cosine":  # plain cosine beat the models the guard judged: its line says so
        serves = (f"plain cosine to the last paragraph (B1), {model['model_version']}\n"
                  f"{'why  ' if model.get('fallback') else 'guard'}         "
                  f"{model['reason'] or 'it scored at least as well as the models judged'}")
    else:
        serves = f"{model['source']} {model['model_version']}" + (
            f" ({model['started_from']})" if model.get("started_from") else
            " (no model of its own: `nextpara train` trains one)" if model["source"] == "general" else "") + (
            f", {model['scorer']} scorer") + (
            f", transition memory weight {model['memory_weight']:g}" if model.get("memory_weight") else
            ", no transition memory")
    if "validation" in model:
        v = model["validation"]
        serves += (f"\nvalidation    MRR@10 {fmt(v['model'])}, Recall@1 {fmt(v['model'], 'recall@1')}; "
                   f"B1 (cosine to the last paragraph) {fmt(v['B1'])}, {fmt(v['B1'], 'recall@1')}")
    print(f"data dir      {info['data_dir']} (store_id {info['store_id']})\n"
          f"embedder      {info['embedder']} (dim {info['dim']})\n"
          + (f"endpoint      {remote.get('base_url', '$NEXTPARA_EMBEDDINGS_URL, else OpenAI')}, key in "
             f"${remote.get('api_key_env', 'OPENAI_API_KEY')} (query texts are embedded there)\n" if remote else "")
          + f"documents     {info['documents']}\n"
          f"paragraphs    {info['paragraphs']}\n"
          f"index         {index['requested']}: {index['factory']}{f' ({params})' if params else ''}, {index['vectors']} vectors\n"
          f"generation    {info['generation']} (snapshot at {info['snapshot_generation']})\n"
          f"disk          {info['disk_bytes'] / 1e6:.1f} MB"
          + (f" ({info['disk_bytes_per_paragraph']} bytes/paragraph)\n" if info["paragraphs"] else " (no paragraphs)\n")
          + f"model         {serves}")
    return 0
