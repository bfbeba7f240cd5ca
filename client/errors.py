"""Client exceptions, one per gRPC status code, each raised ``from`` the grpc.RpcError.

They derive from :class:`ServiceError`, itself a :class:`nextpara.errors.NextparaError` (the one
hierarchy of the package; that module is pure Python, so the client stays light).
"""

from __future__ import annotations

import grpc
from nextpara.errors import NextparaError

__all__ = ["NextparaError", "ServiceError", "from_rpc_error"]


class ServiceError(NextparaError):
    """A call failed; ``code`` is the grpc.StatusCode, ``details`` the server's message."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, details: str, code: grpc.StatusCode | None = None):
        super().__init__(details)
        self.details = details
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code.name}: {self.details}"


class InvalidArgument(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(ServiceError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class DeadlineExceeded(ServiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unavailable(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE


class Internal(ServiceError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, NotFound, FailedPrecondition, ResourceExhausted, Unauthenticated,
                                      PermissionDenied, DeadlineExceeded, Unavailable, Internal)}


def from_rpc_error(error: grpc.RpcError) -> ServiceError:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return _BY_CODE.get(code, ServiceError)(details or code.name, code)
