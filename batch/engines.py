"""The three engines of a batch job. Each takes the pending rows in input order and yields their
output rows in the same order, a chunk at a time (the job writes each chunk before asking for more).

* ``InProcessEngine``: a Predictor in this process, ``scoring.score_rows`` per chunk (each row's lists of
  vectors made one array as it is read: ``scoring.vectors_as_arrays``).
* ``ServiceEngine``: a running nextpara service; rows with candidates go to Rerank, rows without
  to PredictNext, at most ``in_flight`` calls unanswered (the server coalesces concurrent calls
  into batches). Only the client library is imported.
* ``RayEngine``: Ray Data; ``map_batches`` over an actor pool, each actor opening the store and
  model once and running ``scoring.score_rows``: the same scoring as in-process.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Iterable, Iterator

from .rows import Row, error_output, predict_output, rerank_output

log = logging.getLogger(__name__)
MAX_DATASET_BYTES = 256 * 2**20  # of serialized rows per Ray dataset (each dataset starts its actor pool anew)
QUEUE_PATIENCE = 300.0  # seconds the service engine waits, for one row, on a server that answers QUEUE_FULL


def chunked(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


class InProcessEngine:
    name = "in-process"

    def __init__(self, data_dir: str | Path, with_text: bool = True, chunk_rows: int = 512):
        from nextpara.attention_core.predictor import Predictor

        self.predictor = Predictor.open(data_dir)
        self.with_text, self.chunk_rows = with_text, chunk_rows

    @property
    def model_version(self) -> str:
        return self.predictor.model_version

    @property
    def store_id(self) -> str:
        return self.predictor.store.store_id

    @property
    def index_version(self) -> int:
        return self.predictor.store.index_generation

    def run(self, rows: Iterable[Row]) -> Iterator[list[dict]]:
        from .scoring import score_rows, vectors_as_arrays

        # lists of vectors made arrays row by row as read: a chunk never holds them as Python floats
        for chunk in chunked(map(vectors_as_arrays, rows), self.chunk_rows):
            yield score_rows(self.predictor, chunk, self.with_text)

    def close(self) -> None:
        self.predictor.close()


class ServiceEngine:
    name = "service"

    def __init__(self, client, with_text: bool = True, in_flight: int = 32, chunk_rows: int = 512):
        from nextpara.client.errors import InvalidArgument, NotFound
        from nextpara.errors import InvalidInputError

        self.client, self.with_text, self.chunk_rows, self.in_flight = client, with_text, chunk_rows, in_flight
        # the row's fault (the service's answer, or the client's own check before sending); anything else stops the job
        self.row_errors = (InvalidArgument, NotFound, InvalidInputError)
        # the service asked first, so that one that cannot be reached stops the job before its OUTPUT is opened (an
        # --overwrite emptied it, then found no server)
        try:
            info = client.info()
            self.model_version, self.store_id, self.index_version = info.model_version, info.store_id, info.index_version
        except BaseException:
            client.close()
            raise
        self.pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="rerank-batch")
        self._stopping = threading.Event()  # set by close(): a row waiting out a busy server gives up at once

    def _one(self, row: Row) -> dict:
        """The row's output; a server whose queue is full (the client's own retries spent) is waited for, as a batch
        job can, with growing pauses up to QUEUE_PATIENCE seconds for one row."""
        if row.error is not None:
            return error_output(row, row.error)
        from nextpara.client.errors import ResourceExhausted

        waited, attempt = 0.0, 0
        while True:
            try:
                return self._answer(row)
            except ResourceExhausted as e:
                if e.reason != "QUEUE_FULL":  # a message over the server's limit, say: the row's
                    return error_output(row, e.details or str(e))
                if waited >= QUEUE_PATIENCE:
                    raise ResourceExhausted(f"{e.details}; the server has been busy for {waited:.0f} s: lower --in-flight "
                                            f"(now {self.in_flight}), or run the job when it is quieter (rerunning "
                                            "the same command resumes it)", reason=e.reason) from e
                pause = min(5.0, max(e.retry_delay or 0.0, 0.1) * 2 ** attempt) * random.uniform(1.0, 1.5)
                if self._stopping.wait(pause):  # the job is ending (Ctrl-C, another row's failure)
                    raise
                waited, attempt = waited + pause, attempt + 1

    def _answer(self, row: Row) -> dict:
        from nextpara.client._channel import RequestTooLarge

        try:
            if row.candidates is not None:
                r = self.client.rerank(row.context, row.candidates, top_k=row.top_k)
                self.model_version = r.model_version
                return rerank_output(row, r.order, r.scores, r.context_dropped)
            p = self.client.predict_next(row.context, row.top_k, omit_text=not self.with_text)
            self.model_version = p.model_version
            return predict_output(row, p.predictions, p.context_dropped, self.with_text)
        except RequestTooLarge as e:  # the library's advice (max_message_bytes) is no option of this command's
            return error_output(row, f"the row's request is {int(e.metadata['size']):,} bytes, over the "
                                     f"{int(e.metadata['max']):,}-byte message limit of rerank-batch's client: split it "
                                     "into rows of fewer or shorter context paragraphs or candidates (a server's "
                                     "--max-message-mb does not raise this limit)")
        except self.row_errors as e:
            return error_output(row, getattr(e, "details", None) or str(e))

    def run(self, rows: Iterable[Row]) -> Iterator[list[dict]]:
        for chunk in chunked(rows, self.chunk_rows):
            yield list(self.pool.map(self._one, chunk))

    def close(self) -> None:
        self._stopping.set()
        self.pool.shutdown(cancel_futures=True)
        self.client.close()


class RayScorer:
    """A Ray Data actor: opens the store and model once, then scores batches of serialized rows."""

    def __init__(self, data_dir: str, with_text: bool):
        import ray
        from nextpara.attention_core.pipeline import use_threads
        from nextpara.attention_core.predictor import Predictor

        # threads sized to the actor's CPUs: actors sharing a node must not oversubscribe it
        use_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
        self.predictor = Predictor.open(data_dir)
        self.with_text = with_text

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        from .scoring import score_rows

        rows = [Row(**json.loads(s)) for s in batch["row"]]
        outputs = score_rows(self.predictor, rows, self.with_text)
        return {"out": np.array([json.dumps(o) for o in outputs], dtype=object)}


class RayEngine:
    name = "ray"

    def __init__(self, data_dir: str | Path, with_text: bool = True, address: str = "local",
                 actors: int | None = None, cpus_per_actor: float = 1, batch_rows: int = 256,
                 chunk_rows: int = 100_000):
        from nextpara.attention_core.served import CHECKPOINT, check_embedder, describe_served, read_checkpoint_meta
        from nextpara.errors import FailedPreconditionError, InvalidInputError, Reason
        from nextpara.store.data_dir import DataDir
        from nextpara.store.tables import store_id

        self.data_dir = str(Path(data_dir).resolve())
        # fail before starting Ray, not in every actor; from the store's meta alone (a large store's vectors stay put)
        facts = DataDir(self.data_dir).facts()
        own = Path(self.data_dir) / CHECKPOINT
        if own.exists():  # the store's own model, refused as serving refuses it if trained for another embedder
            check_embedder(read_checkpoint_meta(own), own, facts.embedder_name, facts.dim)
        served = describe_served(facts)  # its own model, else the general model, as elsewhere
        if served["source"] == "none":
            raise FailedPreconditionError(f"nothing can serve {self.data_dir}: {served['reason']} (with --ray the path "
                                          "must hold the store on every node)", reason=Reason.NO_MODEL)
        self.model_version = served["model_version"]
        meta = DataDir(self.data_dir).read_store_meta()
        self.store_id, self.index_version = store_id(meta), int(meta.get("generation", 0))
        import ray

        self._started = not ray.is_initialized()
        if self._started:
            # "local" starts a Ray here; else join the cluster at address (the data dir must be readable there)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING, configure_logging=False,
                         **({"num_cpus": os.cpu_count()} if address == "local" else {}))
            except ConnectionError as e:
                raise FailedPreconditionError(f"cannot join the Ray cluster at {address}: {e}") from None
        from ray.data import DataContext

        logging.getLogger("ray.data").setLevel(logging.ERROR)  # the job reports progress itself
        ctx = DataContext.get_current()
        ctx.execution_options.preserve_order = True  # outputs come back in input order
        ctx.enable_progress_bars = False  # the job has its own
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
        node_cpus = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")), default=cluster_cpus)
        if cpus_per_actor > node_cpus:  # an actor runs on one node: none could ever be placed, the job waited for ever
            self.close()
            raise InvalidInputError(f"--ray-cpus {cpus_per_actor:g} is more than the {node_cpus:g} CPUs of the Ray "
                                    "cluster's largest node: no actor could start (give at most that)")
        self.actors = actors or max(1, int(cluster_cpus // cpus_per_actor))
        self.with_text, self.cpus_per_actor = with_text, cpus_per_actor
        self.batch_rows, self.chunk_rows = batch_rows, chunk_rows
        log.info("Ray: %d CPUs, %d actors of %s CPU", cluster_cpus, self.actors, cpus_per_actor)

    def run(self, rows: Iterable[Row]) -> Iterator[list[dict]]:
        import ray

        for items in self._datasets(rows):
            ds = ray.data.from_items(items).map_batches(
                RayScorer, fn_constructor_kwargs={"data_dir": self.data_dir, "with_text": self.with_text},
                batch_size=self.batch_rows, compute=ray.data.ActorPoolStrategy(size=self.actors),
                num_cpus=self.cpus_per_actor,
                batch_format="numpy")
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                yield [json.loads(s) for s in batch["out"]]

    def _datasets(self, rows: Iterable[Row]) -> Iterator[list[dict]]:
        """Rows serialized for Ray, a dataset's worth at a time: at most ``chunk_rows`` rows or MAX_DATASET_BYTES
        (rows of vectors are large), so the driver never holds the whole input."""
        items, size = [], 0
        for row in rows:
            items.append({"row": row_json(row)})
            size += len(items[-1]["row"])
            if len(items) >= self.chunk_rows or size >= MAX_DATASET_BYTES:
                yield items
                items, size = [], 0
        if items:
            yield items

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()


def row_json(row: Row) -> str:
    """A row as JSON text for Ray. orjson writes it (a Parquet row's vectors straight from their arrays, as float64 so
    that float32 values come back exactly) unless it holds floats orjson would write as null (NaN, infinity): json
    keeps those, for the scorer to name."""
    import numpy as np

    from . import rows

    def plain(items) -> bool:  # no float orjson would write as null: finite arrays, or items without vectors
        if isinstance(items, np.ndarray):
            return bool(np.isfinite(items).all())
        return items is None or not any(isinstance(x, (list, np.ndarray)) for x in items)

    def wide(items):
        return items.astype(np.float64) if isinstance(items, np.ndarray) else items

    if rows.orjson is not None and plain(row.context) and plain(row.candidates):
        fields = dict(row.__dict__, context=wide(row.context), candidates=wide(row.candidates))
        try:
            return rows.orjson.dumps(fields, option=rows.orjson.OPT_SERIALIZE_NUMPY).decode()
        except rows.orjson.JSONEncodeError:  # an integer id beyond 64 bits
            pass
    return json.dumps(row.__dict__, default=lambda a: a.tolist())
