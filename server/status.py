"""The one table that maps domain errors to gRPC status codes."""

from __future__ import annotations

import grpc
from nextpara.errors import (
    FailedPreconditionError,
    InvalidInputError,
    NotFoundError,
    OverloadedError,
    StorageFullError,
    StoreLockedError,
)

STATUS_OF: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (InvalidInputError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (StoreLockedError, grpc.StatusCode.FAILED_PRECONDITION),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (OverloadedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def status_for(error: BaseException) -> grpc.StatusCode | None:
    """The status code for a domain error; None for anything else (a bug: INTERNAL, logged)."""
    for cls, code in STATUS_OF:
        if isinstance(error, cls):
            return code
    return None
