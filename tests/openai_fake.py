"""A loopback HTTP server that speaks the OpenAI embeddings wire format.

Stands in for the remote API, which cannot be reached from here. Vectors are a
deterministic function of the text (seeded by its hash), so equal texts get equal
vectors. ``fail_next`` makes the next requests answer with the given status codes; ``dim`` may change between
requests, and ``zeros`` answers zero vectors (an endpoint gone wrong). ``answering`` cleared holds every answer
until it is set again (an endpoint that hangs). ``status_for(inputs)``, when set, gives the status code to answer a
request of those texts with instead (400: a text the endpoint refuses; 503: down), or None.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32).tolist()


class FakeEmbeddingsServer:
    def __init__(self, dim: int = 1536, api_key: str = "test-key"):
        self.dim = dim
        self.api_key = api_key
        self.fail_next: list[int] = []
        self.zeros = False
        self.status_for = None
        self.delay = 0.0  # seconds each request takes to answer, once answering
        self.answering = threading.Event()
        self.answering.set()
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, payload: dict, headers: dict | None = None):
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = {"path": self.path, "auth": self.headers.get("Authorization"), "body": body,
                           "started": time.monotonic()}
                outer.requests.append(request)
                outer.answering.wait()
                time.sleep(outer.delay)
                request["ended"] = time.monotonic()  # (when it began to answer)
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if self.headers.get("Authorization") != f"Bearer {outer.api_key}":
                    return self._send(401, {"error": {"message": "Incorrect API key provided"}})
                code = outer.status_for(body["input"]) if outer.status_for else None
                if code is None and outer.fail_next:
                    code = outer.fail_next.pop(0)
                if code is not None:
                    return self._send(code, {"error": {"message": f"simulated {code}"}}, {"Retry-After": "0"})
                inputs = body["input"]
                data = [{"object": "embedding", "index": i,
                         "embedding": [0.0] * outer.dim if outer.zeros else fake_vector(t, outer.dim)}
                        for i, t in enumerate(inputs)]
                self._send(200, {"object": "list", "data": data[::-1], "model": body["model"],
                                 "usage": {"prompt_tokens": 0, "total_tokens": 0}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.answering.set()
        self.httpd.shutdown()
        self.httpd.server_close()
