"""Protobuf messages <-> the Predictor's inputs and results. No logic beyond conversion and
the field paths that error messages name."""

from __future__ import annotations

from nextpara.attention_core.predictor import PredictionResult, RerankResult
from nextpara.errors import InvalidInputError
from nextpara.store.corpus import Document
from nextpara.v1 import nextpara_pb2 as pb


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
            raise InvalidInputError(f"{field}[{i}]: none of text, paragraph_id or vector is set")
    return items


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


def documents(request: pb.AddDocumentsRequest, message_index: int) -> tuple[list[Document], list]:
    """Documents of one AddDocuments message and their vectors (None where not given)."""
    docs, vectors = [], []
    for i, d in enumerate(request.documents):
        where = f"message {message_index}, documents[{i}]"
        if d.vectors and len(d.vectors) != len(d.paragraphs):
            raise InvalidInputError(f"{where} ({d.doc_id!r}): {len(d.paragraphs)} paragraphs but {len(d.vectors)} vectors")
        vecs = [list(v.values) for v in d.vectors] or None
        docs.append(Document(doc_id=d.doc_id, title=d.title, paragraphs=list(d.paragraphs), vectors=vecs,
                             source=where))
        vectors.append(vecs)
    return docs, vectors
