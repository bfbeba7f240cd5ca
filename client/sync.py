"""The synchronous client.

    from nextpara.client import Client
    with Client("127.0.0.1:50051") as c:
        result = c.predict_next(["First paragraph.", "Second paragraph."], top_k=5)
        for p in result.predictions:
            print(p.score, p.doc_id, p.text)

Every call takes ``timeout=`` (seconds; the client's default otherwise). Failures raise a
:class:`nextpara.client.errors.ServiceError` subclass chosen by status code, carrying the refusal's reason,
metadata, field violations and retry delay. Only calls that a replay cannot harm are retried (``_retry.py``), on
UNAVAILABLE and, after the delay the server asked for, on QUEUE_FULL: the reads (not the health probe), Reload,
AddDocuments (UNAVAILABLE only), and DeleteDocuments with ``allow_missing``.

Read your writes: the reads take ``min_index_version`` (the ``index_version`` a write returned) and
``wait_for_index``. A server whose index is older raises FailedPrecondition with ``reason == "INDEX_BEHIND"`` (its
``metadata["indexVersion"]``); that is never retried here: without ``wait_for_index`` it comes at once, for the caller
to read from the writer or ask again with ``wait_for_index``, and with it the server has already waited until just
before the call's deadline.
"""

from __future__ import annotations

import threading
import time
from typing import Iterable, Iterator, Mapping, Sequence

import grpc
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc

from . import _channel, _convert, _retry
from ._upload import DocumentStream, refuse_async_iterable
from .errors import DeadlineExceeded, ServiceError, Unavailable, from_rpc_error
from .types import (
    AddResult,
    BackupResult,
    ContextItem,
    DeleteResult,
    Document,
    DocumentPage,
    Filter,
    Info,
    Paragraph,
    PredictResult,
    RerankResult,
    StoredDocument,
)


