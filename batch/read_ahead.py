"""Reading the next chunk of a job's rows while the current one is scored (the in-process engine).

Reading is Python work that holds the GIL (orjson parsing a row of vectors: ~4 ms for 108 x 384 numbers, then
~1 ms to turn its lists into an array); scoring is mostly torch, which releases it. So a thread that reads one
chunk ahead lets the two overlap on two cores instead of taking turns (bench/README.md, Batch reranking
throughput). The reader also turns a row's lists of vectors into one float32 array (``vectors_as_arrays``), the
form Parquet rows already arrive in: the scorer then skips that conversion, and a chunk held in memory is ~8x
smaller than as Python floats.

Order, errors and resumption are unchanged: chunks come out in input order, an exception in the reader (an
unreadable file, say) is raised in the consumer at the point it would have been, and the rows skipped as already
in OUTPUT are decided from what OUTPUT held when the job opened it, whatever the reader has got to.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

import numpy as np

from .rows import Row

T = TypeVar("T")
_DONE = object()  # the reader's last item: the source is exhausted


def read_ahead(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """``items`` in order, up to ``depth`` of them read by a background thread ahead of the consumer. An exception
    raised by ``items`` is raised here, after the items before it. Closing this generator early (the consumer stopped
    or was interrupted) stops the reader at its next item."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:  # False once the consumer has gone
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def reader() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as e:  # handed to the consumer, which raises it
            put((_DONE, e))

    thread = threading.Thread(target=reader, name="rerank-batch-reader", daemon=True)
    thread.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=1)  # a reader in the middle of a chunk finishes it alone (a daemon: it ends with the process)


def vectors_as_arrays(row: Row) -> Row:
    """The row with each item list made only of equally long vectors (lists of numbers) as one (items, dim) float32
    array: the conversion the scorer would make (``unit_rows``), made here, so that it is the same numbers and a bad
    vector gets the same message. A list it cannot convert (texts or ids among the vectors, vectors of different
    lengths, a number beyond float32's range as an integer) stays as it is, for the scorer to take or name."""
    if row.error is None:
        row.context, row.candidates = _as_array(row.context), _as_array(row.candidates)
    return row


def _as_array(items):
    if type(items) is not list or not items or not all(type(item) is list for item in items):
        return items
    try:
        arr = np.asarray(items, dtype=np.float32)
    except (ValueError, TypeError, OverflowError):
        return items
    return arr if arr.ndim == 2 and arr.shape[1] else items
