"""Everything the servicer calls: the store, the predictor, the batcher and the single writer.

The servicer reaches the store and the predictor only through a Runtime. Reads' CPU work runs in a
bounded thread pool (``--workers``); PredictNext and Rerank go through the Coalescer, which forms a
batch when a worker is free. A remote embedder's query texts are embedded before the batch, on threads
of their own (embed_ahead.py), so an endpoint that hangs holds no worker. Writes are serialized by one asyncio lock and
run on a thread of their own, so they do not queue behind reads. The predictor is swapped atomically
on reload, so a response's model and index versions always come from one predictor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from nextpara.attention_core.predictor import Predictor
from nextpara.attention_core.served import CHECKPOINT, describe_served
from nextpara.errors import (
    FailedPreconditionError,
    InvalidInputError,
    LoadingError,
    NextparaError,
    Reason,
    StorageFullError,
)
from nextpara.store.backup import BackupReport
from nextpara.store.filters import RetrievalFilter, doc_id_list
from nextpara.store.ingest import vectors_for
from nextpara.store.store import DocumentRow, ParagraphStore, WriteResult, open_store

from .backups import Backups
from .batching import Coalescer
from .config import ServerSettings
from .embed_ahead import EmbedAhead
from .index_gate import IndexGate
from .metrics import Metrics
from .warm_up import WarmUp

log = logging.getLogger(__name__)
LOADING_RETRY_DELAY = 1.0  # seconds a call that comes while the server loads is asked to wait


@dataclass
class ServiceInfo:
    store: dict  # ParagraphStore.info()
    model_version: str  # empty without a trained model
    index_version: int
    max_context: int  # 0 without a trained model
    max_message_bytes: int
    model: dict  # served.describe_served(): which model serves and its validation figures beside B1's


@dataclass
class Deleted:
    documents: int
    paragraphs: int
    generation: int
    missing: list[str]  # with allow_missing: the doc_ids that were not stored


def size_threads(workers: int, threads: int = 0) -> int:
    """torch and FAISS threads per worker: ``threads``; by default the cores, or ``OMP_NUM_THREADS`` when it is set
    (the usual cap on a shared machine: the whole process's), divided among the workers (the workers are threads
    of this process, each running its own torch and FAISS calls)."""
    import os

    from nextpara.attention_core.pipeline import use_threads

    cores = len(os.sched_getaffinity(0))
    setting = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # OpenMP allows a list: its first level
    if setting.isascii() and setting.isdigit() and int(setting) > 0:
        cores = int(setting)
    elif setting:
        log.warning("OMP_NUM_THREADS=%r is not a positive number of threads: ignored", os.environ["OMP_NUM_THREADS"])
    n = threads or max(1, cores // max(1, workers))
    use_threads(n)
    log.info("CPU work: %d workers x %d torch/FAISS threads", workers, n)
    return n


class Runtime:
    def __init__(self, settings: ServerSettings, data_dir: Path, metrics: Metrics):
        self.settings, self.data_dir, self.metrics = settings, data_dir, metrics
        self.executor = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="nextpara-cpu")
        # writes (one at a time: the write lock) on a thread of their own: a long AddDocuments does not queue reads
        # behind it (both still share the cores)
        self.write_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nextpara-write")
        size_threads(settings.workers, settings.threads)
        self.store: ParagraphStore | None = None
        self.predictor: Predictor | None = None
        self._no_model: FailedPreconditionError | None = None  # why no model serves, when none does
        self._warm_up: WarmUp | None = None  # of the model that serves
        self._model_info: dict = {"source": "none", "reason": "not loaded yet"}
        self.embedder = None
        self._write_lock = asyncio.Lock()
        self.on_reload = None  # async callable run after a reload (the server updates health with it)
        self._snapshot_generation = -1
        self._generation = -1  # the generation the index holds, kept by load, catch-up and each write (error_facts)
        self.index_gate = IndexGate(lambda: self._generation, self._catch_up if settings.read_only else None,
                                    settings.read_only)  # reads that ask for min_index_version
        self.backups = Backups(data_dir, settings.backup_dir)
        self.coalescer = Coalescer(self._run_batch, self.executor, settings.max_batch, settings.max_wait_ms / 1000,
                                   settings.max_queue, on_batch=metrics.batch.observe, slots=settings.workers)
        # a remote embedder's query texts, embedded before their call joins the model's queue (embed_ahead.py)
        self.embed_ahead = EmbedAhead(self._require_model, settings.max_wait_ms / 1000, settings.max_queue)
        for queue, coalescer in (("model", self.coalescer), ("embeddings endpoint", self.embed_ahead.coalescer)):
            metrics.waiting.labels(queue).set_function(coalescer.admitted)

    # ---- lifecycle --------------------------------------------------------------------
    def load(self) -> None:
        """Open the store and the model that serves it; blocking, call in the executor. Nothing of the server changes
        until both are ready: a replica's refused reload (a model that cannot serve the new snapshot, say) leaves the
        store, model and generations that served before, and a read waiting for the new generation waits for its model."""
        store = open_store(self.data_dir, readonly=self.settings.read_only)
        try:
            embedder = store.query_embedder()
            prepared = self._prepare_model(store, embedder)
        except BaseException:
            store.close()
            raise
        self.store, self.embedder = store, embedder
        self._snapshot_generation = store.snapshot_generation
        self._generation = store.index_generation
        self._install_model(*prepared)

    def _load_model(self) -> None:
        """The writer's reload: the model again, over the store it has."""
        self._install_model(*self._prepare_model(self.store, self.embedder))

    def _prepare_model(self, store: ParagraphStore, embedder) -> tuple:
        """(predictor or None, why none, what serves, paragraphs): everything that may fail, before anything changes."""
        predictor, why = None, None
        try:  # the store's own model, else the general model that ships with the package
            predictor = Predictor.from_store(store, embedder=embedder)
        except FailedPreconditionError as e:
            if (store.data_dir / CHECKPOINT).exists():  # the store's own model file is unusable: say so (start-up
                raise  # fails, a Reload is refused with the reason) rather than serve something else
            why = e
        return predictor, why, describe_served(store), store.count_paragraphs()

    def _install_model(self, predictor: Predictor | None, why: Exception | None, info: dict, paragraphs: int) -> None:
        if self._warm_up is not None:
            self._warm_up.stop()
        if predictor is None:
            self.predictor, self._no_model = None, why
            log.warning("no model serves %s: PredictNext and Rerank answer FAILED_PRECONDITION until `nextpara "
                        "train` and a reload (%s)", self.data_dir, why)
        else:
            predictor.observe = lambda stage, seconds: self.metrics.stage.labels(stage).observe(seconds)
            self._warm_up = WarmUp(predictor, self.embedder)  # text model and word rows ahead of the first queries
            self.predictor, self._no_model = predictor, None
        self._model_info = info  # what was just loaded (or why nothing was)
        self.metrics.paragraphs.set(paragraphs)

    def check_loaded(self) -> None:
        """LoadingError until ``load`` has opened the store (the server listens while it loads, health NOT_SERVING)."""
        if self.store is None:
            raise LoadingError(f"the server is still loading its store {self.data_dir} (health NOT_SERVING until it "
                               f"has); retry in {LOADING_RETRY_DELAY:.0f} s", retry_delay=LOADING_RETRY_DELAY)

    @property
    def serving(self) -> bool:
        return self.store is not None and self.predictor is not None

    async def run(self, fn, *args, executor=None):
        return await asyncio.get_running_loop().run_in_executor(executor or self.executor, fn, *args)

    async def run_locked(self, fn, *args):
        """Run ``fn`` in the executor holding the write lock until it has really finished: every write, reload
        and snapshot goes through here. A caller that is cancelled (the client went away, shutdown) cannot stop
        the thread, so the lock waits for it before the next one may start; the cancellation is raised after."""
        async with self._write_lock:
            work = asyncio.ensure_future(self.run(fn, *args, executor=self.write_executor))
            running = self.metrics.writes_running.labels(fn.__name__.strip("_"))
            running.inc()
            work.add_done_callback(lambda _: running.dec())
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                await asyncio.wait([work])
                raise

    async def reload(self) -> tuple[str, int]:
        old = await self.run_locked(self._reload)
        if self.settings.read_only:
            asyncio.get_running_loop().call_later(30, old.close)  # in-flight calls may still use it
        self.index_gate.advanced()
        if self.on_reload is not None:
            await self.on_reload()
        return self.versions()

    def _reload(self) -> ParagraphStore:
        """A replica re-reads the snapshot another process wrote, a writer the model; returns the store before (a
        refused reload changes nothing: load)."""
        old = self.store
        if self.settings.read_only:
            self.load()
        else:
            self._load_model()
        return old

    def versions(self) -> tuple[str, int]:
        """The model version, and the generation the index holds (on a replica: as loaded or caught up)."""
        return (self.predictor.model_version if self.predictor else "", self._generation if self.store else -1)

    async def _catch_up(self) -> None:
        """A replica: replay into its index what the writer has committed since (IndexGate, for waiting reads)."""
        await self.run_locked(self._catch_up_store)

    def _catch_up_store(self) -> None:
        self.metrics.catch_ups.inc()
        before = self._generation
        self._generation = self.store.catch_up()
        if self._generation != before:
            self.metrics.paragraphs.set(self.store.count_paragraphs())
            log.info("caught up with the writer: index generation %d -> %d", before, self._generation)

    def error_facts(self) -> dict:
        """What every refusal's details carry: the index version it was refused at (as of the last write or load:
        refusals are answered on the event loop, which must not wait for SQLite, shared with the workers)."""
        return {"indexVersion": self._generation} if self._generation >= 0 else {}

    async def snapshot_if_changed(self, closing: bool = False) -> None:
        if self.settings.read_only or self.store is None:
            return
        await self.run_locked(self._snapshot_if_changed, closing)

    def _snapshot_if_changed(self, closing: bool = False) -> None:
        if self.store.generation != self._snapshot_generation:
            try:
                self.store.snapshot()
            except (StorageFullError, OSError) as e:  # not fatal: SQLite holds every write, loading replays
                then = "the next start replays the writes since the last one" if closing else "serving on"
                log.error("index snapshot not written, %s: %s", then, e)  # them, and the next round retries
                return
            self._snapshot_generation = self.store.generation

    def start(self) -> None:
        """Start taking calls (in the server's event loop)."""
        self.coalescer.start()
        self.embed_ahead.start()

    async def close(self) -> None:
        await self.coalescer.stop()
        await self.embed_ahead.stop()
        await self.snapshot_if_changed(closing=True)
        self.executor.shutdown(wait=True)
        self.write_executor.shutdown(wait=True)
        if self._warm_up is not None:  # it reads the store: stopped (within a chunk) before the store closes
            self._warm_up.stop()
            await asyncio.get_running_loop().run_in_executor(None, self._warm_up.join)
        if self.store:
            self.store.close()

    # ---- reads ------------------------------------------------------------------------
    def _require_model(self) -> Predictor:
        if self.predictor is None:
            if self._no_model is not None:  # its own reason: NO_MODEL, or MODEL_UNREADABLE for a damaged general model
                raise FailedPreconditionError(str(self._no_model), reason=self._no_model.reason)
            raise FailedPreconditionError(f"no model serves {self.data_dir}: run `nextpara train`, then reload",
                                          reason=Reason.NO_MODEL)
        return self.predictor

    def _run_batch(self, key, payloads: list):
        """Payloads are (context, candidates, embedded ahead: None or (embedder, text -> vector))."""
        predictor = self._require_model()
        embedded = {}
        for _, _, ahead in payloads:
            if ahead is not None and ahead[0] is predictor.embedder:  # (a replica's reload makes another: it embeds)
                embedded.update(ahead[1])
        contexts = [p[0] for p in payloads]
        if key[0] == "predict":
            _, top_k, include_attention, exclude, retrieval_filter = key
            return predictor.predict_next_batch(contexts, top_k, include_attention, list(exclude),
                                                filter=retrieval_filter, embedded=embedded)
        return predictor.rerank_batch(contexts, [p[1] for p in payloads], embedded=embedded)

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    async def predict(self, context: list, top_k: int, include_attention: bool, exclude_doc_ids: list[str],
                      retrieval_filter: RetrievalFilter | None, timeout: float | None):
        """Calls with the same options (filter included: equal filters compare equal) are batched together."""
        self._require_model()
        key = ("predict", top_k, include_attention, doc_id_list(exclude_doc_ids, "exclude_doc_ids"), retrieval_filter)
        deadline = None if timeout is None else time.monotonic() + timeout
        ahead = await self.embed_ahead.vectors(self.predictor, context, [], timeout)
        return await self.coalescer.submit(key, (context, (), ahead), self._left(deadline))

    async def rerank(self, context: list, candidates: list, timeout: float | None):
        self._require_model()
        deadline = None if timeout is None else time.monotonic() + timeout
        ahead = await self.embed_ahead.vectors(self.predictor, context, candidates, timeout)
        return await self.coalescer.submit(("rerank",), (context, candidates, ahead), self._left(deadline))

    async def get_paragraphs(self, ids: list[int], include_vectors: bool) -> tuple[list, np.ndarray | None]:
        """The stored paragraphs in the order asked, and their vectors (None unless ``include_vectors``)."""
        if not ids:
            raise InvalidInputError("paragraph_ids is empty", reason=Reason.FIELD_REQUIRED, field="paragraph_ids")
        return await self.run(self._get_paragraphs, self.store, ids, include_vectors)

    @staticmethod
    def _get_paragraphs(store: ParagraphStore, ids: list[int], include_vectors: bool):
        return store.get_paragraphs(ids), store.vectors(ids) if include_vectors else None

    async def list_documents(self, after: str, page_size: int,
                             labels: dict[str, str] | None = None) -> tuple[list[DocumentRow], bool, int]:
        """A page of documents after the doc_id ``after`` (with ``labels``: only those carrying them all), whether more
        follow, and the generation the index holds (as every read reports it: on a replica, SQLite may show later
        writes, which a min_index_version of that generation would have the replica wait for)."""
        store = self.store
        rows, generation = await self.run(lambda: (store.list_documents(after, page_size + 1, labels),
                                                   store.index_generation))
        return rows[:page_size], len(rows) > page_size, generation

    async def get_document(self, doc_id: str) -> tuple[DocumentRow, list, int]:
        if not doc_id:
            raise InvalidInputError("doc_id is empty", reason=Reason.FIELD_REQUIRED, field="doc_id")
        store = self.store
        return await self.run(lambda: (*store.get_document(doc_id), store.index_generation))  # as list_documents

    async def info(self) -> ServiceInfo:
        store = await self.run(self.store.info)
        model_version, index_version = self.versions()
        return ServiceInfo(store, model_version, index_version, self.predictor.max_context if self.predictor else 0,
                           self.settings.max_message_bytes, self._model_info)

    # ---- writes -----------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.settings.read_only:
            raise FailedPreconditionError("this server is a read-only replica: send writes to the writer",
                                          reason=Reason.READ_ONLY_REPLICA)

    async def add_documents(self, messages) -> WriteResult:
        """Commit each message (a list of Documents) as it arrives; see the proto for the contract. A refusal
        midway says (in its message and its metadata) how many messages were committed before it."""
        self._check_writable()
        total = WriteResult()
        committed = 0
        try:
            async for docs in messages:
                try:
                    result = await self.run_locked(self._write, docs)
                finally:  # also when the caller went away: the write may have committed all the same
                    self.index_gate.advanced()
                committed += 1
                total.added += result.added
                total.replaced += result.replaced
                total.unchanged += result.unchanged
                total.paragraphs += result.paragraphs
        except NextparaError as e:
            e.args = (f"{e} ({committed} earlier message(s) were committed)",)
            e.metadata.update(committedMessages=str(committed), messageIndex=str(committed))
            raise
        total.generation = self.store.generation
        return total

    def _write(self, docs) -> WriteResult:
        t0 = time.perf_counter()
        vectors = vectors_for(self.embedder, docs)
        self.metrics.stage.labels("embed").observe(time.perf_counter() - t0)
        result = self.store.add_documents(docs, vectors)
        self._generation = result.generation
        self.metrics.paragraphs.set(self.store.count_paragraphs())
        return result

    async def delete_documents(self, doc_ids: list[str], allow_missing: bool = False) -> Deleted:
        """Delete whole documents. Unknown doc_ids: NotFoundError and nothing deleted, or with ``allow_missing``
        reported in ``Deleted.missing`` while the others are deleted."""
        self._check_writable()
        if not doc_ids:
            raise InvalidInputError("doc_ids is empty", reason=Reason.FIELD_REQUIRED, field="doc_ids")
        if "" in doc_ids:  # no document has it: a caller's bug, as GetDocument and the filters say
            at = doc_ids.index("")
            raise InvalidInputError(f"doc_ids[{at}] is empty", reason=Reason.FIELD_REQUIRED, field=f"doc_ids[{at}]")
        try:
            deleted = await self.run_locked(self._delete, list(dict.fromkeys(doc_ids)), allow_missing)
        finally:  # also when the caller went away: the delete may have committed all the same
            self.index_gate.advanced()
        self.metrics.paragraphs.set(self.store.count_paragraphs())
        return deleted

    def _delete(self, doc_ids: list[str], allow_missing: bool) -> Deleted:
        missing: list[str] = []
        if allow_missing:  # under the write lock: nothing can add or delete between this look and the delete
            missing = self.store.missing_documents(doc_ids)  # the same rule as the delete's own NOT_FOUND
            gone = set(missing)
            doc_ids = [d for d in doc_ids if d not in gone]
        paragraphs = self.store.delete_documents(doc_ids) if doc_ids else 0
        self._generation = self.store.index_generation
        return Deleted(len(doc_ids), paragraphs, self._generation, missing)

    # ---- backup -----------------------------------------------------------------------
    async def backup(self, destination: str) -> BackupReport:
        """Copy the store to ``destination`` inside --backup-dir while serving and writing go on (server/backups.py)."""
        self._check_writable()
        return await self.backups.take(destination, lambda: self._generation)
