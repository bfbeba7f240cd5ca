"""Items: what a caller gives as a context or candidate paragraph, resolved into vectors and texts.

An item is a text (``str``), a stored paragraph id (``int``) or a raw vector (a sequence of
floats of the store's dimension). :meth:`ItemResolver.resolve_many` turns many lists of items
into :class:`ResolvedItems` at once: texts are embedded in one call (through a bounded in-memory
cache, keyed by the text), stored ids read once (their vectors from memory, their texts with one
SQLite query: all of them to predict, only those whose word rows are not cached to rerank), raw
vectors checked by the store's one vector check (``nextpara.store.unit_vectors``). A list of one
kind (ids only, vectors only: a batch job's rows) is checked as one array, without per-item work. A
list with a bad item becomes an error that names it (``context[2]: unknown paragraph id 99``)
without stopping the other lists.

A list longer than the model reads (``keep_last``) has its oldest items dropped for the model: they are checked as the
others are (an error names them), and excluded as below, but never embedded (so a store of brought vectors, which
refuses a kept text as VECTORS_REQUIRED, takes a dropped one: its text only excludes).

What a context excludes from predictions: the ids it gives, and every stored paragraph whose text
equals one of its texts (given, or stored for an id), and every stored paragraph whose vector is a raw vector's
(cosine at least SAME_VECTOR: a caller who brings vectors and sends back the ones it stored gets those paragraphs
excluded, as their ids would; one search of the raw vectors, SAME_VECTOR_K deep, so a vector stored more often than
that keeps its other copies).
Reranking searches nothing: it resolves with ``exclusions=False`` and ``exclude`` stays empty.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, Union

import numpy as np
from nextpara.errors import IndexBehindError, InvalidInputError, NextparaError, NotFoundError, Reason, not_utf8
from nextpara.store.store import ParagraphStore
from nextpara.store.unit_vectors import is_vector, unit_rows

Item = Union[str, int, Sequence[float], np.ndarray]
MAX_ITEMS = 10_000
SAME_VECTOR = 0.9999  # a raw vector's cosine to a stored paragraph's at which it stands for that paragraph
SAME_VECTOR_K = 16  # how many stored copies of a raw vector it excludes at most


@dataclass
class ResolvedItems:
    vectors: np.ndarray  # (n, D) unit vectors
    texts: list[str | None]  # per item: its text (given, or stored for an id), None for a raw vector (and for an id
    #                          whose text was not read: ``resolve_many(stored_texts=...)``)
    exclude: set[int] = field(default_factory=set)  # stored paragraphs these items stand for (empty: not looked up)
    dropped: int = 0  # oldest items dropped to keep the last ``keep_last``
    ids: list[int | None] | np.ndarray | None = None  # per item: its stored paragraph id (None for a text or vector),
    #                                                   an int64 array for a list of ids only; None: unknown


class EmbeddingLRU:
    """Vectors of texts through a bounded in-memory LRU keyed by a 16-byte hash of the text (memory per entry: the
    vector and the hash, however long the text); the model runs outside the lock. A writing tool's calls repeat
    all but one paragraph of the previous call: those cost no model time. ``observe(seconds)`` is called with the
    time of each model call."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray], dim: int, size: int = 4096):
        self.embed_fn, self.dim, self.size = embed, dim, size
        self.observe: Callable[[float], None] = lambda seconds: None
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def cached(self, texts: list[str]) -> dict[str, np.ndarray] | None:
        """The vectors of ``texts`` if every one is cached (no model call), else None."""
        keys = {t: self.key(t) for t in texts}
        with self._lock:
            if not all(k in self._cache for k in keys.values()):
                return None
            for k in keys.values():
                self._cache.move_to_end(k)
            return {t: self._cache[k] for t, k in keys.items()}

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        keys = {t: self.key(t) for t in texts}
        with self._lock:
            found = {t: self._cache[k] for t, k in keys.items() if k in self._cache}
            for t in found:
                self._cache.move_to_end(keys[t])
        missing = [t for t in keys if t not in found]
        if missing:
            t0 = time.perf_counter()
            vecs = self.embed_fn(missing)
            self.observe(time.perf_counter() - t0)
            found.update(zip(missing, vecs))
            with self._lock:
                self._cache.update((keys[t], v) for t, v in zip(missing, vecs))
                while len(self._cache) > self.size:
                    self._cache.popitem(last=False)
        return np.stack([found[t] for t in texts])


