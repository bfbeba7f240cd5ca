"""The gRPC servicer: convert the request, call the runtime, convert the response.

Every method runs in ``@rpc`` (rpc.py): domain errors become status codes, anything else
INTERNAL with a logged traceback, and each call is counted and timed.
"""

from __future__ import annotations

import contextlib

from nextpara.errors import NextparaError, NotFoundError
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc

from . import convert
from .batching import in_order
from .registration import Refused
from .rpc import rpc
from .runtime import Runtime
from .status import code_for, status_of

STREAM_IN_FLIGHT = 64  # RerankStream requests being scored at once per stream


@contextlib.contextmanager
def unknown_at(field: str, asked: list | None = None):
    """A NotFoundError names the request's field of the first unknown id it lists (``field[i]``, the first place it
    is asked at in ``asked``; ``field`` itself for a single id), as every other refusal names the field at fault."""
    try:
        yield
    except NotFoundError as e:
        first = getattr(e, "first_missing", None)
        if e.field is None:
            e.field = f"{field}[{asked.index(first)}]" if asked and first is not None and first in asked else field
        raise


class NextParagraphServicer(pb_grpc.NextParagraphServiceServicer):
    def __init__(self, runtime: Runtime):
        self.rt = runtime

    async def _index_at_least(self, request, context) -> None:
        """A read's min_index_version (read your writes): INDEX_BEHIND, or with wait_for_index a wait (index_gate.py)."""
        await self.rt.index_gate.require(request.min_index_version, request.wait_for_index, context.time_remaining())

    @rpc
    async def PredictNext(self, request, context):
        await self._index_at_least(request, context)
        result = await self.rt.predict(convert.context_items(request.context, "context"), request.top_k,
                                       request.include_attention, list(request.exclude_doc_ids),
                                       convert.retrieval_filter(request), context.time_remaining())
        return convert.prediction_response(result, request.omit_text)

    @rpc
    async def Rerank(self, request, context):
        return await self._rerank(request, context)

    async def _rerank(self, request, context):
        await self._index_at_least(request, context)
        result = await self.rt.rerank(convert.context_items(request.context, "context"),
                                      convert.context_items(request.candidates, "candidates"), context.time_remaining())
        return convert.rerank_response(request.request_id, result, request.top_k)

    @rpc
    async def RerankStream(self, requests, context):
        """Each request answered in order with its result or its refusal; a bug (INTERNAL) ends the stream."""
        async def one(index, request):
            if isinstance(request, Refused):
                return convert.stream_error("", status_of(request.error, itemIndex=index, **self.rt.error_facts()))
            try:
                return convert.stream_result(await self._rerank(request, context))
            except NextparaError as e:
                if code_for(e) is None:
                    raise
                e.args = (f"request {index} ({request.request_id!r:.80}): {e}",)
                return convert.stream_error(request.request_id, status_of(e, itemIndex=index, **self.rt.error_facts()))

        async with contextlib.aclosing(in_order(requests, one, STREAM_IN_FLIGHT)) as responses:  # a cancelled
            async for response in responses:  # stream cancels its work in flight at once
                yield response

    @rpc
    async def AddDocuments(self, requests, context):
        result = await self.rt.add_documents(convert.document_messages(requests))
        return convert.add_documents_response(result)

    @rpc
    async def DeleteDocuments(self, request, context):
        doc_ids = list(request.doc_ids)
        with unknown_at("doc_ids", doc_ids):
            deleted = await self.rt.delete_documents(doc_ids, request.allow_missing)
        return convert.delete_documents_response(deleted)

    @rpc
    async def GetParagraphs(self, request, context):
        await self._index_at_least(request, context)
        ids = list(request.paragraph_ids)
        with unknown_at("paragraph_ids", ids):
            paragraphs, vectors = await self.rt.get_paragraphs(ids, request.include_vectors)
        return convert.paragraphs_response(paragraphs, vectors)

    @rpc
    async def ListDocuments(self, request, context):
        await self._index_at_least(request, context)
        size, labels = convert.page_size(request.page_size), convert.list_labels(request)
        after = convert.after_doc_id(request.page_token, labels)
        return convert.list_documents_response(*await self.rt.list_documents(after, size, labels), labels)

    @rpc
    async def GetDocument(self, request, context):
        await self._index_at_least(request, context)
        with unknown_at("doc_id"):
            return convert.document_response(*await self.rt.get_document(request.doc_id))

    @rpc
    async def GetInfo(self, request, context):
        await self._index_at_least(request, context)
        return convert.info_response(await self.rt.info())

    @rpc
    async def Reload(self, request, context):
        return convert.reload_response(await self.rt.reload())

    @rpc
    async def Backup(self, request, context):
        return convert.backup_response(await self.rt.backup(request.destination))
