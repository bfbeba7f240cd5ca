"""Register the servicer with request deserializers that turn undecodable bytes into INVALID_ARGUMENT.

The generated ``add_..._to_server`` lets a protobuf DecodeError escape as UNKNOWN; a client
sending bad bytes made a bad request, and says so with INVALID_ARGUMENT.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError
from nextpara.errors import InvalidInputError
from nextpara.v1 import nextpara_pb2

SERVICE = nextpara_pb2.DESCRIPTOR.services_by_name["NextParagraphService"]


class Malformed:
    def __init__(self, type_name: str, error: Exception):
        self.message = f"request is not a valid {type_name} message ({error})"


def _deserializer(cls):
    def decode(data: bytes):
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError) as e:
            return Malformed(cls.DESCRIPTOR.full_name, e)
    return decode


async def _checked(requests):
    async for request in requests:
        if isinstance(request, Malformed):
            raise InvalidInputError(request.message)
        yield request


def _unary_in(method):
    async def behavior(request, context):
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await method(request, context)
    return behavior


def _stream_in(method):
    async def behavior(requests, context):
        return await method(_checked(requests), context)
    return behavior


def _stream_in_out(method):
    async def behavior(requests, context):
        async for response in method(_checked(requests), context):
            yield response
    return behavior


def add_servicer(servicer, server: grpc.aio.Server) -> None:
    handlers = {}
    for m in SERVICE.methods:
        request_cls = getattr(nextpara_pb2, m.input_type.name)
        response_cls = getattr(nextpara_pb2, m.output_type.name)
        method = getattr(servicer, m.name)
        kwargs = {"request_deserializer": _deserializer(request_cls), "response_serializer": response_cls.SerializeToString}
        if m.client_streaming and m.server_streaming:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(_stream_in_out(method), **kwargs)
        elif m.client_streaming:
            handlers[m.name] = grpc.stream_unary_rpc_method_handler(_stream_in(method), **kwargs)
        elif m.server_streaming:  # pragma: no cover - the contract has none
            raise NotImplementedError(m.name)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(_unary_in(method), **kwargs)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
