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

    p = sub.add_parser("add", help="upsert documents from a JSON Lines file into a running server")
    p.add_argument("corpus", help="JSONL, one {\"doc_id\", \"title\", \"paragraphs\"[, \"vectors\"]} per line")
    add_connection(p)
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("delete", help="delete documents from a running server")
    p.add_argument("doc_ids", nargs="+")
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
        print(f"error: {e}", file=sys.stderr)
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
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                yield {"doc_id": doc["doc_id"], "title": doc.get("title", ""), "paragraphs": doc["paragraphs"],
                       "vectors": doc.get("vectors")}
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{lineno}: not a document ({e})") from e


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
            r = c.delete_documents(args.doc_ids)
        print(f"{r.documents_deleted} documents ({r.paragraphs_deleted} paragraphs) deleted; "
              f"index generation {r.index_version}")
        return 0
    return _run(go)


def cmd_status(args) -> int:
    def go():
        with client_from(args) as c:
            status = c.health()
            i = c.info()
        print(f"health        {status}\nembedder      {i.embedder} (dim {i.dim})\ndocuments     {i.documents}\n"
              f"paragraphs    {i.paragraphs}\nindex         {i.index_type}: {i.index_factory}\n"
              f"model         {i.model_version or 'none (run nextpara train)'}\nindex version {i.index_version}\n"
              f"server        {i.server_version}")
        return 0 if status == "SERVING" else 1
    return _run(go)
