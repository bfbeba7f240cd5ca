"""The coalescer forms a batch when a worker is free: calls that arrive while the workers are busy wait and go
together, as one batch, instead of queueing as many small batches behind the busy workers."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from nextpara.server.batching import Coalescer
from nextpara.store.http_embedder import EmbeddingServiceError


def behind_a_busy_worker(max_batch: int, keys: list[str], **options) -> tuple[list, list]:
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
            co = Coalescer(run_batch, pool, max_batch=max_batch, max_wait=0.0, max_queue=100, slots=1, **options)
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



def test_a_batch_holds_calls_whose_cost_sums_to_at_most_max_cost():
    """Call i weighs i: behind call 0, calls 1 to 4 fill a batch of weight 10, 5 and 6 go alone (5 + 6 > 10), and a
    call heavier than a batch goes alone, not never."""
    results, batches = behind_a_busy_worker(32, ["a"] * 7 + ["b"], cost=lambda payload: payload, max_cost=10)
    assert results == [i * 10 for i in range(9)]
    assert batches == [("a", [0]), ("a", [1, 2, 3, 4]), ("a", [5]), ("a", [6]), ("a", [7]), ("b", [8])]


def test_a_failure_the_calls_share_is_each_call_s_own_copy_and_runs_once():
    """A batch whose failure is not retried call by call gives every call the error, each its own object (a caller
    that adds to its message or metadata, as RerankStream does, changes no other call's), and runs the batch once."""
    runs = []

    def run_batch(key, payloads):
        runs.append(list(payloads))
        raise EmbeddingServiceError("the endpoint failed 3 times", metadata={"endpoint": "loopback"})

    async def main():
        with ThreadPoolExecutor(1) as pool:
            co = Coalescer(run_batch, pool, max_batch=8, max_wait=0.2, max_queue=10, slots=1,
                           retry_alone=lambda error: False)
            co.start()
            errors = await asyncio.gather(*(co.submit("a", i, None) for i in range(3)), return_exceptions=True)
            await co.stop()
            return errors

    errors = asyncio.run(main())
    assert runs == [[0, 1, 2]]
    assert all(isinstance(e, EmbeddingServiceError) and str(e) == "the endpoint failed 3 times" for e in errors)
    assert len({id(e) for e in errors}) == 3 and len({id(e.metadata) for e in errors}) == 3
    assert all(e.metadata == {"endpoint": "loopback"} and e.reason == "EMBEDDING_SERVICE_FAILED" for e in errors)


def reruns_after_a_bad_call(slots: int, late: bool) -> tuple[list, list]:
    """A batch of calls 1-8, call 5 bad (the batch fails, so each call is run alone), on ``slots`` workers; with
    ``late``, a healthy call of its own key ("late") arrives while they run. Returns (the results, the batches run)."""
    batches: list[tuple[str, list[int]]] = []
    hold, late_sent = threading.Event(), threading.Event()
    if not late:
        late_sent.set()

    def run_batch(key, payloads):
        batches.append((key, list(payloads)))
        if key.startswith("hold"):
            hold.wait(10)  # holds every worker until the batch of 1-8 has gathered behind it
        elif key == "a" and len(payloads) == 1:
            late_sent.wait(10)  # (the first reruns wait until the late call is queued: no race with their speed)
            threading.Event().wait(0.05)
        if 5 in payloads:
            raise ValueError("call 5 is bad")
        return [p * 10 for p in payloads]

    async def main():
        with ThreadPoolExecutor(slots) as pool:
            co = Coalescer(run_batch, pool, max_batch=16, max_wait=0.0, max_queue=100, slots=slots)
            co.start()
            first = [asyncio.ensure_future(co.submit(f"hold{i}", 0, None)) for i in range(slots)]  # a batch each
            while len(batches) < slots:
                await asyncio.sleep(0.001)
            calls = [asyncio.ensure_future(co.submit("a", i, None)) for i in range(1, 9)]
            await asyncio.sleep(0.05)
            hold.set()
            if late:
                while len(batches) < slots + 2:  # the batch failed, and its calls are being run alone
                    await asyncio.sleep(0.001)
                calls.append(asyncio.ensure_future(co.submit("late", 9, None)))
                await asyncio.sleep(0)  # (queued)
                late_sent.set()
            results = await asyncio.wait_for(asyncio.gather(*first, *calls, return_exceptions=True), 60)
            await co.stop()  # (wait_for: a deadlock fails the test rather than hanging the run)
            return results[slots:]

    return asyncio.run(main()), batches


def test_a_failed_batch_s_calls_run_alone_on_one_worker_and_each_gets_its_own_outcome():
    """(Running them in more slots than the batch's own must not wait for a slot the batch itself holds.)"""
    results, batches = reruns_after_a_bad_call(1, late=False)
    assert results[:4] == [10, 20, 30, 40] and isinstance(results[4], ValueError) and results[5:] == [60, 70, 80]
    assert sorted(p[0] for key, p in batches if key == "a" and len(p) == 1) == list(range(1, 9))


def test_a_failed_batch_s_calls_run_alone_in_the_free_slots_and_leave_one_to_a_call_that_arrives():
    """The calls run alone take the slots other batches leave free, and give one back to a batch that waits for it:
    the late call runs before the last of them, not behind all eight (they went one by one in the batch's slot
    before, so four slots ran them no faster than one)."""
    results, batches = reruns_after_a_bad_call(4, late=True)
    assert results[:4] + results[5:] == [10, 20, 30, 40, 60, 70, 80, 90] and isinstance(results[4], ValueError)
    alone = [i for i, (key, p) in enumerate(batches) if key == "a" and len(p) == 1]
    assert len(alone) == 8
    assert batches.index(("late", [9])) < alone[-1], batches


def timed_runs(slots: int, seconds: dict[int, float], plan) -> list[tuple[str, list[int], float, float]]:
    """Run ``plan(submit)`` on a coalescer of ``slots`` workers whose run_batch sleeps ``seconds[payload]`` for a call
    run alone (0.01 s otherwise) and fails any batch holding payload 0 or more than one call of key "f". Returns the
    batches run: (key, payloads, start, end), times from the start."""
    runs, t0 = [], time.monotonic()
    lock = threading.Lock()

    def run_batch(key, payloads):
        start = time.monotonic() - t0
        time.sleep(seconds.get(payloads[0], 0.01) if len(payloads) == 1 else 0.01)
        with lock:
            runs.append((key, list(payloads), start, time.monotonic() - t0))
        if 0 in payloads or (key == "f" and len(payloads) > 1):
            raise ValueError("the batch failed")
        return list(payloads)

    async def main():
        with ThreadPoolExecutor(slots) as pool:
            co = Coalescer(run_batch, pool, max_batch=16, max_wait=0.0, max_queue=100, slots=slots)
            co.start()
            await asyncio.wait_for(plan(lambda key, p: asyncio.ensure_future(co.submit(key, p, None))), 60)
            await co.stop()

    asyncio.run(main())
    return runs


def test_reruns_spread_to_slots_that_free_up_after_the_batch_failed():
    """Every other worker busy when a batch of nine failed: its calls went one by one in its own slot to the end,
    while the two others stood idle from 0.15 s on."""
    async def plan(submit):
        busy = [submit(f"busy{i}", 100 + i) for i in range(2)]
        await asyncio.sleep(0.02)
        failed = [submit("f", i) for i in range(1, 10)]
        await asyncio.gather(*busy, *failed, return_exceptions=True)

    runs = timed_runs(3, {100: 0.15, 101: 0.15, **{i: 0.1 for i in range(1, 10)}}, plan)
    alone = [(start, end) for key, p, start, end in runs if key == "f" and len(p) == 1]
    assert len(alone) == 9
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(alone) for b in alone[i + 1:]), runs  # overlaps


