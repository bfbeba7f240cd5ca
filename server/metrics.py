"""Prometheus metrics, served on their own HTTP port (``--metrics-address``).

* ``nextpara_requests_total{method, code}``: calls by method and final status code
* ``nextpara_request_seconds{method}``: whole-call latency
* ``nextpara_stage_seconds{stage}``: latency of embed, of each retrieval stage (encode, memory (the transition
  memory's prediction), search = stage 1, rows, word_features, model, answer) and of rerank (scoring given candidates)
* ``nextpara_batch_size``: calls per coalesced model batch
* ``nextpara_index_paragraphs``: paragraphs in the index
* ``nextpara_calls_waiting{queue}``: calls admitted and not yet answered, in the model's queue and in the one of calls
  waiting for a remote embedder's endpoint (each at most ``--max-queue``)
* ``nextpara_catch_ups_total``: a replica's catch-ups with its writer (for reads waiting for a generation)
"""

from __future__ import annotations

import errno
import logging
import socket

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from .config import ADDRESS_FORMS, split_host_port

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("nextpara_requests", "Calls by method and status code", ["method", "code"],
                                registry=self.registry)
        self.latency = Histogram("nextpara_request_seconds", "Call latency", ["method"], buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.stage = Histogram("nextpara_stage_seconds", "Latency per stage", ["stage"], buckets=LATENCY_BUCKETS,
                               registry=self.registry)
        self.batch = Histogram("nextpara_batch_size", "Calls per model batch", buckets=(1, 2, 4, 8, 16, 32, 64, 128),
                               registry=self.registry)
        self.paragraphs = Gauge("nextpara_index_paragraphs", "Paragraphs in the index", registry=self.registry)
        self.waiting = Gauge("nextpara_calls_waiting", "Calls admitted and not yet answered, by queue: model (every "
                             "read that scores), embeddings endpoint (calls whose texts a remote embedder embeds, "
                             "before they join the model's)", ["queue"], registry=self.registry)
        self.writes_running = Gauge("nextpara_writes_running", "Store writes under the write lock, submitted to a worker "
                                    "and not finished (a cancelled caller's included), by kind: write (an add), delete, "
                                    "reload, catch_up_store, snapshot_if_changed", ["kind"], registry=self.registry)
        self.catch_ups = Counter("nextpara_catch_ups", "A replica's catch-ups with what its writer committed, run for "
                                 "reads that wait for a generation (wait_for_index)", registry=self.registry)
        self.http_port: int | None = None
        self._http = None

    def serve(self, address: str) -> int:
        """Serve /metrics on ``address`` (host:port or [v6]:port, checked by ServerSettings) from a thread of its own;
        the port bound. Started before the store loads: until then the store's gauges read 0."""
        parsed = split_host_port(address)
        if parsed is None:  # ServerSettings.from_args refuses it first; a caller that builds settings itself, here
            raise ValueError(f"metrics address {ADDRESS_FORMS}, got {address!r}")
        host, port = parsed
        try:
            self._http, _thread = start_http_server(port, addr=host, registry=self.registry)
        except socket.gaierror as e:
            raise OSError(errno.EADDRNOTAVAIL, f"cannot serve metrics on {address}: cannot resolve host {host!r} "
                                               f"({e.strerror})") from e
        except OSError as e:  # another server on this host has the port, say: name the flag that moves it
            hint = (": give this server its own --metrics-address, or '' for none" if e.errno == errno.EADDRINUSE
                    else "")
            raise OSError(e.errno, f"cannot serve metrics on {address} ({e.strerror}){hint}") from e
        self.http_port = self._http.server_port
        bound = str(self._http.server_address[0])
        shown = f"[{bound}]" if ":" in bound else bound
        log.info("metrics on http://%s:%d/metrics", shown, self.http_port)
        return self.http_port

    def close(self) -> None:
        """Stop serving /metrics (a server run in-process gives its port back when it stops)."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
