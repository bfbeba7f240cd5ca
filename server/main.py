"""``nextpara serve``: the grpc.aio server with health, reflection, auth, metrics and graceful shutdown.

``create_server(settings, runtime) -> (server, port, health)`` builds and binds (port 0 picks a
free port, which tests use); ``run_server(settings, data_dir)`` serves until SIGTERM/SIGINT: health goes NOT_SERVING,
in-flight calls get ``grace_seconds`` to finish, a last snapshot is written. SIGHUP reloads the
model (and, on a read-only replica, the index snapshot).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from nextpara.errors import InvalidInputError, NextparaError
from nextpara.v1 import nextpara_pb2

from .auth import TokenAuthInterceptor
from .config import ServerSettings, is_local_socket, split_host_port
from .metrics import Metrics
from .registration import TRANSPORT_FACTOR, add_servicer
from .runtime import Runtime
from .servicer import NextParagraphServicer

log = logging.getLogger(__name__)
SERVICE_NAME = nextpara_pb2.DESCRIPTOR.services_by_name["NextParagraphService"].full_name


def channel_options(settings: ServerSettings) -> list[tuple[str, int]]:
    # Streams per connection are capped a little above the call queue, so that a flood on one connection
    # waits in the client's HTTP/2 layer instead of the server resetting streams (which callers saw as
    # CANCELLED in the load-soak bench's overload burst); calls beyond the queue still get RESOURCE_EXHAUSTED.
    # The transport reads messages a few times over the limit, so that registration.py refuses them with details.
    # grpc-core's own overload protection is off: it resets a new stream (REFUSED_STREAM, which callers see as
    # UNAVAILABLE) whenever the connection has more streams *allocated* than max_concurrent_streams, and a stream
    # stays allocated after its status is sent until this event loop gets to release the call. A burst on one
    # connection keeps the client at the cap, so every call the loop had answered but not yet released made the next
    # stream be refused: the load-soak overload burst ended hundreds of calls as UNAVAILABLE ("RST_STREAM error code
    # 7") instead of RESOURCE_EXHAUSTED. Open streams are still held to the cap, and the call queue sheds the rest.
    return [("grpc.max_receive_message_length", TRANSPORT_FACTOR * settings.max_message_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
            ("grpc.max_concurrent_streams", max(100, 2 * settings.max_queue)),
            ("grpc.http.overload_protection", 0),
            ("grpc.so_reuseport", 0)]  # grpc-core's default shares a port another server holds, splitting its calls


def create_server(settings: ServerSettings, runtime: Runtime) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    interceptors = []
    if settings.auth_enabled:
        interceptors.append(TokenAuthInterceptor(settings.tokens("read"), settings.tokens("write"), runtime.metrics))
    server = grpc.aio.server(interceptors=interceptors, options=channel_options(settings))
    add_servicer(NextParagraphServicer(runtime), server, settings.max_message_bytes)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection([SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    if settings.tls_cert:
        add = functools.partial(server.add_secure_port, settings.address, tls_credentials(settings))
    else:
        add = functools.partial(server.add_insecure_port, settings.address)
    try:
        port = add()
    except RuntimeError:  # grpc says only "Failed to bind to address": why, below
        port = 0
    if port == 0:
        raise (cannot_listen(settings.address) or tls_refusal(settings)
               or OSError(f"cannot listen on {settings.address}"))
    return server, port, health_servicer


def tls_credentials(settings: ServerSettings) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(Path(settings.tls_key).read_bytes(), Path(settings.tls_cert).read_bytes())])


def tls_refusal(settings: ServerSettings) -> InvalidInputError | None:
    """Why grpc cannot serve TLS with --tls-cert and --tls-key, found by adding them to a throwaway server on a free
    loopback port, or None if it can (or TLS is off, or no loopback port can be bound). A key that is not the
    certificate's, a file that is not PEM, or the two swapped make grpc's add_secure_port fail with only "Failed to
    bind to address", which `nextpara serve` said as a port it cannot listen on; it asks before it builds a default
    store (minutes), and again when grpc could not bind. A file that cannot be read is its OSError."""
    if not settings.tls_cert:
        return None
    probe = grpc.server(ThreadPoolExecutor(max_workers=1))
    try:
        try:
            if not probe.add_insecure_port("localhost:0"):
                return None  # no loopback to probe on (IPv4 or IPv6): the real bind says what is wrong
        except RuntimeError:
            return None
        if probe.add_secure_port("localhost:0", tls_credentials(settings)):
            return None
    except RuntimeError:
        pass
    finally:
        probe.stop(None)
    return InvalidInputError(f"cannot serve TLS with the certificate {settings.tls_cert!r} (--tls-cert) and the key "
                             f"{settings.tls_key!r} (--tls-key): check that the key is this certificate's private key "
                             "(not another's, and the two files not swapped) and that both are PEM files, the key "
                             "unencrypted")


def cannot_listen(address: str) -> OSError | None:
    """Why ``address`` (checked by ServerSettings) cannot be listened on, found by binding it here, or None if it
    can: a port another server holds says so and names the flag that moves it. `nextpara serve` asks before it builds
    a default store (minutes), and again when grpc could not bind, which says no more than that."""
    parsed = split_host_port(address)
    if parsed is None:  # a unix: socket, say, which grpc checks itself
        return None
    host, port = parsed
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return OSError(errno.EADDRNOTAVAIL, f"cannot listen on {address}: cannot resolve host {host!r} ({e.strerror})")
    refusals = []
    for family, _, _, _, where in infos:  # grpc listens on every address the host resolves to, and needs one
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc binds: TIME_WAIT is free
                probe.bind(where)
            return None
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return OSError(e.errno, f"cannot listen on {address} ({e.strerror}): another server has this port; "
                                        "give this one its own --address")
            refusals.append(e)
    return OSError(refusals[0].errno, f"cannot listen on {address} ({refusals[0].strerror})") if refusals else None


async def set_health(health_servicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, status)


def start_metrics(settings: ServerSettings) -> Metrics:
    """The server's metrics, served on --metrics-address unless it is ''. `nextpara serve` starts them before it
    builds or checks the default store and before the store loads, so that a taken port is said at once."""
    metrics = Metrics()
    if settings.metrics_address:
        metrics.serve(settings.metrics_address)
    return metrics


async def run_server(settings: ServerSettings, data_dir: Path, ready: asyncio.Event | None = None,
                     stop: asyncio.Event | None = None, metrics: Metrics | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when running as the main program). ``metrics``: already started
    (:func:`start_metrics`), else started here; stopped on the way out either way."""
    if metrics is None:
        metrics = start_metrics(settings)
    try:
        await _serve(settings, data_dir, ready, stop, metrics)
    finally:
        await asyncio.get_running_loop().run_in_executor(None, metrics.close)  # waits up to 0.5 s for its thread


