"""The asyncio client: the same methods as :class:`nextpara.client.Client`, awaitable.

    async with AsyncClient("127.0.0.1:50051") as c:
        result = await c.predict_next(["First paragraph."], top_k=5)
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Iterable, Mapping, Sequence

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


class AsyncClient:
    """As :class:`nextpara.client.Client`, awaitable, with the same arguments (``options``: grpc channel options,
    ``(key, value)`` pairs passed to its grpc.aio channel after the client's own, which they override per key)."""

    def __init__(self, address: str = _channel.DEFAULT_ADDRESS, *, timeout: float = _channel.DEFAULT_TIMEOUT,
                 token: str | None = None, tls: bool = False, root_certificates: str | bytes | None = None,
                 max_message_bytes: int = _channel.DEFAULT_MAX_MESSAGE_BYTES, retry_queue_full: bool = True,
                 options: Sequence[tuple[str, object]] = ()):
        timeout, max_message_bytes = _channel.checked_settings(timeout, max_message_bytes)
        self._metadata = _channel.metadata(token)  # checked before the channel is opened
        self._channel = _channel.open_channel(grpc.aio, address, tls, root_certificates, max_message_bytes, options)
        self._stub = pb_grpc.NextParagraphServiceStub(self._channel)
        self.timeout, self.max_message_bytes = timeout, max_message_bytes
        self._server_max: int | None = None  # the server's message limit, asked once for AddDocuments (_upload_bytes)
        self.retry_queue_full = retry_queue_full  # False: QUEUE_FULL is raised at once, for callers that shed load
        self._closed = False
        self._send_limit = _channel.send_limit(max_message_bytes, options)  # requests over it are refused unsent

    async def _call(self, name: str, request, timeout, *, method=None):
        """As Client._call: one call of ``name`` within ``timeout``, retried here where _retry.Backoff says so."""
        _channel.check_open(self)
        _channel.check_size(request, self._send_limit)
        backoff = _retry.Backoff(_channel.deadline(timeout, self.timeout), None if method else name, request,
                                 self.retry_queue_full)
        method = method or getattr(self._stub, name)
        while True:
            try:
                return await method(request, timeout=backoff.remaining(), metadata=self._metadata)
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                delay = backoff.delay_after(error)
                if delay is None:
                    raise error from e
            await asyncio.sleep(delay)

    async def predict_next(self, context: Sequence[ContextItem], top_k: int = 10, *, include_attention: bool = False,
                           exclude_doc_ids: Sequence[str] = (), omit_text: bool = False,
                           filter: Filter | Mapping | None = None, min_index_version: int = 0,
                           wait_for_index: bool = False, timeout: float | None = None) -> PredictResult:
        """The top_k stored paragraphs most likely to follow ``context`` (texts, stored ids or vectors, oldest first);
        ``filter``: which paragraphs may be returned and how many are kept (a Filter, or a dict of its fields)."""
        request = _convert.predict_request(context, top_k, include_attention, exclude_doc_ids, omit_text, filter,
                                           min_index_version, wait_for_index)
        return _convert.predict_result(await self._call("PredictNext", request, timeout))

    async def rerank(self, context: Sequence[ContextItem], candidates: Sequence[ContextItem], *, top_k: int = 0,
                     min_index_version: int = 0, wait_for_index: bool = False,
                     timeout: float | None = None) -> RerankResult:
        request = _convert.rerank_request(context, candidates, top_k, min_index_version=min_index_version,
                                          wait_for_index=wait_for_index)
        return _convert.rerank_result(await self._call("Rerank", request, timeout))

    async def rerank_many(self, items: Iterable, *, max_in_flight: int = 64, timeout: float | None = None,
                          return_errors: bool = False, min_index_version: int = 0,
                          wait_for_index: bool = False) -> AsyncIterator[RerankResult | Exception]:
        """As Client.rerank_many: results in input order, at most ``max_in_flight`` unanswered; a refused item raises
        its error, or with ``return_errors`` is yielded in its place (as is an item it cannot send: its TypeError or
        InvalidInputError); an exception of ``items`` itself is raised once the items before it are answered."""
        order = _convert.StreamOrder(min_index_version, wait_for_index, return_errors, max_in_flight,
                                     self._send_limit)
        window = asyncio.Semaphore(max_in_flight)

        async def requests():
            for i, item in order.items(items):
                await window.acquire()
                if (request := order.request(item, i)) is None:
                    window.release()  # not sent: its error waits in its place
                else:
                    yield request

        timeout = None if timeout is None else _channel.deadline(timeout, None)  # None: the stream has no deadline
        _channel.check_open(self)
        call = self._stub.RerankStream(requests(), timeout=timeout, metadata=self._metadata)
        try:
            async for response in call:
                window.release()
                for answer in order.answers(response):
                    yield answer
            for error in order.unsent_after_end():
                yield error
            order.finish()
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        finally:
            call.cancel()

    async def _upload_bytes(self, timeout) -> int:
        """How large an AddDocuments message may be: under this client's limit and the server's, asked once (GetInfo);
        one that refuses the question (a token without the read role, say) leaves this client's, and one that cannot be
        reached fails the call here, as AddDocuments would."""
        if self._server_max is None:
            try:
                self._server_max = (await self.info(timeout=timeout)).max_message_bytes
            except (Unavailable, DeadlineExceeded):
                raise
            except ServiceError:  # refused (it will be again): this client's limit from now on
                self._server_max = 0
        return _channel.upload_bytes(min(self._send_limit or self.max_message_bytes, self.max_message_bytes),
                                     self._server_max)

    async def add_documents(self, documents: Iterable[Document | dict], *, timeout: float | None = None) -> AddResult:
        """As Client.add_documents: streamed as ``documents`` is read; an error reading or chunking them ends the
        stream and is raised with ``documents_committed`` set on it. ``documents`` is a (sync) iterable: an async one
        is refused with a TypeError saying so, before any call."""
        refuse_async_iterable(documents)
        stream = DocumentStream(documents, await self._upload_bytes(timeout))
        try:
            result = _convert.add_result(await self._call("AddDocuments", iter(stream), timeout,
                                                         method=self._stub.AddDocuments))
        except ServiceError as e:
            stream.locate(e)
            raise
        return stream.raise_if_failed(result)

    async def delete_documents(self, doc_ids: Sequence[str], *, allow_missing: bool = False,
                               timeout: float | None = None) -> DeleteResult:
        """As Client.delete_documents: retried on UNAVAILABLE only with ``allow_missing``."""
        request = _convert.delete_request(doc_ids, allow_missing)
        return _convert.delete_result(await self._call("DeleteDocuments", request, timeout))

    async def get_paragraphs(self, ids: Sequence[int], *, include_vectors: bool = False, min_index_version: int = 0,
                             wait_for_index: bool = False, timeout: float | None = None) -> list[Paragraph]:
        request = _convert.paragraphs_request(ids, include_vectors, min_index_version, wait_for_index)
        return _convert.paragraphs_result(await self._call("GetParagraphs", request, timeout))

    async def list_documents(self, page_size: int = 0, page_token: str = "", *, labels: Mapping[str, str] | None = None,
                             min_index_version: int = 0, wait_for_index: bool = False,
                             timeout: float | None = None) -> DocumentPage:
        """As Client.list_documents: one page in doc_id order; ``labels``: only documents carrying every one of them."""
        request = _convert.page_request(page_size, page_token, labels, min_index_version, wait_for_index)
        return _convert.page_result(await self._call("ListDocuments", request, timeout))

    async def get_document(self, doc_id: str, *, min_index_version: int = 0, wait_for_index: bool = False,
                           timeout: float | None = None) -> StoredDocument:
        """A stored document and its paragraphs in order; NotFound if it is not stored."""
        return _convert.document_result(await self._call("GetDocument", pb.GetDocumentRequest(
            doc_id=_convert.text(doc_id, "doc_id"), **_convert.fresh(min_index_version, wait_for_index)), timeout))

    async def info(self, *, min_index_version: int = 0, wait_for_index: bool = False,
                   timeout: float | None = None) -> Info:
        request = pb.GetInfoRequest(**_convert.fresh(min_index_version, wait_for_index))
        return _convert.info_result(await self._call("GetInfo", request, timeout))

    async def reload(self, *, timeout: float | None = None) -> tuple[str, int]:
        r = await self._call("Reload", pb.ReloadRequest(), timeout)
        return r.model_version, r.index_version

    async def backup(self, destination: str = "", *, timeout: float | None = None) -> BackupResult:
        """As Client.backup: the server copies its store into a new directory inside its --backup-dir; not retried."""
        return _convert.backup_result(await self._call("Backup", pb.BackupRequest(
            destination=_convert.text(destination, "destination")), timeout))

    async def health(self, *, timeout: float | None = None) -> str:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        _channel.check_open(self)  # before a stub is made on the closed channel
        request = health_pb2.HealthCheckRequest(service="nextpara.v1.NextParagraphService")
        response = await self._call("Check", request, timeout, method=health_pb2_grpc.HealthStub(self._channel).Check)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    async def close(self) -> None:
        self._closed = True
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
