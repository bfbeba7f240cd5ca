"""Rich errors: every reason of the proto's error table provoked over gRPC against real servers on
127.0.0.1, and its details (reason, metadata, field violations, retry delay) read back through the clients.

Not provoked here: INVALID_ARGUMENT and FAILED_PRECONDITION as reasons are catch-alls that no known request gets
(each known refusal has its own reason; FAILED_PRECONDITION is provoked through its known cases: below, a Backup to a
server without --backup-dir; in tests/test_remote_embedder.py, a remote embedder without its API key, and the
remote embedder's EMBEDDING_SERVICE_FAILED), and INTERNAL_ERROR needs a bug in the server. STORAGE_FULL needs a full
disk: it is provoked in tests/test_crash.py::test_a_server_whose_disk_fills_refuses_writes_and_keeps_serving (a
private tmpfs).
"""

import asyncio
import json
import re
import shutil
import sqlite3
import threading
import time
import urllib.request

import grpc
import numpy as np
import pytest
from conftest import REPO, LiveServer, refusal, unit_vectors, vector_store
from nextpara.client import AsyncClient, Client, Reason, ServiceError
from nextpara.client.errors import from_rpc_error
from nextpara.server.status import CODE_OF
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc


def test_the_proto_documents_every_reason_with_its_code():
    text = (REPO / "proto/nextpara/v1/nextpara.proto").read_text()
    table = dict(re.findall(r"^//   ([A-Z_]+) +([A-Z_]+) +", text, re.M))
    assert table == {r.value: code.name for r, code in CODE_OF.items()}
    assert set(CODE_OF) == set(Reason)


# ---- the shared server (a trained MiniLM store) ---------------------------------------------------------------------

