"""CLI commands over the store: ``build``, ``search``, ``backup``. ``info``, which also describes the model, is in
attention_core/cli.py, which also runs ``build`` through :func:`run_build` and :func:`print_build` to judge the general
model after it.

Only argparse is imported at module level; each command imports what it needs when run.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None,
                        help="store directory (default: $NEXTPARA_DATA_DIR, else $XDG_DATA_HOME/nextpara, "
                             "~/.local/share/nextpara by default)")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as one JSON document")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="read a corpus, embed it and store it with a FAISS index",
                       description="Upsert every document of a corpus into the store; unchanged documents are skipped.")
    p.add_argument("corpus_given", nargs="?", metavar="CORPUS", help="the corpus, as --corpus names it")
    p.add_argument("--corpus", default=None,
                   help="a .jsonl file, a directory of .txt/.md files, or 'builtin' (default: the interpreter's own docs)")
    add_data_dir(p)
    p.add_argument("--embedder", default=None,
                   help="minilm, minilm-int8, sentence-transformers:PATH, precomputed:NAME (vectors in the corpus) "
                        "or openai:MODEL (default: the store's own, fixed when it was created; minilm for a new one)")
    p.add_argument("--embedder-url", default=None,
                   help="base URL of an OpenAI-compatible API for openai:MODEL (default: $NEXTPARA_EMBEDDINGS_URL or "
                        "OpenAI's); the store remembers it, and its queries' texts are embedded there too (a later build "
                        "with another changes it)")
    p.add_argument("--api-key-env", default=None,
                   help="environment variable holding the API key (default: OPENAI_API_KEY, or the one the store "
                        "remembers: its name, never the key, is remembered as the URL is)")
    p.add_argument("--index", default=None,
                   help="auto (default: exact below 50,000 paragraphs, HNSW from there), flat, hnsw, ivf or a FAISS "
                        "factory string; used when the store is created (an existing store keeps its own: a warning "
                        "says so)")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed documents and report how many")
    p.add_argument("--prune", action="store_true", help="delete the stored documents the corpus does not hold (a "
                   "removed file's); without it they are kept, and counted")
    p.add_argument("--batch-paragraphs", type=int, default=1024, help="paragraphs per committed batch (default 1024; the progress bar moves as they are embedded)")
    p.add_argument("--no-cache", action="store_true", help="do not use the on-disk embedding cache")
    add_json(p)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("search", help="plain nearest neighbours of a text (for debugging)")
    p.add_argument("text")
    add_data_dir(p)
    p.add_argument("-k", type=int, default=5, help="how many neighbours (default 5)")
    add_json(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("backup", help="copy a store while a server may be writing it (online backup)",
                       description="Copy the store in --data-dir into DEST, a new directory, without stopping its writer: "
                                   "SQLite's online backup of the database, then the index snapshot and the other files "
                                   "(the model). The copy holds every write acknowledged before the backup began and opens "
                                   "as a data directory: serve it, or copy it back in place of the store.")
    p.add_argument("dest", metavar="DEST", help="the new directory to write (it must not exist)")
    add_data_dir(p)
    add_json(p)
    p.set_defaults(func=cmd_backup)


def cmd_build(args: argparse.Namespace) -> int:
    print_build(args, run_build(args))
    return 0


def run_build(args: argparse.Namespace):
    """``nextpara build``'s work: the BuildReport; the documents it skipped as malformed are named on stderr."""
    from nextpara.errors import InvalidInputError

    from .ingest import build

    if args.batch_paragraphs < 1:
        raise InvalidInputError(f"--batch-paragraphs must be at least 1, got {args.batch_paragraphs}")
    if args.corpus_given is not None and args.corpus is not None:
        raise InvalidInputError(f"the corpus given twice ({args.corpus_given!r} and --corpus {args.corpus!r}): give one")
    try:
        report = build(args.corpus_given or args.corpus or "builtin", args.data_dir, embedder=args.embedder,
                       index=args.index, skip_bad=args.skip_bad, batch_paragraphs=args.batch_paragraphs,
                       use_cache=not args.no_cache, quiet=args.quiet,
                       embedder_options={"base_url": args.embedder_url, "api_key_env": args.api_key_env},  # (remote)
                       prune=args.prune)
    except InvalidInputError as e:  # a malformed document stopped the build before anything was stored: say so, and
        if not getattr(e, "malformed_document", False):  # how to build the rest
            raise
        raise InvalidInputError(f"{e}; nothing was stored: fix it, or build with --skip-bad to skip such documents",
                                reason=e.reason, field=e.field, metadata=e.metadata) from e
    for reason in report.skipped_reasons:
        print(f"skipped: {reason}", file=sys.stderr)
    return report


