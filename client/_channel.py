"""Channel options, credentials and call metadata shared by the sync and asyncio clients."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import grpc
from nextpara.errors import InvalidInputError, Reason

from ._retry import SERVICE_CONFIG

DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MIN_MESSAGE_BYTES = 80 * 1024  # AddDocuments needs room beside UPLOAD_MARGIN: 16 KiB messages at the least
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"  # what a PEM file of root certificates holds, one per certificate
UPLOAD_MARGIN = 64 * 1024  # AddDocuments' messages are chunked this far under the limit (the message's own framing)


def checked_settings(timeout, max_message_bytes) -> tuple[float, int]:
    """A client's default deadline and message limit, checked: a ValueError (TypeError for no number) that says which
    and why, at construction, instead of a confusing failure at the first call."""
    return deadline(timeout, None, "timeout"), _message_bytes(max_message_bytes)


def _message_bytes(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_message_bytes must be an integer, got {type(value).__name__}")
    if value < MIN_MESSAGE_BYTES:
        raise ValueError(f"max_message_bytes must be at least {MIN_MESSAGE_BYTES}, got {value}")
    return value


def deadline(timeout, default: float | None, name: str = "timeout") -> float:
    """A call's deadline in seconds: ``timeout``, or ``default`` when it is None; a positive number, else an error
    (0 used to mean the default silently)."""
    if timeout is None and default is not None:
        return default
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(timeout).__name__}")
    if not timeout > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def upload_bytes(client_limit: int, server_limit: int) -> int:
    """How large an AddDocuments message may be: under the smaller of the client's limit and the server's (GetInfo's
    max_message_bytes; 0 when the server refused the question: the client's limit alone)."""
    limit = min(client_limit, server_limit) if server_limit else client_limit
    return limit - UPLOAD_MARGIN


def options(max_message_bytes: int, extra: Iterable[tuple[str, object]] = ()) -> list[tuple[str, object]]:
    """The channel's options: the client's own, then ``extra`` (the caller's), which win where a key is in both."""
    merged = {"grpc.max_receive_message_length": max_message_bytes,
              "grpc.max_send_message_length": max_message_bytes,
              "grpc.enable_retries": 1,
              "grpc.service_config": SERVICE_CONFIG}  # retries on UNAVAILABLE, idempotent calls only (_retry.py)
    for key, value in extra:
        merged[key] = value
    return list(merged.items())


def credentials(tls: bool, root_certificates: str | bytes | None) -> grpc.ChannelCredentials | None:
    """TLS credentials (verifying the server against ``root_certificates`` or the system roots), or None."""
    if root_certificates is None:
        return grpc.ssl_channel_credentials() if tls else None  # the system's roots
    roots = root_certificates
    if isinstance(roots, (str, os.PathLike)):  # a file's path (a pathlib.Path too)
        roots = Path(roots).read_bytes()
    if not isinstance(roots, (bytes, bytearray)):
        raise TypeError(f"root_certificates must be PEM bytes or a file's path, got {type(roots).__name__}")
    if PEM_CERTIFICATE not in roots:
        where = "in the bytes given" if isinstance(root_certificates, (bytes, bytearray)) else f"in {root_certificates}"
        raise InvalidInputError(f"root_certificates: no PEM certificate {where} (no {PEM_CERTIFICATE.decode()!r} "
                                "line): give the PEM file, or its bytes, of the certificate authority that signed the "
                                "server's certificate (a DER file converts with `openssl x509 -inform der`)",
                                reason=Reason.INVALID_ARGUMENT, field="root_certificates")
    return grpc.ssl_channel_credentials(root_certificates=bytes(roots))


def send_limit(max_message_bytes: int, extra: Iterable[tuple[str, object]] = ()) -> int | None:
    """The largest message the channel sends: the client's limit, or the caller's grpc.max_send_message_length option
    (None: -1, no limit)."""
    limit = int(dict(options(max_message_bytes, extra))["grpc.max_send_message_length"])
    return limit if limit >= 0 else None


class RequestTooLarge(InvalidInputError):
    """A request over the client's own send limit, refused before it was sent, with the reason MESSAGE_TOO_LARGE, as the
    server refuses one over its limit; ``metadata`` has its ``size`` and the ``max`` (and the server's keys). A caller
    without the client's settings (rerank-batch) says what it can do instead."""


def check_size(request, limit: int | None) -> None:
    """An InvalidInputError for a unary request over ``limit`` bytes (send_limit), before it is sent: grpc's own
    refusal is RESOURCE_EXHAUSTED "CLIENT: Sent message larger than max", as if the server were full."""
    if limit is None or not hasattr(request, "ByteSize"):  # no limit; a stream's requests are checked one by one
        return
    size = request.ByteSize()
    if size > limit:
        raise RequestTooLarge(f"the request is {size:,} bytes, over the {limit:,}-byte message limit: send fewer or "
                                "shorter items (or raise max_message_bytes here and --max-message-mb on the server)",
                                reason=Reason.MESSAGE_TOO_LARGE, metadata=too_large(size, limit))


def too_large(size: int, limit: int) -> dict[str, object]:
    """The metadata of a request refused unsent for its size: the server's keys for MESSAGE_TOO_LARGE (limitBytes,
    actualBytes, message) and this client's own (max, size)."""
    return {"limitBytes": limit, "actualBytes": size, "message": "request", "max": limit, "size": size}


def check_open(client) -> None:
    """A ValueError, as for a closed file, where ``client`` was closed: both clients say the same (grpc's own errors
    differ between its sync and asyncio channels, one not a ValueError)."""
    if client._closed:
        raise ValueError(f"this {type(client).__name__} is closed (by close() or the end of its with block): open a "
                         "new one")


def metadata(token: str | None) -> list[tuple[str, str]] | None:
    """The call metadata carrying ``token`` (None or blank: none). It goes in the header ``authorization: Bearer
    TOKEN``, so it is checked here, at construction: surrounding blanks (a token read from a file ends in a newline)
    are dropped, as the server drops them from its --read-tokens and --write-tokens, and any other character that a
    header value cannot hold (a control character, a non-ASCII letter) is an InvalidInputError naming ``token``: grpc
    refused such a call only when it was made, INTERNAL "Invalid metadata" from the sync client, a grpc internal
    error from the asyncio one. The token itself is never put in a message."""
    if token is None:
        return None
    if not isinstance(token, str):
        raise TypeError(f"token must be a string, got {type(token).__name__}")
    token = token.strip(" \t\r\n")
    if not token:
        return None
    bad = next((i for i, ch in enumerate(token) if not " " <= ch <= "~"), None)
    if bad is not None:
        kind = "a non-ASCII character" if ord(token[bad]) > 127 else "a control character"
        raise InvalidInputError(f"token has {kind} at position {bad}: a bearer token is sent as the header "
                                "'authorization: Bearer TOKEN', which takes printable ASCII only",
                                reason=Reason.INVALID_TEXT, field="token")
    return [("authorization", f"Bearer {token}")]


def open_channel(api, address: str, tls: bool, root_certificates: str | bytes | None, max_message_bytes: int,
                 extra_options: Iterable[tuple[str, object]] = ()):
    """A channel from ``api`` (``grpc`` or ``grpc.aio``) with the shared options, the caller's, and credentials."""
    creds = credentials(tls, root_certificates)
    opts = options(max_message_bytes, extra_options)
    return api.secure_channel(address, creds, opts) if creds else api.insecure_channel(address, opts)
