"""Server settings: every flag of ``nextpara serve`` also reads an environment variable.

Precedence: flag, then ``NEXTPARA_<NAME>``, then the default shown by ``--help``.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

MiB = 1024 * 1024


@dataclass
class ServerSettings:
    data_dir: str | None = field(default=None, metadata={"help": "store directory (default: the default data dir)"})
    address: str = field(default="127.0.0.1:50051", metadata={"help": "host:port to listen on (port 0: any free port), "
                                                                       "[v6 address]:port, or unix:PATH"})
    workers: int = field(default=1, metadata={"help": "threads running reads' CPU work (embedding, search, model), a "
                                                      "batch each; writes run on a thread of their own (they do "
                                                      "not queue behind reads)"})
    threads: int = field(default=0, metadata={"help": "torch and FAISS threads each worker's work may use "
                                                      "(0: the cores, or $OMP_NUM_THREADS if set, "
                                                      "divided among the workers, at least 1)"})
    max_batch: int = field(default=32, metadata={"help": "PredictNext/Rerank calls coalesced into one model batch"})
    max_wait_ms: float = field(default=0.0, metadata={"help": "how long a batch waits for more calls once a worker is "
                                                           "free (calls that came while the workers were busy join "
                                                           "it anyway)"})
    max_queue: int = field(default=256, metadata={"help": "model calls (PredictNext, Rerank, RerankStream items) admitted "
                                                          "at once; beyond: RESOURCE_EXHAUSTED"})
    max_message_mb: int = field(default=16, metadata={"help": "largest request/response message, in MiB"})
    grace_seconds: float = field(default=10.0, metadata={"help": "on SIGTERM/SIGINT, time in-flight calls get to finish"})
    tls_cert: str | None = field(default=None, metadata={"help": "PEM certificate chain: serve TLS (with --tls-key)"})
    tls_key: str | None = field(default=None, metadata={"help": "PEM private key for --tls-cert"})
    read_tokens: str | None = field(default=None, metadata={"help": "comma-separated bearer tokens for predict/rerank/get/info"})
    write_tokens: str | None = field(default=None, metadata={"help": "comma-separated bearer tokens that may also add/delete/reload/backup"})
    metrics_address: str = field(default="127.0.0.1:9464", metadata={"help": "Prometheus metrics host:port, [v6]:port "
                                                                         "for IPv6 (host empty: 127.0.0.1; port 0: any "
                                                                         "free port; '' to disable)"})
    read_only: bool = field(default=False, metadata={"help": "serve a snapshot without the write lock (replicas); no add/delete"})
    snapshot_seconds: float = field(default=30.0, metadata={"help": "write an index snapshot this often after writes"})
    backup_dir: str | None = field(default=None, metadata={"help": "directory the Backup RPC writes backups into "
                                                                   "(unset: Backup is refused)"})

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mb * MiB

    @property
    def auth_enabled(self) -> bool:
        return bool(self.read_tokens or self.write_tokens)

    def tokens(self, role: str) -> list[str]:
        raw = self.read_tokens if role == "read" else self.write_tokens
        return [t.strip() for t in (raw or "").split(",") if t.strip()]


# (setting, lowest value, whether it must be above it rather than at least it); every one finite too
BOUNDS = (("workers", 1, False), ("threads", 0, False), ("max_batch", 1, False), ("max_queue", 1, False),
          ("max_message_mb", 1, False), ("max_wait_ms", 0, False), ("grace_seconds", 0, False),
          ("snapshot_seconds", 0, True))
LISTEN_FORMS = "must be host:port, or [address]:port for IPv6 (port 0: any free port)"
ADDRESS_FORMS = f"{LISTEN_FORMS}, or '' for none; an IPv6 address goes in brackets: [::1]:9464"


def split_host_port(address: str) -> tuple[str, int] | None:
    """("host", port) of "host:port" or "[v6 address]:port" (the brackets dropped; an empty host is 127.0.0.1), or
    None if it is neither: no port, a port of other than ASCII digits or above 65535, or an IPv6 host without brackets."""
    host, colon, port = address.rpartition(":")
    if not (colon and port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535):
        return None
    if host.startswith("[") and host.endswith("]") and len(host) > 2:
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:
        return None
    return host or "127.0.0.1", int(port)


def is_local_socket(address: str) -> bool:
    """Whether ``address`` is one of grpc's own forms of a local socket (unix:PATH, unix-abstract:NAME), not host:port."""
    return address.startswith(("unix:", "unix-abstract:"))


