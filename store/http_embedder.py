"""An OpenAI-compatible HTTP embeddings endpoint.

Wire format (the one OpenAI and compatible servers speak)::

    POST {base_url}/embeddings
    Authorization: Bearer $OPENAI_API_KEY
    {"model": "text-embedding-ada-002", "input": ["text", ...]}
    -> {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [...]}, ...],
        "model": "...", "usage": {...}}

Texts go in batches of ``batch_size``; 429 and 5xx answers (and connection errors) are
retried with exponential backoff, honouring ``Retry-After``; other 4xx answers fail at
once with the server's message. Only the standard library is used.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from typing import Sequence

import numpy as np
from nextpara.errors import FailedPreconditionError, InvalidInputError, NextparaError, Reason

from .unit_vectors import unit_rows

log = logging.getLogger(__name__)
DEFAULT_BASE_URL = "https://api.openai.com/v1"
REFUSED_TEXTS = {400, 413, 422}  # answers that refuse a request for what it holds (another request may pass)


class EmbeddingServiceError(NextparaError):
    """The embeddings endpoint failed after all retries, or refused the request."""

    reason = Reason.EMBEDDING_SERVICE_FAILED
    refused = False  # True: what failed may be these texts' own (the endpoint refused the request as malformed or too
    # large: 400, 413, 422; or it answered a vector nextpara cannot use), so a request of other texts may pass; False:
    # it failed whatever the texts (down, hung, 5xx or 429 after every try, a bad key, a wrong URL or model)


class OpenAIEmbedder:
    """``dim``: the dimension its answers must have (a store's), else the first answer's. An answer nextpara cannot
    use (another dimension, NaN, a zero vector) is the endpoint's failure, EmbeddingServiceError, never the caller's."""

    remote = True

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 batch_size: int = 256, max_retries: int = 5, timeout: float = 60.0, backoff: float = 0.5,
                 dim: int | None = None):
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = (base_url or os.environ.get("NEXTPARA_EMBEDDINGS_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.api_key_env = api_key_env
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff = backoff
        self.dim: int | None = dim
        self.requests_sent = 0

    @property
    def cache_key(self) -> str:
        """Whose vectors the embedding cache keeps for this embedder: the model at this endpoint."""
        return f"{self.name}@{self.base_url}"

    def _post(self, texts: list[str]) -> list[list[float]]:
        key = os.environ.get(self.api_key_env)
        if not key:
            raise FailedPreconditionError(f"embedder {self.name}: environment variable {self.api_key_env} is not set")
        body = json.dumps({"model": self.model, "input": texts}).encode()
        request = urllib.request.Request(
            f"{self.base_url}/embeddings", data=body, method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        )
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                self.requests_sent += 1
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    payload = json.loads(response.read())
                data = sorted(payload["data"], key=lambda item: item["index"])
                if len(data) != len(texts):
                    raise EmbeddingServiceError(f"{self.base_url}: sent {len(texts)} texts, got {len(data)} embeddings")
                return [item["embedding"] for item in data]
            except urllib.error.HTTPError as e:
                detail = e.read()[:500].decode("utf-8", "replace")
                if e.code != 429 and e.code < 500:
                    refusal = EmbeddingServiceError(f"{self.base_url}/embeddings answered {e.code}: {detail}")
                    refusal.refused = e.code in REFUSED_TEXTS
                    raise refusal from e
                retry_after = e.headers.get("Retry-After")
                reason = f"HTTP {e.code}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                reason = str(e)
            except (KeyError, TypeError, ValueError) as e:
                raise EmbeddingServiceError(f"{self.base_url}/embeddings: malformed answer ({e})") from e
            if attempt == self.max_retries:
                raise EmbeddingServiceError(f"{self.base_url}/embeddings failed {attempt + 1} times, last: {reason}")
            delay = float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else self.backoff * 2**attempt
            log.warning("embeddings request failed (%s); retry %d/%d in %.1fs", reason, attempt + 1, self.max_retries, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            rows.extend(self._post(list(texts[start:start + self.batch_size])))
        if not rows:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        try:
            vectors = unit_rows(rows, self.dim, name=lambda i: f"its vector {i}")
        except InvalidInputError as e:
            dims = sorted({len(r) for r in rows if isinstance(r, list)})
            why = (f"vectors of dimension {', '.join(map(str, dims))} where {self.dim} were expected (the store's)"
                   if self.dim is not None and dims != [self.dim] else f"what nextpara cannot use ({e})")
            unusable = EmbeddingServiceError(f"{self.name}: {self.base_url}/embeddings answered {why}")
            unusable.refused = True  # (a NaN or zero vector may be one text's)
            raise unusable from e
        self.dim = vectors.shape[1]
        return vectors
