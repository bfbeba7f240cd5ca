"""Python values <-> protobuf messages, shared by the sync and asyncio clients."""

from __future__ import annotations

import math
import numbers
import operator
from collections import deque
from typing import AbstractSet, Iterable, Iterator, Mapping, Sequence

from google.rpc import error_details_pb2, status_pb2
from nextpara.errors import InvalidInputError, Reason, misspelt_field, not_utf8
from nextpara.v1 import nextpara_pb2 as pb

from ._channel import check_size, too_large
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

FLOAT32_INF = 3.4028235677973366e38  # a Vector holds float32s: from here (halfway between float32's largest and 2**128)
#                                     a value is sent as inf

UINT32, INT64 = (0, 2**32 - 1), (-2**63, 2**63 - 1)  # the ranges of the messages' integer fields
MAX_TOP_K = 1000  # the most predictions a PredictNext may ask for (the proto's PredictNextRequest.top_k)


def whole(value, field: str, bounds: tuple[int, int] = UINT32) -> int:
    """``value`` for an integer field of a message (None: unset, 0; a float only if whole, as int() took it): a
    TypeError if it is no integer, an InvalidInputError naming the field if it is outside ``bounds`` (protobuf itself
    says only "Value out of range")."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{field} must be an integer, got bool")
    try:
        number = operator.index(value)
    except TypeError:
        if not (hasattr(value, "is_integer") and value.is_integer()):  # 3.0 and numpy's floats: as before
            raise TypeError(f"{field} must be an integer, got {value!r:.40}") from None
        number = int(value)
    if not bounds[0] <= number <= bounds[1]:
        raise InvalidInputError(f"{field} must be {bounds[0]} to {bounds[1]}, got {number}", reason=Reason.OUT_OF_RANGE,
                                field=field)
    return number


def finite(value, field: str) -> float | None:
    """``value`` for an optional float field (None: unset): a TypeError if it is no number (protobuf took True as 1.0,
    and said of a string only "must be real number"), an InvalidInputError naming the field if it is NaN or infinite
    (as the server would)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a number, got {value!r:.40}")
    if not math.isfinite(value):
        raise InvalidInputError(f"{field} must be a finite number, got {value!r}", reason=Reason.OUT_OF_RANGE,
                                field=field)
    return float(value)


def flag(value, field: str) -> bool:
    """``value`` for a bool field: True or False (numpy's too), else a TypeError (protobuf would take 1 and "yes")."""
    if not (isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"))):
        raise TypeError(f"{field} must be True or False, got {value!r:.40}")
    return bool(value)


def text(value, field: str) -> str:
    """``value`` for a string field (None: unset, ""): a TypeError if it is not one, an InvalidInputError if it has no
    UTF-8 form."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a string, got {type(value).__name__}")
    if (why := not_utf8(value)) is not None:
        raise InvalidInputError(f"{field} {why}", reason=Reason.INVALID_TEXT, field=field)
    return value


def listed(values, field: str, what: str) -> list:
    """``values`` as a list; a single string, which list() would split into its characters, is a TypeError."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{field} must be a list of {what}, not a single string")
    return list(values)


def labels_map(labels: Mapping | None, field: str) -> dict[str, str]:
    """Labels for a message: a mapping of strings to strings (or its (key, value) pairs, as dict() takes them)."""
    if labels is None:
        return {}
    try:
        pairs = dict(labels)
    except (TypeError, ValueError):
        raise TypeError(f"{field} must be a mapping of strings to strings, got {type(labels).__name__}") from None
    return {text(k, f"{field} key"): text(v, f"{field}[{k!r}]") for k, v in pairs.items()}


