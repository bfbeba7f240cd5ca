"""CLI commands on the client: ``predict``, ``add``, ``delete``, ``status``. They import only the client."""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_connection(p: argparse.ArgumentParser, address: bool = True) -> None:
    """Connection flags; ``address=False`` when the command adds its own --address."""
    if address:
        p.add_argument("--address", default=os.environ.get("NEXTPARA_ADDRESS", "127.0.0.1:50051"),
                       help="server host:port (default $NEXTPARA_ADDRESS or 127.0.0.1:50051)")
    p.add_argument("--token", default=os.environ.get("NEXTPARA_TOKEN"), help="bearer token (default $NEXTPARA_TOKEN)")
    p.add_argument("--tls", action="store_true", help="connect with TLS, verifying the server against system roots")
    p.add_argument("--ca-cert", default=None, help="PEM file of the CA that signed the server's certificate (implies --tls)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per call (default 30)")


def client_from(args):
    from .sync import Client

    return Client(args.address, token=args.token, tls=args.tls, root_certificates=args.ca_cert, timeout=args.timeout)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="ask a running server for the next paragraphs of a context")
    p.add_argument("paragraphs", nargs="+", metavar="TEXT", help="context paragraphs, oldest first (an integer is a stored id)")
    p.add_argument("-k", "--top-k", type=int, default=5)
    p.add_argument("--explain", action="store_true", help="show the attention weights over the context")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_connection(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("add", help="upsert documents from a JSON Lines file into a running server",
                       description="Streams the file's documents as it reads it. A bad line stops it at once with "
                                   "FILE:LINE: reason and the number of documents committed before it (documents are "
                                   "upserted by doc_id, so running it again after the fix is safe).")
    p.add_argument("corpus", help="JSONL, one {\"doc_id\", \"title\", \"paragraphs\"[, \"vectors\"]} per line")
    add_connection(p)
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("delete", help="delete documents from a running server")
    p.add_argument("doc_ids", nargs="+")
    p.add_argument("--allow-missing", action="store_true",
                   help="doc_ids that are not stored are not an error (listed); such a delete is retried if the "
                        "server is unavailable, as it is safe to repeat")
    add_connection(p)
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("status", help="health and contents of a running server")
    add_connection(p)
    p.set_defaults(func=cmd_status)


def _run(fn):
    from .errors import NextparaError

    try:
        return fn()
    except NextparaError as e:
        committed = getattr(e, "documents_committed", None)  # add: an error that ended the stream (client/_upload.py)
        print(f"error: {e}" + ("" if committed is None else f"; {committed} document(s) before it were committed"),
              file=sys.stderr)
        return 2


def cmd_predict(args) -> int:
    context = [int(p) if p.isdigit() else p for p in args.paragraphs]

    def go():
        with client_from(args) as c:
            r = c.predict_next(context, top_k=args.top_k, include_attention=args.explain)
        if args.json:
            from dataclasses import asdict

            print(json.dumps(asdict(r), indent=2))
            return 0
        for i, p in enumerate(r.predictions, 1):
            text = p.text if len(p.text) <= 200 else p.text[:197] + "..."
            print(f"{i}. {p.score:7.3f}  #{p.paragraph_id} {p.doc_id}[{p.position}]\n   {text}")
        if args.explain and r.attention:
            print("\nattention of the top prediction over the context (rows: heads; columns: oldest -> newest):")
            for h, weights in enumerate(r.attention):
                print(f"  head {h}: " + "  ".join(f"{w:.2f}" for w in weights))
        print(f"\nmodel {r.model_version}, index generation {r.index_version}, {r.context_used} context paragraphs used"
              + (f", {r.context_dropped} oldest dropped" if r.context_dropped else ""))
        return 0
    return _run(go)


def read_jsonl(path: str):
    """The documents of a JSON Lines file, read as they are asked for; a bad line raises CorpusFormatError (FILE:LINE:
    reason). The file is opened here, before the stream starts."""
    from nextpara.errors import CorpusFormatError, InvalidInputError

    try:
        f = open(path, "rb")
    except OSError as e:
        raise InvalidInputError(f"cannot read {path}: {e.strerror}") from e

    def documents():
        with f:
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                    doc = parse_document(line) if line.strip() else None
                except UnicodeDecodeError as e:
                    raise CorpusFormatError(path, lineno, f"not valid UTF-8 ({e.reason} at byte {e.start})") from e
                except ValueError as e:
                    raise CorpusFormatError(path, lineno, str(e)) from e
                if doc is not None:
                    yield doc
    return documents()


def parse_document(line: str) -> dict:
    """One JSON Lines line -> a document for Client.add_documents; ValueError saying what is wrong with it (its
    shape: the server checks the rest, e.g. vector dimensions)."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from e
    if not isinstance(doc, dict):
        raise ValueError(f"not a document: a JSON {type(doc).__name__}, not an object")
    doc_id, paragraphs, title, vectors = doc.get("doc_id"), doc.get("paragraphs"), doc.get("title"), doc.get("vectors")
    title = "" if title is None else title
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError(f"doc_id must be a non-empty string, got {doc_id!r}")
    if not isinstance(paragraphs, list) or not paragraphs:
        raise ValueError(f"document {doc_id!r}: paragraphs must be a non-empty list, got {paragraphs!r:.40}")
    for i, text in enumerate(paragraphs):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"document {doc_id!r}: paragraph {i} is not a non-empty string")
    if not isinstance(title, str):
        raise ValueError(f"document {doc_id!r}: title must be a string, got {type(title).__name__}")
    if vectors is not None:
        if not isinstance(vectors, list) or len(vectors) != len(paragraphs):
            raise ValueError(f"document {doc_id!r}: vectors must be a list of one vector per paragraph ({len(paragraphs)})")
        for i, v in enumerate(vectors):
            if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                raise ValueError(f"document {doc_id!r}: vector {i} is not a list of numbers")
    return {"doc_id": doc_id, "title": title, "paragraphs": paragraphs, "vectors": vectors}


def cmd_add(args) -> int:
    def go():
        with client_from(args) as c:
            r = c.add_documents(read_jsonl(args.corpus))
        print(f"{r.documents_added} added, {r.documents_replaced} replaced, {r.documents_unchanged} unchanged; "
              f"{r.paragraphs_written} paragraphs written; index generation {r.index_version}")
        return 0
    return _run(go)


def cmd_delete(args) -> int:
    def go():
        with client_from(args) as c:
            r = c.delete_documents(args.doc_ids, allow_missing=args.allow_missing)
        print(f"{r.documents_deleted} documents ({r.paragraphs_deleted} paragraphs) deleted; "
              f"index generation {r.index_version}"
              + (f"; not stored: {', '.join(r.missing_doc_ids)}" if r.missing_doc_ids else ""))
        return 0
    return _run(go)


def _model_line(i) -> str:
    m = i.model
    if m is None:  # a server from before ModelInfo
        return i.model_version or "none"
    if m.source == "none":
        return f"none: {m.reason}"
    line = f"{m.source} {m.version}" + (f" ({m.started_from})" if m.started_from else "")
    if m.validation and m.cosine_validation:
        v, b = m.validation, m.cosine_validation
        line += (f"; validation MRR@10 {v.mrr_at_10:.3f} [{v.mrr_at_10_ci[0]:.3f}, {v.mrr_at_10_ci[1]:.3f}], cosine "
                 f"{b.mrr_at_10:.3f} [{b.mrr_at_10_ci[0]:.3f}, {b.mrr_at_10_ci[1]:.3f}]")
    return line


def cmd_status(args) -> int:
    def go():
        with client_from(args) as c:
            status = c.health()
            i = c.info()
        print(f"health        {status}\nembedder      {i.embedder} (dim {i.dim})\ndocuments     {i.documents}\n"
              f"paragraphs    {i.paragraphs}\nindex         {i.index_type}: {i.index_factory}\n"
              f"model         {_model_line(i)}\nindex version {i.index_version}\n"
              f"server        {i.server_version}")
        return 0 if status == "SERVING" else 1
    return _run(go)
