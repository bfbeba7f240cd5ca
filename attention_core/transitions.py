"""Where a paragraph like the last one led: a memory of the store's training documents' transitions.

The query head learns one smooth map from a context to where its next paragraph lies. The memory keeps the
transitions themselves, as a nearest-neighbour language model keeps its training text: for every paragraph of a
training-split document (the fixed split rule of sequences.py) that has a next one, its vector (the key) and the step
to its successor (the successor's vector minus the key's). For a query, the K keys nearest its last context paragraph
vote by softmax(cosine / TEMPERATURE), and the predicted next vector is the last paragraph plus their weighted steps,
normalised. A candidate's cosine to it, times the model's ``memory_boost`` (fitted on the validation split after
training, training.py; a constant for the general model, general.py), is added to the model's score (pipeline.py),
and up to CANDIDATES paragraphs nearest it that stage 1's other sources did not find join the candidates
(candidates.py): by the successor-memory probe, with the memory's term at 16 on the general model, that widened list
ranked better on PEPs and the built-in docs and level on the novels (bench/quality/README.md).
A memory of more than EXACT_UP_TO keys is searched by an HNSW graph (an exact search reads every key for each
query), a smaller one exactly. It holds each key (in its index) and each step as float32: about 2 x 4 x D bytes per
training transition, 104 MB for PEPs' 33,834 at D = 384 (and the graph's links), twice that while it is remade.

Measured before it was built in (bench/quality/successor_memory.py, bench/quality/README.md: "A memory of
transitions"): on the validation splits of PEPs, the novels and the built-in docs it raised plain cosine to the last
paragraph on all three and the general model's ranking on PEPs and the built-in docs, beyond their paired intervals;
the successors' vectors alone (without the last paragraph) predicted far worse than the last paragraph itself. On the
test splits it raised the general model's on the built-in docs and left the other two's where they were.

Training can score its lists beside the memory's term (TrainConfig.train_memory_weight, off by default): a training
query's own transition is in the memory, so it is predicted without its document's (predict_leaving_out).

Only content is read at query time (the query's last vector, the candidates' vectors): the positions and doc_ids are
read to make the memory from the training documents, as training reads them, never to score a candidate. Validation
and test documents are never in it, so evaluation (docs/evaluation.md) is unchanged. The memory is made from the store
as it is when a pipeline first predicts with it, before its stage 1 (every pipeline of one store object shares it:
for_store), and made again
in the background when the store's vectors change (its write generation): meanwhile the one made before serves.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Sequence

import numpy as np
from nextpara.store.store import ParagraphStore

from .sequences import split_of

log = logging.getLogger(__name__)

K = 16  # keys that vote
TEMPERATURE = 0.05  # of the votes' softmax, in cosine units
EXACT_UP_TO = 4096  # keys searched exactly; more: by an HNSW graph
HNSW_LINKS, HNSW_BUILD_DEPTH, HNSW_SEARCH_DEPTH = 16, 40, 64
CANDIDATES = 50  # the predicted vector's nearest paragraphs that stage 1 adds, beyond those its other sources found
INLINE_SECONDS = 0.05  # a memory made faster than this is made again in the call that finds the store changed


LEAVE_OUT_DEPTH = 256  # predict_leaving_out: keys searched beyond K, for those of the query's own document to drop


class TransitionMemory:
    def __init__(self, keys: np.ndarray, steps: np.ndarray, key_docs: np.ndarray | None = None):
        import faiss

        self.steps = steps
        self.key_docs = key_docs  # (n,) each key's document (its index among of_documents' doc_ids), when known
        if len(keys) > EXACT_UP_TO:
            self.index = faiss.IndexHNSWFlat(keys.shape[1], HNSW_LINKS, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction, self.index.hnsw.efSearch = HNSW_BUILD_DEPTH, HNSW_SEARCH_DEPTH
        else:
            self.index = faiss.IndexFlatIP(keys.shape[1])
        if len(keys):
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)  # (this thread's): one thread inserts in one order, so a graph is the same
            try:  # every time it is built, and a batch job resumed in another process ranks as the first one did
                self.index.add(np.ascontiguousarray(keys, dtype=np.float32))
            finally:
                faiss.omp_set_num_threads(threads)

    def __len__(self) -> int:
        return self.index.ntotal

    @classmethod
    def of_documents(cls, doc_ids: Sequence[str], vectors: np.ndarray) -> "TransitionMemory":
        """The transitions of the training-split documents among rows ordered by (doc_id, position): each row and the
        next one of its document."""
        doc = np.asarray(doc_ids, dtype=object)
        follows = np.flatnonzero(doc[1:] == doc[:-1]) if len(doc) > 1 else np.zeros(0, np.int64)
        train = {d: split_of(d) == "train" for d in set(doc_ids)}
        pairs = follows[np.fromiter((train[doc[i]] for i in follows), bool, len(follows))]
        keys = vectors[pairs]
        codes = document_codes(doc_ids)
        return cls(keys, vectors[pairs + 1] - keys, np.fromiter((codes[doc[i]] for i in pairs), np.int64, len(pairs)))

    @classmethod
    def from_store(cls, store: ParagraphStore) -> "TransitionMemory":
        """The transitions of ``store``'s training-split documents, of the paragraphs its vectors hold: a paragraph
        stored since the vectors' generation (a read-only copy's writer added it), or deleted meanwhile, is left
        out with its transitions."""
        ids, doc_ids, _, _ = store.paragraph_table()  # ordered by (doc_id, position)
        training = {d for d in set(doc_ids) if split_of(d) == "train"}  # (a document's split: one hash per document)
        train = np.fromiter((d in training for d in doc_ids), bool, len(ids))
        present, vectors = store.present_vectors(ids[train])
        kept = np.flatnonzero(train)[np.isin(ids[train], present)]
        if not len(kept):
            return cls(np.zeros((0, store.dim), np.float32), np.zeros((0, store.dim), np.float32))
        return cls.of_documents([doc_ids[i] for i in kept], vectors)

    def predict(self, last: np.ndarray) -> np.ndarray | None:
        """(B, D) predicted next vectors, unit length, for (B, D) last context paragraphs; None if the memory is empty."""
        if not len(self) or not len(last):
            return None
        last = np.ascontiguousarray(last, dtype=np.float32)
        sims, rows = self.index.search(last, min(K, len(self)))
        return vote(last, sims, rows, self.steps)

    def predict_leaving_out(self, last: np.ndarray, docs: np.ndarray) -> np.ndarray | None:
        """predict() for queries of the memory's own documents (training's): row i votes without the transitions of
        document ``docs[i]`` (a code of ``key_docs``), which would name its target exactly; of the K + LEAVE_OUT_DEPTH
        nearest keys, the K nearest of other documents vote (fewer where fewer are found; none: the last paragraph)."""
        import faiss

        if self.key_docs is None:
            raise ValueError("this memory does not know its keys' documents: make it with of_documents")
        if not len(self) or not len(last):
            return None
        last = np.ascontiguousarray(last, dtype=np.float32)
        depth = min(K + LEAVE_OUT_DEPTH, len(self))
        params = (faiss.SearchParametersHNSW(efSearch=max(HNSW_SEARCH_DEPTH, depth))
                  if isinstance(self.index, faiss.IndexHNSW) else None)
        sims, rows = self.index.search(last, depth, params=params)
        other = (rows >= 0) & (self.key_docs[np.maximum(rows, 0)] != np.asarray(docs)[:, None])
        order = np.argsort(~other, axis=1, kind="stable")[:, :K]  # each row's first K keys of other documents
        sims, rows = np.take_along_axis(sims, order, 1), np.take_along_axis(rows, order, 1)
        return vote(last, sims, np.where(np.take_along_axis(other, order, 1), rows, -1), self.steps)


def vote(base: np.ndarray, sims: np.ndarray, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """(B, D) normalize(base + the ``steps`` of each row's keys ``rows`` (B, k), nearest first, weighted by
    softmax(sims / TEMPERATURE)): the memory's prediction from its nearest keys. -1 rows (a graph search may find
    fewer) do not vote; a row none vote for is its base."""
    found = rows >= 0
    sims, rows = np.where(found, sims, -np.inf), np.where(found, rows, 0)
    top = np.where(found[:, :1], sims[:, :1], 0.0)
    w = np.where(found, np.exp((sims - top) / TEMPERATURE), 0.0)
    w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-30)
    p = base + np.einsum("bk,bkd->bd", w, steps[rows])
    return p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)


def document_codes(doc_ids: Sequence[str]) -> dict[str, int]:
    """Each document's code in a memory made by of_documents(doc_ids, ...): its place among them, in order."""
    return {d: i for i, d in enumerate(dict.fromkeys(doc_ids))}


