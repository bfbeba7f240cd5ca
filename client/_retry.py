"""Which calls the clients retry, and how: only calls that a replay cannot harm, on UNAVAILABLE and on a full queue.

UNAVAILABLE can mean the server never saw the call, or that it did the work and the answer was lost
(the connection dropped). A replay is safe only for an idempotent call:

- reads (PredictNext, Rerank, RerankStream, GetParagraphs, ListDocuments, GetDocument, GetInfo), Reload (it re-reads the same
  files), and AddDocuments (an upsert: a replayed message finds its documents unchanged): the channel
  retries these itself (the service config below);
- DeleteDocuments only with ``allow_missing``: a plain delete that succeeded and is replayed finds its ids
  gone and answers NOT_FOUND. The channel cannot tell a request's fields apart, so it never retries
  DeleteDocuments; the clients retry an ``allow_missing`` delete themselves, with :class:`Backoff`.
- Backup never: one that succeeded and is replayed finds its destination there (INVALID_DESTINATION).

INDEX_BEHIND (a read's ``min_index_version`` is newer than the server's index) is FAILED_PRECONDITION, which is not
retried: a read that asked to wait (``wait_for_index``) was already kept by the server until just before its deadline,
and one that did not ask was refused at once so that its caller can choose (the writer, or waiting).

A server whose call queue is full answers RESOURCE_EXHAUSTED with reason QUEUE_FULL and a RetryInfo delay: the
clients retry such a call after that delay, for the same methods (a replay of them is harmless, and the refused call
did nothing), within the same attempts and deadline. Other RESOURCE_EXHAUSTED reasons (a message too large, a full
disk) are not retried: waiting does not help them. A streamed request (AddDocuments) is never replayed by the clients:
its iterator is spent; nor is a RerankStream item refused with QUEUE_FULL: it comes back as that item's error (with
its RetryInfo delay), for the caller to send again.

The health check is safe to replay too but is not retried: it is a probe, whose caller wants the state
now (retried against a stopped server, ``nextpara status --timeout 1`` ended as DEADLINE_EXCEEDED
instead of UNAVAILABLE).
"""

from __future__ import annotations

import json
import random
import time

import grpc
from nextpara.errors import NextparaError, Reason

SERVICE = "nextpara.v1.NextParagraphService"

# Every method of SERVICE is in exactly one of these
# (tests/test_client_idempotency.py::test_every_method_has_a_retry_decision checks the proto against them).
IDEMPOTENT = ("PredictNext", "Rerank", "RerankStream", "AddDocuments", "GetParagraphs", "ListDocuments", "GetDocument",
              "GetInfo", "Reload")
NOT_IDEMPOTENT = ("DeleteDocuments",  # idempotent only with allow_missing: see retried()
                  "Backup")  # a replay finds its destination there

MAX_ATTEMPTS = 4  # the first call and up to three retries
INITIAL_BACKOFF, MAX_BACKOFF, BACKOFF_MULTIPLIER = 0.2, 3.0, 2.0
RETRYABLE_CODES = (grpc.StatusCode.UNAVAILABLE,)

RETRY_POLICY = {"maxAttempts": MAX_ATTEMPTS, "initialBackoff": f"{INITIAL_BACKOFF:g}s", "maxBackoff": f"{MAX_BACKOFF:g}s",
                "backoffMultiplier": BACKOFF_MULTIPLIER, "retryableStatusCodes": [c.name for c in RETRYABLE_CODES]}

# A method named here is retried by the channel; any other (DeleteDocuments) is not.
SERVICE_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": SERVICE, "method": m} for m in IDEMPOTENT],
    "retryPolicy": RETRY_POLICY}]})


def retried(method: str, request=None) -> bool:
    """Whether a call of ``method`` (a NextParagraphService method name) with ``request`` is retried on UNAVAILABLE."""
    if method in IDEMPOTENT:
        return True
    if method == "DeleteDocuments":
        return bool(request is not None and request.allow_missing)
    if method in NOT_IDEMPOTENT:
        return False
    raise KeyError(f"{method}: not a method of {SERVICE}")


class Backoff:
    """The channel's retry policy, for the calls the clients retry themselves: at most MAX_ATTEMPTS attempts, the
    n-th retry after a random delay up to min(MAX_BACKOFF, INITIAL_BACKOFF * BACKOFF_MULTIPLIER**(n-1)) seconds (or,
    for QUEUE_FULL, the delay the server asked for), all within one deadline (``timeout`` seconds from now) as the
    channel's retries are. ``method`` and ``request`` decide what may be retried (see the module's docstring); None:
    nothing (a call outside NextParagraphService, a streamed request)."""

    def __init__(self, timeout: float, method: str | None = None, request=None, queue_full: bool = True):
        self.deadline = time.monotonic() + timeout
        self.attempts = 0
        safe = method is not None and retried(method, request)
        self.queue_full = safe and queue_full  # False: the caller wants QUEUE_FULL raised (it sheds load itself)
        self.unavailable = safe and method not in IDEMPOTENT  # the channel retries those itself

    def remaining(self) -> float:
        """Seconds left for the next attempt."""
        return max(0.0, self.deadline - time.monotonic())

    def delay_after(self, error: NextparaError) -> float | None:
        """Seconds to wait before retrying after ``error`` (a client ServiceError); None when it must be raised (not
        retried for this call, no attempts or time left)."""
        self.attempts += 1
        if self.attempts >= MAX_ATTEMPTS:
            return None
        if self.queue_full and error.reason == Reason.QUEUE_FULL:
            # not before the server's delay, and up to a quarter after it, so that refused callers spread out
            delay = error.retry_delay * random.uniform(1.0, 1.25) if error.retry_delay is not None else self._random()
        elif self.unavailable and getattr(error, "code", None) in RETRYABLE_CODES:
            delay = self._random()
        else:
            return None
        return delay if delay < self.remaining() else None

    def _random(self) -> float:
        return random.uniform(0, min(MAX_BACKOFF, INITIAL_BACKOFF * BACKOFF_MULTIPLIER ** (self.attempts - 1)))
