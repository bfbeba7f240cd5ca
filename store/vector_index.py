"""The FAISS index over paragraph vectors: inner product on unit vectors (= cosine).

Index types, through FAISS's index factory, all wrapped in ``IDMap2`` so FAISS returns
our paragraph ids:

=========  ==============================  ============================================
``flat``   ``IDMap2,Flat``                 exact
``hnsw``   ``IDMap2,HNSW32,Flat``          graph; efConstruction 80, efSearch 512
``ivf``    ``IVF{nlist},Flat``              nlist = 2*sqrt(N) (at most N/39), nprobe 64;
                                           trained on a sample of 64 points per list
``auto``   flat below 50,000 vectors, hnsw from there; re-decided at every snapshot (the default)
=========  ==============================  ============================================

The parameters come from bench/speed/index_scale.py (bench/results/index_scale.md): on 2 cores a flat
scan costs about 0.1 ms per 1,000 vectors of 384 dims (10 ms at 100K, 121 ms at 1M), so exact
search stops being cheap around 50K. HNSW needed efSearch 512 to keep recall@100 at 0.95 at 1M
vectors (0.90 with 256, 0.82 with 128), at about 3 ms; IVF was slower than HNSW at equal recall
(nprobe 128 of 2,000 lists: 0.91 at 9 ms), so auto chooses HNSW.

A flat index is searched by VectorTable itself (one torch matrix product over the table's vectors and a top-k,
faster than FAISS's flat scan here: bench/results/profile_request_after.md); the FAISS flat index is still kept in
step with the table (its ids, adds and removes), though no search reads it.

Any other string is passed to ``faiss.index_factory`` (``IDMap2,`` is prefixed unless it is
an IVF index, which keeps ids itself: IDMap2 over IVF cannot remove ids).
Flat and IVF indexes remove vectors; the others (HNSW...) cannot, so removed ids become
tombstones that every search filters out with an ``IDSelector``; the index is rebuilt
without them once they exceed 20%.
An index with too few vectors to train (an ivf one, or a factory string's IVF4096 on a few thousand) answers by exact
search until it can train, and so does one FAISS cannot search with an id filter (IndexPQ), marked so at its first
search. A string the factory cannot build is refused before a store is created (check_index).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import faiss
import numpy as np
from nextpara.errors import InvalidInputError

log = logging.getLogger(__name__)


class UnfilterableIndex(RuntimeError):
    """FAISS refused a search with an id filter: the index's type has no support for one."""

AUTO_HNSW_FROM = 50_000
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 80, 512
IVF_NPROBE = 64
IVF_LISTS_PER_SQRT_N = 2
IVF_MIN_POINTS_PER_LIST = 39  # FAISS warns below this many training points per list
IVF_TRAIN_POINTS_PER_LIST = 64  # k-means sample; FAISS itself would take 256 per list
TOMBSTONE_REBUILD_FRACTION = 0.2


@dataclass
class IndexChoice:
    """What was asked for (``requested``) and the factory string in use."""

    requested: str
    factory: str
    params: dict = field(default_factory=dict)


def check_index(requested: str, dim: int | None) -> None:
    """Refuse an index type FAISS cannot build, before a store is created for it (InvalidInputError): a store created
    with one could never be opened. (One FAISS builds but cannot search with id filters, IndexPQ's, is searched
    exactly, as VectorTable.search finds.)"""
    choice = choose_index(requested, 0)
    if dim:
        VectorIndex(choice, dim)


def choose_index(requested: str, n: int) -> IndexChoice:
    """Resolve a requested index type to a factory string for a corpus of ``n`` vectors."""
    kind = requested.lower()
    if kind == "auto":
        return IndexChoice("auto", *_factory("hnsw" if n >= AUTO_HNSW_FROM else "flat", n))
    if kind in ("flat", "hnsw", "ivf"):
        return IndexChoice(kind, *_factory(kind, n))
    if not requested.strip():
        raise InvalidInputError("index type must not be empty: use flat, hnsw, ivf, auto or a FAISS factory string")
    factory = requested if requested.startswith("IDMap") or requested.startswith("IVF") else f"IDMap2,{requested}"
    return IndexChoice(requested, factory, {})


