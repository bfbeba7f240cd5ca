"""Which calls the clients retry, and how: only calls that a replay cannot harm, only on UNAVAILABLE.

UNAVAILABLE can mean the server never saw the call, or that it did the work and the answer was lost
(the connection dropped). A replay is safe only for an idempotent call:

- reads (PredictNext, Rerank, RerankStream, GetParagraphs, GetInfo), Reload (it re-reads the same
  files), and AddDocuments (an upsert: a replayed message finds its documents unchanged): the channel
  retries these itself (the service config below);
- DeleteDocuments only with ``allow_missing``: a plain delete that succeeded and is replayed finds its ids
  gone and answers NOT_FOUND. The channel cannot tell a request's fields apart, so it never retries
  DeleteDocuments; the clients retry an ``allow_missing`` delete themselves, with :class:`Backoff`.

The health check is safe to replay too but is not retried: it is a probe, whose caller wants the state
now (retried against a stopped server, ``nextpara status --timeout 1`` ended as DEADLINE_EXCEEDED
instead of UNAVAILABLE).
"""

from __future__ import annotations

import json
import random
import time

import grpc

SERVICE = "nextpara.v1.NextParagraphService"

# Every method of SERVICE is in exactly one of these
# (tests/test_client_idempotency.py::test_every_method_has_a_retry_decision checks the proto against them).
IDEMPOTENT = ("PredictNext", "Rerank", "RerankStream", "AddDocuments", "GetParagraphs", "GetInfo", "Reload")
NOT_IDEMPOTENT = ("DeleteDocuments",)  # idempotent only with allow_missing: see retried()

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
    n-th retry after a random delay up to min(MAX_BACKOFF, INITIAL_BACKOFF * BACKOFF_MULTIPLIER**(n-1)) seconds, all
    within one deadline (``timeout`` seconds from now) as the channel's retries are."""

    def __init__(self, timeout: float):
        self.deadline = time.monotonic() + timeout
        self.attempts = 0

    def remaining(self) -> float:
        """Seconds left for the next attempt."""
        return max(0.0, self.deadline - time.monotonic())

    def delay_after(self, error: grpc.RpcError) -> float | None:
        """Seconds to wait before retrying after ``error``; None when it must be raised (another code, no attempts
        or time left)."""
        self.attempts += 1
        code = error.code() if hasattr(error, "code") else None
        if code not in RETRYABLE_CODES or self.attempts >= MAX_ATTEMPTS:
            return None
        delay = random.uniform(0, min(MAX_BACKOFF, INITIAL_BACKOFF * BACKOFF_MULTIPLIER ** (self.attempts - 1)))
        return delay if delay < self.remaining() else None
