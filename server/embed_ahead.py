"""Query texts that a remote embedder embeds, embedded before their call joins the model's queue.

A store of `openai:` vectors embeds a query's texts over the network. Embedding them in the model's batch would hold
one of the few CPU workers for as long as the endpoint takes, and an endpoint that hangs would stall every read,
calls by ids and vectors included. So the server embeds such texts first, on threads of their own (EMBED_REQUESTS
requests at the endpoint at once), and hands each call its vectors with its payload (``Predictor.predict_next_batch
(..., embedded=)``). The calls waiting here are coalesced as the model's calls are (batching.py): those that arrive
while the endpoint has every request it may have go together in the next one (up to EMBED_CALLS calls and EMBED_TEXTS
texts: a call of more goes alone, so that no call waits for another's many requests). They have a queue limit of
their own (--max-queue), so while an endpoint hangs, calls that send it nothing are still admitted.

A failure the endpoint has whatever the texts (down, hung, 5xx after every try) is every waiting call's; one that may
be a text's own (the request refused as malformed or too large, an unusable vector) is asked again call by call,
EMBED_REQUESTS at once, so that only that text's call fails. A local model (MiniLM) embeds in the model's batch: all
its calls' texts in one model call.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from nextpara.attention_core.predictor import Predictor
from nextpara.store.http_embedder import EmbeddingServiceError

from .batching import Coalescer

EMBED_REQUESTS = 4  # embedding calls a server has at a remote endpoint at once (each waits on it, not on the cores)
EMBED_CALLS = 64  # calls whose texts one of them carries at most
EMBED_TEXTS = 256  # and texts (a call of more goes alone: calls batched with it would wait for all of its requests)
EMBED_RETRY_DELAY = 1.0  # seconds, at least, a call refused because too many wait for the endpoint is asked to wait


def _texts_refused(error: Exception) -> bool:
    """Whether a batch of calls whose texts a remote embedder failed on is worth running call by call: unless the
    endpoint failed whatever the texts (down, hung, 5xx after every try), it may have refused one call's text."""
    return not isinstance(error, EmbeddingServiceError) or error.refused


def _texts_in(payload: tuple) -> int:
    """The texts a call waiting for a remote embedder may send it: its (context, candidates)' text items."""
    return sum(isinstance(item, str) for items in payload for item in items)


class EmbedAhead:
    """``vectors(...)`` for each call; ``predictor()`` gives the model that serves when a batch runs."""

    def __init__(self, predictor: Callable[[], Predictor], max_wait: float, max_queue: int):
        self.predictor = predictor
        self.executor = ThreadPoolExecutor(max_workers=EMBED_REQUESTS, thread_name_prefix="nextpara-embed")
        self.coalescer = Coalescer(self._run_batch, self.executor, EMBED_CALLS, max_wait, max_queue,
                                   slots=EMBED_REQUESTS, busy="calls waiting for the embeddings endpoint",
                                   retry_alone=_texts_refused, min_retry_delay=EMBED_RETRY_DELAY, cost=_texts_in,
                                   max_cost=EMBED_TEXTS)

    def start(self) -> None:
        self.coalescer.start()

    async def stop(self) -> None:
        await self.coalescer.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)  # (a try at a hung endpoint ends by its timeout)

    async def vectors(self, predictor: Predictor | None, context: list, candidates: list,
                      timeout: float | None) -> tuple | None:
        """(embedder, text -> vector) for a call's texts, when a remote embedder embeds them; None when there is
        none to embed (or a local model embeds them in the batch). Texts in the predictor's cache cost no wait."""
        if predictor is None or not predictor.embeds_remotely:
            return None
        if (cached := predictor.cached_texts(context, candidates)) is not None:  # ({} for a call of no text)
            return (predictor.embedder, cached) if cached else None
        return await self.coalescer.submit(("embed",), (context, candidates), timeout)

    def _run_batch(self, key, payloads: list) -> list:
        """Payloads are (context, candidates); each gets (embedder, text -> vector)."""
        predictor = self.predictor()
        return [(predictor.embedder, vectors) for vectors in predictor.embed_ahead(payloads)]
