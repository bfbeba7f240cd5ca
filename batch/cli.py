"""``nextpara rerank-batch INPUT OUTPUT``: the command line of batch jobs."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


def register(sub: argparse._SubParsersAction) -> None:
    from nextpara.client.cli import add_connection, add_json

    p = sub.add_parser(
        "rerank-batch", help="rerank (or predict for) every row of a JSON Lines / Parquet file; resumable",
        description="Each INPUT row is {\"id\", \"context\": [...], \"candidates\": [...] (optional), \"top_k\" (optional)}; "
                    "items are texts, stored paragraph ids or vectors. Rows without candidates are answered like "
                    "PredictNext. OUTPUT gets one JSON line per row, in input order; rerunning the same command after "
                    "an interruption skips the ids already in OUTPUT and appends the rest. A bad row becomes "
                    "{\"id\", \"line\", \"error\"} and the job goes on.")
    p.add_argument("input", metavar="INPUT", help="JSON Lines (.jsonl) or Parquet (.parquet, needs pyarrow)")
    p.add_argument("output", metavar="OUTPUT", help="JSON Lines written here (appended to when resuming)")
    engine = p.add_argument_group("engine (default: in-process on --data-dir)")
    engine.add_argument("--data-dir", default=None,
                        help="store and model (default: $NEXTPARA_DATA_DIR, else $XDG_DATA_HOME/nextpara, else "
                             "~/.local/share/nextpara); with --ray every Ray node must be able to read this path")
    engine.add_argument("--address", default=None, metavar="HOST:PORT", help="send the rows to a running nextpara service")
    engine.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="run on Ray Data: alone, a local Ray; with ADDRESS, join that cluster (needs nextpara[ray])")
    p.add_argument("-k", "--top-k", type=int, default=10, help="results kept per row unless the row says (default 10)")
    p.add_argument("--no-text", action="store_true", help="leave paragraph texts out of retrieval results")
    p.add_argument("--overwrite", action="store_true", help="start OUTPUT afresh instead of resuming it")
    p.add_argument("--chunk-rows", type=int, default=512,
                   help="rows scored together and written (fsynced) at once (default 512)")
    p.add_argument("--in-flight", type=int, default=32, help="service: calls unanswered at once (default 32)")
    p.add_argument("--ray-actors", type=int, default=None, help="Ray: actors (default: the cluster's CPUs / --ray-cpus)")
    p.add_argument("--ray-cpus", type=float, default=1, help="Ray: CPUs per actor, also its torch threads (default 1)")
    add_json(p)
    add_connection(p, address=False)
    p.set_defaults(func=cmd_rerank_batch)


def make_engine(args):
    from nextpara.errors import InvalidInputError

    if args.address and (args.ray or args.data_dir):
        raise InvalidInputError("--address sends rows to a service, which has its own store: "
                                "drop --data-dir / --ray")
    for flag in ("chunk_rows", "in_flight"):  # --top-k is checked with the rows' own rule
        if getattr(args, flag) < 1:
            raise InvalidInputError(f"--{flag.replace('_', '-')} must be at least 1")
    if not args.ray and (args.ray_actors is not None or args.ray_cpus != 1):
        raise InvalidInputError("--ray-actors and --ray-cpus size a Ray job: add --ray (or --ray ADDRESS)")
    if args.ray_actors is not None and args.ray_actors < 1:
        raise InvalidInputError(f"--ray-actors must be at least 1, got {args.ray_actors}")
    if not args.ray_cpus > 0:
        raise InvalidInputError(f"--ray-cpus must be above 0, got {args.ray_cpus}")
    if args.address:
        from nextpara.client.cli import client_from

        from .engines import ServiceEngine

        return ServiceEngine(client_from(args), with_text=not args.no_text, in_flight=args.in_flight,
                             chunk_rows=args.chunk_rows)
    from nextpara.store.data_dir import DataDir

    data_dir = DataDir.resolve(args.data_dir)
    if args.ray:
        try:
            import ray  # noqa: F401
        except ModuleNotFoundError:
            raise InvalidInputError("--ray needs Ray: pip install 'nextpara[ray]'") from None
        from .engines import RayEngine

        return RayEngine(data_dir, with_text=not args.no_text, address=args.ray,
                         actors=args.ray_actors, cpus_per_actor=args.ray_cpus, batch_rows=min(args.chunk_rows, 256))
    from .engines import InProcessEngine

    return InProcessEngine(data_dir, with_text=not args.no_text, chunk_rows=args.chunk_rows)


def cmd_rerank_batch(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nextpara.client.errors import ServiceError
    from nextpara.errors import InvalidInputError

    from .job import run_job
    from .rows import check_top_k

    if not Path(args.input).is_file():
        raise InvalidInputError(f"INPUT {args.input} is not a file")
    if Path(args.input).resolve() == Path(args.output).resolve():
        raise InvalidInputError("INPUT and OUTPUT are the same file")
    if not Path(args.output).parent.is_dir():  # (a typo in the path: made into folders, as it was, it loses the rows)
        raise InvalidInputError(f"OUTPUT {args.output}: the folder {Path(args.output).parent} does not exist; create "
                                "it first")
    if Path(args.output).suffix.lower() in (".parquet", ".pq"):
        raise InvalidInputError(f"OUTPUT {args.output}: rows are written as JSON Lines, whatever the name; name it "
                                ".jsonl (Parquet is read as INPUT only)")
    check_top_k(args.top_k, "--top-k")
    try:
        engine = make_engine(args)
    except ServiceError as e:  # the service asked for its model and store: a deadline passed is this command's own
        _raise_explained(e, args, mid_job=False)
    try:
        summary = run_job(args.input, args.output, engine, default_top_k=args.top_k, overwrite=args.overwrite,
                          quiet=args.quiet)
    except KeyboardInterrupt:
        print(f"rerank-batch: interrupted; the rows in {args.output} are complete: rerun the same command to resume",
              file=sys.stderr)
        return 130
    except ServiceError as e:  # the service went away, or stayed busy, or a call outlasted --timeout: what is written stands
        who = "by this command's --timeout" if e.code.name == "DEADLINE_EXCEEDED" else "by the service"
        print(f"rerank-batch: stopped {who} (below); the rows in {args.output} are complete: rerun the same "
              "command to resume", file=sys.stderr)
        _raise_explained(e, args)
    finally:
        engine.close()
    if not summary.rows and not summary.skipped:  # (valid, and so not an error: but nothing was ranked)
        print(f"rerank-batch: {args.input} holds no rows: nothing to rank", file=sys.stderr)
    if args.json:
        import json
        from dataclasses import asdict

        print(json.dumps({**asdict(summary), "rows_per_second": summary.rows_per_second}, indent=2))
        return 0
    print(summary.line())
    return 0


def _raise_explained(e, args, mid_job: bool = True) -> NoReturn:
    """Raise ``e`` with a message that says what happened in this command's terms, where grpc's own says only its
    code: a deadline exceeded is the caller's own --timeout (not the service's refusal), and a call CANCELLED or
    UNAVAILABLE ``mid_job`` is a server that stopped or went away (it was "CANCELLED: CANCELLED"). Any other error is
    raised as it is."""
    code = e.code.name
    if code == "DEADLINE_EXCEEDED":
        message = (f"a call had no answer within --timeout {args.timeout:g} s, this command's own deadline for each call, "
                   "not the service's refusal: give a longer --timeout (the service may be busy, or the rows large)")
    elif code in ("CANCELLED", "UNAVAILABLE") and mid_job and not e.reason:  # (the transport's, not a refusal such
        # as EMBEDDING_SERVICE_FAILED from a server still up)
        message = f"the server at {args.address} stopped or went away"
    else:
        raise e
    said = e.details if e.details and e.details != code and e.details.lower() != code.replace("_", " ").lower() else ""
    raise type(e)(message + (f" ({said})" if said else ""), e.code, reason=e.reason, domain=e.domain,
                  metadata=e.metadata, field_violations=e.field_violations, retry_delay=e.retry_delay) from e
