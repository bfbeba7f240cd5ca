"""What a load starts ahead of the first queries, on a thread of its own: the model's transition memory (seconds on a
large store, else paid by the first query), the store's local text model (seconds of imports and weights, else paid
by the first query by text), then every stored paragraph's word row (else read and tokenised by the queries that need
them). Each is logged when done; benchmarks wait for the lines."""

from __future__ import annotations

import logging
import threading
import time

from nextpara.attention_core.predictor import Predictor
from nextpara.store.embedders import SentenceTransformerEmbedder

log = logging.getLogger(__name__)

TEXT_MODEL_READY = "text model ready"  # logged once the store's local text model is loaded
WORD_ROWS_READY = "word rows ready"  # logged once every stored paragraph's word row is kept (benchmarks wait for it)


class WarmUp:
    """Started for each model a load installs; stopped (within a chunk of rows) when another replaces it or the server
    closes the store it reads. A refused reload installs nothing, so the warm-up of what serves goes on."""

    def __init__(self, predictor: Predictor, embedder):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(predictor, embedder), name="nextpara-warm-up",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join()

    def _run(self, predictor: Predictor, embedder) -> None:
        if predictor.pipeline.memory is not None:
            started = time.perf_counter()
            try:
                n = len(predictor.pipeline.memory.get())
            except Exception as e:  # noqa: BLE001 - not fatal: the first query makes it, or says why not
                log.warning("transition memory not made ahead: %s", e)
            else:
                log.info("transition memory of %d training transitions made in %.1f s", n, time.perf_counter() - started)
        if isinstance(embedder, SentenceTransformerEmbedder) and not self._stop.is_set():
            started = time.perf_counter()
            try:
                embedder.model  # noqa: B018 - the property loads it
            except Exception as e:  # noqa: BLE001 - not fatal: the first query by text loads it, or says why not
                log.warning("text model not loaded ahead: %s", e)
            else:
                log.info("%s: text model loaded ahead in %.1f s", TEXT_MODEL_READY, time.perf_counter() - started)
        started = time.perf_counter()
        try:
            n = predictor.pipeline.warm_word_rows(stop=self._stop)
        except Exception as e:  # noqa: BLE001 - not fatal: each query computes the rows it lacks, as before
            log.warning("word rows not computed ahead: %s", e)
            return
        if not self._stop.is_set():
            log.info("%s: word rows of %d paragraphs kept in %.1f s", WORD_ROWS_READY, n, time.perf_counter() - started)