def test_a_failed_batch_gives_its_slot_back_when_it_has_nothing_left_for_it():
    """The batch's slot stayed taken until its slowest rerun, in another slot, had ended: a call that arrived
    meanwhile waited with a worker idle."""
    async def plan(submit):
        failed = [submit("f", i) for i in (1, 2, 3)]  # 1 is slow, in the other slot; 2 and 3 run in the batch's
        await asyncio.sleep(0.2)
        late = submit("late", 50)
        await asyncio.gather(*failed, late, return_exceptions=True)

    runs = timed_runs(2, {1: 0.8, 2: 0.05, 3: 0.05}, plan)
    slow_end = next(end for key, p, _, end in runs if p == [1])
    late_start = next(start for key, _, start, _ in runs if key == "late")
    assert late_start < slow_end - 0.3, runs


def test_a_rerun_in_another_slot_runs_on_while_no_call_wants_its_slot():
    """A slot taken for the reruns ran one call and was given back idle: the next call waited for the batch's own
    slot, busy with a slow one."""
    async def plan(submit):
        await asyncio.gather(*(submit("f", i) for i in (1, 2, 3)), return_exceptions=True)  # 1 in the other slot

    runs = timed_runs(2, {1: 0.05, 2: 0.8, 3: 0.05}, plan)
    slow_end = next(end for key, p, _, end in runs if p == [2])
    assert next(start for key, p, start, _ in runs if p == [3]) < slow_end - 0.3, runs
