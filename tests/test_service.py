"""The gRPC service end to end: a real server on 127.0.0.1 (port 0), the real model and store, both clients."""

import asyncio
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from conftest import REPO, LiveServer, run_cli
from grpc_health.v1 import health_pb2, health_pb2_grpc
from nextpara.client import (
    AsyncClient,
    Client,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ServiceError,
    Unauthenticated,
)
from nextpara.client.errors import from_rpc_error
from nextpara.v1 import nextpara_pb2 as pb
from nextpara.v1 import nextpara_pb2_grpc as pb_grpc


def some_ids(client, n=12):
    return [p.paragraph_id for p in client.get_paragraphs(list(range(1, n + 1)))]


def test_every_rpc_from_the_sync_client(client):
    info = client.info()
    assert info.dim == 384 and info.paragraphs > 500 and info.model_version and info.max_context == 8
    ids = some_ids(client)
    r = client.predict_next(ids[:3], top_k=4, include_attention=True)
    assert len(r.predictions) == 4 and r.model_version == info.model_version and r.index_version == info.index_version
    assert not {p.paragraph_id for p in r.predictions} & set(ids[:3])
    assert len(r.attention) == 4 and all(len(h) == 3 for h in r.attention)
    text = client.get_paragraphs([ids[5]], include_vectors=True)[0]
    assert len(text.vector) == 384
    by_text = client.predict_next([text.text], top_k=3, omit_text=True)
    assert all(p.text == "" for p in by_text.predictions)
    rr = client.rerank(ids[:2], [ids[5], "A sentence about something else entirely.", text.vector], top_k=2)
    assert len(rr.order) == 2 and set(rr.order) <= {0, 1, 2}
    many = list(client.rerank_many([{"context": ids[:2], "candidates": ids[3:8], "request_id": f"q{i}"} for i in range(20)],
                                   max_in_flight=4))
    assert [m.request_id for m in many] == [f"q{i}" for i in range(20)]
    assert all(m.order == many[0].order for m in many)
    before = client.info()
    added = client.add_documents([{"doc_id": "svc-test", "title": "t",
                                   "paragraphs": ["The server stores this paragraph.", "And this one after it."]}])
    assert (added.documents_added, added.paragraphs_written) == (1, 2) and added.index_version > before.index_version
    assert client.info().paragraphs == before.paragraphs + 2
    deleted = client.delete_documents(["svc-test"])
    assert (deleted.documents_deleted, deleted.paragraphs_deleted) == (1, 2)
    assert client.info().paragraphs == before.paragraphs
    assert client.health() == "SERVING"


def test_every_rpc_from_the_async_client(server):
    async def go():
        async with AsyncClient(server.address, timeout=60) as c:
            info = await c.info()
            ids = [p.paragraph_id for p in await c.get_paragraphs([1, 2, 3, 4, 5, 6])]
            r = await c.predict_next(ids[:2], top_k=3)
            rr = await c.rerank(ids[:2], ids[2:6])
            many = [m async for m in c.rerank_many([(ids[:2], ids[2:6])] * 5, max_in_flight=2)]
            added = await c.add_documents([{"doc_id": "async-doc", "paragraphs": ["Async clients add documents too."]}])
            deleted = await c.delete_documents(["async-doc"])
            return info, r, rr, many, added, deleted, await c.health(), await c.reload()
    info, r, rr, many, added, deleted, health, (model_version, _) = asyncio.run(go())
    assert len(r.predictions) == 3 and sorted(rr.order) == [0, 1, 2, 3]
    assert [m.order for m in many] == [rr.order] * 5 and [m.request_id for m in many] == ["0", "1", "2", "3", "4"]
    assert added.documents_added == 1 and deleted.paragraphs_deleted == 1
    assert health == "SERVING" and model_version == info.model_version


def raw_predict(client, **fields):
    """A PredictNext the client would refuse before sending (a caller in another language may send it)."""
    return client._call("PredictNext", pb.PredictNextRequest(context=[pb.ContextParagraph(paragraph_id=1)], **fields), 30)


