"""The coalescer forms a batch when a worker is free: calls that arrive while the workers are busy wait and go
together, as one batch, instead of queueing as many small batches behind the busy workers."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from nextpara.server.batching import Coalescer


def behind_a_busy_worker(max_batch: int, keys: list[str]) -> tuple[list, list]:
    """Call 0 (key "a") holds the only worker while calls 1.. (one per key of ``keys``) arrive; then it is let go.
    Returns (each call's result in order, the batches run as (key, payloads))."""
    release = threading.Event()
    batches: list[tuple[str, list[int]]] = []

    def run_batch(key, payloads):
        batches.append((key, list(payloads)))
        if payloads == [0]:
            release.wait(10)
        return [p * 10 for p in payloads]

    async def main():
        with ThreadPoolExecutor(1) as pool:
            co = Coalescer(run_batch, pool, max_batch=max_batch, max_wait=0.0, max_queue=100, slots=1)
            co.start()
            first = asyncio.ensure_future(co.submit("a", 0, None))
            while not batches:
                await asyncio.sleep(0.001)
            rest = [asyncio.ensure_future(co.submit(key, i, None)) for i, key in enumerate(keys, start=1)]
            await asyncio.sleep(0.05)  # all queued behind the busy worker
            release.set()
            results = await asyncio.gather(first, *rest)
            await co.stop()
            return results

    return asyncio.run(main()), batches


def test_calls_that_arrive_while_the_worker_is_busy_run_as_one_batch():
    results, batches = behind_a_busy_worker(32, ["a"] * 10)
    assert results == [i * 10 for i in range(11)]
    assert batches == [("a", [0]), ("a", list(range(1, 11)))]


def test_a_batch_never_exceeds_max_batch_and_keys_never_mix():
    results, batches = behind_a_busy_worker(4, ["ab"[i % 2] for i in range(1, 11)])
    assert results == [i * 10 for i in range(11)]
    assert all(len(p) <= 4 for _, p in batches)
    assert all(all("ab"[i % 2] == key for i in p) for key, p in batches[1:])
    assert sorted(i for _, p in batches for i in p) == list(range(11))
    assert len(batches) == 5  # 0; then five of "b" and five of "a", in batches of four and one
