"""Channel options, credentials and call metadata shared by the sync and asyncio clients."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import grpc

from ._retry import SERVICE_CONFIG

DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


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
    if not tls and root_certificates is None:
        return None
    roots = root_certificates
    if isinstance(roots, str):
        roots = Path(roots).read_bytes()
    return grpc.ssl_channel_credentials(root_certificates=roots)


def metadata(token: str | None) -> list[tuple[str, str]] | None:
    return [("authorization", f"Bearer {token}")] if token else None


def open_channel(api, address: str, tls: bool, root_certificates: str | bytes | None, max_message_bytes: int,
                 extra_options: Iterable[tuple[str, object]] = ()):
    """A channel from ``api`` (``grpc`` or ``grpc.aio``) with the shared options, the caller's, and credentials."""
    creds = credentials(tls, root_certificates)
    opts = options(max_message_bytes, extra_options)
    return api.secure_channel(address, creds, opts) if creds else api.insecure_channel(address, opts)