@dataclass
class _Parsed:
    """One list's items sorted by kind, before any store or model work."""

    n: int
    dropped: int
    texts: dict[int, str] = field(default_factory=dict)  # position -> text
    id_at: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # positions of the stored ids ...
    id_values: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ... and the ids
    vectors: np.ndarray | None = None  # (n_vec, D) for positions ``vector_at``
    vector_at: list[int] = field(default_factory=list)
    unknown: list[tuple[int, int]] = field(default_factory=list)  # (position, id) of ids beyond 64 bits
    older: "_Parsed | None" = None  # the dropped oldest items (positions from 0): checked and excluded, never embedded


def _id_array(values: list) -> np.ndarray | None:
    """Paragraph ids as int64, or None if one is beyond 64 bits (no stored id is)."""
    try:
        return np.asarray(values, np.int64)
    except OverflowError:
        return None


class ItemResolver:
    def __init__(self, store: ParagraphStore, embed: Callable[[list[str]], np.ndarray]):
        self.store, self.embed = store, embed

    def parse(self, items: Sequence[Item], where: str, keep_last: int | None) -> _Parsed:
        """Sort items by kind and check each (raw vectors fully); InvalidInputError naming ``where[i]``."""
        if type(items) not in (list, tuple) and (isinstance(items, (str, bytes))
                                                 or not isinstance(items, (Sequence, np.ndarray))):
            raise InvalidInputError(f"{where} must be a list of items, got {type(items).__name__}")
        if len(items) == 0:
            raise InvalidInputError(f"{where} is empty: give at least one paragraph", reason=Reason.FIELD_REQUIRED,
                                    field=where)
        if len(items) > MAX_ITEMS:
            raise InvalidInputError(f"{where} has {len(items)} items, at most {MAX_ITEMS}", reason=Reason.OUT_OF_RANGE,
                                    field=where, metadata={"max": MAX_ITEMS})
        dropped = max(0, len(items) - keep_last) if keep_last else 0
        if not (isinstance(items, np.ndarray) and items.ndim == 2 and items.dtype.kind == "f"):  # (a Parquet row's)
            items = list(items)
        # the oldest, which the model does not read, are the caller's items too: checked as the others are (first, so
        # that an error names the first bad item), and what they stand for is excluded from predictions
        older = self._sorted(items[:dropped], where, 0) if dropped else None
        kept = self._sorted(items[dropped:], where, dropped)
        kept.older = older
        return kept

    def _sorted(self, items, where: str, dropped: int) -> _Parsed:
        """``items`` (the ones after the ``dropped`` oldest) sorted by kind and checked; errors name ``where[i]``."""
        def vectors(rows, at: Sequence[int]) -> np.ndarray:  # rows at positions ``at``, checked: errors name them
            return unit_rows(rows, self.store.dim, where, self.store.embedder_name,
                             name=lambda j: f"{where}[{at[j] + dropped}]",
                             field=lambda j: f"{where}[{at[j] + dropped}].vector")

        if isinstance(items, np.ndarray) and items.ndim == 2 and items.dtype.kind == "f":  # a Parquet row's vectors
            return _Parsed(n=len(items), dropped=dropped, vector_at=list(range(len(items))),
                           vectors=vectors(items, range(len(items))))
        # a batch job's rows, of one kind: stored ids only, or vectors only (lists of numbers: one array conversion)
        if all(type(item) is int for item in items):
            values = _id_array(items)
            if values is not None:
                return _Parsed(n=len(items), dropped=dropped, id_at=np.arange(len(items)), id_values=values)
        if all(type(item) is list for item in items):
            return _Parsed(n=len(items), dropped=dropped, vector_at=list(range(len(items))),
                           vectors=vectors(items, range(len(items))))
        p = _Parsed(n=len(items), dropped=dropped)
        raw, id_at, id_values = [], [], []
        for i, item in enumerate(items):
            if isinstance(item, str):
                if not item.strip():
                    raise InvalidInputError(f"{where}[{i + dropped}]: empty text", reason=Reason.INVALID_TEXT,
                                            field=f"{where}[{i + dropped}].text")
                why = "contains a NUL character" if "\x00" in item else not_utf8(item)  # as a stored text may not
                if why is not None:
                    raise InvalidInputError(f"{where}[{i + dropped}]: the text {why}", reason=Reason.INVALID_TEXT,
                                            field=f"{where}[{i + dropped}].text")
                p.texts[i] = item
            elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                id_at.append(i)
                id_values.append(int(item))
            elif is_vector(item):
                p.vector_at.append(i)
                raw.append(item)
            else:
                raise InvalidInputError(f"{where}[{i + dropped}]: expected a text, a paragraph id or a vector, "
                                        f"got {type(item).__name__}")
        if id_at:
            wide = [not -2**63 <= v < 2**63 for v in id_values]  # beyond 64 bits: no stored paragraph's
            p.unknown = [(i, v) for i, v, w in zip(id_at, id_values, wide) if w]
            p.id_at = np.asarray([i for i, w in zip(id_at, wide) if not w], np.int64)
            p.id_values = np.asarray([v for v, w in zip(id_values, wide) if not w], np.int64)
        if raw:
            p.vectors = vectors(raw, p.vector_at)
        return p

    def _id_error(self, p: _Parsed, lost: np.ndarray, where: str) -> NextparaError | None:
        """The error of a list whose ids at ``lost`` (indices into ``p.id_values``) or ``p.unknown`` are not in the
        index, naming the first: INDEX_BEHIND on a replica whose writer wrote it since, else NOT_FOUND; None if none."""
        if not (len(lost) or p.unknown):
            return None
        i, bad = zip(*sorted([*zip(p.id_at[lost].tolist(), p.id_values[lost].tolist()), *p.unknown]))
        i, bad = i[0], list(bad)
        if (newer := self._written_since_load(bad)) is not None:  # named at its own place in the list
            i = int(p.id_at[np.flatnonzero(p.id_values == newer)[0]])
            return IndexBehindError(
                f"{where}[{i + p.dropped}]: paragraph id {newer} was written after this replica loaded its index "
                f"(generation {self.store.index_generation}): read from the writer, or have this replica catch up "
                "(Reload, or a read with the write's index_version as min_index_version and wait_for_index)",
                field=f"{where}[{i + p.dropped}].paragraph_id",
                metadata={"indexVersion": self.store.index_generation, "readOnly": "true"})
        return NotFoundError(f"{where}[{i + p.dropped}]: unknown paragraph id {bad[0]}"
                             + (f" ({len(bad) - 1} more unknown)" if len(bad) > 1 else ""),
                             field=f"{where}[{i + p.dropped}].paragraph_id",
                             metadata={"idKind": "paragraph_id", "missingCount": len(bad),
                                       "missingIds": json.dumps(bad[:20])})

    def _written_since_load(self, ids: list[int]) -> int | None:
        """On a read-only replica whose writer has written since it loaded: the first of ``ids`` that SQLite holds and
        its vectors do not (a paragraph GetParagraphs would return: INDEX_BEHIND for it, not unknown); else None."""
        if not self.store.behind_writer():
            return None
        held = set(self.store.sqlite_ids([i for i in ids if -2**63 <= i < 2**63]).tolist())
        return next((i for i in ids if i in held), None)

    def _same_vectors(self, parsed: list["_Parsed"]) -> dict[int, list[int]]:
        """id(list) -> the stored paragraphs whose vectors are one of its raw vectors (cosine >= SAME_VECTOR), for the
        lists that have raw vectors: one search of all of them."""
        lists = [p for p in parsed if len(p.vector_at)]
        if not lists or not self.store.count_paragraphs():
            return {}
        scores, ids = self.store.search(np.concatenate([p.vectors for p in lists]), SAME_VECTOR_K)
        out: dict[int, list[int]] = {}
        start = 0
        for p in lists:
            end = start + len(p.vector_at)
            hit = scores[start:end] >= SAME_VECTOR
            out[id(p)] = ids[start:end][hit].tolist()
            start = end
        return out

    def texts_of(self, items: Sequence[Item], where: str, keep_last: int | None = None) -> list[str]:
        """The distinct texts ``resolve_many`` would embed for a list of ``items`` (none if it would refuse it)."""
        if not any(isinstance(item, str) for item in items):  # (ids and vectors: no text, nothing to check)
            return []
        try:
            return list(dict.fromkeys(self.parse(items, where, keep_last).texts.values()))
        except InvalidInputError:
            return []

    def resolve_many(self, lists: Sequence[Sequence[Item]], where: str, keep_last: int | None = None,
                     exclusions: bool = True, stored_texts: bool | Callable[[np.ndarray], np.ndarray] = True,
                     embedded: Mapping[str, np.ndarray] | None = None) -> list[ResolvedItems | NextparaError]:
        """Resolve every list; a list with a bad item gets its error in its place. ``exclusions``: find the stored
        paragraphs each list stands for (its ids and every paragraph of the same text: what retrieval must not return;
        one lookup by text hash per item); reranking given candidates searches nothing and leaves ``exclude`` empty.
        ``stored_texts``: read the texts of the stored ids (one SQLite query; an id SQLite lacks is unknown). False or a
        function: an id's text is left None and its id is in ``ids`` (a reranked item's word row comes from the
        lexicon's cache by id), and it is checked against the vectors in memory, so a list of ids costs a few array
        operations; on a read-only replica whose writer has written since it loaded (its vectors are those of the
        index it loaded), also against SQLite (ids only, no text), so that a paragraph its writer deleted is unknown.
        A function: the texts of the ids it returns (of the sorted ids asked) are read, as with True
        (RerankPipeline.uncached_words: those not cached). ``embedded``: vectors of texts embedded already (text ->
        unit vector, from this resolver's embedder): only the other texts are embedded."""
        if exclusions and stored_texts is not True:
            raise ValueError("exclusions need every stored id's text (its copies are excluded too): stored_texts=True")
        parsed: list[_Parsed | NextparaError] = []
        for items in lists:
            try:
                parsed.append(self.parse(items, where, keep_last))
            except InvalidInputError as e:
                parsed.append(e)
        ok = [p for p in parsed if isinstance(p, _Parsed)]
        olders = [p.older for p in ok if p.older is not None]  # dropped items: their ids checked, nothing embedded
        asked = (np.unique(np.concatenate([p.id_values for p in ok + olders])) if ok
                 else np.zeros(0, np.int64))
        stored: dict[int, str] = {}
        read = (asked if stored_texts is True else stored_texts(asked)) if stored_texts and len(asked) else asked[:0]
        if len(read):  # one read; an id whose row SQLite lacks is missing
            stored = {pid: row.text for pid, row in self.store.find_paragraphs(read.tolist()).items()}
            asked = np.setdiff1d(asked, np.setdiff1d(read, np.fromiter(stored, np.int64, len(stored))))
        unread = (np.setdiff1d(asked, read) if stored_texts is not True and len(asked) > len(read)
                  and self.store.behind_writer() else asked[:0])  # (one SQLite read, only when some id was not read)
        if len(unread):  # a replica's vectors are those of the index it loaded: SQLite says what its writer deleted
            asked = np.setdiff1d(asked, np.setdiff1d(unread, self.store.sqlite_ids(unread)))
        known, id_vectors = (self.store.present_vectors(asked) if len(asked)
                             else (asked, np.zeros((0, self.store.dim), np.float32)))
        texts = list(dict.fromkeys(t for p in ok for t in p.texts.values()))
        given = {t: embedded[t] for t in texts if t in embedded} if embedded else {}
        try:
            missing = [t for t in texts if t not in given]
            text_vectors, embed_error = {**given, **dict(zip(missing, self.embed(missing)))}, None
        except InvalidInputError as e:  # a store of precomputed vectors: each list with a text gets this error
            if e.reason != Reason.VECTORS_REQUIRED:  # (an embedding service down stops the call, as before)
                raise
            text_vectors, embed_error = {}, e
        old_texts = [t for o in olders for t in o.texts.values()]
        same_text = (self.store.ids_by_text([*texts, *old_texts, *stored.values()])
                     if exclusions and (texts or old_texts or stored) else {})
        same_vector = self._same_vectors(ok + olders) if exclusions else {}
        every = np.concatenate([p.id_values for p in ok]) if ok else np.zeros(0, np.int64)  # one search for all
        rows = iter(np.split(np.minimum(np.searchsorted(known, every), max(len(known) - 1, 0)),
                             np.cumsum([len(p.id_values) for p in ok])[:-1]))
        def excluded(part: _Parsed, part_texts) -> set[int]:
            ids = set(part.id_values.tolist())
            for t in part_texts:
                ids.update(same_text.get(t, ()) if t is not None else ())
            return ids | set(same_vector.get(id(part), ()))

        out: list[ResolvedItems | NextparaError] = []
        for p in parsed:
            if not isinstance(p, _Parsed):
                out.append(p)
                continue
            row = next(rows)
            if embed_error is not None and p.texts:
                first = min(p.texts) + p.dropped
                out.append(type(embed_error)(f"{where}[{first}]: {embed_error}", reason=embed_error.reason,
                                             field=f"{where}[{first}].text", metadata=embed_error.metadata))
                continue
            o = p.older
            if o is not None and (error := self._id_error(o, np.flatnonzero(~np.isin(o.id_values, known)), where)):
                out.append(error)
                continue
            lost = np.flatnonzero(known[row] != p.id_values) if len(known) else np.arange(len(p.id_values))
            if error := self._id_error(p, lost, where):
                out.append(error)
                continue
            one_kind = p.n in (len(p.id_values), len(p.vector_at))  # ids only or vectors only: no array to fill
            vectors = None if one_kind else np.zeros((p.n, self.store.dim), np.float32)
            item_texts: list[str | None] = [None] * p.n
            item_ids: list[int | None] | np.ndarray = [None] * p.n
            for i, t in p.texts.items():
                vectors[i], item_texts[i] = text_vectors[t], t
            if len(p.id_values) == p.n:  # ids only
                vectors = id_vectors[row]
                item_ids = p.id_values
                item_texts = [stored.get(pid) for pid in item_ids.tolist()] if stored else [None] * p.n
            elif len(p.id_values):
                vectors[p.id_at] = id_vectors[row]
                for i, pid in zip(p.id_at.tolist(), p.id_values.tolist()):
                    item_ids[i], item_texts[i] = pid, stored.get(pid)
            if len(p.vector_at) == p.n:  # vectors only
                vectors = p.vectors
            elif p.vector_at:
                vectors[p.vector_at] = p.vectors
            exclude: set[int] = set()
            if exclusions:  # the ids given, and every stored copy of the texts and raw vectors
                exclude = excluded(p, item_texts)
                if o is not None:  # and those of the dropped oldest: never predicted either
                    exclude |= excluded(o, [*o.texts.values(), *(stored.get(pid) for pid in o.id_values.tolist())])
            out.append(ResolvedItems(vectors, item_texts, exclude, p.dropped, item_ids))
        return out
