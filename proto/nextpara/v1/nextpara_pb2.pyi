from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Vector(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class ContextParagraph(_message.Message):
    __slots__ = ("text", "paragraph_id", "vector")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    text: str
    paragraph_id: int
    vector: Vector
    def __init__(self, text: _Optional[str] = ..., paragraph_id: _Optional[int] = ..., vector: _Optional[_Union[Vector, _Mapping]] = ...) -> None: ...

class PredictNextRequest(_message.Message):
    __slots__ = ("context", "top_k", "omit_text", "include_attention", "exclude_doc_ids", "filter", "min_index_version", "wait_for_index")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    OMIT_TEXT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    context: _containers.RepeatedCompositeFieldContainer[ContextParagraph]
    top_k: int
    omit_text: bool
    include_attention: bool
    exclude_doc_ids: _containers.RepeatedScalarFieldContainer[str]
    filter: RetrievalFilter
    min_index_version: int
    wait_for_index: bool
    def __init__(self, context: _Optional[_Iterable[_Union[ContextParagraph, _Mapping]]] = ..., top_k: _Optional[int] = ..., omit_text: _Optional[bool] = ..., include_attention: _Optional[bool] = ..., exclude_doc_ids: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[RetrievalFilter, _Mapping]] = ..., min_index_version: _Optional[int] = ..., wait_for_index: _Optional[bool] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ("paragraph_id", "doc_id", "position", "text", "score", "retrieval_score")
    PARAGRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_SCORE_FIELD_NUMBER: _ClassVar[int]
    paragraph_id: int
    doc_id: str
    position: int
    text: str
    score: float
    retrieval_score: float
    def __init__(self, paragraph_id: _Optional[int] = ..., doc_id: _Optional[str] = ..., position: _Optional[int] = ..., text: _Optional[str] = ..., score: _Optional[float] = ..., retrieval_score: _Optional[float] = ...) -> None: ...

class AttentionHead(_message.Message):
    __slots__ = ("weights",)
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    weights: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, weights: _Optional[_Iterable[float]] = ...) -> None: ...

class PredictNextResponse(_message.Message):
    __slots__ = ("predictions", "model_version", "index_version", "context_used", "context_dropped", "attention")
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_USED_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_DROPPED_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    predictions: _containers.RepeatedCompositeFieldContainer[Prediction]
    model_version: str
    index_version: int
    context_used: int
    context_dropped: int
    attention: _containers.RepeatedCompositeFieldContainer[AttentionHead]
    def __init__(self, predictions: _Optional[_Iterable[_Union[Prediction, _Mapping]]] = ..., model_version: _Optional[str] = ..., index_version: _Optional[int] = ..., context_used: _Optional[int] = ..., context_dropped: _Optional[int] = ..., attention: _Optional[_Iterable[_Union[AttentionHead, _Mapping]]] = ...) -> None: ...

