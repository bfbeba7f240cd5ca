"""AddDocuments refusals say where: a doc_id twice in one message names both copies, as every other refusal of a
document does, and the clients say how many of the caller's documents were committed before a refusal. A real server
on 127.0.0.1, both clients and grpcio with the proto's stubs."""

import asyncio

import grpc
import pytest
from conftest import LiveServer, unit_vectors, vector_store
from nextpara.client import AsyncClient, Client, InvalidArgument
from nextpara.client.errors import from_rpc_error
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def dup_server(tmp_path_factory):
    vectors = unit_vectors(4, 8, seed=7)
    store = vector_store(tmp_path_factory.mktemp("dup"), "dup8",
                         [("d0", ["One.", "Two."], vectors[:2]), ("d1", ["Three.", "Four."], vectors[2:])])
    s = LiveServer(store).start()
    yield s
    s.stop()


def doc(doc_id: str, seed: int) -> dict:
    return {"doc_id": doc_id, "paragraphs": ["A paragraph."], "vectors": unit_vectors(1, 8, seed=seed).tolist()}


def test_a_doc_id_twice_in_one_message_is_refused_naming_both_places(dup_server):
    with Client(dup_server.address, timeout=60) as c:
        before = c.info().index_version
        with pytest.raises(InvalidArgument) as err:
            c.add_documents([doc("a", 1), doc("b", 2), doc("a", 3)])
        e = err.value
        assert (e.reason, e.field, e.metadata["messageIndex"]) == ("DUPLICATE_DOC_ID", "documents[2].doc_id", "0")
        # it said only "document 'a' appears twice in one write"
        assert str(e).startswith("INVALID_ARGUMENT: message 0, documents[2]: document 'a' appears twice in one write "
                                 "(first at message 0, documents[0])"), str(e)
        assert c.info().index_version == before  # nothing written
    with grpc.insecure_channel(dup_server.address) as channel:  # the second message of a stream, as grpcio sends it
        messages = [pb.AddDocumentsRequest(documents=[pb.Document(doc_id="c", paragraphs=["x"],
                                                                  vectors=[pb.Vector(values=[0.5] * 8)])]),
                    pb.AddDocumentsRequest(documents=[pb.Document(doc_id=i, paragraphs=["y"],
                                                                  vectors=[pb.Vector(values=[0.25] * 8)])
                                                      for i in ("e", "f", "f")])]
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.NextParagraphServiceStub(channel).AddDocuments(iter(messages), timeout=60)
        refusal = from_rpc_error(err.value)
        assert refusal.details.startswith("message 1, documents[2]: document 'f' appears twice in one write "
                                          "(first at message 1, documents[1])"), refusal.details
        assert (refusal.field, refusal.metadata["committedMessages"]) == ("documents[2].doc_id", "1")


def test_a_refusal_midway_says_how_many_of_the_callers_documents_were_committed(dup_server):
    """Each message commits whole: the documents before the refused one in its own message were not stored, so
    document_index alone over-counts; documents_committed says where to send again from (it was unset)."""
    docs = [{"doc_id": f"mid-{i}", "paragraphs": [f"Paragraph {i}. " + "w" * 5000],
             "vectors": unit_vectors(1, 8, seed=100 + i).tolist()} for i in range(40)]
    docs[34]["paragraphs"].append("")  # the second document of its message, under a 80 KiB client limit
    with Client(dup_server.address, timeout=60, max_message_bytes=80 * 1024) as c:
        with pytest.raises(InvalidArgument) as err:
            c.add_documents(docs)
        e = err.value
        assert e.document_index == 34 and e.documents_committed < 34, (e.document_index, e.documents_committed)
        stored = {d.doc_id for d in c.list_documents(1000).documents if d.doc_id.startswith("mid-")}
        assert stored == {f"mid-{i}" for i in range(e.documents_committed)}
        c.delete_documents(sorted(stored))

        async def aio():
            async with AsyncClient(dup_server.address, timeout=60, max_message_bytes=80 * 1024) as a:
                with pytest.raises(InvalidArgument) as err:
                    await a.add_documents(docs)
                return err.value.documents_committed
        assert asyncio.run(aio()) == e.documents_committed
        c.delete_documents([f"mid-{i}" for i in range(40)], allow_missing=True)
