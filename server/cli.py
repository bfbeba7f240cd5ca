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
    from .config import from_args

    settings = from_args(args)  # a bad setting is said at once, before seconds of imports
    import asyncio

    from nextpara.attention_core.bootstrap import ensure_default_store
    from nextpara.store.data_dir import DataDir

    from .main import cannot_listen, run_server, start_metrics, tls_refusal

    # before a build of the default store: at once
    if (refused := cannot_listen(settings.address) or tls_refusal(settings)) is not None:
        raise refused
    metrics = start_metrics(settings)  # ... and so is a taken metrics port
    data_dir = DataDir.resolve(settings.data_dir)
    ensure_default_store(data_dir, quiet=args.quiet, read_only=settings.read_only)  # builds only the default location
    asyncio.run(run_server(settings, data_dir, metrics=metrics))
    return 0
