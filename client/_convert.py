"""Python values <-> protobuf messages, shared by the sync and asyncio clients."""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping, Sequence

from nextpara.errors import InvalidInputError
from nextpara.v1 import nextpara_pb2 as pb

from .errors import ServiceError, from_status
from .types import (
    AddResult,
    BackupResult,
    ContextItem,
    DeleteResult,
    Document,
    DocumentPage,
    DocumentSummary,
    Filter,
    Info,
    ModelInfo,
    Paragraph,
    Prediction,
    PredictResult,
    RerankResult,
    StoredDocument,
    ValidationFigures,
)


def paragraph_message(item: ContextItem, where: str) -> pb.ContextParagraph:
    if isinstance(item, str):
        return pb.ContextParagraph(text=item)
    if isinstance(item, bool):
        raise TypeError(f"{where}: expected a text, a paragraph id or a vector, got bool")
    if isinstance(item, int) or type(item).__name__ in ("int64", "int32"):
        return pb.ContextParagraph(paragraph_id=int(item))
    try:
        values = [float(x) for x in (item.tolist() if hasattr(item, "tolist") else item)]
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: expected a text, a paragraph id or a vector, got {type(item).__name__}") from e
    return pb.ContextParagraph(vector=pb.Vector(values=values))


def paragraphs(items: Sequence[ContextItem], field: str) -> list[pb.ContextParagraph]:
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{field} must be a list of paragraphs, not a single string")
    return [paragraph_message(item, f"{field}[{i}]") for i, item in enumerate(items)]


def filter_message(f: Filter | Mapping | None) -> pb.RetrievalFilter | None:
    """A Filter (or a mapping of its fields) as the message; None for None."""
    if f is None:
        return None
    if isinstance(f, Mapping):
        f = Filter(**f)
    for name in ("doc_ids", "exclude_doc_ids"):
        if isinstance(getattr(f, name), str):
            raise TypeError(f"filter.{name} must be a list of doc_ids, not a single string")
    return pb.RetrievalFilter(doc_ids=list(f.doc_ids), exclude_doc_ids=list(f.exclude_doc_ids), labels=dict(f.labels),
                              min_score=f.min_score, max_per_document=f.max_per_document)


def fresh(min_index_version: int, wait_for_index: bool) -> dict:
    """A read's read-your-writes fields (min_index_version, wait_for_index)."""
    return {"min_index_version": int(min_index_version), "wait_for_index": bool(wait_for_index)}


def predict_request(context, top_k, include_attention, exclude_doc_ids, omit_text, filter=None,
                    min_index_version: int = 0, wait_for_index: bool = False) -> pb.PredictNextRequest:
    return pb.PredictNextRequest(context=paragraphs(context, "context"), top_k=top_k, include_attention=include_attention,
                                 exclude_doc_ids=list(exclude_doc_ids), omit_text=omit_text, filter=filter_message(filter),
                                 **fresh(min_index_version, wait_for_index))


def predict_result(r: pb.PredictNextResponse) -> PredictResult:
    return PredictResult(
        predictions=[Prediction(p.paragraph_id, p.doc_id, p.position, p.text, p.score, p.retrieval_score)
                     for p in r.predictions],
        model_version=r.model_version, index_version=r.index_version, context_used=r.context_used,
        context_dropped=r.context_dropped, attention=[list(h.weights) for h in r.attention])


def rerank_request(context, candidates, top_k: int = 0, request_id: str = "", message=pb.RerankRequest,
                   min_index_version: int = 0, wait_for_index: bool = False):
    """A RerankRequest (or, as ``message``, a RerankStreamRequest: the same fields)."""
    return message(request_id=request_id, context=paragraphs(context, "context"),
                   candidates=paragraphs(candidates, "candidates"), top_k=top_k, **fresh(min_index_version, wait_for_index))


def rerank_result(r: pb.RerankResponse) -> RerankResult:
    return RerankResult(list(r.order), list(r.scores), r.model_version, r.index_version, r.request_id, r.context_dropped)


def rerank_item(item, index: int, min_index_version: int = 0, wait_for_index: bool = False) -> pb.RerankStreamRequest:
    """An item of rerank_many: a (context, candidates) pair or a mapping with context/candidates[/request_id/top_k]."""
    if isinstance(item, Mapping):
        return rerank_request(item["context"], item["candidates"], item.get("top_k", 0), str(item.get("request_id", index)),
                              pb.RerankStreamRequest, min_index_version, wait_for_index)
    context, candidates = item
    return rerank_request(context, candidates, 0, str(index), pb.RerankStreamRequest, min_index_version, wait_for_index)


