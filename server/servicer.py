"""The gRPC servicer: convert the request, call the runtime, convert the response.

Every method goes through ``_call`` (or ``_stream`` for RerankStream), which maps domain
errors to status codes (status.py), records metrics and never lets an unexpected exception
escape as anything but INTERNAL with a logged traceback.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from nextpara import __version__
from nextpara.errors import InvalidInputError
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc

from . import convert
from .runtime import Runtime
from .status import status_for

log = logging.getLogger(__name__)
STREAM_IN_FLIGHT = 64  # RerankStream requests being scored at once per stream


class NextParagraphServicer(pb_grpc.NextParagraphServiceServicer):
    def __init__(self, runtime: Runtime):
        self.rt = runtime

    async def _call(self, method: str, context: grpc.aio.ServicerContext, work):
        t0 = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            return await work()
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as e:  # noqa: BLE001 - every error becomes a status
            code = status_for(e)
            if code is None:
                log.exception("%s failed", method)
                code, message = grpc.StatusCode.INTERNAL, f"internal error in {method} (logged by the server)"
            else:
                message = str(e)
            await context.abort(code, message)
        finally:
            if context.time_remaining() is not None and context.time_remaining() <= 0 and code == grpc.StatusCode.CANCELLED:
                code = grpc.StatusCode.DEADLINE_EXCEEDED
            self.rt.metrics.requests.labels(method, code.name).inc()
            self.rt.metrics.latency.labels(method).observe(time.perf_counter() - t0)

    async def PredictNext(self, request, context):
        async def work():
            result = await self.rt.predict(convert.context_items(request.context, "context"), request.top_k,
                                           request.include_attention, list(request.exclude_doc_ids), context.time_remaining())
            return convert.prediction_response(result, request.omit_text)
        return await self._call("PredictNext", context, work)

    async def Rerank(self, request, context):
        async def work():
            result = await self._rerank(request, context)
            return convert.rerank_response(request.request_id, result, request.top_k)
        return await self._call("Rerank", context, work)

    async def _rerank(self, request, context):
        return await self.rt.rerank(convert.context_items(request.context, "context"),
                                    convert.context_items(request.candidates, "candidates"), context.time_remaining())

    async def RerankStream(self, request_iterator, context):
        t0 = time.perf_counter()
        code = grpc.StatusCode.OK
        pending: asyncio.Queue = asyncio.Queue(maxsize=STREAM_IN_FLIGHT)

        async def feed():
            index = 0
            async for request in request_iterator:
                task = asyncio.ensure_future(self._rerank(request, context))
                await pending.put((index, request, task))
                index += 1
            await pending.put(None)

        feeder = asyncio.ensure_future(feed())
        try:
            while (item := await pending.get()) is not None:
                index, request, task = item
                try:
                    result = await task
                except InvalidInputError as e:
                    raise InvalidInputError(f"request {index} ({request.request_id!r}): {e}") from e
                yield convert.rerank_response(request.request_id, result, request.top_k)
            await feeder
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as e:  # noqa: BLE001
            code = status_for(e) or grpc.StatusCode.INTERNAL
            if code == grpc.StatusCode.INTERNAL:
                log.exception("RerankStream failed")
            await context.abort(code, str(e) if code != grpc.StatusCode.INTERNAL else "internal error (logged)")
        finally:
            feeder.cancel()
            self.rt.metrics.requests.labels("RerankStream", code.name).inc()
            self.rt.metrics.latency.labels("RerankStream").observe(time.perf_counter() - t0)

    async def AddDocuments(self, request_iterator, context):
        async def messages():
            index = 0
            async for request in request_iterator:
                docs, _ = convert.documents(request, index)
                index += 1
                yield docs

        async def work():
            r = await self.rt.add_documents(messages())
            return pb.AddDocumentsResponse(documents_added=r.added, documents_replaced=r.replaced,
                                           documents_unchanged=r.unchanged, paragraphs_written=r.paragraphs,
                                           index_version=r.generation)
        return await self._call("AddDocuments", context, work)

    async def DeleteDocuments(self, request, context):
        async def work():
            docs, paragraphs = await self.rt.delete_documents(list(request.doc_ids))
            return pb.DeleteDocumentsResponse(documents_deleted=docs, paragraphs_deleted=paragraphs,
                                              index_version=self.rt.store.generation)
        return await self._call("DeleteDocuments", context, work)

    async def GetParagraphs(self, request, context):
        async def work():
            ids = list(request.paragraph_ids)
            if not ids:
                raise InvalidInputError("paragraph_ids is empty")
            paragraphs = await self.rt.run(self.rt.store.get_paragraphs, ids)
            vectors = await self.rt.run(self.rt.store.vectors, ids) if request.include_vectors else None
            return pb.GetParagraphsResponse(paragraphs=[
                pb.Paragraph(paragraph_id=p.id, doc_id=p.doc_id, position=p.position, text=p.text,
                             vector=pb.Vector(values=vectors[i]) if vectors is not None else None)
                for i, p in enumerate(paragraphs)])
        return await self._call("GetParagraphs", context, work)

    async def GetInfo(self, request, context):
        async def work():
            store = self.rt.store
            info = await self.rt.run(store.info)
            model_version, index_version = self.rt.versions()
            return pb.GetInfoResponse(
                embedder=info["embedder"], dim=info["dim"], documents=info["documents"], paragraphs=info["paragraphs"],
                index_type=info["index"]["requested"], index_factory=info["index"]["factory"], model_version=model_version,
                index_version=index_version, max_context=self.rt.predictor.max_context if self.rt.predictor else 0,
                max_message_bytes=self.rt.settings.max_message_bytes, server_version=__version__)
        return await self._call("GetInfo", context, work)

    async def Reload(self, request, context):
        async def work():
            model_version, index_version = await self.rt.reload()
            return pb.ReloadResponse(model_version=model_version, index_version=index_version)
        return await self._call("Reload", context, work)
