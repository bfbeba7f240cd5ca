"""Load and soak: many concurrent clients for minutes, then an overload burst.

    python -m bench.reliability.load_soak --data-dir /tmp/peps-bench       # 32 clients, 10 minutes
    python -m bench.reliability.load_soak --data-dir DIR --clients 8 --minutes 0.5 --window 10 \
        --burst 2048 --seed 1                                               # (tests/test_load.py's setting)

``nextpara serve`` runs on a copy of the data dir as its own process; this script is the second
process, on 127.0.0.1, driving it through the async client library. Each of ``--clients``
concurrent clients loops over a mix: PredictNext by stored ids (40%), PredictNext by text (10%),
Rerank of 20 stored candidates (30%), GetParagraphs of 10 ids (20%); one call in 100 asks for an
unknown paragraph id on purpose (NOT_FOUND expected, counted apart). Beside them a writer adds
one small document every 2 seconds (AddDocuments, embedded by the server).

Per window (``--window`` seconds, 60 by default): calls, p50/p99 latency, errors, and the
server's resident memory (VmRSS). Memory growth is measured from the end of the first window
(warm-up) to the end of the run; target < 10%.

Then overload: ``--burst`` calls (default 8x the server's queue of ``--max-queue``) sent at
once. Calls beyond the queue must be refused with RESOURCE_EXHAUSTED quickly (their latency is
reported) rather than time out, and afterwards the server must answer normally again.
Prints tables, writes bench/results/load_soak.{json,md}.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.record import argument_parser, rss_bytes, save, stamp


class Stats:
    def __init__(self):
        self.windows: list[dict] = []
        self.reset()

    def reset(self):
        self.lat: list[float] = []
        self.errors: dict[str, int] = {}
        self.provoked = 0

    def error(self, e: BaseException) -> None:
        key = f"{type(e).__name__}: {str(e)[:120]}"
        self.errors[key] = self.errors.get(key, 0) + 1


async def client_loop(client, stats: Stats, ids: list[int], texts: list[str], stop: asyncio.Event, rng: random.Random):
    from nextpara.client import NotFound

    while not stop.is_set():
        r = rng.random()
        provoke = rng.random() < 0.01
        ctx = rng.sample(ids, 4)
        t0 = time.perf_counter()
        try:
            if provoke:
                await client.get_paragraphs([10**12 + rng.randrange(10**6)])
            elif r < 0.4:
                await client.predict_next(ctx, top_k=10)
            elif r < 0.5:
                await client.predict_next(rng.sample(texts, 3), top_k=10)
            elif r < 0.8:
                await client.rerank(ctx, rng.sample(ids, 20))
            else:
                await client.get_paragraphs(rng.sample(ids, 10))
            stats.lat.append((time.perf_counter() - t0) * 1000)
        except NotFound:
            if provoke:
                stats.provoked += 1
            else:
                stats.error(NotFound("unexpected"))
        except Exception as e:  # noqa: BLE001 - every other failure is counted and reported
            stats.error(e)


async def writer_loop(client, stats: Stats, stop: asyncio.Event, run_id: str) -> int:
    n = 0
    while not stop.is_set():
        try:
            await client.add_documents([{"doc_id": f"soak-{run_id}-{n}", "title": "Soak test",
                                         "paragraphs": [f"Soak document {n}, first paragraph.",
                                                        f"Soak document {n}, second paragraph, written under load."]}])
            n += 1
        except Exception as e:  # noqa: BLE001
            stats.error(e)
        try:
            await asyncio.wait_for(stop.wait(), timeout=2.0)
        except asyncio.TimeoutError:
            pass
    return n


async def overload(address: str, burst: int, ids: list[int]) -> dict:
    from nextpara.client import AsyncClient, ResourceExhausted

    # QUEUE_FULL is raised, not retried: the burst measures how fast the server refuses what it cannot take
    async with AsyncClient(address, timeout=120, retry_queue_full=False) as client:
        async def one():
            t0 = time.perf_counter()
            try:
                await client.rerank(ids[:4], ids[:100])
                return "ok", time.perf_counter() - t0
            except ResourceExhausted:
                return "resource_exhausted", time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - named by status code when it has one
                code = getattr(e, "code", None)
                return (f"{code.name}: {str(e)[:80]}" if code is not None else type(e).__name__), time.perf_counter() - t0

        # the connection's first call lets the server's HTTP/2 settings (its cap on streams) arrive before the burst:
        # a burst on a connection that has not seen them opens every stream at once, and the server resets those
        # beyond the cap (REFUSED_STREAM), which a loaded machine made visible as UNAVAILABLE in a fresh-clone run
        await client.info()
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(burst)))
        burst_s = time.perf_counter() - t0
        refused = [s for k, s in results if k == "resource_exhausted"]
        kinds = {k: sum(1 for kk, _ in results if kk == k) for k in {k for k, _ in results}}
        t1 = time.perf_counter()
        after = await client.predict_next(ids[:4], top_k=5)
        return {"burst": burst, "outcomes": kinds, "burst_seconds": round(burst_s, 2),
                "refused_p50_ms": round(float(np.percentile(refused, 50)) * 1000, 1) if refused else None,
                "refused_max_ms": round(max(refused) * 1000, 1) if refused else None,
                "recovered": bool(after.predictions), "first_call_after_ms": round((time.perf_counter() - t1) * 1000, 1)}


async def soak(address: str, pid: int, args, ids: list[int], texts: list[str]) -> dict:
    from nextpara.client import AsyncClient

    stats, stop = Stats(), asyncio.Event()
    rng = random.Random(args.seed)
    async with AsyncClient(address, timeout=60) as client:
        tasks = [asyncio.create_task(client_loop(client, stats, ids, texts, stop, random.Random(rng.random())))
                 for _ in range(args.clients)]
        writer = asyncio.create_task(writer_loop(client, stats, stop, str(os.getpid())))
        started = time.perf_counter()
        n_windows = max(1, round(args.minutes * 60 / args.window))
        errors_before = provoked_before = 0  # the counters run for the whole soak; a window shows its own share
        for w in range(n_windows):
            await asyncio.sleep(started + (w + 1) * args.window - time.perf_counter())
            lat, stats.lat = stats.lat, []
            row = {"window": w + 1, "end_s": round(time.perf_counter() - started), "calls": len(lat),
                   "calls_per_s": round(len(lat) / args.window, 1),
                   "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat else None,
                   "p99_ms": round(float(np.percentile(lat, 99)), 1) if lat else None,
                   "errors": sum(stats.errors.values()) - errors_before, "provoked_not_found": stats.provoked - provoked_before,
                   "server_rss_mb": round(rss_bytes(pid) / 2**20, 1)}
            errors_before, provoked_before = sum(stats.errors.values()), stats.provoked
            stats.windows.append(row)
            print(row, flush=True)
        stop.set()
        await asyncio.gather(*tasks)
        written = await writer
    first, last = stats.windows[0]["server_rss_mb"], stats.windows[-1]["server_rss_mb"]
    return {"windows": stats.windows, "error_kinds": stats.errors, "documents_added": written,
            "rss_growth_after_warmup": round((last - first) / first, 4) if len(stats.windows) > 1 else None}


def run(data_dir: str, args) -> dict:
    from nextpara.server.process import ServerProcess
    from nextpara.store.store import open_store

    with tempfile.TemporaryDirectory(prefix="nextpara-soak-") as work:
        data = Path(work) / "store"
        shutil.copytree(data_dir, data, ignore=shutil.ignore_patterns("write.lock"))
        with open_store(data, readonly=True) as store:
            all_ids = store.paragraph_table()[0]
            pick = np.random.default_rng(args.seed).choice(all_ids, size=min(2000, len(all_ids)), replace=False)
            ids = [int(i) for i in pick]
            texts = [p.text for p in store.get_paragraphs(ids[:200])]
        server = ServerProcess.local(data, "--grace-seconds", "1", "--max-queue", str(args.max_queue),
                                     require_model=False, stop_timeout=120).start()
        try:
            result = asyncio.run(soak(server.address, server.pid, args, ids, texts))
            result["overload"] = asyncio.run(overload(server.address, args.burst or 8 * args.max_queue, ids))
            print(result["overload"], flush=True)
            result["server_alive"] = server.alive
        finally:
            server.stop()
        result["server_exit_code"] = server.returncode
    return result


def markdown(record: dict) -> str:
    r = record["result"]
    o = r["overload"]
    lines = [f"# Load and soak\n\n`{record['command']}` on {record['date']}, {record['machine']}; server and load "
             "generator on the same 2 cores.\n",
             f"**{sum(w['calls'] for w in r['windows']):,} calls, {sum(w['errors'] for w in r['windows'])} unexpected errors, "
             f"{sum(w['provoked_not_found'] for w in r['windows'])} provoked NOT_FOUND, {r['documents_added']} documents added "
             f"under load; server memory growth after warm-up {r['rss_growth_after_warmup']:+.1%}.**\n" if r["rss_growth_after_warmup"]
             is not None else "", "| window | end s | calls | calls/s | p50 ms | p99 ms | errors | server RSS MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {w['window']} | {w['end_s']} | {w['calls']} | {w['calls_per_s']} | {w['p50_ms']} | {w['p99_ms']} | "
              f"{w['errors']} | {w['server_rss_mb']} |" for w in r["windows"]]
    if r["error_kinds"]:
        lines += ["", "Errors: " + "; ".join(f"{k} x{v}" for k, v in r["error_kinds"].items())]
    lines += ["", f"Overload: {o['burst']} Rerank calls at once against a queue of {record['max_queue']}: {o['outcomes']} "
              f"in {o['burst_seconds']} s; refused calls answered in p50 {o['refused_p50_ms']} ms, max {o['refused_max_ms']} ms; "
              f"afterwards PredictNext answered in {o['first_call_after_ms']} ms (recovered: {o['recovered']})."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argument_parser(__doc__, __file__)
    parser.add_argument("--data-dir", required=True, help="a built and trained store; it is copied, not changed")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=60.0, help="seconds per reported window")
    parser.add_argument("--max-queue", type=int, default=256, help="the server's --max-queue")
    parser.add_argument("--burst", type=int, default=0, help="overload calls sent at once (default 8x --max-queue)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    result = run(args.data_dir, args)
    record = {**stamp(__file__), "max_queue": args.max_queue, "result": result}
    save("load_soak", record, markdown(record))
    ok = (not result["error_kinds"] and result["overload"]["recovered"] and result["server_alive"]
          and (result["rss_growth_after_warmup"] or 0) < 0.10)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
