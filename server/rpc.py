"""The one wrapper every servicer method runs in, unary and streaming alike.

``@rpc`` puts a method's whole call inside ``Call`` (a call that comes while the server is still loading is refused at
once: UNAVAILABLE, LOADING), which answers a refusal with its status code and
details (status.py; every refusal's details also carry the index version it was refused at), answers
anything else with INTERNAL and logs its traceback, counts the call by method and final code, observes
its latency, and reports a call cut short after its deadline passed as DEADLINE_EXCEEDED rather than
CANCELLED. A response over the message size limit is refused as MESSAGE_TOO_LARGE before it is sent (the
transport would end the call without saying why).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time

import grpc
from nextpara.errors import NextparaError, Reason

from .metrics import Metrics
from .status import abort, code_for, internal_error

log = logging.getLogger(__name__)


class Call:
    """``async with Call(method, context, metrics):`` around the work of one call."""

    def __init__(self, method: str, context: grpc.aio.ServicerContext, metrics: Metrics, facts=dict):
        self.method, self.context, self.metrics = method, context, metrics
        self.facts = facts  # () -> metadata every refusal of this call carries

    async def __aenter__(self) -> Call:
        self.t0 = time.perf_counter()
        return self

    async def __aexit__(self, kind, error, traceback) -> bool:
        code = grpc.StatusCode.OK
        try:
            if error is None:
                return False
            if not isinstance(error, Exception):  # CancelledError, GeneratorExit: the caller or its deadline is gone
                code = grpc.StatusCode.CANCELLED
                return False
            code = code_for(error)
            if code is None:
                log.error("%s failed", self.method, exc_info=error)
                error = internal_error(self.method)
                code = code_for(error)
            self._count(code)  # before the refusal is sent: a client that has its answer finds it counted
            code = None
            await abort(self.context, error, **self.facts())  # raises
            return False  # pragma: no cover
        finally:
            if code is not None:
                self._count(code)

    def _count(self, code: grpc.StatusCode) -> None:
        remaining = self.context.time_remaining()
        if code == grpc.StatusCode.CANCELLED and remaining is not None and remaining <= 0:
            code = grpc.StatusCode.DEADLINE_EXCEEDED
        self.metrics.requests.labels(self.method, code.name).inc()
        self.metrics.latency.labels(self.method).observe(time.perf_counter() - self.t0)


def sendable(response, max_bytes: int):
    """``response``, or MESSAGE_TOO_LARGE when it is over the message size limit."""
    size = response.ByteSize()
    if size > max_bytes:
        raise NextparaError(f"the response would be {size} bytes, over the {max_bytes}-byte message limit "
                            "(GetInfo.max_message_bytes): ask for less per call", reason=Reason.MESSAGE_TOO_LARGE,
                            metadata={"limitBytes": max_bytes, "actualBytes": size, "message": "response"})
    return response


def rpc(method):
    """Decorate a servicer method (a coroutine, or an async generator for a response stream) to run in ``Call``;
    the gRPC method name is the Python one. The servicer must have ``rt`` (the Runtime)."""
    name = method.__name__

    def call(self, context) -> Call:
        return Call(name, context, self.rt.metrics, self.rt.error_facts)

    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def streaming(self, request, context):
            async with call(self, context):
                self.rt.check_loaded()
                async with contextlib.aclosing(method(self, request, context)) as responses:
                    async for response in responses:
                        yield sendable(response, self.rt.settings.max_message_bytes)
        return streaming

    @functools.wraps(method)
    async def unary(self, request, context):
        async with call(self, context):
            self.rt.check_loaded()
            return sendable(await method(self, request, context), self.rt.settings.max_message_bytes)
    return unary