def paragraph_message(item: ContextItem, where: str) -> pb.ContextParagraph:
    if isinstance(item, str):
        return pb.ContextParagraph(text=text(item, where))
    if isinstance(item, bool):
        raise TypeError(f"{where}: expected a text, a paragraph id or a vector, got bool")
    if isinstance(item, int) or (hasattr(item, "__index__") and not hasattr(item, "__len__")):  # numpy's integers too
        return pb.ContextParagraph(paragraph_id=whole(item, where, INT64))
    if isinstance(item, Iterable) and not isinstance(item, (Mapping, AbstractSet)):  # a vector (a numpy row too)
        return pb.ContextParagraph(vector=vector_message(item, where, f"{where}.vector"))
    raise TypeError(f"{where}: expected a text, a paragraph id or a vector, got {type(item).__name__}")


def vector_message(values, where: str, field: str | None = None) -> pb.Vector:
    """A sequence of numbers (a numpy row too) as a Vector; a TypeError naming ``where`` if it is not one (a text or
    a bool among them too, which protobuf would take as 1.0), an InvalidInputError if a number is too large for a float
    or for the message's float32 (which would send it as inf)."""
    if isinstance(values, (str, bytes, Mapping, AbstractSet)):  # (a set has no order)
        raise TypeError(f"{where}: a vector must be a sequence of numbers, got {type(values).__name__}")
    numeric_array = getattr(values, "ndim", None) == 1 and getattr(getattr(values, "dtype", None), "kind", "") in "fiu"
    try:
        numbers = values.tolist() if hasattr(values, "tolist") else list(values)
    except TypeError:
        raise TypeError(f"{where}: a vector must be a sequence of numbers, got {type(values).__name__}") from None
    if not numeric_array and bool in set(map(type, numbers)):
        raise TypeError(f"{where}: a vector must be a sequence of numbers, and it holds a bool")
    try:
        message = pb.Vector(values=numbers)  # (protobuf refuses what is not a real number)
    except TypeError as e:
        raise TypeError(f"{where}: a vector must be a sequence of numbers ({e})") from None
    except OverflowError:  # an integer beyond any float (10**400): the item's error, not the caller's whole job's
        raise InvalidInputError(f"{where}: a value is too large for a float", reason=Reason.INVALID_VECTOR,
                                field=field or where) from None
    peak = max(max(numbers), -min(numbers)) if numbers else 0.0
    if FLOAT32_INF <= peak < math.inf:  # finite here, infinite as the message's float (the server would name inf)
        raise InvalidInputError(f"{where}: a value is beyond float32's range (±3.4e38)", reason=Reason.INVALID_VECTOR,
                                field=field or where)
    return message


def paragraphs(items: Sequence[ContextItem], field: str) -> list[pb.ContextParagraph]:
    return [paragraph_message(item, f"{field}[{i}]") for i, item in enumerate(listed(items, field, "paragraphs"))]


def filter_message(f: Filter | Mapping | None) -> pb.RetrievalFilter | None:
    """A Filter (or a mapping of its fields) as the message; None for None."""
    if f is None:
        return None
    if isinstance(f, Mapping):
        f = Filter(**f)
    return pb.RetrievalFilter(doc_ids=doc_ids(f.doc_ids, "filter.doc_ids"),
                              exclude_doc_ids=doc_ids(f.exclude_doc_ids, "filter.exclude_doc_ids"),
                              labels=labels_map(f.labels, "filter.labels"),
                              min_score=finite(f.min_score, "filter.min_score"),
                              max_per_document=whole(f.max_per_document, "filter.max_per_document"),
                              distinct_texts=flag(f.distinct_texts, "filter.distinct_texts"))


def doc_ids(values: Sequence[str], field: str) -> list[str]:
    return [text(d, f"{field}[{i}]") for i, d in enumerate(listed(values, field, "doc_ids"))]


def fresh(min_index_version: int, wait_for_index: bool) -> dict:
    """A read's read-your-writes fields (min_index_version, wait_for_index)."""
    return {"min_index_version": whole(min_index_version, "min_index_version", INT64),
            "wait_for_index": flag(wait_for_index, "wait_for_index")}