class RetrievalFilter(_message.Message):
    __slots__ = ("doc_ids", "exclude_doc_ids", "labels", "min_score", "max_per_document", "distinct_texts")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_TEXTS_FIELD_NUMBER: _ClassVar[int]
    doc_ids: _containers.RepeatedScalarFieldContainer[str]
    exclude_doc_ids: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    min_score: float
    max_per_document: int
    distinct_texts: bool
    def __init__(self, doc_ids: _Optional[_Iterable[str]] = ..., exclude_doc_ids: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., min_score: _Optional[float] = ..., max_per_document: _Optional[int] = ..., distinct_texts: _Optional[bool] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("request_id", "context", "candidates", "top_k", "min_index_version", "wait_for_index")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    context: _containers.RepeatedCompositeFieldContainer[ContextParagraph]
    candidates: _containers.RepeatedCompositeFieldContainer[ContextParagraph]
    top_k: int
    min_index_version: int
    wait_for_index: bool
    def __init__(self, request_id: _Optional[str] = ..., context: _Optional[_Iterable[_Union[ContextParagraph, _Mapping]]] = ..., candidates: _Optional[_Iterable[_Union[ContextParagraph, _Mapping]]] = ..., top_k: _Optional[int] = ..., min_index_version: _Optional[int] = ..., wait_for_index: _Optional[bool] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("request_id", "order", "scores", "model_version", "index_version", "context_dropped")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_DROPPED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    order: _containers.RepeatedScalarFieldContainer[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    model_version: str
    index_version: int
    context_dropped: int
    def __init__(self, request_id: _Optional[str] = ..., order: _Optional[_Iterable[int]] = ..., scores: _Optional[_Iterable[float]] = ..., model_version: _Optional[str] = ..., index_version: _Optional[int] = ..., context_dropped: _Optional[int] = ...) -> None: ...

class RerankStreamRequest(_message.Message):
    __slots__ = ("request_id", "context", "candidates", "top_k", "min_index_version", "wait_for_index")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    context: _containers.RepeatedCompositeFieldContainer[ContextParagraph]
    candidates: _containers.RepeatedCompositeFieldContainer[ContextParagraph]
    top_k: int
    min_index_version: int
    wait_for_index: bool
    def __init__(self, request_id: _Optional[str] = ..., context: _Optional[_Iterable[_Union[ContextParagraph, _Mapping]]] = ..., candidates: _Optional[_Iterable[_Union[ContextParagraph, _Mapping]]] = ..., top_k: _Optional[int] = ..., min_index_version: _Optional[int] = ..., wait_for_index: _Optional[bool] = ...) -> None: ...

class RerankStreamResponse(_message.Message):
    __slots__ = ("request_id", "result", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    result: RerankResponse
    error: _status_pb2.Status
    def __init__(self, request_id: _Optional[str] = ..., result: _Optional[_Union[RerankResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("doc_id", "title", "paragraphs", "vectors", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPHS_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    title: str
    paragraphs: _containers.RepeatedScalarFieldContainer[str]
    vectors: _containers.RepeatedCompositeFieldContainer[Vector]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, doc_id: _Optional[str] = ..., title: _Optional[str] = ..., paragraphs: _Optional[_Iterable[str]] = ..., vectors: _Optional[_Iterable[_Union[Vector, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AddDocumentsRequest(_message.Message):
    __slots__ = ("documents",)
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    def __init__(self, documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ...) -> None: ...

class AddDocumentsResponse(_message.Message):
    __slots__ = ("documents_added", "documents_replaced", "documents_unchanged", "paragraphs_written", "index_version")
    DOCUMENTS_ADDED_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_REPLACED_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPHS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    documents_added: int
    documents_replaced: int
    documents_unchanged: int
    paragraphs_written: int
    index_version: int
    def __init__(self, documents_added: _Optional[int] = ..., documents_replaced: _Optional[int] = ..., documents_unchanged: _Optional[int] = ..., paragraphs_written: _Optional[int] = ..., index_version: _Optional[int] = ...) -> None: ...

class DeleteDocumentsRequest(_message.Message):
    __slots__ = ("doc_ids", "allow_missing")
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    doc_ids: _containers.RepeatedScalarFieldContainer[str]
    allow_missing: bool
    def __init__(self, doc_ids: _Optional[_Iterable[str]] = ..., allow_missing: _Optional[bool] = ...) -> None: ...

class DeleteDocumentsResponse(_message.Message):
    __slots__ = ("documents_deleted", "paragraphs_deleted", "index_version", "missing_doc_ids")
    DOCUMENTS_DELETED_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPHS_DELETED_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    MISSING_DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    documents_deleted: int
    paragraphs_deleted: int
    index_version: int
    missing_doc_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, documents_deleted: _Optional[int] = ..., paragraphs_deleted: _Optional[int] = ..., index_version: _Optional[int] = ..., missing_doc_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetParagraphsRequest(_message.Message):
    __slots__ = ("paragraph_ids", "include_vectors", "min_index_version", "wait_for_index")
    PARAGRAPH_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VECTORS_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    paragraph_ids: _containers.RepeatedScalarFieldContainer[int]
    include_vectors: bool
    min_index_version: int
    wait_for_index: bool
    def __init__(self, paragraph_ids: _Optional[_Iterable[int]] = ..., include_vectors: _Optional[bool] = ..., min_index_version: _Optional[int] = ..., wait_for_index: _Optional[bool] = ...) -> None: ...

class Paragraph(_message.Message):
    __slots__ = ("paragraph_id", "doc_id", "position", "text", "vector")
    PARAGRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    paragraph_id: int
    doc_id: str
    position: int
    text: str
    vector: Vector
    def __init__(self, paragraph_id: _Optional[int] = ..., doc_id: _Optional[str] = ..., position: _Optional[int] = ..., text: _Optional[str] = ..., vector: _Optional[_Union[Vector, _Mapping]] = ...) -> None: ...

class GetParagraphsResponse(_message.Message):
    __slots__ = ("paragraphs",)
    PARAGRAPHS_FIELD_NUMBER: _ClassVar[int]
    paragraphs: _containers.RepeatedCompositeFieldContainer[Paragraph]
    def __init__(self, paragraphs: _Optional[_Iterable[_Union[Paragraph, _Mapping]]] = ...) -> None: ...

class ListDocumentsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "labels", "min_index_version", "wait_for_index")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    labels: _containers.ScalarMap[str, str]
    min_index_version: int
    wait_for_index: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., min_index_version: _Optional[int] = ..., wait_for_index: _Optional[bool] = ...) -> None: ...

class DocumentSummary(_message.Message):
    __slots__ = ("doc_id", "title", "paragraphs", "generation", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPHS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    title: str
    paragraphs: int
    generation: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, doc_id: _Optional[str] = ..., title: _Optional[str] = ..., paragraphs: _Optional[int] = ..., generation: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_page_token", "index_version")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[DocumentSummary]
    next_page_token: str
    index_version: int
    def __init__(self, documents: _Optional[_Iterable[_Union[DocumentSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., index_version: _Optional[int] = ...) -> None: ...

class GetDocumentRequest(_message.Message):
    __slots__ = ("doc_id", "min_index_version", "wait_for_index")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    min_index_version: int
    wait_for_index: bool
    def __init__(self, doc_id: _Optional[str] = ..., min_index_version: _Optional[int] = ..., wait_for_index: _Optional[bool] = ...) -> None: ...

class GetDocumentResponse(_message.Message):
    __slots__ = ("document", "paragraphs", "index_version")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPHS_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    document: DocumentSummary
    paragraphs: _containers.RepeatedCompositeFieldContainer[Paragraph]
    index_version: int
    def __init__(self, document: _Optional[_Union[DocumentSummary, _Mapping]] = ..., paragraphs: _Optional[_Iterable[_Union[Paragraph, _Mapping]]] = ..., index_version: _Optional[int] = ...) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ("min_index_version", "wait_for_index")
    MIN_INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    min_index_version: int
    wait_for_index: bool
    def __init__(self, min_index_version: _Optional[int] = ..., wait_for_index: _Optional[bool] = ...) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("embedder", "dim", "documents", "paragraphs", "index_type", "index_factory", "model_version", "index_version", "max_context", "max_message_bytes", "server_version", "model", "store_id")
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPHS_FIELD_NUMBER: _ClassVar[int]
    INDEX_TYPE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FACTORY_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
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
    model: ModelInfo
    store_id: str
    def __init__(self, embedder: _Optional[str] = ..., dim: _Optional[int] = ..., documents: _Optional[int] = ..., paragraphs: _Optional[int] = ..., index_type: _Optional[str] = ..., index_factory: _Optional[str] = ..., model_version: _Optional[str] = ..., index_version: _Optional[int] = ..., max_context: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., server_version: _Optional[str] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., store_id: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("source", "version", "started_from", "reason", "validation", "cosine_validation", "scorer")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STARTED_FROM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    COSINE_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    SCORER_FIELD_NUMBER: _ClassVar[int]
    source: str
    version: str
    started_from: str
    reason: str
    validation: ValidationFigures
    cosine_validation: ValidationFigures
    scorer: str
    def __init__(self, source: _Optional[str] = ..., version: _Optional[str] = ..., started_from: _Optional[str] = ..., reason: _Optional[str] = ..., validation: _Optional[_Union[ValidationFigures, _Mapping]] = ..., cosine_validation: _Optional[_Union[ValidationFigures, _Mapping]] = ..., scorer: _Optional[str] = ...) -> None: ...

class ValidationFigures(_message.Message):
    __slots__ = ("mrr_at_10", "mrr_at_10_low", "mrr_at_10_high", "recall_at_1", "recall_at_1_low", "recall_at_1_high", "queries")
    MRR_AT_10_FIELD_NUMBER: _ClassVar[int]
    MRR_AT_10_LOW_FIELD_NUMBER: _ClassVar[int]
    MRR_AT_10_HIGH_FIELD_NUMBER: _ClassVar[int]
    RECALL_AT_1_FIELD_NUMBER: _ClassVar[int]
    RECALL_AT_1_LOW_FIELD_NUMBER: _ClassVar[int]
    RECALL_AT_1_HIGH_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    mrr_at_10: float
    mrr_at_10_low: float
    mrr_at_10_high: float
    recall_at_1: float
    recall_at_1_low: float
    recall_at_1_high: float
    queries: int
    def __init__(self, mrr_at_10: _Optional[float] = ..., mrr_at_10_low: _Optional[float] = ..., mrr_at_10_high: _Optional[float] = ..., recall_at_1: _Optional[float] = ..., recall_at_1_low: _Optional[float] = ..., recall_at_1_high: _Optional[float] = ..., queries: _Optional[int] = ...) -> None: ...

class ReloadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("model_version", "index_version")
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    model_version: str
    index_version: int
    def __init__(self, model_version: _Optional[str] = ..., index_version: _Optional[int] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ("destination",)
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    destination: str
    def __init__(self, destination: _Optional[str] = ...) -> None: ...

class BackupResponse(_message.Message):
    __slots__ = ("path", "index_version", "snapshot_generation", "documents", "paragraphs", "size_bytes", "files", "seconds")
    PATH_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    PARAGRAPHS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    path: str
    index_version: int
    snapshot_generation: int
    documents: int
    paragraphs: int
    size_bytes: int
    files: int
    seconds: float
    def __init__(self, path: _Optional[str] = ..., index_version: _Optional[int] = ..., snapshot_generation: _Optional[int] = ..., documents: _Optional[int] = ..., paragraphs: _Optional[int] = ..., size_bytes: _Optional[int] = ..., files: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...