def read_bool(text: str) -> bool:
    """A yes-or-no environment variable; anything else is a ValueError (a typo must not turn a replica into a writer)."""
    word = text.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in fields(ServerSettings):
        env = f"NEXTPARA_{f.name.upper()}"
        flag = f"--{f.name.replace('_', '-')}"
        help_text = f"{f.metadata['help']} [env {env}; default {f.default!r}]"
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action="store_true", default=None, help=help_text)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, default=None, help=help_text)


def from_args(args: argparse.Namespace) -> ServerSettings:
    """The settings from the flags, then the environment, then the defaults; a value out of range is an
    InvalidInputError (exit status 2) naming the flag, or the variable it came from."""
    from nextpara.errors import InvalidInputError
    from nextpara.store.data_dir import DataDir

    values, source = {}, {}  # a field's value, and where it came from: its flag or its environment variable
    for f in fields(ServerSettings):
        source[f.name] = f"--{f.name.replace('_', '-')}"
        value = getattr(args, f.name, None)
        if value is None and (env := os.environ.get(env_name := f"NEXTPARA_{f.name.upper()}")) is not None:
            kind = {"int": int, "float": float}.get(str(f.type))
            try:
                value = read_bool(env) if str(f.type) == "bool" else kind(env) if kind else env
            except ValueError:
                expected = "1, true, yes, on or 0, false, no, off" if str(f.type) == "bool" else (
                    "an integer" if kind is int else "a number")
                raise InvalidInputError(f"{env_name}={env!r}: expected {expected} (as {source[f.name]})") from None
            source[f.name] = env_name
        if value is not None:
            values[f.name] = value
    settings = ServerSettings(**values)
    for name, low, above in BOUNDS:
        value = getattr(settings, name)
        if not (value > low if above else value >= low):  # not `value < low`: NaN is below nothing
            raise InvalidInputError(f"{source[name]} must be {'above' if above else 'at least'} {low}, got {value}")
        if not math.isfinite(value):  # inf: a batch that waits for ever, say
            raise InvalidInputError(f"{source[name]} must be a finite number, got {value}")
    if not is_local_socket(settings.address) and (
            split_host_port(settings.address) is None or settings.address.startswith(":")):  # grpc wants a host
        raise InvalidInputError(f"{source['address']} {LISTEN_FORMS}; an IPv6 address goes in brackets: [::1]:50051, "
                                f"got {settings.address!r}")
    if settings.metrics_address and split_host_port(settings.metrics_address) is None:
        raise InvalidInputError(f"{source['metrics_address']} {ADDRESS_FORMS}, got {settings.metrics_address!r}")
    if settings.backup_dir:
        backups = Path(settings.backup_dir).expanduser().resolve()
        if backups.is_file():
            raise InvalidInputError(f"{source['backup_dir']}: {settings.backup_dir!r} is a file, not a directory")
        store = DataDir.resolve(settings.data_dir).path.resolve()
        if backups == store or store in backups.parents:  # every Backup would be refused as inside what it copies
            raise InvalidInputError(f"{source['backup_dir']}: {settings.backup_dir!r} is inside the store it would back "
                                    f"up ({store}): give a directory outside it")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise InvalidInputError("--tls-cert and --tls-key go together (or NEXTPARA_TLS_CERT and NEXTPARA_TLS_KEY)")
    return settings
