"""A request over the message limit has one reason wherever it is refused: MESSAGE_TOO_LARGE from the server (grpcio
with the proto's stubs) and from the client library, which refuses it unsent. A real server on 127.0.0.1 with a
1 MiB limit."""

import asyncio

import grpc
import pytest
from conftest import LiveServer, unit_vectors, vector_store
from nextpara.client import AsyncClient, Client, InvalidInputError
from nextpara.client.errors import from_rpc_error
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc

BIG = "word " * 300_000  # 1.5 MB


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    vectors = unit_vectors(4, 8, seed=9)
    store = vector_store(tmp_path_factory.mktemp("large"), "large8",
                         [("d0", ["One.", "Two."], vectors[:2]), ("d1", ["Three.", "Four."], vectors[2:])])
    s = LiveServer(store, max_message_mb=1).start()
    yield s
    s.stop()


def test_the_server_and_both_clients_give_a_request_over_the_limit_one_reason(small_server):
    options = [("grpc.max_send_message_length", 8 << 20)]
    with grpc.insecure_channel(small_server.address, options=options) as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.NextParagraphServiceStub(channel).Rerank(pb.RerankRequest(
                context=[pb.ContextParagraph(paragraph_id=1)], candidates=[pb.ContextParagraph(text=BIG)]), timeout=60)
        served = from_rpc_error(err.value)
    assert (served.reason, served.metadata["message"]) == ("MESSAGE_TOO_LARGE", "request")

    limit = 1 << 20
    with Client(small_server.address, timeout=60, max_message_bytes=limit) as c:
        with pytest.raises(InvalidInputError) as err:  # refused unsent; its reason was OUT_OF_RANGE
            c.rerank([1], [BIG])
        e = err.value
        assert e.reason == served.reason == "MESSAGE_TOO_LARGE"
        assert (e.metadata["message"], e.metadata["limitBytes"]) == ("request", str(limit))
        assert int(e.metadata["actualBytes"]) == int(e.metadata["size"]) > limit
        with pytest.raises(InvalidInputError) as err:  # a document over the limit: it had no reason of its own
            c.add_documents([{"doc_id": "big", "paragraphs": [BIG], "vectors": [[0.5] * 8]}])
        assert (err.value.reason, err.value.field) == ("MESSAGE_TOO_LARGE", "documents[0]")
        [unsent] = c.rerank_many([([1], [BIG])], return_errors=True)
        assert isinstance(unsent, InvalidInputError) and unsent.reason == "MESSAGE_TOO_LARGE"
        assert c.info().documents == 2  # nothing written

    async def aio():
        async with AsyncClient(small_server.address, timeout=60, max_message_bytes=limit) as a:
            with pytest.raises(InvalidInputError) as err:
                await a.predict_next([BIG])
            return err.value.reason
    assert asyncio.run(aio()) == "MESSAGE_TOO_LARGE"


def test_add_names_the_line_of_a_document_over_the_limit(small_server, tmp_path):
    import json

    from conftest import run_cli

    lines = [json.dumps({"doc_id": "small", "paragraphs": ["Small."], "vectors": [[1.0] + [0.0] * 7]}), "",
             json.dumps({"doc_id": "big", "paragraphs": [BIG], "vectors": [[1.0] + [0.0] * 7]})]
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    r = run_cli("add", str(corpus), "--address", small_server.address, timeout=120)
    assert r.returncode == 2, r  # it said "document 1 ('big')": its place among the documents, not the file's line
    assert f"nextpara add: error: {corpus}:3: document 'big' is " in r.stderr and "message limit" in r.stderr, r.stderr
    assert "split it into smaller documents" in r.stderr and "document(s) before it were committed" in r.stderr, r.stderr