@pytest.mark.parametrize("call, reason, field, metadata", [
    (lambda c: c.predict_next([]), "FIELD_REQUIRED", "context", {}),
    (lambda c: c.rerank([1], []), "FIELD_REQUIRED", "candidates", {}),
    (lambda c: c.get_paragraphs([]), "FIELD_REQUIRED", "paragraph_ids", {}),
    (lambda c: c.delete_documents([]), "FIELD_REQUIRED", "doc_ids", {}),
    (lambda c: c.delete_documents(["no-such-doc", ""], allow_missing=True), "FIELD_REQUIRED", "doc_ids[1]", {}),
    (lambda c: c.add_documents([{"doc_id": " ", "paragraphs": ["x"]}]), "FIELD_REQUIRED", "documents[0].doc_id", {}),
    (lambda c: c._call("PredictNext", pb.PredictNextRequest(context=[pb.ContextParagraph(paragraph_id=1)], top_k=5000),
                       30), "OUT_OF_RANGE", "top_k", {"max": "1000"}),  # (the client refuses it before sending)
    (lambda c: c.add_documents([{"doc_id": "d" * 600, "paragraphs": ["x"]}]), "OUT_OF_RANGE", "documents[0].doc_id", {}),
    (lambda c: c.predict_next(["A text.", [0.1] * 7]), "DIMENSION_MISMATCH", "context[1].vector",
     {"expectedDim": "384", "actualDim": "7"}),
    (lambda c: c.add_documents([{"doc_id": "dim", "paragraphs": ["a", "b"], "vectors": [[1.0] * 384, [1.0] * 384]},
                                {"doc_id": "dim2", "paragraphs": ["c"], "vectors": [[1.0] * 5]}]),
     "DIMENSION_MISMATCH", "documents[1].vectors[0]", {"expectedDim": "384", "actualDim": "5"}),
    (lambda c: c.rerank([1], [2, [float("nan")] * 384]), "INVALID_VECTOR", "candidates[1].vector", {}),
    (lambda c: c.predict_next([[0.0] * 384]), "INVALID_VECTOR", "context[0].vector", {}),
    (lambda c: c.add_documents([{"doc_id": "ragged", "paragraphs": ["a", "b"], "vectors": [[1.0] * 384, [1.0, 2.0]]}]),
     "DIMENSION_MISMATCH", "documents[0].vectors[1]", {"expectedDim": "384", "actualDim": "2"}),  # was INVALID_VECTOR
    (lambda c: c.predict_next(["A text.", "  "]), "INVALID_TEXT", "context[1].text", {}),
    (lambda c: c.predict_next(["A text.", "a\x00b"]), "INVALID_TEXT", "context[1].text", {}),
    (lambda c: c.add_documents([{"doc_id": "nul", "paragraphs": ["fine", "a\x00b"]}]), "INVALID_TEXT",
     "documents[0].paragraphs[1]", {}),
    (lambda c: c.add_documents([{"doc_id": "twice", "paragraphs": ["a"]}, {"doc_id": "twice", "paragraphs": ["b"]}]),
     "DUPLICATE_DOC_ID", "documents[1].doc_id", {}),
    (lambda c: c.get_paragraphs([1, 10**12, 10**12 + 1]), "UNKNOWN_IDS", "paragraph_ids[1]",
     {"idKind": "paragraph_id", "missingCount": "2", "missingIds": "[1000000000000, 1000000000001]"}),
    (lambda c: c.predict_next([1, 10**12]), "UNKNOWN_IDS", "context[1].paragraph_id", {"missingIds": "[1000000000000]"}),
    (lambda c: c.delete_documents(["no-such-doc"]), "UNKNOWN_IDS", "doc_ids[0]",
     {"idKind": "doc_id", "missingIds": '["no-such-doc"]'}),
    (lambda c: c.get_document("no-such-doc"), "UNKNOWN_IDS", "doc_id", {"idKind": "doc_id"}),
    (lambda c: c.get_paragraphs([1] * 12_000, include_vectors=True), "MESSAGE_TOO_LARGE", None,
     {"message": "response", "limitBytes": str(16 * 2**20)}),
    (lambda c: c.get_paragraphs([1], min_index_version=10**9), "INDEX_BEHIND", None,
     {"minIndexVersion": str(10**9), "readOnly": "false", "waitedSeconds": "0.000"}),
    (lambda c: c.backup("../outside"), "INVALID_DESTINATION", "destination", {"destination": "../outside"}),
    (lambda c: c.backup("fine-name"), "FAILED_PRECONDITION", None, {}),  # the server has no --backup-dir
])
def test_refusals_carry_their_reason_field_and_metadata(client, call, reason, field, metadata):
    before = client.info()
    e = refusal(lambda: call(client))
    assert (e.reason, e.domain) == (reason, "nextpara") and e.code == CODE_OF[Reason(reason)]
    assert e.field == field and [v.field for v in e.field_violations] == ([field] if field else [])
    assert all(v.description == e.details for v in e.field_violations)
    assert metadata.items() <= e.metadata.items(), e.metadata
    assert e.metadata["indexVersion"] == str(before.index_version) and e.retry_delay is None
    after = client.info()
    assert (after.documents, after.paragraphs, after.index_version) == (before.documents, before.paragraphs,
                                                                      before.index_version)


def test_malformed_requests_and_unset_fields_from_raw_bytes(server):
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary("/nextpara.v1.NextParagraphService/GetParagraphs")(b"\xff\xff\xff", timeout=30)
        assert from_rpc_error(err.value).reason == "MALFORMED_REQUEST"
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.NextParagraphServiceStub(channel).Rerank(pb.RerankRequest(
                context=[pb.ContextParagraph(paragraph_id=1)], candidates=[pb.ContextParagraph()]), timeout=30)
        e = from_rpc_error(err.value)
        assert (e.reason, e.field) == ("FIELD_REQUIRED", "candidates[0]")
        for score in (float("nan"), float("inf")):  # (the client refuses them before sending: clients of other languages)
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.NextParagraphServiceStub(channel).PredictNext(pb.PredictNextRequest(
                    context=[pb.ContextParagraph(paragraph_id=1)], top_k=3,
                    filter=pb.RetrievalFilter(min_score=score)), timeout=30)
            e = from_rpc_error(err.value)
            assert (e.reason, e.field) == ("OUT_OF_RANGE", "filter.min_score")