def predict_request(context, top_k, include_attention, exclude_doc_ids, omit_text, filter=None,
                    min_index_version: int = 0, wait_for_index: bool = False) -> pb.PredictNextRequest:
    if top_k is None:  # (whole() takes None for an unset field, which top_k may not be)
        raise TypeError("top_k must be an integer, got None")
    return pb.PredictNextRequest(context=paragraphs(context, "context"), top_k=whole(top_k, "top_k", (1, MAX_TOP_K)),
                                 include_attention=flag(include_attention, "include_attention"),
                                 omit_text=flag(omit_text, "omit_text"), filter=filter_message(filter),
                                 exclude_doc_ids=doc_ids(exclude_doc_ids, "exclude_doc_ids"),
                                 **fresh(min_index_version, wait_for_index))


def predict_result(r: pb.PredictNextResponse) -> PredictResult:
    return PredictResult(
        predictions=[Prediction(p.paragraph_id, p.doc_id, p.position, p.text, p.score, p.retrieval_score)
                     for p in r.predictions],
        model_version=r.model_version, index_version=r.index_version, context_used=r.context_used,
        context_dropped=r.context_dropped, attention=[list(h.weights) for h in r.attention])


def rerank_request(context, candidates, top_k: int = 0, request_id: str = "", message=pb.RerankRequest,
                   min_index_version: int = 0, wait_for_index: bool = False, where: str = ""):
    """A RerankRequest (or, as ``message``, a RerankStreamRequest: the same fields); ``where`` prefixes the fields
    named in an error."""
    return message(request_id=request_id, context=paragraphs(context, f"{where}context"),
                   candidates=paragraphs(candidates, f"{where}candidates"), top_k=whole(top_k, f"{where}top_k"),
                   **fresh(min_index_version, wait_for_index))


def rerank_result(r: pb.RerankResponse) -> RerankResult:
    return RerankResult(list(r.order), list(r.scores), r.model_version, r.index_version, r.request_id, r.context_dropped)


def rerank_item(item, index: int, min_index_version: int = 0, wait_for_index: bool = False) -> pb.RerankStreamRequest:
    """An item of rerank_many: a (context, candidates) pair or a mapping with context/candidates[/request_id/top_k]."""
    where = f"items[{index}]."
    if isinstance(item, Mapping):
        if "context" not in item or "candidates" not in item:
            raise TypeError(f"items[{index}] must have a context and candidates, has {sorted(map(str, item))}")
        request_id = item.get("request_id")  # None: the item's index; a number: as str() writes it, as before
        request_id = text(str(index) if request_id is None else str(request_id), f"items[{index}].request_id")
        return rerank_request(item["context"], item["candidates"], item.get("top_k", 0), request_id,
                              pb.RerankStreamRequest, min_index_version, wait_for_index, where)
    try:
        context, candidates = item
    except (TypeError, ValueError):
        raise TypeError(f"items[{index}] must be a (context, candidates) pair or a mapping, got "
                        f"{type(item).__name__}") from None
    return rerank_request(context, candidates, 0, str(index), pb.RerankStreamRequest, min_index_version, wait_for_index,
                          where)