class StoreMemory:
    """A store's TransitionMemory: made when first asked for, and made again in the background after the store's
    vectors change, the one made before serving meanwhile. A remake starts no sooner after the last one ended than that
    one took, so a store written without pause spends at most about half a core on its memory. A memory made in less
    than INLINE_SECONDS is made again at once, by the call that finds the store changed: every call after a write then
    reads the same memory (two identical queries rank alike), at a cost no call notices."""

    def __init__(self, store: ParagraphStore):
        self._store = weakref.ref(store)  # (the memories' table is keyed weakly by the store)
        self._lock = threading.Lock()
        self._made: tuple[int, TransitionMemory] | None = None
        self._remaking = False
        self._rest_until = 0.0  # monotonic time before which no remake starts
        self._took = 0.0  # seconds the last make took

    def get(self) -> TransitionMemory:
        store = self._store()
        generation = store.index_generation
        with self._lock:
            if self._made is None or (self._made[0] != generation and self._took < INLINE_SECONDS):
                self._made = (generation, self._make(store))
            elif self._made[0] != generation and not self._remaking and time.monotonic() >= self._rest_until:
                self._remaking = True
                threading.Thread(target=self._remake, args=(generation,), name="transition-memory", daemon=True).start()
            return self._made[1]

    def _make(self, store: ParagraphStore) -> TransitionMemory:
        started = time.monotonic()
        memory = TransitionMemory.from_store(store)
        ended = time.monotonic()
        self._took = ended - started
        self._rest_until = ended + self._took
        return memory

    def _remake(self, generation: int) -> None:
        try:
            store = self._store()
            if store is not None:
                made = (generation, self._make(store))
                with self._lock:
                    self._made = made
        except Exception:  # (a store closed meanwhile): the memory made before goes on serving, and a later call retries
            log.warning("could not remake the transition memory", exc_info=True)
        finally:
            with self._lock:
                self._remaking = False


_MEMORIES: "weakref.WeakKeyDictionary[ParagraphStore, StoreMemory]" = weakref.WeakKeyDictionary()
_MEMORIES_LOCK = threading.Lock()


def for_store(store: ParagraphStore) -> StoreMemory:
    """The StoreMemory every pipeline of ``store`` shares."""
    with _MEMORIES_LOCK:
        if store not in _MEMORIES:
            _MEMORIES[store] = StoreMemory(store)
        return _MEMORIES[store]
