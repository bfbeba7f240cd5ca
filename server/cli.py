"""``nextpara serve``."""

from __future__ import annotations

import argparse

from .config import add_arguments


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the gRPC API (first builds the built-in corpus into the default data dir when "
                                     "that holds nothing of the user's; the general model serves it)",
                       description="Serve nextpara.v1.NextParagraphService with health checking, reflection and "
                                   "Prometheus metrics. Every option also reads NEXTPARA_<OPTION> from the environment.")
    add_arguments(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from nextpara.store.data_dir import DataDir

    from .config import from_args
    from .main import run_server

    settings = from_args(args)
    from nextpara.attention_core.bootstrap import ensure_default_store

    data_dir = DataDir.resolve(settings.data_dir)
    ensure_default_store(data_dir, quiet=args.quiet, read_only=settings.read_only)  # builds only the default location
    asyncio.run(run_server(settings, data_dir))
    return 0
