"""A doc_id twice in one AddDocuments message: the refusal says where both copies are, as every other refusal of a
document does. A real server on 127.0.0.1, the client library and grpcio with the proto's stubs."""

import grpc
import pytest
from conftest import LiveServer, unit_vectors, vector_store
from nextpara.client import Client, InvalidArgument
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