def test_a_request_over_the_message_limit(server):
    big = "x" * (server.settings.max_message_bytes + 10)
    with Client(server.address, max_message_bytes=64 * 2**20) as unlimited:
        e = refusal(lambda: unlimited.predict_next([big]))
    assert e.reason == "MESSAGE_TOO_LARGE" and e.metadata["message"] == "request"
    assert int(e.metadata["actualBytes"]) > int(e.metadata["limitBytes"]) == server.settings.max_message_bytes


def test_an_add_documents_refusal_says_how_many_messages_were_committed(server, client):
    def messages():
        yield pb.AddDocumentsRequest(documents=[pb.Document(doc_id="meta-a", paragraphs=["First committed message."])])
        yield pb.AddDocumentsRequest(documents=[pb.Document(doc_id="meta-b", paragraphs=["Refused."],
                                                            vectors=[pb.Vector(values=[1.0])])])
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.NextParagraphServiceStub(channel).AddDocuments(messages(), timeout=60)
    e = from_rpc_error(err.value)
    assert (e.reason, e.field) == ("DIMENSION_MISMATCH", "documents[0].vectors[0]")
    assert e.metadata["committedMessages"] == "1" and e.metadata["messageIndex"] == "1"
    assert int(e.metadata["indexVersion"]) == client.info().index_version
    client.delete_documents(["meta-a"])


def test_a_refusal_quoting_long_ids_stays_small(client):
    """Ten 600-character doc_ids of 4-byte characters: the message quoted them whole and the client's transport
    refused the trailers (RESOURCE_EXHAUSTED, the fuzzer's unexplained DeleteDocuments)."""
    ids = [f"{i}" + "\U0001F600" * 599 for i in range(10)]
    e = refusal(lambda: client.delete_documents(ids))
    assert e.reason == "UNKNOWN_IDS" and e.metadata["missingCount"] == "10"
    assert e.field == "doc_ids[0]"  # (it was "doc_ids": the field was found from missingIds, which here lists none)
    assert json.loads(e.metadata["missingIds"]) == ids[:len(json.loads(e.metadata["missingIds"]))]


def test_the_async_client_exposes_the_details(server):
    async def go():
        async with AsyncClient(server.address, timeout=60) as c:
            with pytest.raises(ServiceError) as err:
                await c.predict_next(["A text.", [0.5] * 3])
            return err.value
    e = asyncio.run(go())
    assert (e.reason, e.field, e.metadata["actualDim"]) == ("DIMENSION_MISMATCH", "context[1].vector", "3")


# ---- QUEUE_FULL ------------------------------------------------------------------------------------------------------

def refused_calls(server) -> float:
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    found = re.search(r'nextpara_requests_total\{code="RESOURCE_EXHAUSTED",method="PredictNext"\} (\S+)', metrics)
    return float(found.group(1)) if found else 0.0


def test_queue_full_asks_for_a_delay_and_the_clients_retry_after_it(server_store, tmp_path):
    """One call in the queue at a time, each waiting 300 ms for company: a second call is refused with RetryInfo; the
    clients wait that long and try again, and get their answer."""
    store = tmp_path / "store"
    shutil.copytree(server_store, store, ignore=shutil.ignore_patterns("write.lock"))
    s = LiveServer(store, max_queue=1, max_wait_ms=300).start()
    try:
        with grpc.insecure_channel(s.address) as channel, Client(s.address, timeout=30) as client:
            stub = pb_grpc.NextParagraphServiceStub(channel)
            request = pb.PredictNextRequest(context=[pb.ContextParagraph(paragraph_id=1)], top_k=2)

            def occupied(then):
                holder = stub.PredictNext.future(request, timeout=30)
                time.sleep(0.1)  # the holder is in the queue, waiting for its batch
                try:
                    return then()
                finally:
                    holder.result()

            with pytest.raises(grpc.RpcError) as err:
                occupied(lambda: stub.PredictNext(request, timeout=30))
            e = from_rpc_error(err.value)
            assert (e.reason, e.metadata["queueLimit"]) == ("QUEUE_FULL", "1") and 0.3 <= e.retry_delay <= 2.0
            refused = refused_calls(s)
            t0 = time.monotonic()
            assert len(occupied(lambda: client.predict_next([1], top_k=2)).predictions) == 2
            assert refused_calls(s) > refused and time.monotonic() - t0 >= 0.3  # refused first, answered after the delay

            async def aio():
                async with AsyncClient(s.address, timeout=30) as c:
                    return await c.predict_next([1], top_k=2)
            refused = refused_calls(s)
            assert len(occupied(lambda: asyncio.run(aio())).predictions) == 2 and refused_calls(s) > refused
    finally:
        s.stop()


