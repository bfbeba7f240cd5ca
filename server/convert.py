"""Protobuf messages <-> what the runtime takes and returns. Every message the server sends is built here.

No logic beyond conversion and the field paths that error messages name.
"""

from __future__ import annotations

import base64
import hashlib
import json

from google.rpc import status_pb2
from nextpara import __version__
from nextpara.attention_core.predictor import PredictionResult, RerankResult
from nextpara.errors import InvalidInputError, Reason
from nextpara.store.backup import BackupReport
from nextpara.store.corpus import Document
from nextpara.store.filters import RetrievalFilter
from nextpara.store.labels import check_labels
from nextpara.store.store import DocumentRow, WriteResult
from nextpara.v1 import nextpara_pb2 as pb

from .runtime import Deleted, ServiceInfo

DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 100, 1000


def context_items(paragraphs, field: str) -> list:
    """ContextParagraph messages -> texts, ids and vectors (lists of floats)."""
    items = []
    for i, p in enumerate(paragraphs):
        kind = p.WhichOneof("kind")
        if kind == "text":
            items.append(p.text)
        elif kind == "paragraph_id":
            items.append(int(p.paragraph_id))
        elif kind == "vector":
            items.append(list(p.vector.values))
        else:
            raise InvalidInputError(f"{field}[{i}]: none of text, paragraph_id or vector is set",
                                    reason=Reason.FIELD_REQUIRED, field=f"{field}[{i}]")
    return items


def retrieval_filter(request: pb.PredictNextRequest) -> RetrievalFilter | None:
    """PredictNextRequest.filter, checked (InvalidInputError naming ``filter.<field>``); None when unset."""
    if not request.HasField("filter"):
        return None
    f = request.filter
    return RetrievalFilter(doc_ids=list(f.doc_ids), exclude_doc_ids=list(f.exclude_doc_ids), labels=dict(f.labels),
                           min_score=f.min_score if f.HasField("min_score") else None,
                           max_per_document=f.max_per_document, distinct_texts=f.distinct_texts)


def prediction_response(result: PredictionResult, omit_text: bool) -> pb.PredictNextResponse:
    return pb.PredictNextResponse(
        predictions=[pb.Prediction(paragraph_id=p.paragraph_id, doc_id=p.doc_id, position=p.position,
                                   text="" if omit_text else p.text, score=p.score, retrieval_score=p.retrieval_score)
                     for p in result.predictions],
        model_version=result.model_version, index_version=result.index_version, context_used=result.context_used,
        context_dropped=result.context_dropped,
        attention=[pb.AttentionHead(weights=w) for w in (result.attention or [])])


def rerank_response(request_id: str, result: RerankResult, k: int) -> pb.RerankResponse:
    n = k or len(result.order)
    return pb.RerankResponse(request_id=request_id, order=result.order[:n], scores=result.scores[:n],
                             model_version=result.model_version, index_version=result.index_version,
                             context_dropped=result.context_dropped)


def stream_result(result: pb.RerankResponse) -> pb.RerankStreamResponse:
    return pb.RerankStreamResponse(request_id=result.request_id, result=result)


def stream_error(request_id: str, status: status_pb2.Status) -> pb.RerankStreamResponse:
    """A refused RerankStream request's answer: its google.rpc.Status."""
    return pb.RerankStreamResponse(request_id=request_id, error=status)


def documents(request: pb.AddDocumentsRequest, message_index: int) -> list[Document]:
    """The documents of one AddDocuments message, with their vectors where given."""
    docs = []
    for i, d in enumerate(request.documents):
        where = f"message {message_index}, documents[{i}]"
        if d.vectors and len(d.vectors) != len(d.paragraphs):
            raise InvalidInputError(f"{where} ({d.doc_id!r:.80}): {len(d.paragraphs)} paragraphs but {len(d.vectors)} "
                                    "vectors", reason=Reason.INVALID_VECTOR, field=f"documents[{i}].vectors")
        docs.append(Document(doc_id=d.doc_id, title=d.title, paragraphs=list(d.paragraphs),
                             vectors=[list(v.values) for v in d.vectors] or None, source=where,
                             request_path=f"documents[{i}]", labels=dict(d.labels)))
    return docs


async def document_messages(requests):
    """AddDocuments messages as they arrive -> the documents of each (see ``documents``)."""
    index = 0
    async for request in requests:
        yield documents(request, index)
        index += 1


def add_documents_response(r: WriteResult) -> pb.AddDocumentsResponse:
    return pb.AddDocumentsResponse(documents_added=r.added, documents_replaced=r.replaced,
                                   documents_unchanged=r.unchanged, paragraphs_written=r.paragraphs,
                                   index_version=r.generation)


def delete_documents_response(d: Deleted) -> pb.DeleteDocumentsResponse:
    return pb.DeleteDocumentsResponse(documents_deleted=d.documents, paragraphs_deleted=d.paragraphs,
                                      index_version=d.generation, missing_doc_ids=d.missing)


