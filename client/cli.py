"""CLI commands on the client: ``predict``, ``add``, ``delete``, ``status``. They import only the client.

Each prints its result as text, or with ``--json`` as one JSON document on stdout. Errors propagate to the entry
point (``nextpara.__main__``), which maps them to the exit status: 1 for the service's, 2 for the user's.
"""

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
    p.add_argument("--timeout", type=seconds, default=os.environ.get("NEXTPARA_TIMEOUT", "30"),
                   help="seconds per call (default $NEXTPARA_TIMEOUT or 30)")


def seconds(text: str) -> float:
    """A --timeout (or $NEXTPARA_TIMEOUT): a positive number of seconds; argparse makes anything else a usage error."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds (from --timeout or "
                                         "$NEXTPARA_TIMEOUT)")
    return value


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")


def print_json(result) -> None:
    """A result (a client dataclass, or a dict of them) as one JSON document on stdout."""
    from dataclasses import asdict, is_dataclass

    print(json.dumps(asdict(result) if is_dataclass(result) else result, indent=2))


class ContextItems(argparse.Action):
    """``predict``'s TEXT arguments and ``--id`` ids, gathered in ``args.context`` in the order given."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, "context", None) or [])
        namespace.context = items + (values if isinstance(values, list) else [values])


def client_from(args):
    from .sync import Client

    return Client(args.address, token=args.token, tls=args.tls, root_certificates=args.ca_cert, timeout=args.timeout)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="ask a running server for the next paragraphs of a context")
    p.add_argument("texts", nargs="*", metavar="TEXT", action=ContextItems,
                   help="context paragraphs, oldest first; '-' reads them from stdin, one per line")
    p.add_argument("--id", type=int, dest="ids", metavar="ID", action=ContextItems,
                   help="a stored paragraph in the context, by its id (repeatable; placed in the order given)")
    p.add_argument("-k", "--top-k", type=int, default=5)
    p.add_argument("--explain", action="store_true", help="show the attention weights over the context")
    f = p.add_argument_group("filter", "which stored paragraphs may be predicted (searched among those alone, so -k "
                                       "is filled from them)")
    f.add_argument("--label", type=_label, action="append", default=[], metavar="KEY=VALUE",
                   help="only documents carrying this label (repeatable: all must match)")
    f.add_argument("--only-doc", action="append", default=[], metavar="DOC_ID",
                   help="only paragraphs of this document (repeatable)")
    f.add_argument("--exclude-doc", action="append", default=[], metavar="DOC_ID",
                   help="never paragraphs of this document (repeatable)")
    f.add_argument("--min-score", type=float, default=None, metavar="S", help="only predictions scoring at least S")
    f.add_argument("--max-per-document", type=int, default=0, metavar="N",
                   help="at most N predictions from one document, its best (0: no limit)")
    f.add_argument("--distinct-texts", action="store_true",
                   help="a text at most once, its best-ranked paragraph (corpora repeat paragraphs)")
    add_json(p)
    add_connection(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("add", help="upsert documents from a JSON Lines file (or stdin) into a running server",
                       description="Streams the file's documents as it reads it. A bad line stops it at once with "
                                   "FILE:LINE: reason and the number of documents committed before it (documents are "
                                   "upserted by doc_id, so running it again after the fix is safe).")
    p.add_argument("corpus", help="JSONL, one {\"doc_id\", \"title\", \"paragraphs\"[, \"vectors\", \"labels\"]} per line; "
                                  "'-' reads it from stdin")
    add_json(p)
    add_connection(p)
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("delete", help="delete documents from a running server")
    p.add_argument("doc_ids", nargs="+")
    p.add_argument("--allow-missing", action="store_true",
                   help="doc_ids that are not stored are not an error (listed); such a delete is retried if the "
                        "server is unavailable, as it is safe to repeat")
    add_json(p)
    add_connection(p)
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("status", help="health and contents of a running server (exit status 1 unless SERVING)")
    add_json(p)
    add_connection(p)
    p.set_defaults(func=cmd_status)


def _label(text: str) -> tuple[str, str]:
    from .cli_input import label_pair

    try:
        return label_pair(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def predict_filter(args):
    """The Filter of ``predict``'s filter flags; None when none is given."""
    from nextpara.errors import InvalidInputError

    from ._convert import finite
    from .types import Filter

    if args.max_per_document < 0:
        raise InvalidInputError(f"--max-per-document must be 0 (no limit) or more, got {args.max_per_document}")
    finite(args.min_score, "--min-score")  # (InvalidInputError: a usage error)
    if not (args.label or args.only_doc or args.exclude_doc or args.min_score is not None or args.max_per_document
            or args.distinct_texts):
        return None
    labels: dict[str, str] = {}
    for key, value in args.label:
        if labels.setdefault(key, value) != value:  # a dict would keep the last, silently dropping a filter
            raise InvalidInputError(f"--label {key}={labels[key]} and --label {key}={value}: a document carries one "
                                    f"value of {key!r}, so both cannot match")
    return Filter(doc_ids=args.only_doc, exclude_doc_ids=args.exclude_doc, labels=labels,
                  min_score=args.min_score, max_per_document=args.max_per_document,
                  distinct_texts=args.distinct_texts)


def _filter_flags(args) -> str:
    """The filter flags given, as they were typed (for a message about the filter)."""
    flags = ([f"--label {k}={v}" for k, v in args.label] + [f"--only-doc {d}" for d in args.only_doc]
             + [f"--exclude-doc {d}" for d in args.exclude_doc]
             + ([f"--min-score {args.min_score:g}"] if args.min_score is not None else [])
             + ([f"--max-per-document {args.max_per_document}"] if args.max_per_document else [])
             + (["--distinct-texts"] if args.distinct_texts else []))
    return " ".join(flags)


def cmd_predict(args) -> int:
    from nextpara.errors import InvalidInputError

    from ._convert import MAX_TOP_K
    from .cli_input import read_context

    if not 1 <= args.top_k <= MAX_TOP_K:  # the client would refuse it too, naming top_k: it is this command line's
        raise InvalidInputError(f"-k must be 1 to {MAX_TOP_K}, got {args.top_k}")
    context = read_context(getattr(args, "context", None) or [])
    chosen = predict_filter(args)
    with client_from(args) as c:
        r = c.predict_next(context, top_k=args.top_k, include_attention=args.explain, filter=chosen)
    if args.json:
        print_json(r)
        return 0
    if not r.predictions:  # a blank line and the model's, as if something had been predicted: nothing, and why
        print(f"nextpara predict: no stored paragraph matched the filter ({_filter_flags(args)})" if chosen is not None
              else "nextpara predict: the service predicted no paragraph (does the store hold any beside the context's?)",
              file=sys.stderr)
        return 0
    for i, p in enumerate(r.predictions, 1):
        text = p.text if len(p.text) <= 200 else p.text[:197] + "..."
        print(f"{i}. {p.score:7.3f}  #{p.paragraph_id} {p.doc_id}[{p.position}]\n   {text}")
    if args.explain and r.attention:
        print("\nattention of the top prediction over the context (rows: heads; columns: oldest -> newest):")
        for h, weights in enumerate(r.attention):
            print(f"  head {h}: " + "  ".join(f"{w:.2f}" for w in weights))
    elif args.explain and r.predictions:
        print("\nno attention weights: the model that serves has no cross-attention (the fast scorer, or plain cosine "
              "where the guard found it better: `nextpara status` says which)")
    print(f"\nmodel {r.model_version}, index generation {r.index_version}, {r.context_used} context paragraphs used"
          + (f", {r.context_dropped} oldest dropped" if r.context_dropped else ""))
    return 0


LOST_CALL = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")  # status codes of a call cut short, not refused


def cmd_add(args) -> int:
    from nextpara.errors import InvalidInputError, Reason

    from .cli_input import read_jsonl, source_name
    from .errors import ServiceError

    lines: list[int] = []
    documents = read_jsonl(args.corpus, lines)
    with client_from(args) as c:
        try:
            r = c.add_documents(documents)
        except InvalidInputError as e:  # a document over the message limit, refused unsent: its line, not its index
            at = getattr(e, "document_index", None)
            if e.reason != Reason.MESSAGE_TOO_LARGE or at is None or at >= len(lines):
                raise
            m = e.metadata  # (the library's message advises raising a client limit this command has no flag for)
            message = (f"document {m['docId']!r} is {m['actualBytes']} bytes encoded, over the {m['limitBytes']}-byte "
                       "message limit: split it into smaller documents (this command's messages are held to the "
                       "smaller of 16 MiB and the server's --max-message-mb)")
            print(f"nextpara add: error: {source_name(args.corpus)}:{lines[at]}: {message}; "
                  f"{getattr(e, 'documents_committed', 0)} document(s) before it were committed", file=sys.stderr)
            return 2
        except ServiceError as e:  # the service refused a document (a vector's dimension, say): where it is in the file
            at = getattr(e, "document_index", None)
            if at is not None and at < len(lines):
                print(f"nextpara add: error: {source_name(args.corpus)}:{lines[at]}: {e}", file=sys.stderr)
                return 1
            if e.code.name in LOST_CALL:  # the server went away (or the deadline passed) with the upload under way
                print(f"nextpara add: error: {e}\n  documents sent before may have been committed: the same command "
                      "again is safe (documents are upserted by doc_id)", file=sys.stderr)
                return 1
            raise
    if args.json:
        print_json(r)
        return 0
    print(f"{r.documents_added} added, {r.documents_replaced} replaced, {r.documents_unchanged} unchanged; "
          f"{r.paragraphs_written} paragraphs written; index generation {r.index_version}")
    return 0


def cmd_delete(args) -> int:
    from .errors import NotFound

    with client_from(args) as c:
        try:
            r = c.delete_documents(args.doc_ids, allow_missing=args.allow_missing)
        except NotFound as e:  # the server deleted none of them: say so, and how to delete the stored ones
            print(f"nextpara delete: error: {e}; nothing was deleted"
                  + (" (--allow-missing deletes the stored ones and lists the others)" if len(args.doc_ids) > 1 else
                     " (--allow-missing makes a delete of a doc_id that is not stored succeed)"), file=sys.stderr)
            return 1
    if args.json:
        print_json(r)
        return 0
    print(f"{r.documents_deleted} documents ({r.paragraphs_deleted} paragraphs) deleted; "
          f"index generation {r.index_version}"
          + (f"; not stored: {', '.join(r.missing_doc_ids)}" if r.missing_doc_ids else ""))
    return 0


def _model_line(i) -> str:
    m = i.model
    if m is None:  # a server from before ModelInfo
        return i.model_version or "none"
    if m.source == "none":
        return f"none: {m.reason}"
    if m.source == "cosine":  # the guard found plain cosine at least as good as the models: m.reason says so
        line = f"plain cosine to the last paragraph (B1), {m.version}"
    else:
        line = (f"{m.source} {m.version}" + (f" ({m.started_from})" if m.started_from else "")
                + (f", {m.scorer} scorer" if m.scorer else ""))
    if m.source == "cosine" and m.validation:
        b = m.validation
        line += f"; validation MRR@10 {b.mrr_at_10:.3f} [{b.mrr_at_10_ci[0]:.3f}, {b.mrr_at_10_ci[1]:.3f}]"
    elif m.validation and m.cosine_validation:
        v, b = m.validation, m.cosine_validation
        line += (f"; validation MRR@10 {v.mrr_at_10:.3f} [{v.mrr_at_10_ci[0]:.3f}, {v.mrr_at_10_ci[1]:.3f}], cosine "
                 f"{b.mrr_at_10:.3f} [{b.mrr_at_10_ci[0]:.3f}, {b.mrr_at_10_ci[1]:.3f}]")
    return line


def cmd_status(args) -> int:
    from dataclasses import asdict

    from .errors import ServiceError, Unauthenticated

    def error(e: ServiceError) -> dict:
        return {"code": e.code.name, "reason": e.reason, "message": e.details}

    with client_from(args) as c:
        try:
            status = c.health()
        except ServiceError as e:  # no service there, or none that answers in time: the entry point says it, and
            if args.json:  # scripts still get one document: no health, and why
                print_json({"health": None, "error": error(e)})
            raise
        try:
            i = c.info()
        except ServiceError as e:  # health is open to all: say it before the refusal (or failure) of the rest
            if args.json:  # still one document for scripts: the health, and the error instead of the info
                print_json({"health": status, "error": error(e)})
            else:
                print(f"health        {status}")
            if not isinstance(e, Unauthenticated):
                raise
            print(f"nextpara status: error: {e} (the rest needs a read token: --token or $NEXTPARA_TOKEN)",
                  file=sys.stderr)
            return 1
    code = 0 if status == "SERVING" else 1
    if args.json:
        print_json({"health": status, **asdict(i)})
        return code
    print(f"health        {status}\nembedder      {i.embedder} (dim {i.dim})\ndocuments     {i.documents}\n"
          f"paragraphs    {i.paragraphs}\nindex         {i.index_type}: {i.index_factory}\n"
          f"model         {_model_line(i)}\nindex version {i.index_version}\n"
          f"server        {i.server_version}")
    return code