class Client:
    """A connection to a nextpara server at ``address`` (host:port).

    ``timeout``: the default deadline of each call, in seconds (each method also takes ``timeout=``). ``token``: a
    bearer token sent with every call. ``tls`` / ``root_certificates`` (PEM bytes or a file's path, checked here;
    implies TLS): verify the server against these roots, or the system's. ``max_message_bytes``: the largest message
    sent or received (AddDocuments is chunked under it). ``retry_queue_full=False`` raises QUEUE_FULL at once instead of retrying it.
    ``options``: grpc channel options, ``(key, value)`` pairs such as ``("grpc.keepalive_time_ms", 30000)`` or
    ``("grpc.primary_user_agent", "my-app/1.0")``, passed to the channel after the client's own (message limits,
    retries), which they override where a key is in both.
    """

    def __init__(self, address: str = _channel.DEFAULT_ADDRESS, *, timeout: float = _channel.DEFAULT_TIMEOUT,
                 token: str | None = None, tls: bool = False, root_certificates: str | bytes | None = None,
                 max_message_bytes: int = _channel.DEFAULT_MAX_MESSAGE_BYTES, retry_queue_full: bool = True,
                 options: Sequence[tuple[str, object]] = ()):
        timeout, max_message_bytes = _channel.checked_settings(timeout, max_message_bytes)
        self._metadata = _channel.metadata(token)  # checked before the channel is opened
        self._channel = _channel.open_channel(grpc, address, tls, root_certificates, max_message_bytes, options)
        self._stub = pb_grpc.NextParagraphServiceStub(self._channel)
        self.timeout, self.max_message_bytes = timeout, max_message_bytes
        self._server_max: int | None = None  # the server's message limit, asked once for AddDocuments (_upload_bytes)
        self.retry_queue_full = retry_queue_full  # False: QUEUE_FULL is raised at once, for callers that shed load
        self._closed = False
        self._send_limit = _channel.send_limit(max_message_bytes, options)  # requests over it are refused unsent

    def _call(self, name: str, request, timeout, *, method=None):
        """One call of NextParagraphService's ``name`` within ``timeout``, retried here where _retry.Backoff says so;
        ``method``: another stub's method, not retried."""
        _channel.check_open(self)
        _channel.check_size(request, self._send_limit)
        backoff = _retry.Backoff(_channel.deadline(timeout, self.timeout), None if method else name, request,
                                 self.retry_queue_full)
        method = method or getattr(self._stub, name)
        while True:
            try:
                return method(request, timeout=backoff.remaining(), metadata=self._metadata)
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                delay = backoff.delay_after(error)
                if delay is None:
                    raise error from e
            time.sleep(delay)

    def predict_next(self, context: Sequence[ContextItem], top_k: int = 10, *, include_attention: bool = False,
                     exclude_doc_ids: Sequence[str] = (), omit_text: bool = False,
                     filter: Filter | Mapping | None = None, min_index_version: int = 0,
                     wait_for_index: bool = False, timeout: float | None = None) -> PredictResult:
        """The top_k stored paragraphs most likely to follow ``context`` (texts, stored ids or vectors, oldest first);
        ``filter``: which paragraphs may be returned and how many are kept (a Filter, or a dict of its fields)."""
        request = _convert.predict_request(context, top_k, include_attention, exclude_doc_ids, omit_text, filter,
                                           min_index_version, wait_for_index)
        return _convert.predict_result(self._call("PredictNext", request, timeout))

    def rerank(self, context: Sequence[ContextItem], candidates: Sequence[ContextItem], *, top_k: int = 0,
               min_index_version: int = 0, wait_for_index: bool = False,
               timeout: float | None = None) -> RerankResult:
        request = _convert.rerank_request(context, candidates, top_k, min_index_version=min_index_version,
                                          wait_for_index=wait_for_index)
        return _convert.rerank_result(self._call("Rerank", request, timeout))

    def rerank_many(self, items: Iterable, *, max_in_flight: int = 64, timeout: float | None = None,
                    return_errors: bool = False, min_index_version: int = 0,
                    wait_for_index: bool = False) -> Iterator[RerankResult | Exception]:
        """Stream (context, candidates) pairs (or mappings with context, candidates, request_id, top_k) through
        RerankStream; yields results in input order with at most ``max_in_flight`` requests unanswered.
        A refused item raises its error (a ServiceError with its ``request_id``), which ends the iteration; with
        ``return_errors`` it is yielded in the item's place instead and the others go on. So is an item this client
        cannot send (not a pair or a mapping, a bad value): its TypeError or InvalidInputError, never sent. An exception
        of ``items`` itself ends the stream there and is raised once the items before it are answered. ``timeout``
        bounds the whole stream (default: none)."""
        order = _convert.StreamOrder(min_index_version, wait_for_index, return_errors, max_in_flight,
                                     self._send_limit)
        window = threading.Semaphore(max_in_flight)
        done = threading.Event()

        def requests():  # read by grpc on its own thread
            for i, item in order.items(items):
                while not window.acquire(timeout=0.1):
                    if done.is_set():
                        return
                if (request := order.request(item, i)) is None:
                    window.release()  # not sent: its error waits in its place
                else:
                    yield request

        timeout = None if timeout is None else _channel.deadline(timeout, None)  # None: the stream has no deadline
        _channel.check_open(self)
        call = self._stub.RerankStream(requests(), timeout=timeout, metadata=self._metadata)
        try:
            for response in call:
                window.release()
                yield from order.answers(response)
            yield from order.unsent_after_end()
            order.finish()
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        finally:
            done.set()
            call.cancel()  # nothing when the stream has ended; stops it when the caller stopped early

    def _upload_bytes(self, timeout) -> int:
        """How large an AddDocuments message may be: under this client's limit and the server's, asked once (GetInfo);
        one that refuses the question (a token without the read role, say) leaves this client's, and one that cannot be
        reached fails the call here, as AddDocuments would."""
        if self._server_max is None:
            try:
                self._server_max = (self.info(timeout=timeout)).max_message_bytes
            except (Unavailable, DeadlineExceeded):
                raise
            except ServiceError:  # refused (it will be again): this client's limit from now on
                self._server_max = 0
        return _channel.upload_bytes(min(self._send_limit or self.max_message_bytes, self.max_message_bytes),
                                     self._server_max)

    def add_documents(self, documents: Iterable[Document | dict], *, timeout: float | None = None) -> AddResult:
        """Upsert documents, streamed in messages under the message size limit as ``documents`` is read; each
        message commits whole. If reading or chunking a document fails (the iterable raises; a document over the
        message limit: InvalidInputError naming it), the stream ends before that document's message and that
        exception is raised once the server has answered, with ``documents_committed`` set on it. A refusal that names
        a document has ``document_index``, that document's place in ``documents``, and a refusal midway
        ``documents_committed``, the documents of the messages committed before it. An async iterable is refused
        with a TypeError saying how to send it."""
        refuse_async_iterable(documents)
        stream = DocumentStream(documents, self._upload_bytes(timeout))
        try:
            result = _convert.add_result(self._call("AddDocuments", iter(stream), timeout,
                                                         method=self._stub.AddDocuments))
        except ServiceError as e:
            stream.locate(e)
            raise
        return stream.raise_if_failed(result)

    def delete_documents(self, doc_ids: Sequence[str], *, allow_missing: bool = False,
                         timeout: float | None = None) -> DeleteResult:
        """Delete whole documents. An unknown doc_id is NotFound and nothing is deleted; this call is never retried
        (one that succeeded but lost its answer would be NotFound). With ``allow_missing``, unknown ids are listed in
        ``missing_doc_ids`` instead and the call is retried on UNAVAILABLE like a read."""
        request = _convert.delete_request(doc_ids, allow_missing)
        return _convert.delete_result(self._call("DeleteDocuments", request, timeout))

    def get_paragraphs(self, ids: Sequence[int], *, include_vectors: bool = False, min_index_version: int = 0,
                       wait_for_index: bool = False, timeout: float | None = None) -> list[Paragraph]:
        request = _convert.paragraphs_request(ids, include_vectors, min_index_version, wait_for_index)
        return _convert.paragraphs_result(self._call("GetParagraphs", request, timeout))

    def list_documents(self, page_size: int = 0, page_token: str = "", *, labels: Mapping[str, str] | None = None,
                       min_index_version: int = 0, wait_for_index: bool = False,
                       timeout: float | None = None) -> DocumentPage:
        """One page of the stored documents in doc_id order (``page_size`` 0: the server's default of 100, at most
        1000); pass ``next_page_token`` back for the next page. Tokens stay valid while the store is written.
        ``labels``: only documents carrying every one of them (pass the same labels with each page's token)."""
        request = _convert.page_request(page_size, page_token, labels, min_index_version, wait_for_index)
        return _convert.page_result(self._call("ListDocuments", request, timeout))

    def get_document(self, doc_id: str, *, min_index_version: int = 0, wait_for_index: bool = False,
                     timeout: float | None = None) -> StoredDocument:
        """A stored document and its paragraphs in order; NotFound if it is not stored."""
        return _convert.document_result(self._call("GetDocument", pb.GetDocumentRequest(
            doc_id=_convert.text(doc_id, "doc_id"), **_convert.fresh(min_index_version, wait_for_index)), timeout))

    def info(self, *, min_index_version: int = 0, wait_for_index: bool = False, timeout: float | None = None) -> Info:
        request = pb.GetInfoRequest(**_convert.fresh(min_index_version, wait_for_index))
        return _convert.info_result(self._call("GetInfo", request, timeout))

    def reload(self, *, timeout: float | None = None) -> tuple[str, int]:
        r = self._call("Reload", pb.ReloadRequest(), timeout)
        return r.model_version, r.index_version

    def backup(self, destination: str = "", *, timeout: float | None = None) -> BackupResult:
        """Have the server copy its store into ``destination``, a new directory inside its --backup-dir ("": a name of
        its choosing), while it goes on serving and writing (write role; the writer only). Never retried: a replay
        would find its destination there. A large store needs a longer ``timeout``; if the deadline passes the copy
        goes on on the server, and its directory appears only once it is complete (a Backup sent meanwhile waits for
        it to finish first)."""
        return _convert.backup_result(self._call("Backup", pb.BackupRequest(
            destination=_convert.text(destination, "destination")), timeout))

    def health(self, *, timeout: float | None = None) -> str:
        """The standard health status of the service: SERVING, NOT_SERVING, ..."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        _channel.check_open(self)  # before a stub is made on the closed channel (grpc then crashed the process)
        request = health_pb2.HealthCheckRequest(service="nextpara.v1.NextParagraphService")
        response = self._call("Check", request, timeout, method=health_pb2_grpc.HealthStub(self._channel).Check)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def close(self) -> None:
        self._closed = True
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
