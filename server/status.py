"""The one table from a refusal's reason to its gRPC status code, and the google.rpc.Status the server sends.

Every refusal is a :class:`nextpara.errors.NextparaError` whose ``reason`` picks its code here (``CODE_OF``, the
table the proto's service comment documents). :func:`status_of` turns it into a google.rpc.Status: its message, an
``ErrorInfo`` (the reason, the domain, the error's metadata), a ``BadRequest.FieldViolation`` when the error names a
request field, and a ``RetryInfo`` when the server asks for a retry (QUEUE_FULL, LOADING). Everything is cut to
sizes that fit a client's 8 KiB limit on trailing metadata, however long the ids or texts it quotes: an over-long message used
to come back as RESOURCE_EXHAUSTED from the client's own transport instead of the refusal.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from nextpara.errors import DOMAIN, NextparaError, Reason

R, C = Reason, grpc.StatusCode
CODE_OF: dict[Reason, grpc.StatusCode] = {
    **dict.fromkeys([R.MALFORMED_REQUEST, R.FIELD_REQUIRED, R.OUT_OF_RANGE, R.DIMENSION_MISMATCH, R.INVALID_VECTOR,
                     R.INVALID_TEXT, R.DUPLICATE_DOC_ID, R.VECTORS_REQUIRED, R.INVALID_PAGE_TOKEN, R.INVALID_DESTINATION,
                     R.INVALID_ARGUMENT],
                    C.INVALID_ARGUMENT),
    R.UNKNOWN_IDS: C.NOT_FOUND,
    **dict.fromkeys([R.NO_MODEL, R.MODEL_UNREADABLE, R.EMBEDDER_MISMATCH, R.NO_WORD_INDEX, R.READ_ONLY_REPLICA,
                     R.INDEX_BEHIND, R.FAILED_PRECONDITION], C.FAILED_PRECONDITION),
    **dict.fromkeys([R.QUEUE_FULL, R.MESSAGE_TOO_LARGE, R.STORAGE_FULL], C.RESOURCE_EXHAUSTED),
    **dict.fromkeys([R.EMBEDDING_SERVICE_FAILED, R.LOADING], C.UNAVAILABLE),
    **dict.fromkeys([R.TOKEN_MISSING, R.TOKEN_INVALID], C.UNAUTHENTICATED),
    R.WRITE_ROLE_REQUIRED: C.PERMISSION_DENIED,
    R.INTERNAL_ERROR: C.INTERNAL,
}

MAX_MESSAGE_BYTES = 600  # the status message (sent twice: grpc-message, and inside the details)
MAX_VALUE_BYTES = 200  # each metadata value


def code_for(error: BaseException) -> grpc.StatusCode | None:
    """The status code of a refusal; None for anything else (a bug: INTERNAL, logged)."""
    reason = getattr(error, "reason", None) if isinstance(error, NextparaError) else None
    return CODE_OF.get(reason) if reason is not None else None


def fit(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, marked with "..." where it was cut."""
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes - 3].decode(errors="ignore") + "..."


def _packed(message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_of(error: NextparaError, **metadata: object) -> status_pb2.Status:
    """The google.rpc.Status for a refusal (``code_for(error)`` is not None), with ``metadata`` added to its own."""
    code = code_for(error)
    message = fit(str(error), MAX_MESSAGE_BYTES)
    facts = {**{k: str(v) for k, v in metadata.items()}, **error.metadata}
    details = [error_details_pb2.ErrorInfo(reason=error.reason.value, domain=DOMAIN,
                                           metadata={k: fit(v, MAX_VALUE_BYTES) for k, v in facts.items()})]
    if error.field:
        details.append(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=fit(error.field, MAX_VALUE_BYTES), description=message)]))
    retry_delay = getattr(error, "retry_delay", None)
    if retry_delay is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(retry_delay * 1e9))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    return status_pb2.Status(code=code.value[0], message=message, details=[_packed(d) for d in details])


def internal_error(method: str) -> NextparaError:
    """What a caller is told about a bug in ``method`` (its traceback is in the server's log)."""
    return NextparaError(f"internal error in {method} (logged by the server)", reason=Reason.INTERNAL_ERROR)


async def abort(context: grpc.aio.ServicerContext, error: NextparaError, **metadata: object) -> None:
    """End the call with the refusal's status and details; raises, as ``context.abort`` does."""
    status = rpc_status.to_status(status_of(error, **metadata))
    await context.abort(status.code, status.details, status.trailing_metadata)
