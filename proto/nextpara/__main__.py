"""The ``nextpara`` command: one entry point whose subcommands live with the layer they drive.

``python -m nextpara`` and the ``nextpara`` console script both run :func:`main`. Exit status: 0 success; 1 a
service error (the server refused or failed the call: the client's ServiceError, or a grpc.RpcError; also ``status``
of a server that is not SERVING); 2 a usage error (bad flags, a bad input file, any other NextparaError raised here)
or a file system error (an OSError: a full disk, a path that cannot be written; one line, ``-v`` adds the
traceback); 130 interrupted (Ctrl-C); 141 when the reader of its output stopped early (``| head``).
"""

from __future__ import annotations

import argparse
import logging
import sys

from nextpara import __version__

HEAVY = {"numpy", "torch", "faiss", "sentence_transformers", "tqdm", "grpc_reflection", "prometheus_client", "transformers"}


def make_parser() -> argparse.ArgumentParser:
    from nextpara.attention_core import cli as model_cli
    from nextpara.batch import cli as batch_cli
    from nextpara.client import cli as client_cli
    from nextpara.server import cli as server_cli
    from nextpara.store import cli as store_cli

    parser = argparse.ArgumentParser(prog="nextpara", description="Next-paragraph retrieval: build, train, serve, query.")
    parser.add_argument("--version", action="version", version=f"nextpara {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars, warnings only")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    store_cli.register(sub)
    model_cli.register(sub)
    batch_cli.register(sub)
    server_cli.register(sub)
    client_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "predict" and not any(x.startswith("-") and x != "-" for x in extra):
        # texts after an option (`A --id 3 B`, `A -k 3 B`): argparse's "nextpara: error: unrecognized arguments: B"
        # named neither the command nor the rule
        print(f"nextpara predict: error: the TEXT arguments are one run, but {' '.join(map(repr, extra))} came after "
              "an option that follows other texts: put the options before or after all the texts. --id keeps its "
              "place among them (`--id 3 A B` is the context 3, A, B; `A B --id 3` is A, B, 3), so an id between two "
              "texts is for the client library, not this command", file=sys.stderr)
        return 2
    if extra:
        parser.parse_args(argv)  # argparse's own message and exit status 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("nextpara").setLevel(logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO)
    from nextpara.errors import NextparaError

    try:
        return int(args.func(args) or 0)
    except NextparaError as e:
        committed = getattr(e, "documents_committed", None)  # add: an error that ended the stream (client/_upload.py)
        print(f"nextpara {args.command}: error: {e}{token_hint(args, e)}"
              + ("" if committed is None else f"; {committed} document(s) before it were committed"), file=sys.stderr)
        return 1 if is_service_error(e) else 2
    except BrokenPipeError:  # the reader of stdout went away (`nextpara ... | head`): nothing of this command failed
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit would raise it again
        return 141  # as a shell reports a process ended by SIGPIPE
    except OSError as e:  # the file system refused (a full disk, a read-only one, a missing folder): one line
        logging.getLogger("nextpara").debug("%s failed", args.command, exc_info=True)  # the traceback, with -v
        print(f"nextpara {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in HEAVY:
            print(f"nextpara {args.command}: needs {e.name}, which the client-only install lacks: "
                  "pip install 'nextpara[server]'", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print(f"nextpara {args.command}: interrupted{AFTER_INTERRUPT.get(args.command, '')}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # grpc's own threads may still be inside the interrupted call (an AddDocuments stream waiting on stdin): a
        # normal interpreter exit then aborts in grpc's teardown (SIGABRT) instead of exiting 130
        import os

        os._exit(130)
    except Exception as e:
        if not is_service_error(e):
            raise
        from nextpara.client.errors import from_rpc_error

        error = from_rpc_error(e)
        print(f"nextpara {args.command}: error: {error}{token_hint(args, error)}", file=sys.stderr)
        return 1


AFTER_INTERRUPT = {  # what an interrupted command leaves, where a user would ask
    "build": "; what it stored is kept, and the same command continues (stored documents are skipped)",
    "add": "; documents sent before may have been committed: the same command again is safe (upserted by doc_id)",
}


def token_hint(args: argparse.Namespace, e: BaseException) -> str:
    """What to do about a refused token, for a command that takes ``--token``: the server's message speaks of gRPC
    metadata, which a user of the command line does not send."""
    code = getattr(getattr(e, "code", None), "name", None)
    if not hasattr(args, "token") or code not in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return ""
    if code == "PERMISSION_DENIED":
        return " (give a write token: --token or $NEXTPARA_TOKEN)"
    return " (give a token: --token or $NEXTPARA_TOKEN)" if not args.token else " (check --token or $NEXTPARA_TOKEN)"


def is_service_error(e: BaseException) -> bool:
    """Whether ``e`` is the service's answer (exit 1) rather than the user's or this process's fault (exit 2)."""
    grpc = sys.modules.get("grpc")  # only a command that loaded grpc can have had a service error
    if grpc is None:
        return False
    from nextpara.client.errors import ServiceError

    return isinstance(e, (ServiceError, grpc.RpcError))


if __name__ == "__main__":
    sys.exit(main())
