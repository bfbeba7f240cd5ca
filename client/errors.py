"""Client exceptions, one per gRPC status code, each raised ``from`` the grpc.RpcError."""

from __future__ import annotations

import grpc


class NextparaError(Exception):
    """A call failed; ``code`` is the grpc.StatusCode, ``details`` the server's message."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, details: str, code: grpc.StatusCode | None = None):
        super().__init__(details)
        self.details = details
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code.name}: {self.details}"


class InvalidArgument(NextparaError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(NextparaError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(NextparaError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(NextparaError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(NextparaError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(NextparaError):
    code = grpc.StatusCode.PERMISSION_DENIED


class DeadlineExceeded(NextparaError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unavailable(NextparaError):
    code = grpc.StatusCode.UNAVAILABLE


class Internal(NextparaError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, NotFound, FailedPrecondition, ResourceExhausted, Unauthenticated,
                                      PermissionDenied, DeadlineExceeded, Unavailable, Internal)}


def from_rpc_error(error: grpc.RpcError) -> NextparaError:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return _BY_CODE.get(code, NextparaError)(details or code.name, code)
