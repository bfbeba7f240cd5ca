"""Read your writes: a read's ``min_index_version`` against the generation this server's index holds.

A read that asks for a generation the server's index has not reached is refused with INDEX_BEHIND at once, or, when
it asks to wait (``wait_for_index``), waits until the index gets there or the call's deadline is near:

- on the writer, each write advances the index (the runtime calls :meth:`IndexGate.advanced`), so the read waits for
  a write (a generation the store has not reached: one returned by another store, or a write still in flight);
- on a read-only replica, the waiting read has the replica catch up with what the writer has committed (``catch_up``:
  its SQLite already holds every acknowledged write, which the replica replays into its index), again and again with a
  growing pause until the generation is there. Concurrent waiters share one catch-up at a time. A Reload (or SIGHUP)
  advances it too.

The refusal comes just before the deadline (``MARGIN``), so that the caller reads INDEX_BEHIND with its details rather
than a bare DEADLINE_EXCEEDED. All of it runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from nextpara.errors import IndexBehindError

log = logging.getLogger(__name__)
MAX_WAIT = 60.0  # seconds a waiting read without a deadline may wait
MARGIN = 0.25  # seconds before the deadline at which a waiting read gives up (at most a tenth of its budget)
FIRST_PAUSE, MAX_PAUSE = 0.02, 0.5  # a replica's pause between catch-ups while the writer has not got there


class IndexGate:
    """``current()``: the generation the index holds now; ``catch_up``: (a replica) an awaitable that brings it to what
    the writer has committed, or None (the writer: its own writes advance it)."""

    def __init__(self, current: Callable[[], int], catch_up: Callable[[], Awaitable[object]] | None, read_only: bool):
        self.current, self._catch_up, self.read_only = current, catch_up, read_only
        self._changed = asyncio.Event()
        self._task: asyncio.Future | None = None

    def advanced(self) -> None:
        """The index may hold a newer generation: wake the waiting reads (on the event loop)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def require(self, minimum: int, wait: bool, time_remaining: float | None) -> None:
        """Return once the index holds generation ``minimum`` (at once if it does, or ``minimum`` <= 0); else
        IndexBehindError, at once without ``wait``, else just before the deadline (``time_remaining`` seconds)."""
        if minimum <= self.current():
            return
        if not wait:
            raise self._behind(minimum, 0.0, False)
        loop = asyncio.get_running_loop()
        start = loop.time()
        budget = MAX_WAIT if time_remaining is None else max(0.0, min(time_remaining, MAX_WAIT))
        deadline = start + budget - min(MARGIN, budget / 10)
        pause = FIRST_PAUSE
        while self.current() < minimum:
            left = deadline - loop.time()
            if left <= 0:
                raise self._behind(minimum, loop.time() - start, True)
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                if self._catch_up is None:
                    await asyncio.wait([changed], timeout=left)
                    continue
                await asyncio.wait([changed, self._shared_catch_up()], timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if self.current() < minimum and not changed.done():  # the catch-up found nothing new: pause, then again
                    await asyncio.wait([changed], timeout=min(pause, max(0.0, deadline - loop.time())))
                    pause = min(pause * 2, MAX_PAUSE)
            finally:
                changed.cancel()

    def _shared_catch_up(self) -> asyncio.Future:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run_catch_up())
        return self._task

    async def _run_catch_up(self) -> None:
        """One catch-up; it wakes the waiting reads only if the generation moved: otherwise they pause (growing from
        FIRST_PAUSE to MAX_PAUSE) before the next, rather than catch up back to back (each holds the write lock)."""
        before = self.current()
        try:
            await self._catch_up()
        except Exception:  # the waiting reads go on until their deadline; the next one tries again
            log.exception("catching up with the writer failed")
        if self.current() != before:
            self.advanced()

    def _behind(self, minimum: int, waited: float, wait: bool) -> IndexBehindError:
        current = self.current()
        if wait:
            advice = f"it did not get there within {waited:.1f}s"
        elif self.read_only:
            advice = "this replica has not loaded it yet: ask with wait_for_index to have it catch up, or read from the writer"
        else:
            advice = "the store has not reached it (wait_for_index waits for it)"
        return IndexBehindError(f"this server's index is at generation {current}, older than min_index_version {minimum}: "
                                f"{advice}", metadata={"indexVersion": current, "minIndexVersion": minimum,
                                                       "waitedSeconds": f"{waited:.3f}",
                                                       "readOnly": str(self.read_only).lower()})
