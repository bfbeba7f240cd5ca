"""AddDocuments' request stream, shared by the sync and asyncio clients.

grpc reads a request iterator on its own thread (grpc.aio: in its own task), and an exception raised
by it is lost: the sync call fails as ``UNKNOWN: Exception iterating requests!``, the asyncio call as
CANCELLED. So :class:`DocumentStream` never raises to grpc. It chunks the caller's documents lazily
(an unbounded iterable is never read whole), and when reading or chunking them fails it keeps the
error and ends the stream there: the server commits every message sent before (each message is
committed whole), and the client, once the call has answered, raises the kept error itself with the
number of documents committed in it.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, Mapping

from nextpara.v1 import nextpara_pb2 as pb

from ._convert import chunk_documents
from .types import AddResult, Document


def refuse_async_iterable(documents) -> None:
    """A TypeError for an async iterable of documents, before any call (Python's own, raised on grpc's side, said
    only "'async_generator' object is not iterable", and only after the client had asked the server's limit)."""
    if hasattr(documents, "__aiter__") and not hasattr(documents, "__iter__"):
        raise TypeError(f"documents: add_documents reads a list or another (sync) iterable, not an async iterable "
                        f"({type(documents).__name__}); collect it first ([d async for d in docs]) or send it in "
                        "batches, one add_documents call each")


class DocumentStream:
    """``for message in DocumentStream(docs, max_bytes)``: the AddDocuments messages of ``docs``, made as they are
    asked for; an error of ``docs`` or of chunking ends the iteration and is kept in ``error``."""

    def __init__(self, documents: Iterable[Document | Mapping], max_bytes: int):
        self._chunks = chunk_documents(documents, max_bytes)
        self.error: BaseException | None = None
        self.sizes: list[int] = []  # documents per message sent

    def __iter__(self) -> Iterator[pb.AddDocumentsRequest]:
        while True:
            try:
                message = next(self._chunks)
            except StopIteration:
                return
            except BaseException as e:  # noqa: B036 (grpc would swallow it; raise_if_failed raises it on the caller's side)
                self.error = e
                return
            self.sizes.append(len(message.documents))
            yield message

    def locate(self, error: BaseException) -> None:
        """Set ``error.document_index``, the place in the caller's documents of the one a refusal names (by its message,
        metadata messageIndex, and its place there, the field ``documents[j]...``), when it names one; and
        ``error.documents_committed``, the caller's documents in the messages the server committed before it (metadata
        committedMessages), when it says: each message commits whole, so the documents before the refused one in its
        own message were not stored."""
        metadata = getattr(error, "metadata", None) or {}
        message = metadata.get("messageIndex", "")
        place = re.match(r"documents\[(\d+)\]", getattr(error, "field", None) or "")
        if message.isdigit() and place and int(message) < len(self.sizes):
            error.document_index = sum(self.sizes[:int(message)]) + int(place.group(1))
        committed = metadata.get("committedMessages", "")
        if committed.isdigit() and int(committed) <= len(self.sizes):
            error.documents_committed = sum(self.sizes[:int(committed)])
            if hasattr(error, "add_note"):  # Python 3.11+
                error.add_note(f"AddDocuments stopped there: the first {error.documents_committed} document(s) were "
                               "committed, no later one (documents are upserted by doc_id: sending the rest again from "
                               "there is safe)")

    def raise_if_failed(self, result: AddResult) -> AddResult:
        """``result`` when every document was sent; otherwise raise the kept error, telling how many documents
        the server committed before it (as ``error.documents_committed``, ``error.add_result`` and a note)."""
        error = self.error
        if error is None:
            return result
        committed = result.documents_added + result.documents_replaced + result.documents_unchanged
        error.documents_committed = committed
        error.add_result = result
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"AddDocuments stopped there: {committed} document(s) sent before it were committed "
                           "(documents are upserted by doc_id, so sending them again is safe)")
        raise error
