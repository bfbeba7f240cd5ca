"""The ``nextpara`` command: one entry point whose subcommands live with the layer they drive.

``python -m nextpara`` and the ``nextpara`` console script both run :func:`main`.
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
    args = make_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("nextpara").setLevel(logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO)
    from nextpara.errors import NextparaError

    try:
        return int(args.func(args) or 0)
    except NextparaError as e:
        print(f"nextpara {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in HEAVY:
            print(f"nextpara {args.command}: needs {e.name}, which the client-only install lacks: "
                  "pip install 'nextpara[server]'", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print(f"nextpara {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
