"""The one wrapper every servicer method runs in, unary and streaming alike.

``@rpc`` puts a method's whole call inside ``Call``, which maps domain errors to status codes
(status.py), answers anything else with INTERNAL and logs its traceback, counts the call by
method and final code, observes its latency, and reports a call cut short after its deadline
passed as DEADLINE_EXCEEDED rather than CANCELLED.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time

import grpc

from .metrics import Metrics
from .status import status_for

log = logging.getLogger(__name__)


class Call:
    """``async with Call(method, context, metrics):`` around the work of one call."""

    def __init__(self, method: str, context: grpc.aio.ServicerContext, metrics: Metrics):
        self.method, self.context, self.metrics = method, context, metrics

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
            code = status_for(error)
            if code is None:
                log.error("%s failed", self.method, exc_info=error)
                code, message = grpc.StatusCode.INTERNAL, f"internal error in {self.method} (logged by the server)"
            else:
                message = str(error)
            await self.context.abort(code, message)  # raises
            return False  # pragma: no cover
        finally:
            remaining = self.context.time_remaining()
            if code == grpc.StatusCode.CANCELLED and remaining is not None and remaining <= 0:
                code = grpc.StatusCode.DEADLINE_EXCEEDED
            self.metrics.requests.labels(self.method, code.name).inc()
            self.metrics.latency.labels(self.method).observe(time.perf_counter() - self.t0)


def rpc(method):
    """Decorate a servicer method (a coroutine, or an async generator for a response stream) to run in ``Call``;
    the gRPC method name is the Python one. The servicer must have ``rt.metrics``."""
    name = method.__name__
    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def streaming(self, request, context):
            async with Call(name, context, self.rt.metrics):
                async with contextlib.aclosing(method(self, request, context)) as responses:
                    async for response in responses:
                        yield response
        return streaming

    @functools.wraps(method)
    async def unary(self, request, context):
        async with Call(name, context, self.rt.metrics):
            return await method(self, request, context)
    return unary