def print_build(args: argparse.Namespace, report, extra: dict | None = None) -> None:
    """The report as one line, or with ``--json`` one JSON document (``extra``'s keys beside the report's)."""
    if args.json:
        from dataclasses import asdict

        print(json.dumps({**asdict(report), "paragraphs_per_second": report.paragraphs_per_second, **(extra or {})},
                         indent=2))
        return
    print(f"built {report.data_dir}: {report.documents_read} documents read"
          f" ({report.documents_added} added, {report.documents_replaced} replaced, {report.documents_unchanged} unchanged,"
          f" {report.documents_skipped_bad} malformed skipped); {report.paragraphs_written} paragraphs written;"
          f" {report.paragraphs_embedded} embedded in {report.embed_seconds:.1f}s ({report.paragraphs_per_second:.0f}/s"
          + (f"; loading the model {report.model_load_seconds:.1f}s" if report.model_load_seconds else "") + "),"
          + (f" {report.cache_hits} from the embedding cache, {report.paragraphs_repeated} repeated texts embedded once;"
             if report.cached else " no embedding cache;") + f" total {report.total_seconds:.1f}s")
    if report.paragraphs_cut:
        print(f"{report.paragraphs_cut} paragraph text(s) longer than the model reads ({report.model_reads_tokens} word "
              f"pieces; the first: {report.first_cut}): each is embedded by its beginning, so the rest of it counts "
              "for its words only; split them to have all of it read", file=sys.stderr)
    if report.documents_pruned:
        print(f"pruned {report.documents_pruned} stored document(s) the corpus does not hold")
    if report.documents_absent:
        shown = ", ".join(map(repr, report.absent_doc_ids)) + (", ..." if report.documents_absent > 5 else "")
        print(f"kept {report.documents_absent} stored document(s) the corpus does not hold ({shown}): this build "
              "with --prune deletes them", file=sys.stderr)


def cmd_search(args: argparse.Namespace) -> int:
    from nextpara.errors import InvalidInputError

    from .store import open_store

    if not args.text.strip():  # as predict refuses an empty paragraph: there is nothing to be near
        raise InvalidInputError("the text to search for is empty")
    with open_store(args.data_dir, readonly=True) as store:
        embedder = store.query_embedder()
        scores, ids = store.search(embedder.embed([args.text]), args.k)
        hits = [(s, i) for s, i in zip(scores[0], ids[0]) if i >= 0]
        paragraphs = store.get_paragraphs([i for _, i in hits])
        if args.json:
            print(json.dumps({"text": args.text, "data_dir": str(store.data_dir), "results": [
                {"score": float(score), "paragraph_id": int(pid), "doc_id": para.doc_id, "position": para.position,
                 "text": para.text} for (score, pid), para in zip(hits, paragraphs)]}, indent=2))
            return 0
        for (score, pid), para in zip(hits, paragraphs):
            text = para.text if len(para.text) <= 160 else para.text[:157] + "..."
            print(f"{score:.3f}  #{pid}  {para.doc_id}[{para.position}]  {text}")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .backup import backup

    report = backup(args.data_dir, args.dest, quiet=args.quiet)
    print(json.dumps(asdict(report), indent=2) if args.json else report.line())
    return 0