async def _serve(settings: ServerSettings, data_dir: Path, ready: asyncio.Event | None, stop: asyncio.Event | None,
                 metrics: Metrics) -> None:
    runtime = Runtime(settings, data_dir, metrics)
    server, port, health_servicer = create_server(settings, runtime)
    await set_health(health_servicer, False)
    runtime.on_reload = lambda: set_health(health_servicer, runtime.serving)
    await server.start()
    where = (settings.address if is_local_socket(settings.address)  # (for which grpc's port is 1)
             else f"{settings.address.rpartition(':')[0]}:{port}")
    log.info("listening on %s (NOT_SERVING while loading)", where)
    runtime.start()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    reload_requested = asyncio.Event()
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, reload_requested.set)
    except (NotImplementedError, RuntimeError):  # not the main thread (tests run servers in threads)
        pass
    unfinished = None  # a snapshot the stop cut short
    try:
        await runtime.run(runtime.load)
        await set_health(health_servicer, runtime.serving)
        model_version, index_version = runtime.versions()
        log.info("%s on %s: model %s, index generation %d, %d paragraphs",
                 "SERVING" if runtime.serving else "NOT_SERVING (no model)", where, model_version or "none",
                 index_version, runtime.store.count_paragraphs())
        if ready is not None:
            ready.port = port  # type: ignore[attr-defined]
            ready.metrics_port = metrics.http_port  # type: ignore[attr-defined]
            ready.set()
        while not stop.is_set():
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(reload_requested.wait())]
            await asyncio.wait(waiters, timeout=settings.snapshot_seconds, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()
            if reload_requested.is_set():
                reload_requested.clear()
                try:
                    log.info("reloaded: model %s, index generation %d", *(await runtime.reload()))
                except NextparaError as e:  # as a refused Reload call: what served goes on serving
                    log.error("reload (SIGHUP) refused, still serving what was loaded before: %s", e)
            # a snapshot waits for a write under way (the write lock): raced against the stop, so that SIGTERM turns
            # health NOT_SERVING at once rather than when the write is through (close() snapshots after it)
            snapshot, stopping = asyncio.ensure_future(runtime.snapshot_if_changed()), asyncio.ensure_future(stop.wait())
            await asyncio.wait([snapshot, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if snapshot.done():
                snapshot.result()  # what it raised, raised here as before the race
            else:  # stopping: waited for (its thread, if it runs) once health says NOT_SERVING
                snapshot.cancel()
                unfinished = snapshot
    finally:
        log.info("shutting down: NOT_SERVING, %.0fs for in-flight calls", settings.grace_seconds)
        await set_health(health_servicer, False)
        if unfinished is not None:
            await asyncio.gather(unfinished, return_exceptions=True)  # cancelled: close() snapshots after the write
        await server.stop(settings.grace_seconds)
        await runtime.close()
        log.info("stopped")