class StreamOrder:
    """Which item each RerankStream answer belongs to, and the items this client could not send (a TypeError or an
    InvalidInputError from their conversion) in their places: the requests are made on grpc's side of the stream, where
    an exception would end the whole stream with no more than "Exception iterating requests!". deque's appends and
    pops are atomic, so the two sides need no lock. Without ``return_errors`` the first such error is raised in its
    place instead of being returned. The server numbers the requests by their place in the stream, which an item not
    sent never took: ``answers`` gives an answer's error the item's place in ``items`` instead."""

    def __init__(self, min_index_version: int, wait_for_index: bool, return_errors: bool, max_in_flight: int,
                 max_message_bytes: int | None = None):
        self._order: deque[tuple[int, Exception | None]] = deque()  # items by index; None: sent, else why it was not
        self._answered = 0  # answers so far: the server's number for the request the next one answers
        self._fresh, self._return_errors = (min_index_version, wait_for_index), return_errors
        self.source_error: Exception | None = None  # what the caller's iterable of items raised, if it did
        self._limit = max_message_bytes  # an item's request over it is that item's error (grpc's would end the stream)
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise TypeError(f"max_in_flight must be an integer, got {type(max_in_flight).__name__}")
        if max_in_flight < 1:  # 0 waited for ever: no request could be sent
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")

    def items(self, items: Iterable) -> Iterator[tuple[int, object]]:
        """The caller's items, numbered. If their iterable raises, the stream ends there (grpc would lose the exception:
        "Exception iterating requests!", CANCELLED in grpc.aio) and ``finish`` raises it once the answers to the items
        before it are through."""
        try:
            yield from enumerate(items)
        except Exception as e:  # noqa: BLE001 (anything the caller's iterable raises is theirs, raised by finish)
            self.source_error = e

    def finish(self) -> None:
        """After the stream's last answer: raise what the caller's iterable raised, if it did."""
        if self.source_error is not None:
            raise self.source_error

    def request(self, item, index: int) -> pb.RerankStreamRequest | None:
        """The item's request, or None when it cannot be sent (its error waits in its place)."""
        try:
            request = rerank_item(item, index, *self._fresh)
            check_size(request, self._limit)
        except Exception as e:  # noqa: BLE001 (OverflowError of a vector's 10**400 too: on grpc's side it ends all)
            self._order.append((index, e))
            return None
        self._order.append((index, None))
        return request

    def answers(self, response: pb.RerankStreamResponse) -> list[RerankResult | Exception]:
        """The errors of the items not sent before the one ``response`` answers, then its result or its error (see
        ``rerank_stream_result``), numbered as the caller's items."""
        errors = []
        while (head := self._order.popleft())[1] is not None:
            errors.append(head[1])
        errors = self._raised(errors)
        position, self._answered = self._answered, self._answered + 1
        return [*errors, rerank_stream_result(response, self._return_errors, position, head[0])]

    def unsent_after_end(self) -> list[Exception]:
        """The errors of the items after the last one answered."""
        return self._raised([e for _, e in self._order if e is not None])

    def _raised(self, errors: list[Exception]) -> list[Exception]:
        if errors and not self._return_errors:
            raise errors[0]
        return errors


def rerank_stream_result(r: pb.RerankStreamResponse, return_errors: bool, position: int,
                         index: int) -> RerankResult | ServiceError:
    """A RerankStream answer: its result, or its error (raised, or with ``return_errors`` returned); the answer to
    the stream's request ``position``, which was the caller's item ``index``."""
    if r.HasField("error"):
        error = from_status(renumbered(r.error, position, index), r.request_id)
        if return_errors:
            return error
        raise error
    return rerank_result(r.result)


def renumbered(status: status_pb2.Status, position: int, index: int) -> status_pb2.Status:
    """A RerankStream error's Status with the caller's item ``index`` where it names the request's ``position`` in the
    stream (servicer.RerankStream's "request N (request_id): ..." message, also the description of the field at fault,
    and ErrorInfo's itemIndex): the two differ after an item this client could not send. The server's answer stays
    as it is for a caller of the raw stream, whose requests are its items."""
    if position == index:
        return status
    status, received = status_pb2.Status(), status
    status.CopyFrom(received)  # the response stays as it came
    was, now = f"request {position} (", f"request {index} ("
    if status.message.startswith(was):
        status.message = now + status.message[len(was):]
    for packed in status.details:
        if packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            packed.Unpack(info)
            if info.metadata.get("itemIndex") == str(position):
                info.metadata["itemIndex"] = str(index)
                packed.Pack(info)
        elif packed.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            packed.Unpack(bad)
            for violation in bad.field_violations:
                if violation.description.startswith(was):
                    violation.description = now + violation.description[len(was):]
            packed.Pack(bad)
    return status