def rerank_stream_result(r: pb.RerankStreamResponse, return_errors: bool) -> RerankResult | ServiceError:
    """A RerankStream answer: its result, or its error (raised, or with ``return_errors`` returned)."""
    if r.HasField("error"):
        error = from_status(r.error, r.request_id)
        if return_errors:
            return error
        raise error
    return rerank_result(r.result)


def document_message(doc: Document | Mapping) -> pb.Document:
    if isinstance(doc, Mapping):
        doc = Document(doc_id=doc["doc_id"], paragraphs=list(doc["paragraphs"]), title=doc.get("title", ""),
                       vectors=doc.get("vectors"), labels=doc.get("labels") or {})
    vectors = [pb.Vector(values=[float(x) for x in v]) for v in (doc.vectors or [])]
    return pb.Document(doc_id=doc.doc_id, title=doc.title, paragraphs=list(doc.paragraphs), vectors=vectors,
                       labels=dict(doc.labels or {}))


def chunk_documents(docs: Iterable[Document | Mapping], max_bytes: int) -> Iterator[pb.AddDocumentsRequest]:
    """AddDocuments messages of at most ``max_bytes`` each, made as ``docs`` is read; a single larger document is
    refused here (InvalidInputError naming it, a ValueError)."""
    batch: list[pb.Document] = []
    size = 0
    for i, doc in enumerate(docs):
        message = document_message(doc)
        n = message.ByteSize() + 8
        if n > max_bytes:
            raise InvalidInputError(f"document {i} ({message.doc_id!r}) is {n} bytes encoded, over the {max_bytes}-byte "
                                    "message limit: split it, or raise the limit on both server and client")
        if batch and size + n > max_bytes:
            yield pb.AddDocumentsRequest(documents=batch)
            batch, size = [], 0
        batch.append(message)
        size += n
    if batch:
        yield pb.AddDocumentsRequest(documents=batch)


def add_result(r: pb.AddDocumentsResponse) -> AddResult:
    return AddResult(r.documents_added, r.documents_replaced, r.documents_unchanged, r.paragraphs_written, r.index_version)


def delete_result(r: pb.DeleteDocumentsResponse) -> DeleteResult:
    return DeleteResult(r.documents_deleted, r.paragraphs_deleted, r.index_version, list(r.missing_doc_ids))


def paragraphs_result(r: pb.GetParagraphsResponse) -> list[Paragraph]:
    return [Paragraph(p.paragraph_id, p.doc_id, p.position, p.text, list(p.vector.values) if p.HasField("vector") else None)
            for p in r.paragraphs]


def _figures(f: pb.ValidationFigures) -> ValidationFigures:
    return ValidationFigures(f.mrr_at_10, (f.mrr_at_10_low, f.mrr_at_10_high), f.recall_at_1,
                             (f.recall_at_1_low, f.recall_at_1_high), f.queries)


def summary_result(d: pb.DocumentSummary) -> DocumentSummary:
    return DocumentSummary(d.doc_id, d.title, d.paragraphs, d.generation, dict(d.labels))


def page_result(r: pb.ListDocumentsResponse) -> DocumentPage:
    return DocumentPage([summary_result(d) for d in r.documents], r.next_page_token, r.index_version)


def document_result(r: pb.GetDocumentResponse) -> StoredDocument:
    return StoredDocument(summary_result(r.document), paragraphs_result(r), r.index_version)


def info_result(r: pb.GetInfoResponse) -> Info:
    m = r.model
    model = ModelInfo(m.source, m.version, m.started_from, m.reason,
                      _figures(m.validation) if m.HasField("validation") else None,
                      _figures(m.cosine_validation) if m.HasField("cosine_validation") else None,
                      m.scorer) if r.HasField("model") else None
    return Info(r.embedder, r.dim, r.documents, r.paragraphs, r.index_type, r.index_factory, r.model_version,
                r.index_version, r.max_context, r.max_message_bytes, r.server_version, model)


def backup_result(r: pb.BackupResponse) -> BackupResult:
    return BackupResult(r.path, r.index_version, r.snapshot_generation, r.documents, r.paragraphs, r.size_bytes, r.files,
                        r.seconds)