@pytest.mark.parametrize("call, error, message", [
    (lambda c: c.predict_next([]), InvalidArgument, "context is empty"),
    (lambda c: c.predict_next([""]), InvalidArgument, r"context\[0\]: empty text"),
    (lambda c: c.predict_next([[0.1] * 5]), InvalidArgument, r"context\[0\]: vector of dimension 5"),
    (lambda c: c.predict_next([[float("nan")] * 384]), InvalidArgument, "NaN"),
    (lambda c: c.predict_next([10**12]), NotFound, "unknown paragraph id"),
    (lambda c: raw_predict(c, top_k=5000), InvalidArgument, "top_k must be an integer from 1 to 1000"),
    (lambda c: raw_predict(c, top_k=0), InvalidArgument, "top_k must be an integer from 1 to 1000, got 0"),
    (lambda c: c.rerank([1], []), InvalidArgument, "candidates is empty"),
    (lambda c: c.get_paragraphs([]), InvalidArgument, "paragraph_ids is empty"),
    (lambda c: c.get_paragraphs([10**12]), NotFound, "unknown paragraph id"),
    (lambda c: c.delete_documents(["no-such-doc"]), NotFound, "unknown doc_id"),
    (lambda c: c.add_documents([{"doc_id": "", "paragraphs": ["x"]}]), InvalidArgument, "doc_id must be a non-empty"),
    (lambda c: c.add_documents([{"doc_id": "v", "paragraphs": ["x"], "vectors": [[1.0, 2.0]]}]), InvalidArgument,
     "dimension 2"),
    (lambda c: c.add_documents([{"doc_id": "ok-1", "paragraphs": ["fine"]}, {"doc_id": "bad", "paragraphs": []}]),
     InvalidArgument, "has no paragraphs"),
    # found by bench/reliability/fuzz_service.py: vectors of different lengths in one document were INTERNAL
    (lambda c: c.add_documents([{"doc_id": "ragged", "paragraphs": ["a", "b"], "vectors": [[1.0] * 384, [1.0, 2.0]]}]),
     InvalidArgument, "'ragged' vector 1: vector of dimension 2, this store's embedder .* has dimension 384"),
])
def test_bad_input_gets_the_documented_status_and_changes_nothing(client, call, error, message):
    before = client.info()
    with pytest.raises(error, match=message) as err:
        call(client)
    assert isinstance(err.value.__cause__, grpc.RpcError)
    after = client.info()
    assert (after.documents, after.paragraphs, after.index_version) == (before.documents, before.paragraphs,
                                                                      before.index_version)


def test_oversized_and_malformed_messages(server, client):
    big = "x" * (server.settings.max_message_bytes + 10)
    with Client(server.address, max_message_bytes=64 * 1024 * 1024) as unlimited:
        with pytest.raises(Exception) as err:
            unlimited.predict_next([big])
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    with grpc.insecure_channel(server.address) as channel:  # a ContextParagraph with nothing set
        stub = pb_grpc.NextParagraphServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.PredictNext(pb.PredictNextRequest(context=[pb.ContextParagraph()]), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "context[0]: none of text" in err.value.details()
        raw = channel.unary_unary("/nextpara.v1.NextParagraphService/PredictNext")  # bytes that are not protobuf
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\xff\xff\xff\xff", timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a valid" in err.value.details()
    assert client.health() == "SERVING"


def test_a_stream_that_fails_midway_keeps_the_committed_messages(server, client):
    before = client.info().paragraphs

    def messages():
        yield pb.AddDocumentsRequest(documents=[pb.Document(doc_id="stream-a", paragraphs=["First committed message."])])
        yield pb.AddDocumentsRequest(documents=[pb.Document(doc_id="stream-b", paragraphs=["Second, refused."],
                                                            vectors=[pb.Vector(values=[1.0])])])
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.NextParagraphServiceStub(channel).AddDocuments(messages(), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "1 earlier message(s) were committed" in err.value.details()
    assert client.info().paragraphs == before + 1
    client.delete_documents(["stream-a"])


def writes_running(server, kind: str) -> float:
    """The server's count of store writes of ``kind`` whose thread is still running (its metrics page)."""
    return server.metric(f'nextpara_writes_running{{kind="{kind}"}}')


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.02)


def test_a_cancelled_write_holds_the_write_lock_until_its_thread_is_done(server, client):
    """A client that cancels an AddDocuments cannot stop the thread embedding its message; the next write
    must wait for that thread (it used to start at once and the store changed after it had answered).
    Timing-free: the cancel comes once the server has the write under way, and the check once it is done."""
    texts = [f"Paragraph {i} of a long message, written so that embedding it takes a while." for i in range(300)]
    request = pb.AddDocumentsRequest(documents=[pb.Document(doc_id="cancelled-write", paragraphs=texts)])
    before = client.info()
    with grpc.insecure_channel(server.address) as channel:
        call = pb_grpc.NextParagraphServiceStub(channel).AddDocuments.future(iter([request]), timeout=60)
        wait_until(lambda: writes_running(server, "write") == 1, "the write to be under way")
        call.cancel()
    with pytest.raises(NotFound):
        client.delete_documents(["no-such-doc"])  # a write: it must wait for the cancelled one
    settled = client.info()
    wait_until(lambda: writes_running(server, "write") + writes_running(server, "delete") == 0,
               "the write threads to finish")
    after = client.info()
    assert after.index_version == settled.index_version  # nothing changed once the next write had answered
    assert after.paragraphs == before.paragraphs + 300  # the thread had started: the whole message committed
    client.delete_documents(["cancelled-write"])


def test_deadline_shorter_than_the_work(client):
    with pytest.raises(DeadlineExceeded):
        client.predict_next(["A context paragraph that needs embedding before anything else."], timeout=0.001)
    assert client.health() == "SERVING" and len(client.predict_next([1], top_k=1).predictions) == 1


def test_concurrent_clients_get_the_sequential_answers(server, client):
    ids = some_ids(client, 40)
    contexts = [ids[i:i + 3] for i in range(32)]
    expected = [[p.paragraph_id for p in client.predict_next(c, top_k=5).predictions] for c in contexts]
    got = [None] * 32

    def worker(i):
        with Client(server.address, timeout=120) as c:
            got[i] = [p.paragraph_id for p in c.predict_next(contexts[i], top_k=5).predictions]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    assert 'nextpara_requests_total{code="OK",method="PredictNext"}' in metrics
    assert "nextpara_batch_size_count" in metrics and 'nextpara_stage_seconds_count{stage="model"}' in metrics


def test_reflection_lists_the_service(server):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=30)
        names = [s.name for r in responses for s in r.list_services_response.service]
    assert "nextpara.v1.NextParagraphService" in names and "grpc.health.v1.Health" in names


