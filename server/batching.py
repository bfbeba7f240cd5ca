"""Coalescing concurrent calls into small batches, run in a bounded thread pool; a stream's calls kept in order.

Calls are admitted while fewer than ``max_queue`` are in the system; beyond that ``submit``
raises OverloadedError at once (RESOURCE_EXHAUSTED, QUEUE_FULL), so overload answers quickly instead of
timing out; it asks the caller to retry after the shortest time a call spends here (the batch wait and a batch's
run time, smoothed). A dispatcher takes the first waiting call, waits until one of the executor's ``slots``
(its workers) is free, takes every call with the same batch key that arrived meanwhile (up to ``max_batch``, and
calls whose ``cost`` sums to at most ``max_cost``),
waits up to ``max_wait`` more for further calls if the batch is not full, and hands the batch to the executor.
So a lone call waits for nothing, and under load the batches grow with the queue instead of queueing up as
many small ones in the executor (on PEPs at concurrency 16 a batch averaged 2 calls when batches were cut
every 2 ms regardless of free workers, and each worker then paid its fixed costs per 2 calls). Calls
whose deadline passed or whose caller went away before their batch starts are dropped. If a
batch fails, its calls are retried each alone (in its slot and any others free) so that one bad call cannot fail
the others (unless its failure is
what they share: the server's second coalescer, of calls waiting for a remote embedder's endpoint, gives them all
the error of an endpoint that failed whatever the texts, rather than waiting it out again once per call).

``in_order`` runs the calls of one stream (RerankStream) concurrently and yields their results
in the order the requests came.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Hashable, TypeVar

from nextpara.errors import OverloadedError

log = logging.getLogger(__name__)
MIN_RETRY_DELAY, MAX_RETRY_DELAY = 0.05, 2.0  # seconds a refused call is asked to wait (a call's shortest time in
# the system: the batch wait and a batch's run), within these


@dataclass
class _Call:
    key: Hashable
    payload: Any
    deadline: float | None  # time.monotonic() by which the caller stops waiting
    future: asyncio.Future = field(default=None)
    cost: float = 0  # what it weighs in a batch (Coalescer's cost), reckoned once


class Coalescer:
    def __init__(self, run_batch: Callable[[Hashable, list], list], executor: Executor, max_batch: int,
                 max_wait: float, max_queue: int, on_batch: Callable[[int], None] | None = None, slots: int = 1,
                 busy: str = "calls in progress", retry_alone: Callable[[Exception], bool] = lambda e: True,
                 min_retry_delay: float = MIN_RETRY_DELAY, cost: Callable[[Any], int] = lambda payload: 0,
                 max_cost: float = math.inf):
        """``busy``: what the admitted calls are doing, in a refusal's message; ``min_retry_delay``: the least it asks a
        refused caller to wait. ``retry_alone(error)``: whether a batch that failed with it has each of its calls run
        alone, in the slots free then (else its failure is every call's, each given a copy of its own, as when the
        batch failed on something they share). ``cost(payload)``: what a call weighs, a batch at most ``max_cost`` (a call heavier alone goes
        alone)."""
        self.run_batch, self.executor, self.slots = run_batch, executor, slots
        self.cost, self.max_cost = cost, max_cost
        self.busy, self.retry_alone, self.min_retry_delay = busy, retry_alone, min_retry_delay
        self._free: asyncio.Semaphore | None = None  # batches the executor may run at once
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait, max_queue
        self.on_batch = on_batch
        self._queue: asyncio.Queue[_Call] | None = None
        self._admitted = 0
        self._task: asyncio.Task | None = None
        self._dispatch_waits = False  # the dispatcher holds a batch and waits for a slot
        self._batch_seconds: float | None = None  # how long a batch runs, smoothed (a full queue's retry delay)

    def admitted(self) -> int:
        """Calls admitted and not yet answered (waiting for their batch, or in it)."""
        return self._admitted

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._free = asyncio.Semaphore(self.slots)
        self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def submit(self, key: Hashable, payload: Any, timeout: float | None) -> Any:
        if self._admitted >= self.max_queue:
            delay = min(MAX_RETRY_DELAY, max(self.min_retry_delay, self.max_wait + (self._batch_seconds or 0.0)))
            raise OverloadedError(f"server busy: {self._admitted} {self.busy} (limit {self.max_queue}); retry in "
                                  f"{delay:.2f} s", retry_delay=delay, metadata={"queueLimit": self.max_queue})
        self._admitted += 1
        call = _Call(key, payload, time.monotonic() + timeout if timeout is not None else None,
                     asyncio.get_running_loop().create_future(), self.cost(payload))
        try:
            self._queue.put_nowait(call)
            return await call.future
        finally:
            self._admitted -= 1
            if not call.future.done():
                call.future.cancel()  # the caller went away: its batch will skip it

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        held: list[_Call] = []  # calls taken from the queue that belong to another key, or that a batch had no room for
        while True:
            first = held.pop(0) if held else await self._queue.get()
            self._dispatch_waits = True  # (a failed batch's reruns leave it the next free slot: _run_each_alone)
            try:
                await self._free.acquire()  # released when the batch has run (_run)
            finally:
                self._dispatch_waits = False
            batch, cost = [first], first.cost
            until = loop.time() + self.max_wait
            full = False
            for call in [c for c in held if c.key == first.key]:
                if len(batch) >= self.max_batch or cost + call.cost > self.max_cost:
                    full = True
                    break
                held.remove(call)
                batch.append(call)
                cost += call.cost
            while not full and len(batch) < self.max_batch:
                if not self._queue.empty():  # arrived while the workers were busy
                    call = self._queue.get_nowait()
                else:
                    remaining = until - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        call = await asyncio.wait_for(self._queue.get(), remaining)
                    except asyncio.TimeoutError:
                        break
                if call.key == first.key and cost + call.cost <= self.max_cost:
                    batch.append(call)
                    cost += call.cost
                else:
                    held.append(call)  # (in arrival order: the first of the next batch)
                    full = call.key == first.key
            loop.create_task(self._run(batch))

    async def _run(self, batch: list[_Call]) -> None:
        slot = _Slot()
        try:
            await self._run_calls(batch, slot)
        finally:
            if not slot.released:
                self._free.release()

    async def _run_calls(self, batch: list[_Call], slot: "_Slot | None" = None) -> None:
        """Run ``batch``'s live calls and answer them. ``slot``: the batch's own, which a failed batch's reruns give
        back as soon as they have nothing left for it (None: a call run alone in a slot its caller releases)."""
        now = time.monotonic()
        live = []
        for c in batch:
            if c.future.done():
                continue
            if c.deadline is not None and c.deadline <= now:
                c.future.cancel()
                continue
            live.append(c)
        if not live:
            return
        if self.on_batch:
            self.on_batch(len(live))
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            results = await loop.run_in_executor(self.executor, self.run_batch, live[0].key, [c.payload for c in live])
            took = time.monotonic() - started
            self._batch_seconds = took if self._batch_seconds is None else self._batch_seconds + 0.2 * (took - self._batch_seconds)
        except Exception as e:  # noqa: BLE001 - delivered to the caller, who maps it to a status
            if len(live) == 1 or not self.retry_alone(e):
                for i, c in enumerate(live):
                    if not c.future.done():  # (a caller may add to its error's message: RerankStream's item number)
                        c.future.set_exception(e if i == 0 else _copy(e))
                return
            await self._run_each_alone(live, slot)
            return
        for c, r in zip(live, results):
            if not c.future.done():
                c.future.set_result(r)

    async def _run_each_alone(self, calls: list[_Call], slot: "_Slot") -> None:
        """Attribute a batch's failure: each call run alone, in the batch's slot and, before each of those, in every
        other slot free then that no call waits for (a remote embedder's threads wait on its endpoint: one after
        another, 64 calls to a slow one took 64 of its answers' time). A helper runs calls while no call waits for a
        slot, then gives its slot back, and the batch's slot goes back as soon as nothing is left for it, so new calls
        still find the workers; a call whose caller gave up or whose deadline passed before its turn is dropped there
        (_run_calls)."""
        pending = list(calls)
        helpers: list[asyncio.Future] = []

        def no_call_waits() -> bool:  # for a slot: none queued, and the dispatcher not waiting with a batch
            return not self._dispatch_waits and self._queue.empty()

        async def helper(call: _Call) -> None:  # runs on while no call wants its slot (released when it ends)
            while True:
                await self._run_calls([call])
                if not pending or not no_call_waits():
                    return
                call = pending.pop(0)

        try:
            while pending:
                while len(pending) > 1 and no_call_waits() and not self._free.locked():
                    await self._free.acquire()  # (free and unwanted: taken at once)
                    task = asyncio.ensure_future(helper(pending.pop(0)))
                    task.add_done_callback(lambda _: self._free.release())  # (even if cancelled before it ran)
                    helpers.append(task)
                await self._run_calls([pending.pop(0)])
        finally:
            if not slot.released:  # the batch's own
                slot.released = True
                self._free.release()
        await asyncio.gather(*helpers)


@dataclass
class _Slot:
    """A batch's slot of the executor, and whether it was given back before the batch ended."""
    released: bool = False


def _copy(error: Exception) -> Exception:
    """``error`` again, for another caller: its message, cause and attributes, dicts (a NextparaError's metadata)
    copied."""
    clone = type(error).__new__(type(error), *error.args)
    clone.args = error.args
    clone.__dict__.update({k: dict(v) if isinstance(v, dict) else v for k, v in vars(error).items()})
    clone.__cause__, clone.__traceback__ = error.__cause__, error.__traceback__
    return clone


T, R = TypeVar("T"), TypeVar("R")


async def in_order(items: AsyncIterator[T], work: Callable[[int, T], Awaitable[R]], limit: int) -> AsyncIterator[R]:
    """``work(index, item)`` started for each item as it arrives, at most ``limit`` at once, results yielded in
    the items' order. The first failure (of a work, or of reading the items) is raised after the results before
    it; whatever was still running is then cancelled."""
    pending: asyncio.Queue = asyncio.Queue()
    slots = asyncio.Semaphore(limit)

    async def feed():
        try:
            index = 0
            async for item in items:
                await slots.acquire()
                pending.put_nowait(asyncio.ensure_future(work(index, item)))
                index += 1
        finally:
            pending.put_nowait(None)

    feeder = asyncio.ensure_future(feed())
    try:
        while (task := await pending.get()) is not None:
            result = await task
            slots.release()
            yield result
        await feeder  # raises what reading the items raised
    finally:
        _discard(feeder)
        while not pending.empty():
            if (task := pending.get_nowait()) is not None:
                _discard(task)


def _discard(task: asyncio.Future) -> None:
    """Cancel ``task``, or if it is done, mark its outcome seen (nothing logs it as never retrieved)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()