# ---- a store of precomputed vectors without a model: VECTORS_REQUIRED, plain cosine, and bad models on Reload -----

def test_precomputed_store_without_a_model(trained_store, tmp_path):
    from safetensors.torch import load_file, save_file

    vecs = unit_vectors(6, 8, seed=4)
    store = vector_store(tmp_path, "toy", [("v-doc", ["one", "two", "three"], vecs[:3])])
    s = LiveServer(store).start()
    try:
        with Client(s.address, timeout=60) as c:
            e = refusal(lambda: c.add_documents([{"doc_id": "t", "paragraphs": ["Text needs an embedder."]}]))
            assert (e.reason, e.field) == ("VECTORS_REQUIRED", "documents[0].vectors")
            # no model fits 8-d vectors (the general model is MiniLM's): plain cosine serves, and says why
            assert refusal(lambda: c.rerank([vecs[4].tolist()], ["A text."])).reason == "VECTORS_REQUIRED"
            served = c.info().model
            assert served.source == "cosine" and "no model of its own, and the general model is for" in served.reason
            predicted = c.predict_next([vecs[4].tolist()], top_k=2)
            assert predicted.model_version == served.version and len(predicted.predictions) == 2
            ranked = c.rerank([vecs[4].tolist()], [vecs[5].tolist(), vecs[4].tolist()])
            assert ranked.order == [1, 0]  # cosine to the last paragraph: the same vector first
            (store / "model.safetensors").write_bytes(b"not a checkpoint at all")
            e = refusal(c.reload)
            assert e.reason == "MODEL_UNREADABLE" and e.code == grpc.StatusCode.FAILED_PRECONDITION
            trained = store / "model.safetensors"
            shutil.copyfile(trained_store / "model.safetensors", trained)  # trained on MiniLM, 384-d
            e = refusal(c.reload)
            assert e.reason == "EMBEDDER_MISMATCH" and e.metadata["storeEmbedder"] == "toy"
            meta = json.loads(_metadata(trained)["nextpara"])
            meta["embedder"]["name"] = "toy"
            save_file(load_file(str(trained)), str(trained), metadata={"nextpara": json.dumps(meta)})
            e = refusal(c.reload)
            assert (e.reason, e.metadata["modelDim"], e.metadata["storeDim"]) == ("EMBEDDER_MISMATCH", "384", "8")
    finally:
        s.stop()


