"""Request and result types of the client: plain dataclasses, never generated protobuf classes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

# A context or candidate paragraph: a text, a stored paragraph id, or a vector of floats.
ContextItem = Union[str, int, Sequence[float]]


@dataclass(frozen=True)
class Filter:
    """What predict_next may return: the server checks it (InvalidArgument naming ``filter.<field>``). The document
    conditions apply inside its search, so top_k is filled from the paragraphs that pass; the limits apply to the
    reranked list. Doc_ids that are not stored match nothing."""

    doc_ids: Sequence[str] = ()  # only paragraphs of these documents (empty: any)
    exclude_doc_ids: Sequence[str] = ()  # never paragraphs of these documents
    labels: Mapping[str, str] = field(default_factory=dict)  # only documents carrying every one, e.g. {"tenant": "acme"}
    min_score: float | None = None  # only predictions whose score is at least this
    max_per_document: int = 0  # at most this many predictions from one document, its best (0: no limit)
    distinct_texts: bool = False  # a text at most once, its best-ranked paragraph (corpora repeat paragraphs)


@dataclass(frozen=True)
class Prediction:
    paragraph_id: int
    doc_id: str
    position: int
    text: str
    score: float
    retrieval_score: float


@dataclass(frozen=True)
class PredictResult:
    predictions: list[Prediction]
    model_version: str
    index_version: int
    context_used: int
    context_dropped: int
    attention: list[list[float]] = field(default_factory=list)  # one list per head, over the context used


@dataclass(frozen=True)
class RerankResult:
    order: list[int]  # candidate indices, best first
    scores: list[float]
    model_version: str
    index_version: int
    request_id: str = ""
    context_dropped: int = 0


@dataclass(frozen=True)
class Paragraph:
    paragraph_id: int
    doc_id: str
    position: int
    text: str
    vector: list[float] | None = None


@dataclass(frozen=True)
class DocumentSummary:
    doc_id: str
    title: str
    paragraphs: int  # how many
    generation: int  # the write generation that last changed it (0: before the store recorded it)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DocumentPage:
    documents: list[DocumentSummary]  # in doc_id order
    next_page_token: str  # "" on the last page
    index_version: int


@dataclass(frozen=True)
class StoredDocument:
    document: DocumentSummary
    paragraphs: list[Paragraph]  # in reading order
    index_version: int


@dataclass
class Document:
    doc_id: str
    paragraphs: list[str]
    title: str = ""
    vectors: list[Sequence[float]] | None = None
    labels: dict[str, str] = field(default_factory=dict)  # e.g. {"tenant": "acme"}; re-adding a document replaces them


@dataclass(frozen=True)
class AddResult:
    documents_added: int
    documents_replaced: int
    documents_unchanged: int
    paragraphs_written: int
    index_version: int


@dataclass(frozen=True)
class DeleteResult:
    documents_deleted: int
    paragraphs_deleted: int
    index_version: int
    missing_doc_ids: list[str] = field(default_factory=list)  # with allow_missing: the ids that were not stored


@dataclass(frozen=True)
class ValidationFigures:
    """Figures on the store's validation split (L = 4), each with its 95% bootstrap interval (low, high)."""

    mrr_at_10: float
    mrr_at_10_ci: tuple[float, float]
    recall_at_1: float
    recall_at_1_ci: tuple[float, float]
    queries: int


@dataclass(frozen=True)
class ModelInfo:
    """The model that serves: ``source`` "trained" (the store's own), "general" (the packaged general model), "cosine"
    (plain cosine to the last paragraph, B1, which the guard of `nextpara train` or `nextpara build` found at least as
    good as the models on the store's validation split; ``reason`` is its line) or "none" (``reason`` says why); its
    and cosine's (B1) validation figures when a guard measured them."""

    source: str
    version: str
    started_from: str = ""
    reason: str = ""
    validation: ValidationFigures | None = None
    cosine_validation: ValidationFigures | None = None
    scorer: str = ""  # "full" or "fast" (`nextpara train --scorer`), "cosine", "custom"; empty from a server before it


@dataclass(frozen=True)
class Info:
    embedder: str
    dim: int
    documents: int
    paragraphs: int
    index_type: str
    index_factory: str
    model_version: str
    index_version: int
    max_context: int
    max_message_bytes: int
    server_version: str
    model: ModelInfo | None = None  # None from a server older than this field
    store_id: str = ""  # the store's identity (the same on its replicas and backups); "" from a server older than it


@dataclass(frozen=True)
class BackupResult:
    path: str  # the backup's directory on the server's machine
    index_version: int  # the write generation the copy holds
    snapshot_generation: int  # the index snapshot copied with it (-1: none)
    documents: int
    paragraphs: int
    size_bytes: int
    files: int
    seconds: float