def test_generic_client_compiled_from_the_proto_alone(server, client, tmp_path):
    """An application in any language has only proto/: compile it here and call PredictNext."""
    from grpc_tools import protoc

    src = tmp_path / "src"
    shutil.copytree(REPO / "proto" / "nextpara", src / "nextpara", ignore=shutil.ignore_patterns("*.py", "*.pyi", "__pycache__"))
    out = tmp_path / "out"
    out.mkdir()
    sys.path.insert(0, str(REPO / "proto"))
    try:  # it imports google/rpc/status.proto, which every gRPC toolchain has (here: googleapis-common-protos)
        from generate import googleapis_root
    finally:
        sys.path.remove(str(REPO / "proto"))
    well_known = Path(protoc.__file__).resolve().parent / "_proto"
    assert protoc.main(["protoc", f"-I{src}", f"-I{well_known}", f"-I{googleapis_root()}", f"--python_out={out}",
                        f"--grpc_python_out={out}", str(src / "nextpara/v1/nextpara.proto")]) == 0
    code = f"""
import sys; sys.path.insert(0, {str(out)!r})
import grpc
from nextpara.v1 import nextpara_pb2 as pb, nextpara_pb2_grpc as stubs
assert pb.__file__.startswith({str(out)!r})
with grpc.insecure_channel({server.address!r}) as ch:
    r = stubs.NextParagraphServiceStub(ch).PredictNext(pb.PredictNextRequest(
        context=[pb.ContextParagraph(paragraph_id=1), pb.ContextParagraph(text="Another paragraph.")], top_k=3), timeout=60)
print(len(r.predictions), r.model_version)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3", client.info().model_version]


def test_committed_stubs_match_the_proto():
    r = subprocess.run([sys.executable, str(REPO / "proto" / "generate.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def private_copy(server_store, tmp_path, *skip):
    store = tmp_path / "store"
    shutil.copytree(server_store, store, ignore=shutil.ignore_patterns("write.lock", *skip))
    return store


def test_auth_roles(server_store, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)  # every log record of the server, at every level
    s = LiveServer(private_copy(server_store, tmp_path), read_tokens="reader-token", write_tokens="writer-token").start()
    try:
        with Client(s.address) as anonymous:
            with pytest.raises(Unauthenticated) as err:
                anonymous.info()
            assert err.value.reason == "TOKEN_MISSING"
            assert anonymous.health() == "SERVING"  # health stays open for load balancers
        r = run_cli("status", "--address", s.address, timeout=60)  # ... and `status` says it before the refusal
        assert r.returncode == 1 and r.stdout.startswith("health        SERVING") and "no bearer token" in r.stderr, r
        r = run_cli("status", "--address", s.address, "--json", timeout=60)  # one document too (it printed none)
        assert r.returncode == 1 and "no bearer token" in r.stderr, r
        shown = json.loads(r.stdout)
        assert sorted(shown) == ["error", "health"] and shown["health"] == "SERVING"
        error = shown["error"]
        assert (error["code"], error["reason"]) == ("UNAUTHENTICATED", "TOKEN_MISSING"), error
        assert error["message"].startswith("no bearer token"), error
        with Client(s.address, token="wrong-token-7f3a") as wrong:
            with pytest.raises(Unauthenticated) as err:
                wrong.predict_next([1])
            assert err.value.reason == "TOKEN_INVALID"
        with grpc.insecure_channel(s.address) as channel:  # HTTP's schemes are any case (RFC 7235): "bearer" is Bearer
            get_info = pb_grpc.NextParagraphServiceStub(channel).GetInfo
            for header in ("bearer reader-token", "BEARER  reader-token"):
                assert get_info(pb.GetInfoRequest(), metadata=[("authorization", header)], timeout=60).paragraphs > 0
            for header, says in [("Basic cmVhZGVyOnRva2Vu", "the authorization metadata's scheme is not Bearer"),
                                 ("reader-token", "the authorization metadata's scheme is not Bearer"),
                                 ("bearer ", "no bearer token")]:
                with pytest.raises(grpc.RpcError) as err:
                    get_info(pb.GetInfoRequest(), metadata=[("authorization", header)], timeout=60)
                refusal = from_rpc_error(err.value)
                assert (refusal.reason, says in str(refusal)) == ("TOKEN_MISSING", True), (header, str(refusal))
                assert "reader-token" not in str(refusal)  # a token sent without its scheme is not repeated
        with Client(s.address, token="reader-token") as reader:
            assert reader.info().paragraphs > 0 and reader.predict_next([1], top_k=1).predictions
            first = reader.list_documents(2).documents[0]  # listing is reading
            assert reader.get_document(first.doc_id).document == first
            with pytest.raises(PermissionDenied) as err:
                reader.add_documents([{"doc_id": "x", "paragraphs": ["y"]}])
            assert (err.value.reason, err.value.metadata) == ("WRITE_ROLE_REQUIRED", {"method": "AddDocuments"})
            with pytest.raises(PermissionDenied) as err:
                reader.delete_documents(["x"])
            assert err.value.reason == "WRITE_ROLE_REQUIRED"
        with Client(s.address, token="writer-token") as writer:
            assert writer.add_documents([{"doc_id": "auth-doc", "paragraphs": ["Written with a write token."]}]).documents_added == 1
            assert writer.delete_documents(["auth-doc"]).documents_deleted == 1
        # refused calls are counted as answered ones are (the interceptor refused them before the servicer counted)
        assert s.metric('nextpara_requests_total{code="UNAUTHENTICATED",method="GetInfo"}') == 6  # info, 2 status, 3 raw
        assert s.metric('nextpara_requests_total{code="UNAUTHENTICATED",method="PredictNext"}') == 1
        assert s.metric('nextpara_requests_total{code="PERMISSION_DENIED",method="DeleteDocuments"}') == 1
    finally:
        s.stop()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert len(caplog.records) > 3, "the server's log was not captured"
    for token in ("reader-token", "writer-token", "wrong-token-7f3a"):
        assert token not in logged, f"a token ({token}) was logged"


def test_health_through_startup_reload_and_shutdown(server_store, tmp_path):
    store = private_copy(server_store, tmp_path, "model.safetensors")
    s = LiveServer(store).start()
    try:
        with Client(s.address) as c:
            # no model of its own: the general model serves (plain cosine where it does not fit: test_errors.py)
            assert c.health() == "SERVING" and c.info().model.source == "general"
            assert c.predict_next([1]).model_version == c.info().model.version
            shutil.copyfile(server_store / "model.safetensors", store / "model.safetensors")
            model_version, _ = c.reload()
            assert model_version == c.info().model.version and c.info().model.source == "trained"
            assert c.health() == "SERVING"
            with grpc.insecure_channel(s.address) as channel:
                watch = health_pb2_grpc.HealthStub(channel).Watch(
                    health_pb2.HealthCheckRequest(service="nextpara.v1.NextParagraphService"), timeout=60)
                assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
                release = threading.Event()

                def slow_requests():  # an in-flight stream that outlives the shutdown signal
                    yield pb.RerankStreamRequest(request_id="a", context=[pb.ContextParagraph(paragraph_id=1)],
                                                 candidates=[pb.ContextParagraph(paragraph_id=2)])
                    release.wait(30)
                    yield pb.RerankStreamRequest(request_id="b", context=[pb.ContextParagraph(paragraph_id=1)],
                                                 candidates=[pb.ContextParagraph(paragraph_id=3)])
                stream = pb_grpc.NextParagraphServiceStub(channel).RerankStream(slow_requests(), timeout=60)
                assert next(stream).request_id == "a"
                stopper = threading.Thread(target=s.stop)
                stopper.start()
                assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
                release.set()
                assert next(stream).request_id == "b"  # the in-flight call finished during the grace period
                stopper.join()
    finally:
        if s.thread.is_alive():
            s.stop()


def test_a_stop_during_a_long_write_turns_health_not_serving_at_once(server_store, tmp_path):
    """The serving loop's snapshot waited for the write under way (the write lock) before it looked at the stop: SIGTERM
    during a 25-second AddDocuments left the server SERVING, taking new calls, until the write was through."""
    store = private_copy(server_store, tmp_path)
    s = LiveServer(store, snapshot_seconds=0.1).start()
    try:
        docs = [{"doc_id": f"long-{i}", "paragraphs": [f"Paragraph {j} of long document {i}, about item {i * 1000 + j}."
                                                        for j in range(150)]} for i in range(8)]  # seconds of embedding
        with Client(s.address, timeout=120) as c:
            def add():  # cut short by the shutdown (CANCELLED, UNAVAILABLE) or through: the writer's business here
                try:
                    c.add_documents(docs)
                except ServiceError:
                    pass
            writing = threading.Thread(target=add)
            writing.start()
            while not s.metric('nextpara_writes_running{kind="write"}'):  # the write holds the lock ...
                assert writing.is_alive(), "the write ended before the stop could be tested"
                time.sleep(0.02)
            time.sleep(0.3)  # ... and the loop's snapshot waits for it
            with grpc.insecure_channel(s.address) as channel:
                watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=120)
                assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
                stopper = threading.Thread(target=s.stop)
                stopped_at = time.monotonic()
                stopper.start()
                assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
                assert time.monotonic() - stopped_at < 1.5 and writing.is_alive()
                stopper.join()
            writing.join(60)
    finally:
        if s.thread.is_alive():
            s.stop()


def test_add_documents_is_chunked_under_the_message_limit(server, client):
    from nextpara.client._convert import chunk_documents

    docs = [{"doc_id": f"chunk-{i}", "paragraphs": [f"Paragraph {j} of chunked document {i}. " * 12 for j in range(4)]}
            for i in range(40)]
    messages = list(chunk_documents(docs, 16 * 1024))
    assert len(messages) > 3 and all(m.ByteSize() <= 16 * 1024 for m in messages)
    assert [d.doc_id for m in messages for d in m.documents] == [d["doc_id"] for d in docs]
    before = client.info().paragraphs
    with Client(server.address, max_message_bytes=80 * 1024, timeout=120) as small:
        assert small.add_documents(docs).documents_added == 40
    assert client.info().paragraphs == before + 160
    client.delete_documents([d["doc_id"] for d in docs])
    with pytest.raises(ValueError, match="over the 1024-byte message limit"):
        list(chunk_documents([{"doc_id": "huge", "paragraphs": ["x" * 5000]}], 1024))


def test_a_server_loads_its_text_model_and_every_word_row_once_it_has_loaded(server_store):
    """After loading, a server loads its local text model and reads and weighs every stored paragraph's word row in the
    background (its first query by text then waits for no model, its queries read no candidate's text), and says so
    in its log, in that order."""
    from nextpara.server.process import ServerProcess
    from nextpara.server.warm_up import TEXT_MODEL_READY, WORD_ROWS_READY
    from nextpara.store.store import open_store

    with open_store(server_store, readonly=True) as store:
        n = store.count_paragraphs()
    with ServerProcess.local(server_store, "--read-only", metrics=False) as server:
        assert server.wait_for(WORD_ROWS_READY, 120), server.tail()
        assert f"{WORD_ROWS_READY}: word rows of {n} paragraphs kept in" in server.log
        assert 0 <= server.log.index(f"{TEXT_MODEL_READY}: text model loaded ahead in") < server.log.index(WORD_ROWS_READY)