def document_message(doc: Document | Mapping, where: str = "document") -> pb.Document:
    """A Document (or a mapping of its fields) as the message: a TypeError or InvalidInputError naming ``where`` and
    the field when it cannot be one."""
    if isinstance(doc, Mapping):
        if (why := misspelt_field(doc)) is not None:
            raise TypeError(f"{where}: {why}")
        missing = [k for k in ("doc_id", "paragraphs") if k not in doc]
        if missing:
            raise InvalidInputError(f"{where} has no {' and no '.join(missing)}", reason=Reason.FIELD_REQUIRED,
                                    field=f"{where}.{missing[0]}")
        doc = Document(doc_id=doc["doc_id"], paragraphs=doc["paragraphs"], title=doc.get("title", ""),
                       vectors=doc.get("vectors"), labels=doc.get("labels") or {})
    elif not isinstance(doc, Document):
        raise TypeError(f"{where} must be a Document or a mapping of its fields, got {type(doc).__name__}")
    rows = [] if doc.vectors is None else listed(doc.vectors, f"{where}.vectors", "vectors")  # (a 2-d array's rows)
    vectors = [vector_message(v, f"{where}.vectors[{j}]") for j, v in enumerate(rows)]
    texts = listed(doc.paragraphs, f"{where}.paragraphs", "texts")
    return pb.Document(doc_id=text(doc.doc_id, f"{where}.doc_id"), title=text(doc.title, f"{where}.title"),
                       paragraphs=[text(t, f"{where}.paragraphs[{i}]") for i, t in enumerate(texts)], vectors=vectors,
                       labels=labels_map(doc.labels, f"{where}.labels"))


def delete_request(ids: Sequence[str], allow_missing: bool) -> pb.DeleteDocumentsRequest:
    return pb.DeleteDocumentsRequest(doc_ids=doc_ids(ids, "doc_ids"), allow_missing=allow_missing)


def paragraphs_request(ids: Sequence[int], include_vectors: bool, min_index_version: int,
                       wait_for_index: bool) -> pb.GetParagraphsRequest:
    return pb.GetParagraphsRequest(paragraph_ids=[whole(i, f"ids[{n}]", INT64)
                                                  for n, i in enumerate(listed(ids, "ids", "paragraph ids"))],
                                   include_vectors=include_vectors, **fresh(min_index_version, wait_for_index))


def page_request(page_size: int, page_token: str, labels: Mapping[str, str] | None, min_index_version: int,
                 wait_for_index: bool) -> pb.ListDocumentsRequest:
    return pb.ListDocumentsRequest(page_size=whole(page_size, "page_size"), page_token=text(page_token, "page_token"),
                                   labels=labels_map(labels, "labels"), **fresh(min_index_version, wait_for_index))


def chunk_documents(docs: Iterable[Document | Mapping], max_bytes: int) -> Iterator[pb.AddDocumentsRequest]:
    """AddDocuments messages of at most ``max_bytes`` each, made as ``docs`` is read; a single larger document is
    refused here (InvalidInputError naming it, a ValueError)."""
    batch: list[pb.Document] = []
    size = 0
    for i, doc in enumerate(docs):
        message = document_message(doc, f"documents[{i}]")
        n = message.ByteSize() + 8
        if n > max_bytes:
            error = InvalidInputError(f"document {i} ({message.doc_id!r:.200}) is {n} bytes encoded, over the "
                                      f"{max_bytes}-byte message limit: split it, or raise the limit on both server "
                                      "and client", reason=Reason.MESSAGE_TOO_LARGE, field=f"documents[{i}]",
                                      metadata={**too_large(n, max_bytes), "docId": message.doc_id[:200]})
            error.document_index = i  # (as a server's refusal of a document has it: DocumentStream.locate)
            raise error
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
                r.index_version, r.max_context, r.max_message_bytes, r.server_version, model, r.store_id)


def backup_result(r: pb.BackupResponse) -> BackupResult:
    return BackupResult(r.path, r.index_version, r.snapshot_generation, r.documents, r.paragraphs, r.size_bytes, r.files,
                        r.seconds)
