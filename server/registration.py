"""Register the servicer with request deserializers that refuse what the generated code would let through badly.

The generated ``add_..._to_server`` lets a protobuf DecodeError escape as UNKNOWN; a client sending bad bytes made
a bad request, and says so with INVALID_ARGUMENT (MALFORMED_REQUEST). A request over the message size limit is
refused here too (MESSAGE_TOO_LARGE, naming the limit): the transport accepts up to ``TRANSPORT_FACTOR`` times the
limit so that it does not end such calls itself, without details (main.py sets it). A refused request ends a call,
except in a request and response stream (RerankStream), whose servicer answers it in its place and goes on.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError
from nextpara.errors import InvalidInputError, NextparaError, Reason
from nextpara.v1 import nextpara_pb2

from .status import abort

SERVICE = nextpara_pb2.DESCRIPTOR.services_by_name["NextParagraphService"]
TRANSPORT_FACTOR = 4  # messages the transport reads, as a multiple of the limit the server holds callers to


class Refused:
    """A request that was refused while it was read; ``error`` says why."""

    def __init__(self, error: NextparaError):
        self.error = error


def _deserializer(cls, max_bytes: int):
    def decode(data: bytes):
        if len(data) > max_bytes:
            return Refused(NextparaError(
                f"a {cls.DESCRIPTOR.name} of {len(data)} bytes is over the server's {max_bytes}-byte message limit "
                "(GetInfo.max_message_bytes)", reason=Reason.MESSAGE_TOO_LARGE,
                metadata={"limitBytes": max_bytes, "actualBytes": len(data), "message": "request"}))
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError) as e:
            return Refused(InvalidInputError(f"request is not a valid {cls.DESCRIPTOR.full_name} message ({e})",
                                             reason=Reason.MALFORMED_REQUEST))
    return decode


async def _checked(requests):
    async for request in requests:
        if isinstance(request, Refused):
            raise request.error
        yield request


def _unary_in(method):
    async def behavior(request, context):
        if isinstance(request, Refused):
            await abort(context, request.error)
        return await method(request, context)
    return behavior


def _stream_in(method):
    async def behavior(requests, context):
        return await method(_checked(requests), context)
    return behavior


def _stream_in_out(method):
    async def behavior(requests, context):  # the servicer answers each Refused request itself
        async for response in method(requests, context):
            yield response
    return behavior


def add_servicer(servicer, server: grpc.aio.Server, max_message_bytes: int) -> None:
    handlers = {}
    for m in SERVICE.methods:
        request_cls = getattr(nextpara_pb2, m.input_type.name)
        response_cls = getattr(nextpara_pb2, m.output_type.name)
        method = getattr(servicer, m.name)
        kwargs = {"request_deserializer": _deserializer(request_cls, max_message_bytes),
                  "response_serializer": response_cls.SerializeToString}
        if m.client_streaming and m.server_streaming:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(_stream_in_out(method), **kwargs)
        elif m.client_streaming:
            handlers[m.name] = grpc.stream_unary_rpc_method_handler(_stream_in(method), **kwargs)
        elif m.server_streaming:  # pragma: no cover - the contract has none
            raise NotImplementedError(m.name)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(_unary_in(method), **kwargs)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
