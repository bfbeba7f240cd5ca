"""Client exceptions, one per gRPC status code, each raised ``from`` the grpc.RpcError, with the refusal's details.

They derive from :class:`ServiceError`, itself a :class:`nextpara.errors.NextparaError` (the one hierarchy of the
package; that module is pure Python, so the client stays light). The server sends a google.rpc.Status with each
refusal; its details become attributes: ``reason`` (the ErrorInfo reason, a string such as ``"QUEUE_FULL"``; the
table is in the proto), ``metadata`` (its facts, strings), ``field_violations`` (the request fields at fault) and
``retry_delay`` (seconds the server asked the caller to wait, or None).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2, status_pb2
from nextpara.errors import DOMAIN, NextparaError, Reason

__all__ = ["NextparaError", "ServiceError", "FieldViolation", "from_rpc_error", "from_status"]

DETAILS_KEY = "grpc-status-details-bin"
_CODES = {code.value[0]: code for code in grpc.StatusCode}
TRANSPORT_TOO_LARGE = "message larger than max"  # grpc's own words for a message over its limit (it sends no details)


@dataclass(frozen=True)
class FieldViolation:
    field: str  # a path into the request, e.g. "context[2].vector" or "documents[0].doc_id"
    description: str


class ServiceError(NextparaError):
    """A call failed; ``code`` is the grpc.StatusCode, ``details`` the server's message, ``reason``, ``metadata``,
    ``field_violations`` and ``retry_delay`` the refusal's details (empty when the server sent none: a deadline that
    passed, a connection that failed). A RerankStream item's error also has its ``request_id``."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, details: str, code: grpc.StatusCode | None = None, *, reason: str = "", domain: str = "",
                 metadata: dict[str, str] | None = None, field_violations: list[FieldViolation] | None = None,
                 retry_delay: float | None = None, request_id: str | None = None):
        violations = list(field_violations or [])
        super().__init__(details, metadata=metadata, field=violations[0].field if violations else None)
        self.details = details
        if code is not None:
            self.code = code
        self.reason, self.domain = reason, domain  # reason: a plain string; compare with it or with a Reason
        self.field_violations = violations
        self.retry_delay = retry_delay
        self.request_id = request_id

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


def from_status(status: status_pb2.Status, request_id: str | None = None) -> ServiceError:
    """The exception for a google.rpc.Status (a refusal's trailers, or a RerankStream item's error)."""
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    kwargs: dict = {"field_violations": [], "request_id": request_id}
    for packed in status.details:
        if packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            packed.Unpack(info)
            kwargs.update(reason=info.reason, domain=info.domain, metadata=dict(info.metadata))
        elif packed.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            packed.Unpack(bad)
            kwargs["field_violations"] += [FieldViolation(v.field, v.description) for v in bad.field_violations]
        elif packed.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            packed.Unpack(retry)
            kwargs["retry_delay"] = retry.retry_delay.ToNanoseconds() / 1e9
    return _BY_CODE.get(code, ServiceError)(status.message or code.name, code, **kwargs)


def from_rpc_error(error: grpc.RpcError) -> ServiceError:
    """The exception for a failed call, with the details the server sent in its trailers."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else str(error)) or code.name
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == DETAILS_KEY:
            status = status_pb2.Status.FromString(value)
            if status.code == code.value[0]:
                return from_status(status)
    reason = ""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and TRANSPORT_TOO_LARGE in details:
        reason = Reason.MESSAGE_TOO_LARGE.value  # over a limit of the transport, which sends no details
    return _BY_CODE.get(code, ServiceError)(details, code, reason=reason, domain=DOMAIN if reason else "")