def paragraphs_response(paragraphs: list, vectors) -> pb.GetParagraphsResponse:
    """Stored paragraphs (and their vectors, an (n, dim) array, or None) -> the response, in the order given."""
    return pb.GetParagraphsResponse(paragraphs=[
        pb.Paragraph(paragraph_id=p.id, doc_id=p.doc_id, position=p.position, text=p.text,
                     vector=pb.Vector(values=vectors[i]) if vectors is not None else None)
        for i, p in enumerate(paragraphs)])


def page_size(requested: int) -> int:
    """ListDocumentsRequest.page_size: 0 means the default, more than the maximum means the maximum."""
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def list_labels(request: pb.ListDocumentsRequest) -> dict[str, str]:
    """ListDocumentsRequest.labels, checked (InvalidInputError naming ``labels["key"]``)."""
    return check_labels(dict(request.labels), "labels", "labels")


def _fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(labels.items())).encode()).hexdigest()[:16]


def page_token(last_doc_id: str, labels: dict[str, str] | None = None) -> str:
    """The token of the page after ``last_doc_id``: opaque to callers; a listing with labels also carries their
    fingerprint, so that the token is not taken for another listing's."""
    fields = {"v": 1, "after": last_doc_id, **({"labels": _fingerprint(labels)} if labels else {})}
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()


def after_doc_id(token: str, labels: dict[str, str] | None = None) -> str:
    """The doc_id a page token continues after ("" for no token); INVALID_PAGE_TOKEN for one this server did not make,
    or one made for a listing with other ``labels``."""
    if not token:
        return ""
    try:
        fields = json.loads(base64.urlsafe_b64decode(token.encode()))
        made_here = fields.get("v") == 1 and isinstance(fields.get("after"), str)
    except (ValueError, AttributeError):  # not base64, not UTF-8, not JSON, not an object
        made_here = False
    if not made_here:
        raise InvalidInputError(f"page_token {token[:40]!r} was not made by ListDocuments: pass next_page_token as it "
                                "came", reason=Reason.INVALID_PAGE_TOKEN, field="page_token")
    if fields.get("labels") != (_fingerprint(labels) if labels else None):
        raise InvalidInputError("page_token was made for a listing with other labels: pass the labels of the first "
                                "page with each next_page_token", reason=Reason.INVALID_PAGE_TOKEN, field="page_token")
    return fields["after"]


def summary(row: DocumentRow) -> pb.DocumentSummary:
    return pb.DocumentSummary(doc_id=row.doc_id, title=row.title, paragraphs=row.paragraphs, generation=row.generation,
                              labels=row.labels)


def list_documents_response(rows: list[DocumentRow], more: bool, generation: int,
                            labels: dict[str, str] | None = None) -> pb.ListDocumentsResponse:
    return pb.ListDocumentsResponse(documents=[summary(r) for r in rows], index_version=generation,
                                    next_page_token=page_token(rows[-1].doc_id, labels) if more else "")


def document_response(row: DocumentRow, paragraphs: list, generation: int) -> pb.GetDocumentResponse:
    return pb.GetDocumentResponse(document=summary(row), index_version=generation, paragraphs=[
        pb.Paragraph(paragraph_id=p.id, doc_id=p.doc_id, position=p.position, text=p.text) for p in paragraphs])


def info_response(info: ServiceInfo) -> pb.GetInfoResponse:
    store = info.store
    return pb.GetInfoResponse(
        embedder=store["embedder"], dim=store["dim"], documents=store["documents"], paragraphs=store["paragraphs"],
        index_type=store["index"]["requested"], index_factory=store["index"]["factory"],
        model_version=info.model_version, index_version=info.index_version, max_context=info.max_context,
        max_message_bytes=info.max_message_bytes, server_version=__version__, model=model_info(info.model),
        store_id=store["store_id"])


def validation_figures(f: dict | None) -> pb.ValidationFigures | None:
    if not f:
        return None
    return pb.ValidationFigures(mrr_at_10=f["mrr@10"], mrr_at_10_low=f["mrr@10_ci"][0], mrr_at_10_high=f["mrr@10_ci"][1],
                                recall_at_1=f["recall@1"], recall_at_1_low=f["recall@1_ci"][0],
                                recall_at_1_high=f["recall@1_ci"][1], queries=f.get("queries", 0))


def model_info(m: dict) -> pb.ModelInfo:
    """served.describe_served()'s dict as the message."""
    v = m.get("validation", {})
    return pb.ModelInfo(source=m["source"], version=m.get("model_version", ""), started_from=m.get("started_from", ""),
                        reason=m.get("reason", ""), validation=validation_figures(v.get("model")),
                        cosine_validation=validation_figures(v.get("B1")), scorer=m.get("scorer", ""))


def reload_response(versions: tuple[str, int]) -> pb.ReloadResponse:
    model_version, index_version = versions
    return pb.ReloadResponse(model_version=model_version, index_version=index_version)


def backup_response(r: BackupReport) -> pb.BackupResponse:
    return pb.BackupResponse(path=r.path, index_version=r.generation, snapshot_generation=r.snapshot_generation,
                             documents=r.documents, paragraphs=r.paragraphs, size_bytes=r.size_bytes, files=r.files,
                             seconds=r.seconds)
