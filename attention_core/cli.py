"""CLI commands over the store: ``build``, ``info``, ``search``.

Only argparse is imported at module level; each command imports what it needs when run.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None,
                        help="store directory (default: $NEXTPARA_DATA_DIR or ~/.local/share/nextpara)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="read a corpus, embed it and store it with a FAISS index",
                       description="Upsert every document of a corpus into the store; unchanged documents are skipped.")
    p.add_argument("--corpus", default="builtin",
                   help="a .jsonl file, a directory of .txt/.md files, or 'builtin' (default: the interpreter's own docs)")
    add_data_dir(p)
    p.add_argument("--embedder", default="minilm",
                   help="minilm (default), sentence-transformers:PATH, precomputed:NAME (vectors in the corpus) or openai:MODEL")
    p.add_argument("--embedder-url", default=None,
                   help="base URL of an OpenAI-compatible API for openai:MODEL (default: $NEXTPARA_EMBEDDINGS_URL or OpenAI)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    p.add_argument("--index", default="auto",
                   help="auto (default: exact below 50,000 paragraphs, HNSW from there), flat, hnsw, ivf or a FAISS "
                        "factory string; used when the store is created")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed documents and report how many")
    p.add_argument("--batch-paragraphs", type=int, default=1024, help="paragraphs per embedded, committed batch")
    p.add_argument("--no-cache", action="store_true", help="do not use the on-disk embedding cache")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("info", help="describe a store: embedder, counts, index, disk use")
    add_data_dir(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("search", help="plain nearest neighbours of a text (for debugging)")
    p.add_argument("text")
    add_data_dir(p)
    p.add_argument("-k", type=int, default=5, help="how many neighbours (default 5)")
    p.set_defaults(func=cmd_search)
    register_model_commands(sub)


def register_model_commands(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--no-lexical", action="store_true",
                   help="score from the vectors alone, without the word overlap of the texts")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="evaluate baselines and the trained model on the test split (DESIGN.md protocol)")
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

    from .ingest import default_data_dir
    from .train_config import TrainConfig
    from .training import train

    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    model_cfg = {k: v for k, v in {"d_model": args.d_model, "n_context_layers": args.layers}.items() if v is not None}
    if args.no_lexical:
        model_cfg["lexical"] = False
    meta = train(args.data_dir or default_data_dir(), model_cfg, cfg, quiet=args.quiet)
    v = meta["metrics"]["validation"]
    print(f"trained model {meta['model_version']} in {meta['training']['seconds']}s: validation MRR@10 {v['mrr@10']:.4f}, "
          f"Recall@1 {v['recall@1']:.4f}, stage-1 recall {v['stage1_recall']:.3f}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .eval_report import markdown_table, run_evaluation
    from .ingest import default_data_dir

    result = run_evaluation(args.data_dir or default_data_dir(), n_queries=args.queries, context_length=args.context_length,
                            output=args.output, plot_dir=args.plot, latency_queries=args.latency_queries, seed=args.seed)
    c = result["config"]
    print(f"{c['queries']} test queries, L={c['context_length']}, {c['paragraphs']} paragraphs indexed, "
          f"model {c['model_version']}\n")
    print(markdown_table(result))
    for path in result.get("plots", []):
        print(f"wrote {path}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from .ingest import build

    report = build(args.corpus, args.data_dir, embedder=args.embedder, index=args.index, skip_bad=args.skip_bad,
                   batch_paragraphs=args.batch_paragraphs, use_cache=not args.no_cache, quiet=args.quiet,
                   embedder_options={"base_url": args.embedder_url, "api_key_env": args.api_key_env}
                   if args.embedder.startswith("openai:") else None)
    for reason in report.skipped_reasons:
        print(f"skipped: {reason}", file=sys.stderr)
    print(f"built {report.data_dir}: {report.documents_read} documents read"
          f" ({report.documents_added} added, {report.documents_replaced} replaced, {report.documents_unchanged} unchanged,"
          f" {report.documents_skipped_bad} malformed skipped); {report.paragraphs_written} paragraphs written;"
          f" {report.paragraphs_embedded} embedded in {report.embed_seconds:.1f}s"
          f" ({report.paragraphs_per_second:.0f}/s), {report.cache_hits} from cache; total {report.total_seconds:.1f}s")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .ingest import open_default

    with open_default(args.data_dir) as store:
        info = store.info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    index = info["index"]
    params = ", ".join(f"{k}={v}" for k, v in index["params"].items())
    print(f"data dir      {info['data_dir']}\n"
          f"embedder      {info['embedder']} (dim {info['dim']})\n"
          f"documents     {info['documents']}\n"
          f"paragraphs    {info['paragraphs']}\n"
          f"index         {index['requested']}: {index['factory']}{f' ({params})' if params else ''}, {index['vectors']} vectors\n"
          f"generation    {info['generation']} (snapshot at {info['snapshot_generation']})\n"
          f"disk          {info['disk_bytes'] / 1e6:.1f} MB ({info['disk_bytes_per_paragraph']} bytes/paragraph)")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from .embedders import embedder_for_store
    from .ingest import open_default

    with open_default(args.data_dir) as store:
        embedder = embedder_for_store(store.embedder_spec, store.embedder_name, store.dim)
        scores, ids = store.search(embedder.embed([args.text]), args.k)
        hits = [(s, i) for s, i in zip(scores[0], ids[0]) if i >= 0]
        for (score, pid), para in zip(hits, store.get_paragraphs([i for _, i in hits])):
            text = para.text if len(para.text) <= 160 else para.text[:157] + "..."
            print(f"{score:.3f}  #{pid}  {para.doc_id}[{para.position}]  {text}")
    return 0