def _factory(kind: str, n: int) -> tuple[str, dict]:
    if kind == "flat":
        return "IDMap2,Flat", {}
    if kind == "hnsw":
        return f"IDMap2,HNSW{HNSW_M},Flat", {"efConstruction": HNSW_EF_CONSTRUCTION, "efSearch": HNSW_EF_SEARCH}
    nlist = max(1, min(int(IVF_LISTS_PER_SQRT_N * math.sqrt(max(n, 1))), n // IVF_MIN_POINTS_PER_LIST))
    return f"IVF{nlist},Flat", {"nlist": nlist, "nprobe": min(IVF_NPROBE, nlist)}


class VectorIndex:
    """A FAISS index plus the tombstones of removed ids it cannot drop itself."""

    def __init__(self, choice: IndexChoice, dim: int, index: faiss.Index | None = None):
        self.choice = choice
        self.dim = dim
        try:
            self.index = index if index is not None else faiss.index_factory(dim, choice.factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as e:
            raise InvalidInputError(f"FAISS cannot build index {choice.factory!r}: {str(e).splitlines()[0]}") from e
        outer = faiss.downcast_index(self.index)
        self._inner = faiss.downcast_index(outer.index) if isinstance(outer, faiss.IndexIDMap) else outer
        if isinstance(self._inner, faiss.IndexHNSW) and index is None:
            self._inner.hnsw.efConstruction = choice.params.get("efConstruction", HNSW_EF_CONSTRUCTION)
        self.filterable = True  # False once FAISS refused a search with an id filter (IndexPQ): searched exactly then
        self.failed_training_on = 0  # vectors a training that FAISS refused had: tried again only with more
        if isinstance(self._inner, faiss.IndexIVF):  # a factory string's own lists (IVF4096,Flat): trained only once
            choice.params.setdefault("nlist", int(self._inner.nlist))  # there are points enough for them, as ivf's
        self.tombstones: set[int] = set()

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def is_trained(self) -> bool:
        return bool(self.index.is_trained)

    def can_train_on(self, n: int) -> bool:
        """Whether ``n`` vectors may train it: enough for an IVF index's lists, and more than a failed try had."""
        if n <= self.failed_training_on:
            return False
        return n >= self.choice.params.get("nlist", 1) * IVF_MIN_POINTS_PER_LIST if "nlist" in self.choice.params else n > 0

    def train(self, vectors: np.ndarray) -> None:
        self.index.train(vectors)

    @classmethod
    def build(cls, choice: IndexChoice, dim: int, ids: np.ndarray, vectors: np.ndarray) -> "VectorIndex":
        """A new index of ``choice`` holding ``vectors`` under ``ids``; an IVF index is trained on a
        seeded sample of at most IVF_TRAIN_POINTS_PER_LIST points per list (left untrained, answering by
        exact search, while there are too few)."""
        index = cls(choice, dim)
        if not index.is_trained:
            if not index.can_train_on(len(ids)):
                return index
            cap = IVF_TRAIN_POINTS_PER_LIST * choice.params["nlist"] if "nlist" in choice.params else len(ids)
            sample = np.sort(np.random.default_rng(0).permutation(len(ids))[:cap]) if cap < len(ids) else None
            # the sample, then every vector (IVF2,PQ16: its codes want 256 points); else exact search until there are more
            refused = index._train_refused(vectors if sample is None else vectors[sample])
            if refused and sample is not None:
                refused = index._train_refused(vectors)
            if refused:
                log.warning("FAISS cannot train index %r on %d vectors (%s): searched exactly until it can",
                            choice.factory, len(ids), refused)
                untrained = cls(choice, dim)
                untrained.failed_training_on = len(ids)
                return untrained
        index.add(vectors, ids)
        return index

    def _train_refused(self, vectors: np.ndarray) -> str:
        """Train on ``vectors``: "" once trained, else FAISS's reason (it wants more vectors than there are)."""
        try:
            self.train(np.ascontiguousarray(vectors, dtype=np.float32))
            return ""
        except RuntimeError as e:
            return str(e).strip().splitlines()[0] or "refused"

    def ids(self) -> np.ndarray:
        """Every id the index holds (tombstoned ones included)."""
        if isinstance(self._inner, faiss.IndexIVF):
            lists = self._inner.invlists
            parts = [faiss.rev_swig_ptr(lists.get_ids(i), lists.list_size(i)).copy()
                     for i in range(lists.nlist) if lists.list_size(i)]
            return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        return faiss.vector_to_array(faiss.downcast_index(self.index).id_map).astype(np.int64)

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        if len(ids):
            self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))

    def remove(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        if isinstance(self._inner, (faiss.IndexFlat, faiss.IndexIVF)):
            self.index.remove_ids(np.asarray(ids, dtype=np.int64))
        else:
            self.tombstones.update(int(i) for i in ids)

    def needs_rebuild(self) -> bool:
        return len(self.tombstones) > TOMBSTONE_REBUILD_FRACTION * max(self.ntotal, 1)

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None,
               allow: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query, excluding ``exclude`` and tombstones, and with ``allow`` only ids among it:
        FAISS checks each id it meets against an id selector, so the k results all pass. -1 ids pad short rows (an
        approximate index may find fewer allowed ids than there are: vector_table.py falls back to exact search)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        blocked = np.asarray(sorted(self.tombstones), dtype=np.int64)
        if exclude is not None and len(exclude):
            blocked = np.union1d(blocked, np.asarray(exclude, dtype=np.int64))
        if allow is not None:
            selector = faiss.IDSelectorBatch(np.setdiff1d(np.asarray(allow, dtype=np.int64), blocked))
        else:
            selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(blocked)) if len(blocked) else None
        if isinstance(self._inner, faiss.IndexHNSW):
            params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(self.choice.params.get("efSearch", HNSW_EF_SEARCH), k))
        elif isinstance(self._inner, faiss.IndexIVF):
            params = faiss.SearchParametersIVF(sel=selector, nprobe=self.choice.params.get("nprobe", IVF_NPROBE))
        else:
            params = faiss.SearchParameters(sel=selector)
        k_eff = max(1, min(k, self.ntotal))
        try:
            scores, ids = self.index.search(queries, k_eff, params=params)
        except RuntimeError as e:  # IndexPQ: "invalid search params"; the caller searches exactly from now on
            raise UnfilterableIndex(f"FAISS cannot search index {self.choice.factory!r} with id filters "
                                    f"({str(e).strip().splitlines()[-1]})") from e
        if k_eff < k:  # pad so every caller sees (m, k)
            scores = np.pad(scores, ((0, 0), (0, k - k_eff)), constant_values=-np.inf)
            ids = np.pad(ids, ((0, 0), (0, k - k_eff)), constant_values=-1)
        return scores, ids

    @property
    def is_flat(self) -> bool:
        """An exact index that holds nothing but the vectors and their ids: rebuilt from them, never saved."""
        return isinstance(self._inner, faiss.IndexFlat) and isinstance(faiss.downcast_index(self.index), faiss.IndexIDMap)

    def write(self, path) -> None:
        """Write the index file (FAISS writes it from its own memory: no copy of it in Python). FAISS reports a
        failed write (a full disk, say) as a RuntimeError: it is raised as the OSError it is, without an errno."""
        try:
            faiss.write_index(self.index, str(path))
        except RuntimeError as e:
            raise OSError(f"FAISS could not write {path}: {str(e).strip().splitlines()[-1]}") from e

    @classmethod
    def read(cls, path, choice: IndexChoice, dim: int) -> "VectorIndex":
        """Read an index file written by :meth:`write` (FAISS reads it straight from the file)."""
        index = faiss.read_index(str(path))
        if index.d != dim:
            raise InvalidInputError(f"index file has dimension {index.d}, the store expects {dim}")
        return cls(choice, dim, index=index)
