"""Rich errors: every reason of the proto's error table provoked over gRPC against real servers on
127.0.0.1, and its details (reason, metadata, field violations, retry delay) read back through the clients.

Not provoked here: INVALID_ARGUMENT and FAILED_PRECONDITION as reasons are catch-alls that no known request gets
(each known refusal has its own reason; FAILED_PRECONDITION is provoked below through its known cases, a remote
embedder without its API key and a Backup to a server without --backup-dir), and INTERNAL_ERROR needs a bug in the server. STORAGE_FULL needs a full disk: it is
provoked in tests/test_crash.py::test_a_server_whose_disk_fills_refuses_writes_and_keeps_serving (a private tmpfs).
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
from conftest import REPO, LiveServer, unit_vectors, vector_store
from nextpara.client import AsyncClient, Client, Reason, ServiceError
from nextpara.client.errors import from_rpc_error
from nextpara.server.status import CODE_OF
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc
from openai_fake import FakeEmbeddingsServer, fake_vector


def refusal(call) -> ServiceError:
    with pytest.raises(ServiceError) as err:
        call()
    assert isinstance(err.value.__cause__, grpc.RpcError)
    return err.value


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


# ---- a remote embedder: EMBEDDING_SERVICE_FAILED, and FAILED_PRECONDITION without its key -------------------------------

def test_remote_embedder_refusals(tmp_path, monkeypatch):
    from nextpara.store.ingest import build

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("First paragraph of a.\n\nSecond paragraph of a.\n")
    with FakeEmbeddingsServer(dim=16) as fake:
        monkeypatch.setenv("NEXTPARA_EMBEDDINGS_URL", fake.base_url)
        build(str(corpus), tmp_path / "store", embedder="openai:fake-model", quiet=True,
              embedder_options={"base_url": fake.base_url}, use_cache=False)
        s = LiveServer(tmp_path / "store").start()
        try:
            with Client(s.address, timeout=60) as c:
                fake.fail_next = [400] * 8  # it refuses the texts, however often the channel retries
                e = refusal(lambda: c.add_documents([{"doc_id": "b", "paragraphs": ["Refused upstream."]}]))
                assert e.reason == "EMBEDDING_SERVICE_FAILED" and e.code == grpc.StatusCode.UNAVAILABLE
                fake.fail_next = []
                fake.dim = 8  # an answer of another dimension than the store's: the endpoint's failure, not the caller's
                e = refusal(lambda: c.add_documents([{"doc_id": "d", "paragraphs": ["Answered wrongly upstream."]}]))
                assert e.reason == "EMBEDDING_SERVICE_FAILED" and e.code == grpc.StatusCode.UNAVAILABLE
                assert "answered vectors of dimension 8 where 16 were expected" in e.details, e.details
                fake.dim = 16  # and once it answers right again, so does the server (nothing pinned to the bad answer)
                assert c.add_documents([{"doc_id": "d", "paragraphs": ["Answered rightly upstream."]}]).documents_added == 1
                c.delete_documents(["d"])
                monkeypatch.delenv("OPENAI_API_KEY")
                e = refusal(lambda: c.add_documents([{"doc_id": "c", "paragraphs": ["No key to send."]}]))
                assert (e.reason, e.code) == ("FAILED_PRECONDITION", grpc.StatusCode.FAILED_PRECONDITION)
                assert "OPENAI_API_KEY is not set" in e.details and c.info().documents == 1
        finally:
            s.stop()


def remote_store(tmp_path, monkeypatch, fake: FakeEmbeddingsServer, paragraphs: int = 3):
    """A store of two documents whose vectors come from the loopback endpoint (its query texts go there too)."""
    from nextpara.store.ingest import build

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for doc in ("a", "b"):
        (corpus / f"{doc}.md").write_text("\n\n".join(f"Paragraph {i} of {doc}." for i in range(paragraphs)) + "\n")
    build(str(corpus), tmp_path / "store", embedder="openai:fake-model", quiet=True,
          embedder_options={"base_url": fake.base_url}, use_cache=False)
    return tmp_path / "store"


def test_an_endpoint_that_hangs_holds_no_worker(tmp_path, monkeypatch):
    """A remote embedder's query texts are embedded off the one worker, with a limit of their own: while the endpoint
    holds a call's texts, calls by ids and vectors are answered (and admitted: a full --max-queue of text calls
    refuses only text calls), and the held call is answered once the endpoint answers, its texts embedded once even
    across a reload; a text embedded before costs no request."""
    with FakeEmbeddingsServer(dim=16) as fake:
        s = LiveServer(remote_store(tmp_path, monkeypatch, fake), workers=1, max_queue=1).start()
        try:
            with Client(s.address, timeout=60, retry_queue_full=False) as c:
                ids = [p.paragraph_id for p in c.get_document("a.md").paragraphs]
                sent = len(fake.requests)
                for _ in range(2):
                    assert c.predict_next(["A warm text."]).predictions
                assert len(fake.requests) == sent + 1  # the second call's text was cached
                fake.answering.clear()
                sent = len(fake.requests)
                held: dict = {}
                by_text = threading.Thread(target=lambda: held.update(result=c.predict_next(["A query by text."])))
                by_text.start()
                deadline = time.monotonic() + 30
                while len(fake.requests) == sent and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert len(fake.requests) == sent + 1, "the text never reached the endpoint"
                by_ids = c.predict_next(ids[:2], top_k=3)
                reranked = c.rerank([ids[0]], [ids[1], ids[2]])
                e = refusal(lambda: c.predict_next(["Another query by text."]))  # the one place is taken
                assert e.reason == "QUEUE_FULL" and "waiting for the embeddings endpoint" in e.details, e.details
                c.reload()  # (a writer's reload keeps its embedder: the held texts' vectors are still good)
                assert by_text.is_alive() and "result" not in held  # answered while the endpoint held the texts
                assert by_ids.predictions and sorted(reranked.order) == [0, 1]
                fake.answering.set()
                by_text.join(60)
                assert held["result"].predictions and len(fake.requests) == sent + 1  # embedded once
        finally:
            fake.answering.set()
            s.stop()


class HeldEndpoint:
    """A server of a store whose texts the loopback endpoint embeds, the endpoint holding as many requests as the
    server sends it at once (a call's text each); ``queue(texts)`` sends a call per text, which wait at the server."""

    def __init__(self, tmp_path, monkeypatch, fake: FakeEmbeddingsServer):
        from nextpara.server.embed_ahead import EMBED_REQUESTS

        self.fake, self.threads, self.answers = fake, [], {}
        self.server = LiveServer(remote_store(tmp_path, monkeypatch, fake, paragraphs=8), workers=1,
                                 max_queue=64).start()
        self.client = Client(self.server.address, timeout=60, retry_queue_full=False,
                             options=[("grpc.enable_retries", 0)])  # (each call's own outcome: no replay)
        self.held = [f"Held text {i}." for i in range(EMBED_REQUESTS)]

    def hold(self) -> int:
        """Send the held calls, one at a time (each its own request); the number of requests before them."""
        self.fake.answering.clear()
        sent = len(self.fake.requests)
        for i, text in enumerate(self.held, 1):
            self.queue([text])
            deadline = time.monotonic() + 30
            while len(self.fake.requests) < sent + i and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(self.fake.requests) == sent + i  # every request the server sends at once, held
        return sent

    def queue(self, texts: list[str]) -> None:
        def ask(text):
            try:
                self.answers[text] = [p.paragraph_id for p in self.client.predict_next([text], top_k=5).predictions]
            except ServiceError as e:
                self.answers[text] = e

        for text in texts:
            self.threads.append(threading.Thread(target=ask, args=(text,)))
            self.threads[-1].start()

    def queue_rerank(self, context: str, candidates: list[str]) -> None:
        def ask():
            self.answers[context] = self.client.rerank([context], candidates).order

        self.threads.append(threading.Thread(target=ask))
        self.threads[-1].start()

    def admitted(self) -> None:
        """Wait until every call sent is waiting at the server (so calls sent next queue behind them)."""
        waiting = 'nextpara_calls_waiting{queue="embeddings endpoint"}'
        deadline = time.monotonic() + 30
        while self.server.metric(waiting) < len(self.threads) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.server.metric(waiting) == len(self.threads)

    def release(self, sent: int) -> list[list[str]]:
        """Let the endpoint answer once every call sent is waiting at the server; the texts of each request made after
        the held ones."""
        self.admitted()
        assert len(self.fake.requests) == sent + len(self.held)  # (none of them could reach the endpoint)
        self.fake.answering.set()
        for t in self.threads:
            t.join(60)
        self.threads = []
        return [r["body"]["input"] for r in self.fake.requests[sent + len(self.held):]]

    def answered_as_by_vector(self, texts) -> None:
        for text in texts:
            by_vector = self.client.predict_next([fake_vector(text, 16)], top_k=5).predictions
            assert self.answers[text] == [p.paragraph_id for p in by_vector], text

    def close(self) -> None:
        self.fake.answering.set()
        self.client.close()
        self.server.stop()


def test_text_calls_that_wait_for_the_endpoint_share_its_requests(tmp_path, monkeypatch):
    """While the endpoint holds as many requests as the server sends it at once, the text calls that arrive wait, and
    go to it together when one ends: a dozen calls cost one request of their texts, not a dozen, and each is answered
    as its text's vector is; a call of more texts than a request holds goes alone."""
    from nextpara.server.embed_ahead import EMBED_TEXTS

    with FakeEmbeddingsServer(dim=16) as fake:
        server = HeldEndpoint(tmp_path, monkeypatch, fake)
        try:
            sent = server.hold()
            waiting = [f"Waiting text {i}." for i in range(12)]
            server.queue(waiting)
            server.admitted()  # (the call of many texts queues after the dozen: else it cuts their batch in two)
            many = [f"Candidate {i}." for i in range(EMBED_TEXTS)]  # with its context, more than a request holds
            server.queue_rerank("A context of many candidates.", many)
            later = server.release(sent)
            big = {"A context of many candidates.", *many}
            assert sorted(waiting) in map(sorted, later), later  # the dozen in one request
            alone = [texts for texts in later if sorted(texts) != sorted(waiting)]  # the call of many texts alone, in
            assert all(big >= set(texts) for texts in alone) and sum(map(len, alone)) == len(big), later  # requests of
            # at most the embedder's batch size
            server.answered_as_by_vector(server.held + waiting)
            assert sorted(server.answers["A context of many candidates."]) == list(range(EMBED_TEXTS))
        finally:
            server.close()


def test_an_endpoint_down_fails_the_calls_waiting_together_once_and_a_refused_text_only_its_own_call(tmp_path,
                                                                                                    monkeypatch):
    """Calls whose texts went to the endpoint together share its outcome only where it is shared: an endpoint that
    answers 503 to every try fails them all after one request's tries (not a round of tries per call); one that
    answers 400 (as for a text over its limit) is asked again call by call, so only the refused text's call fails."""
    with FakeEmbeddingsServer(dim=16) as fake:
        server = HeldEndpoint(tmp_path, monkeypatch, fake)
        try:
            fake.status_for = lambda inputs: 503 if any(t.startswith("Down ") for t in inputs) else None
            sent = server.hold()
            down = [f"Down text {i}." for i in range(6)]
            server.queue(down)
            later = server.release(sent)
            assert len(later) == 3 and all(sorted(texts) == sorted(down) for texts in later), later  # 3 tries
            for text in down:
                e = server.answers[text]
                assert isinstance(e, ServiceError) and e.reason == "EMBEDDING_SERVICE_FAILED", (text, e)
                assert "HTTP 503" in e.details, e.details

            fake.status_for = lambda inputs: 400 if "Refused text." in inputs else None
            server.held = [f"Held again {i}." for i in range(len(server.held))]
            sent = server.hold()
            fine = [f"Fine text {i}." for i in range(5)]
            server.queue([*fine, "Refused text."])
            later = server.release(sent)
            assert sorted(later[0]) == sorted([*fine, "Refused text."]) and sorted(map(tuple, later[1:])) == sorted(
                (text,) for text in [*fine, "Refused text."]), later  # the batch, then each call alone
            e = server.answers["Refused text."]
            assert isinstance(e, ServiceError) and e.reason == "EMBEDDING_SERVICE_FAILED" and "answered 400" in e.details
            server.answered_as_by_vector(server.held + fine)
        finally:
            server.close()


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
