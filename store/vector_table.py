"""VectorTable: every paragraph's id and vector in memory, and the FAISS index over them.

Loading takes the newest snapshot the manifest names and replays whatever SQLite holds beyond
it (ids are never reused, so the ids SQLite has and the snapshot lacks were added since, and the
reverse were removed). After that the table mirrors each committed write (:meth:`apply`) and is
saved as an atomic snapshot (snapshot.py) by :meth:`save` (a flat index as its vectors only: it is
built from them on load). Ids are kept sorted, so an id's row
is a binary search. The snapshot's vectors stay memory-mapped until a write replaces the array
(never written in place).

A flat index (or an IVF index not trained yet) is searched here, by an exact scan of the table's vectors (_exact:
one torch matrix product and a top-k, faster than FAISS's flat scan; what every query excludes, and what each query
excludes on its own, set to -inf in the scores). An approximate index (HNSW, IVF) is searched
by FAISS; restricted to some ids (a retrieval filter) with an id selector, or, when few ids are allowed (at most
EXACT_FILTERED_MAX) or the index answered a row short (an HNSW graph or the probed IVF lists can miss the allowed
ids of a narrow filter), by an exact scan of the allowed vectors: k results wherever k paragraphs pass.

Not thread-safe on its own: the store (store.py) holds its lock around every write and every read of the arrays.
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
from nextpara.errors import StoreMismatchError

from . import snapshot as snap
from .data_dir import DB_FILE, FORMAT_VERSION, DataDir
from .tables import ParagraphTables, unknown_ids
from .vector_index import IndexChoice, UnfilterableIndex, VectorIndex, choose_index

log = logging.getLogger(__name__)
# Allowed vectors scanned exactly rather than searched through the index: about 1 ms for 10,000 vectors of 384 dims
# (a flat scan costs about 0.1 ms per 1,000, bench/results/index_scale.md), where HNSW's graph misses narrow filters.
EXACT_FILTERED_MAX = 10_000
SCAN_SCORES = 1 << 24  # an exact scan scores queries in blocks of at most this many (query, vector) pairs: 64 MB
PAD_SCAN_ROWS = True  # scan_rows(): bench/speed/scan_rows.py turns it off to measure what it saves
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


def scan_rows(n: int) -> int:
    """How many query rows an exact scan multiplies for ``n`` queries, padding with zero rows. torch's CPU matrix
    product (MKL) of the stored vectors by a few query columns takes its time by their number, not in proportion to
    it: on PEPs' 43,588 x 384 on 2 cores (bench/results/scan_rows.md) 1 column took 6.4 ms, 3 took 4.2 and 4 took
    2.7; 12 took 9.5 and 15 took 13.9 where 16 took 7.3; 47 took 19.1 where 48 took 12.3. So up to 4 rows (a call's
    two or three searches, or one alone) are scanned as 4, and a count 10 to 15 past a multiple of 16 (a few calls
    batched) as the next multiple of 16; others as they are (a first trial padded every count to 8 or a multiple of
    16, and 5 or 24 rows took longer so). The scores of a query move by at most a unit in their last place with the
    padding, as they do with the other queries of its block."""
    if not PAD_SCAN_ROWS:
        return n
    if n <= 4:
        return 4
    return -(-n // 16) * 16 if n >= 10 and n % 16 >= 10 else n


class VectorTable:
    def __init__(self, dim: int, requested_index: str, index: VectorIndex, ids: np.ndarray, vectors: np.ndarray):
        self.dim, self.requested_index, self.index = dim, requested_index, index
        self.ids, self.vectors = ids, vectors  # (n,) ascending, (n, dim)
        self.snapshot_name: str | None = None
        self.snapshot_generation = -1

    @classmethod
    def load(cls, data_dir: DataDir, tables: ParagraphTables) -> "VectorTable":
        """The manifest's snapshot (an unreadable one is ignored) plus SQLite's changes since."""
        dim, manifest, live_ids = tables.dim, data_dir.manifest(), tables.live_ids()
        choice = (IndexChoice(**manifest["index"]) if manifest and "index" in manifest
                  else choose_index(tables.requested_index, len(live_ids)))
        table = cls(dim, tables.requested_index, VectorIndex(choice, dim), np.zeros(0, np.int64), np.zeros((0, dim), np.float32))
        if manifest and manifest.get("snapshot"):
            try:  # a crafted snapshot cannot run code (see read_snapshot); it is then ignored
                index_path, s_ids, s_vectors = snap.read_snapshot(data_dir.path, manifest["snapshot"])
                if s_vectors.dtype != np.float32 or s_vectors.shape[1:] != (dim,) or s_ids.dtype.kind != "i":
                    raise StoreMismatchError(f"arrays of {s_vectors.dtype} {s_vectors.shape} and {s_ids.dtype}")
                if index_path is not None:
                    s_index = VectorIndex.read(index_path, choice, dim)
                else:  # a flat index is saved as its vectors
                    s_index = VectorIndex(choice, dim)
                    if not s_index.is_flat:
                        raise StoreMismatchError(f"no {snap.INDEX_FILE} in the snapshot of a {choice.factory} index")
                    s_index.add(s_vectors, s_ids)
                table.index, table.ids, table.vectors = s_index, s_ids, s_vectors
                table.snapshot_name, table.snapshot_generation = manifest["snapshot"], int(manifest["generation"])
            except (OSError, ValueError, RuntimeError, EOFError, StoreMismatchError) as e:
                log.warning("snapshot %s is unreadable (%s): rebuilding the index from %s, which holds every vector",
                            manifest["snapshot"], e, DB_FILE)
        table._replay(live_ids, tables)
        return table

    def replay(self, tables: ParagraphTables) -> None:
        """Bring the table to what SQLite holds now (a read-only store catching up with its writer)."""
        self._replay(tables.live_ids(), tables)

    def _replay(self, live_ids: np.ndarray, tables: ParagraphTables) -> None:
        keep = np.isin(self.ids, live_ids)
        if not keep.all():
            self.ids, self.vectors = self.ids[keep], np.ascontiguousarray(self.vectors[keep])
        added = np.setdiff1d(live_ids, self.ids)
        self._append(added, tables.fetch_vectors(added))
        # whatever the index holds that is no longer live (removed since the snapshot, or HNSW tombstones)
        stale = np.setdiff1d(self.index.ids(), self.ids)
        self.index.remove(stale)
        if not self.index.is_trained and self.index.can_train_on(len(self.ids)):
            self.index = VectorIndex.build(choose_index(self.requested_index, len(self.ids)), self.dim, self.ids, self.vectors)
        elif self.index.is_trained:
            self.index.add(self.vectors[np.isin(self.ids, added)], added)
        if len(added) or len(stale):
            log.info("replayed %d added and %d removed paragraphs beyond snapshot %s", len(added), len(stale),
                     self.snapshot_name)

    def _append(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        self.ids = np.concatenate([self.ids, ids])
        self.vectors = np.concatenate([self.vectors, vectors])
        if len(self.ids) > 1 and (np.diff(self.ids) < 0).any():
            order = np.argsort(self.ids, kind="stable")
            self.ids, self.vectors = self.ids[order], self.vectors[order]

    def __len__(self) -> int:
        return len(self.ids)

    # ---- writes -----------------------------------------------------------------------
    def apply(self, removed: np.ndarray, added: np.ndarray, vectors: np.ndarray) -> None:
        """Mirror a committed write. An untrained (IVF) index answers by exact search until the next snapshot trains it."""
        if len(removed):
            keep = ~np.isin(self.ids, removed)
            self.ids, self.vectors = self.ids[keep], self.vectors[keep]
            self.index.remove(removed)
        self._append(added, vectors)
        if self.index.is_trained:
            self.index.add(vectors, added)

    def _outgrown(self, wanted: IndexChoice) -> bool:
        """True when the corpus size calls for another index: auto switching type, IVF untrained or nlist off by 2x."""
        current = self.index.choice
        if not self.index.is_trained and self.index.can_train_on(len(self.ids)):  # a factory string's IVF4096 too
            return True
        if self.requested_index == "auto":
            return wanted.factory != current.factory
        if "nlist" in wanted.params and len(self.ids):
            ratio = wanted.params["nlist"] / current.params.get("nlist", 1)
            return not self.index.is_trained or ratio > 2 or ratio < 0.5
        return False

    def refit(self) -> None:
        """Rebuild the index when the corpus outgrew it (see _outgrown) or tombstones pile up (HNSW)."""
        wanted = choose_index(self.requested_index, len(self.ids))
        if self._outgrown(wanted) or self.index.needs_rebuild():
            self.index = VectorIndex.build(wanted, self.dim, self.ids, self.vectors)

    def save(self, data_dir: DataDir, generation: int, counts: dict) -> str:
        """Write snapshot ``generation`` and point the manifest at it."""
        name = snap.write_snapshot(data_dir.path, generation, None if self.index.is_flat else self.index.write,
                                   self.ids, self.vectors)
        manifest = {
            "format_version": FORMAT_VERSION,
            **counts,
            "index": {"requested": self.index.choice.requested, "factory": self.index.choice.factory,
                      "params": self.index.choice.params},
            "generation": generation,
            "snapshot": name,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        data_dir.write_manifest(manifest)
        snap.remove_stale_snapshots(data_dir.path, keep=name)
        self.snapshot_name, self.snapshot_generation = name, generation
        return name

    # ---- reads ------------------------------------------------------------------------
    def rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows into the table, mask of ids that exist)."""
        return positions(self.ids, ids)

    def _present_rows(self, ids) -> np.ndarray:
        """Rows of those of ``ids`` the table holds."""
        rows, ok = self.rows(np.asarray(ids, dtype=np.int64))
        return rows[ok]

    def get(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of ``ids`` (n, dim); NotFoundError naming unknown ids."""
        rows, ok = self.rows(ids)
        if not ok.all():
            raise unknown_ids("paragraph id", ids[~ok].tolist())
        return self.vectors[rows]

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray, allow: np.ndarray | None = None,
               row_exclude: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query row by inner product, never an id of ``exclude`` (nor, for row i, of
        ``row_exclude[i]``), and with ``allow`` only ids among it; short rows padded with -1. A flat index (or an
        untrained IVF one) is scanned exactly here rather than through FAISS (see _exact), each row's own exclusions
        set to -inf in its scores; FAISS searches deeper by the longest row's exclusions and each row drops its own."""
        scan = self.index.is_flat or not self.index.is_trained or not self.index.filterable
        rows = None
        if allow is not None:
            rows = np.unique(self._present_rows(allow))
            rows = rows[~np.isin(self.ids[rows], exclude)]
        if scan or (rows is not None and len(rows) <= EXACT_FILTERED_MAX):
            blocked = self._present_rows(exclude) if rows is None else None
            return self._exact(queries, k, rows, blocked, self._row_blocked(row_exclude, rows))
        extra = max((len(e) for e in row_exclude), default=0) if row_exclude is not None else 0
        try:
            if rows is None:
                scores, ids = self.index.search(queries, k + extra, exclude)
            else:
                scores, ids = self.index.search(queries, k + extra, exclude, self.ids[rows])
                short = (ids[:, :min(k + extra, len(rows))] < 0).any(axis=1)
                if short.any():
                    scores[short], ids[short] = self._exact(queries[short], k + extra, rows)
        except UnfilterableIndex as e:  # exact from now on, as an untrained index is: said once
            log.warning("%s: searched exactly instead", e)
            self.index.filterable = False
            return self.search(queries, k, exclude, allow, row_exclude)
        if not extra:
            return scores, ids
        out_s, out_i = np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64)
        for r, e in enumerate(row_exclude):
            keep = np.flatnonzero((ids[r] >= 0) & ~np.isin(ids[r], e))[:k]
            out_s[r, :len(keep)], out_i[r, :len(keep)] = scores[r, keep], ids[r, keep]
        return out_s, out_i

    def _row_blocked(self, row_exclude: list[np.ndarray] | None,
                     rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """(query, column) pairs of the exact scan to block: each row's excluded ids among the scanned vectors (every
        row of the table, or ``rows``)."""
        if row_exclude is None or not any(len(e) for e in row_exclude):
            return None
        which = np.repeat(np.arange(len(row_exclude)), [len(e) for e in row_exclude])
        cols, hit = positions(self.ids if rows is None else self.ids[rows],
                              np.concatenate([np.asarray(e, np.int64) for e in row_exclude]))
        return which[hit], cols[hit]

    def _exact(self, queries: np.ndarray, k: int, rows: np.ndarray | None = None, blocked: np.ndarray | None = None,
               row_blocked: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k over the vectors at ``rows`` (ascending; None: every row but those of ``blocked``), never the
        (query, column) pairs of ``row_blocked`` (each query's own exclusions, _row_blocked), ties in id order; short
        rows padded with -1. A matrix product and torch's top-k, at most SCAN_SCORES scores at a time (queries
        in blocks, each padded to scan_rows' number of rows where that stays within SCAN_SCORES), the table as the left
        operand: as the right one, torch packs all of it before multiplying, and one
        call's two queries spent 3.2x as long in the search on PEPs' 43,588 x 384 (bench/speed/README.md, Serving
        latency); on 2 cores a query costs about a third of FAISS's flat search, and a batch of 32 about a fifth (FAISS
        keeps each query's top k in a heap as it scans; torch selects from the finished scores). torch's top-k picks
        freely among scores tied at the k-th place: a row with such a tie is settled here, lowest ids first, as a stable
        sort would."""
        import torch

        vectors = self.vectors if rows is None else self.vectors[rows]
        ids = self.ids if rows is None else self.ids[rows]
        kk = min(k, len(ids))
        out_s, out_i = np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64)
        if kk == 0:
            return out_s, out_i
        table = torch.from_numpy(vectors)  # a memory-mapped snapshot is read-only: torch only reads it
        block = max(1, SCAN_SCORES // len(ids))
        for start in range(0, len(queries), block):
            with torch.no_grad():
                part = queries[start:start + block]
                padded = scan_rows(len(part))
                q = np.zeros((padded if padded * len(ids) <= SCAN_SCORES else len(part), part.shape[1]), np.float32)
                q[:len(part)] = part
                scores = (table @ torch.from_numpy(q).T).T[:len(part)]  # the table on the left (see above)
                if blocked is not None and len(blocked):
                    scores[:, torch.from_numpy(np.asarray(blocked, dtype=np.int64))] = -torch.inf
                if row_blocked is not None:  # each query's own exclusions, (query, column) pairs
                    here = (row_blocked[0] >= start) & (row_blocked[0] < start + len(part))
                    scores[torch.from_numpy(row_blocked[0][here] - start), torch.from_numpy(row_blocked[1][here])] = -torch.inf
                top_s, top = torch.topk(scores, min(kk + 1, len(ids)), dim=1)  # one more: is the k-th place tied?
            top_s, top = top_s.numpy(), top.numpy()
            tied = np.flatnonzero(top_s[:, kk - 1] == top_s[:, kk]) if kk < len(ids) else np.zeros(0, np.int64)
            for r in tied:  # the k-th place is shared with a row left out: the lowest rows among the tied win
                row = scores[r].numpy()
                above = np.flatnonzero(row > top_s[r, kk - 1])
                top[r, :kk] = np.concatenate([above, np.flatnonzero(row == top_s[r, kk - 1])[:kk - len(above)]])
                top_s[r, :kk] = row[top[r, :kk]]
            top_s, top = top_s[:, :kk], top[:, :kk]
            order = np.lexsort((top, -top_s), axis=1)  # best first, ties in row (= id) order
            top_s, top = np.take_along_axis(top_s, order, 1), np.take_along_axis(top, order, 1)
            found = top_s > -np.inf  # fewer than k rows that are not blocked
            out_s[start:start + block, :kk] = np.where(found, top_s, -np.inf)
            out_i[start:start + block, :kk] = np.where(found, ids[top], -1)
        return out_s, out_i


def positions(sorted_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each of ``ids`` is in ``sorted_ids``, ascending; mask of those it holds): a binary search."""
    if not len(sorted_ids):
        return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return at, sorted_ids[at] == ids