def _metadata(path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata()


# ---- a read-only replica: READ_ONLY_REPLICA, and NO_WORD_INDEX on a reload --------------------------------------------

def test_read_only_replica_refusals(server_store, tmp_path):
    from nextpara.store.ingest import build
    from safetensors.torch import load_file, save_file

    store = tmp_path / "store"
    shutil.copytree(server_store, store, ignore=shutil.ignore_patterns("write.lock"))
    with sqlite3.connect(store / "paragraphs.sqlite") as db:  # a store from before the word index
        for statement in ("DROP TRIGGER paragraphs_words_insert", "DROP TRIGGER paragraphs_words_delete",
                          "DROP TABLE paragraph_words_vocab", "DROP TABLE paragraph_words"):
            db.execute(statement)
    s = LiveServer(store, read_only=True).start()
    try:
        with Client(s.address, timeout=60) as c:
            e = refusal(lambda: c.add_documents([{"doc_id": "r", "paragraphs": ["A write."]}]))
            assert e.reason == "READ_ONLY_REPLICA" and e.code == grpc.StatusCode.FAILED_PRECONDITION
            assert refusal(lambda: c.delete_documents(["r"], allow_missing=True)).reason == "READ_ONLY_REPLICA"
            model = store / "model.safetensors"  # the same weights, now asking for word candidates
            meta = json.loads(_metadata(model)["nextpara"])
            meta["model_config"]["word_candidates"] = 10
            save_file(load_file(str(model)), str(model), metadata={"nextpara": json.dumps(meta)})
            e = refusal(c.reload)
            assert e.reason == "NO_WORD_INDEX" and "word index" in e.details
            assert len(c.predict_next([1], top_k=1).predictions) == 1  # the model in use stays

            before = c.info()
            (tmp_path / "more.jsonl").write_text(json.dumps({"doc_id": "written-meanwhile", "paragraphs": ["One more."]})
                                                 + "\n")
            build(str(tmp_path / "more.jsonl"), store, quiet=True)  # the writer, meanwhile: a newer snapshot
            model.write_bytes(b"not a checkpoint at all")
            assert refusal(c.reload).reason == "MODEL_UNREADABLE"
            after = c.info()  # the model in use stays, and so does the index it searches: a refused reload swaps nothing
            assert (after.index_version, after.model_version) == (before.index_version, before.model_version)
            # (the counts are SQLite's, which a replica reads as committed: 61 documents now, the index still 60)
            assert len(c.predict_next([1], top_k=1).predictions) == 1
    finally:
        s.stop()


def test_details_survive_a_stream_of_many_refusals(client):
    """The details of many concurrent refusals do not mix: each names its own field."""
    errors = [None] * 8

    def worker(i):
        errors[i] = refusal(lambda: client.predict_next(["ok"] * i + [[1.0] * (i + 1)]))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [e.field for e in errors] == [f"context[{i}].vector" for i in range(8)]
    assert [e.metadata["actualDim"] for e in errors] == [str(i + 1) for i in range(8)]
    assert np.all([e.reason == "DIMENSION_MISMATCH" for e in errors])


def test_a_call_while_the_server_loads_is_unavailable_loading(tmp_path):
    """A server listens while it loads its store and model (health NOT_SERVING). A call then was INTERNAL (GetInfo,
    GetDocument, AddDocuments: no store yet) or NO_MODEL, "run `nextpara train`" (PredictNext); now every method is
    UNAVAILABLE with reason LOADING and a RetryInfo. Here, the server as it is before its store opens."""
    from nextpara.server.config import ServerSettings
    from nextpara.server.main import create_server, set_health
    from nextpara.server.metrics import Metrics
    from nextpara.server.runtime import LOADING_RETRY_DELAY, Runtime

    async def main():
        settings = ServerSettings(data_dir=str(tmp_path), address="127.0.0.1:0", metrics_address="")
        runtime = Runtime(settings, tmp_path, Metrics())
        server, port, health = create_server(settings, runtime)
        await set_health(health, False)  # (as the server does until it has loaded)
        await server.start()
        runtime.start()
        try:
            async with AsyncClient(f"127.0.0.1:{port}", timeout=30, options=[("grpc.enable_retries", 0)]) as c:
                assert await c.health() == "NOT_SERVING"
                calls = {"GetInfo": c.info(), "PredictNext": c.predict_next(["A text."]),
                         "Rerank": c.rerank([1], [2, 3]), "GetDocument": c.get_document("a.md"),
                         "AddDocuments": c.add_documents([{"doc_id": "a.md", "paragraphs": ["A text."]}]),
                         "Reload": c.reload()}
                for method, call in calls.items():
                    with pytest.raises(ServiceError) as err:
                        await call
                    e = err.value
                    assert (e.code, e.reason, e.retry_delay) == (grpc.StatusCode.UNAVAILABLE, "LOADING",
                                                                 LOADING_RETRY_DELAY), (method, e)
                    assert "still loading its store" in e.details, (method, e.details)
        finally:
            await server.stop(None)
            await runtime.coalescer.stop()
            await runtime.embed_ahead.stop()

    asyncio.run(main())
