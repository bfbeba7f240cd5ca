"""Retrieval filters: which stored paragraphs a retrieval may return, and how many of its results it keeps.

A :class:`RetrievalFilter` restricts a retrieval to documents (an allow-list of doc_ids, a deny-list, and labels
that must all match, e.g. ``tenant=acme``) and limits its answer (``min_score`` on the final score,
``max_per_document``: each document's best N; ``distinct_texts``: each text once). The store resolves the documents part into paragraph ids
(:func:`resolve`, from SQLite, where the labels are) that the search itself is restricted to: FAISS through an id
selector, the word index by rowid (store.py), so top_k is filled from the paragraphs that pass, not trimmed from
an unfiltered list. The limits apply once the final scores are known (:meth:`RetrievalFilter.select`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from nextpara.errors import InvalidInputError, Reason

from .corpus import MAX_DOC_ID_CHARS
from .labels import check_labels, documents_with, pairs
from .tables import ParagraphTables, select_in

MAX_FILTER_DOC_IDS = 10_000  # in each of the allow-list and the deny-list
FIELD = "filter"  # the filter's path in a request, which refusals name


def doc_id_list(ids: Sequence[str], where: str) -> tuple[str, ...]:
    """``ids`` checked (a list of at most MAX_FILTER_DOC_IDS non-empty doc_ids; InvalidInputError naming ``where``),
    sorted, each once."""
    if isinstance(ids, str):
        raise InvalidInputError(f"{where} must be a list of doc_ids, not one string", reason=Reason.INVALID_ARGUMENT,
                                field=where)
    if len(ids) > MAX_FILTER_DOC_IDS:
        raise InvalidInputError(f"{where} has {len(ids)} doc_ids, at most {MAX_FILTER_DOC_IDS}",
                                reason=Reason.OUT_OF_RANGE, field=where, metadata={"min": 0, "max": MAX_FILTER_DOC_IDS})
    for i, doc_id in enumerate(ids):
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise InvalidInputError(f"{where}[{i}]: a doc_id must be a non-empty string, got {doc_id!r:.40}",
                                    reason=Reason.FIELD_REQUIRED, field=f"{where}[{i}]")
        if len(doc_id) > MAX_DOC_ID_CHARS:
            raise InvalidInputError(f"{where}[{i}]: doc_id is {len(doc_id)} characters, at most {MAX_DOC_ID_CHARS}",
                                    reason=Reason.OUT_OF_RANGE, field=f"{where}[{i}]",
                                    metadata={"min": 1, "max": MAX_DOC_ID_CHARS})
    return tuple(sorted(set(ids)))


@dataclass(frozen=True)
class RetrievalFilter:
    """Made from what a caller gave, checked at once (InvalidInputError naming ``filter.<field>``); then held in an
    order-free, hashable form (equal filters compare equal, so requests with one filter can be batched)."""

    doc_ids: Sequence[str] = ()  # only paragraphs of these documents (empty: any document)
    exclude_doc_ids: Sequence[str] = ()  # never paragraphs of these documents
    labels: Mapping[str, str] | tuple = field(default_factory=dict)  # only documents carrying every one of these
    min_score: float | None = None  # only results whose final (reranker) score is at least this
    max_per_document: int = 0  # at most this many results from one document, its best (0: no limit)
    distinct_texts: bool = False  # a text once, its best-ranked paragraph (corpora repeat paragraphs: boilerplate)

    def __post_init__(self):
        for name in ("doc_ids", "exclude_doc_ids"):
            object.__setattr__(self, name, doc_id_list(getattr(self, name), f"{FIELD}.{name}"))
        labels = self.labels if isinstance(self.labels, Mapping) else dict(self.labels)
        object.__setattr__(self, "labels", pairs(check_labels(labels, f"{FIELD}.labels", f"{FIELD}.labels")))
        score = self.min_score
        if score is not None:
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise InvalidInputError(f"{FIELD}.min_score must be a finite number, got {score!r}",
                                        reason=Reason.OUT_OF_RANGE, field=f"{FIELD}.min_score")
            object.__setattr__(self, "min_score", float(score))
        n = self.max_per_document
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise InvalidInputError(f"{FIELD}.max_per_document must be a whole number (0: no limit), got {n!r}",
                                    reason=Reason.OUT_OF_RANGE, field=f"{FIELD}.max_per_document", metadata={"min": 0})
        object.__setattr__(self, "max_per_document", int(n))
        if not isinstance(self.distinct_texts, (bool, np.bool_)):
            raise InvalidInputError(f"{FIELD}.distinct_texts must be true or false, got {self.distinct_texts!r}",
                                    reason=Reason.INVALID_ARGUMENT, field=f"{FIELD}.distinct_texts")
        object.__setattr__(self, "distinct_texts", bool(self.distinct_texts))

    @property
    def restricts_documents(self) -> bool:
        """True when only some documents may be returned (an allow-list or labels)."""
        return bool(self.doc_ids or self.labels)

    @property
    def limits(self) -> bool:
        """True when results are dropped after scoring (min_score, max_per_document, distinct_texts)."""
        return self.min_score is not None or self.max_per_document > 0 or self.distinct_texts

    @property
    def drops_results(self) -> bool:
        """True when results are dropped from inside the ranking, so a retrieval must keep more than top_k."""
        return self.max_per_document > 0 or self.distinct_texts

    def select(self, doc_ids: Sequence[str], scores: Sequence[float], k: int,
               texts: Sequence[str] | None = None) -> list[int]:
        """Indices of the results to keep, best first, from results ranked best first: at most ``k``, none scoring
        below min_score, at most max_per_document per document and with distinct_texts each text (``texts``) once (the
        best, as the ranking has them first)."""
        kept: list[int] = []
        per_doc: dict[str, int] = {}
        seen: set[str] = set()
        for i, (doc_id, score) in enumerate(zip(doc_ids, scores)):
            if len(kept) == k or (self.min_score is not None and score < self.min_score):
                break  # ranked best first: every later one scores lower
            if self.distinct_texts:
                if texts[i] in seen:
                    continue
                seen.add(texts[i])
            if self.max_per_document:
                if per_doc.get(doc_id, 0) == self.max_per_document:
                    continue
                per_doc[doc_id] = per_doc.get(doc_id, 0) + 1
            kept.append(i)
        return kept


@dataclass
class Allowed:
    """A filter resolved into paragraph ids: ``allow`` (ascending; None: every paragraph) minus ``deny``."""

    allow: np.ndarray | None
    deny: np.ndarray  # ascending; already taken out of ``allow`` when there is one


def resolve(tables: ParagraphTables, f: RetrievalFilter, exclude_doc_ids: Sequence[str] = ()) -> Allowed:
    """The paragraph ids ``f`` allows and denies (``exclude_doc_ids``: more documents to deny). Unknown doc_ids
    match nothing. The caller holds the store's lock (the connection is shared with writes)."""
    deny = tables.ids_of_documents([*f.exclude_doc_ids, *exclude_doc_ids])
    if not f.restricts_documents:
        return Allowed(None, deny)
    denied = set(f.exclude_doc_ids) | set(exclude_doc_ids)
    if f.labels:
        query, params = documents_with(dict(f.labels))
        if not tables.has_labels:
            allow = np.zeros(0, np.int64)  # a store from before labels: no document carries one
        elif f.doc_ids:
            rows = select_in(tables.db, f"SELECT p.id FROM paragraphs p WHERE p.doc_id IN ({query}) AND p.doc_id",
                             [d for d in f.doc_ids if d not in denied], params)
            allow = np.fromiter((r[0] for r in rows), np.int64)
        else:
            rows = tables.db.execute(f"SELECT id FROM paragraphs WHERE doc_id IN ({query})", params)
            allow = np.fromiter((r[0] for r in rows), np.int64)
    else:
        allow = tables.ids_of_documents([d for d in f.doc_ids if d not in denied])
    return Allowed(np.setdiff1d(allow, deny), deny)
