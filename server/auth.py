"""Bearer-token auth with two roles, as a grpc.aio server interceptor.

``authorization: Bearer <token>`` metadata (``Bearer`` in any case, as HTTP's schemes are). Read tokens may call
PredictNext, Rerank, RerankStream, GetParagraphs, ListDocuments, GetDocument and GetInfo; write tokens may call
everything. Tokens are compared in constant time (hmac.compare_digest) and never logged. Health checks and reflection
are open, so load balancers and tools need no token. A refused call is counted in the metrics (``requests``) by its
method and code, as the servicer counts the calls it answers.
"""

from __future__ import annotations

import hmac

import grpc
from nextpara.errors import AuthError, Reason

from .status import abort, code_for

SERVICE = "/nextpara.v1.NextParagraphService/"
WRITE_METHODS = {"AddDocuments", "DeleteDocuments", "Reload", "Backup"}
OPEN_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")


def _matches(token: str, allowed: list[str]) -> bool:
    found = False
    for candidate in allowed:  # no early exit: the time taken does not depend on which token matched
        found |= hmac.compare_digest(token.encode(), candidate.encode())
    return found


def _deny(handler: grpc.RpcMethodHandler, error: AuthError, count) -> grpc.RpcMethodHandler:
    async def abort_unary(request_or_iterator, context):
        count()
        await abort(context, error)

    async def abort_stream(request_or_iterator, context):
        count()
        await abort(context, error)
        yield  # pragma: no cover - makes this an async generator

    kwargs = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(abort_unary, **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(abort_stream, **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(abort_unary, **kwargs)
    return grpc.stream_stream_rpc_method_handler(abort_stream, **kwargs)


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, read_tokens: list[str], write_tokens: list[str], metrics=None):
        self.read_tokens = read_tokens + write_tokens  # write implies read
        self.write_tokens = write_tokens
        self.metrics = metrics  # server/metrics.py's Metrics, or None

    def _deny(self, handler: grpc.RpcMethodHandler, method: str, error: AuthError) -> grpc.RpcMethodHandler:
        def count():
            if self.metrics is not None:
                self.metrics.requests.labels(method[len(SERVICE):] if method.startswith(SERVICE) else method,
                                             code_for(error).name).inc()
        return _deny(handler, error, count)

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        method = details.method
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        header = dict(details.invocation_metadata or ()).get("authorization", "")
        scheme, _, token = header.partition(" ")  # (neither half is put in a message: it may be a token)
        if header and scheme.lower() != "bearer":  # a scheme is any case (RFC 7235): "bearer TOKEN" is one too
            return self._deny(handler, method, AuthError("the authorization metadata's scheme is not Bearer: send the "
                                                         "metadata 'authorization: Bearer TOKEN'",
                                                         reason=Reason.TOKEN_MISSING))
        token = token.strip(" ")  # blanks around it are no part of it, as around --read-tokens' and --write-tokens'
        if not token:
            return self._deny(handler, method, AuthError("no bearer token: send the metadata 'authorization: Bearer TOKEN'",
                                            reason=Reason.TOKEN_MISSING))
        if not _matches(token, self.read_tokens):
            return self._deny(handler, method, AuthError("invalid bearer token: it is none of this server's tokens",
                                            reason=Reason.TOKEN_INVALID))
        name = method[len(SERVICE):]
        if method.startswith(SERVICE) and name in WRITE_METHODS and not _matches(token, self.write_tokens):
            return self._deny(handler, method, AuthError(f"this token may read but not call {name}: it needs a write token",
                                            reason=Reason.WRITE_ROLE_REQUIRED, metadata={"method": name}))
        return handler
