"""Idempotency, end to end against a real server on 127.0.0.1: DeleteDocuments' allow_missing,
which calls the clients retry, and AddDocuments streams that fail on the caller's side; and a client used after it
was closed."""

import asyncio
import json
import re
import socket
import threading
import time

import pytest
from conftest import run_cli
from nextpara.client import AsyncClient, Client, InvalidArgument, NotFound, Unavailable, _retry
from nextpara.v1 import nextpara_pb2 as pb


def add(client, *doc_ids):
    client.add_documents([{"doc_id": d, "paragraphs": [f"The only paragraph of {d}."]} for d in doc_ids])


# ---- allow_missing ----------------------------------------------------------------------------------------------

def test_delete_twice_with_allow_missing_succeeds_and_reports_the_id_missing(client):
    add(client, "idem-1")
    first = client.delete_documents(["idem-1"], allow_missing=True)
    assert (first.documents_deleted, first.paragraphs_deleted, first.missing_doc_ids) == (1, 1, [])
    second = client.delete_documents(["idem-1"], allow_missing=True)
    assert (second.documents_deleted, second.paragraphs_deleted, second.missing_doc_ids) == (0, 0, ["idem-1"])
    assert second.index_version == first.index_version  # nothing was written
    with pytest.raises(NotFound, match="unknown doc_id.*'idem-1'"):
        client.delete_documents(["idem-1"])


def test_allow_missing_deletes_the_stored_ids_and_lists_the_others(client):
    add(client, "idem-a", "idem-b")
    before = client.info()
    with pytest.raises(NotFound, match="'idem-gone'"):  # without it: nothing deleted
        client.delete_documents(["idem-a", "idem-gone", "idem-b"])
    assert client.info().documents == before.documents
    r = client.delete_documents(["idem-gone", "idem-a", "idem-b", "idem-a", "idem-gone-2"], allow_missing=True)
    assert (r.documents_deleted, r.paragraphs_deleted) == (2, 2)
    assert r.missing_doc_ids == ["idem-gone", "idem-gone-2"]
    assert client.info().documents == before.documents - 2


def test_allow_missing_from_the_async_client(server):
    async def go():
        async with AsyncClient(server.address, timeout=60) as c:
            await c.add_documents([{"doc_id": "idem-async", "paragraphs": ["Deleted twice, asynchronously."]}])
            first = await c.delete_documents(["idem-async"], allow_missing=True)
            second = await c.delete_documents(["idem-async"], allow_missing=True)
            with pytest.raises(NotFound):
                await c.delete_documents(["idem-async"])
            return first, second
    first, second = asyncio.run(go())
    assert (first.documents_deleted, first.missing_doc_ids) == (1, [])
    assert (second.documents_deleted, second.missing_doc_ids) == (0, ["idem-async"])


def test_a_closed_client_says_so_in_both_clients(server):
    closed = re.escape("is closed (by close() or the end of its with block): open a new one")
    with Client(server.address, timeout=60) as c:
        assert c.info().documents > 0
    for call in (c.health, c.info, lambda: c.predict_next(["A paragraph."]),  # health first: it crashed the process
                 lambda: list(c.rerank_many([(["a"], ["b"])])), lambda: add(c, "idem-closed")):
        with pytest.raises(ValueError, match=f"this Client {closed}"):
            call()

    async def go():
        async with AsyncClient(server.address, timeout=60) as a:
            assert (await a.info()).documents > 0
        for call in (a.health, a.info, lambda: a.rerank(["a"], ["b"]), lambda: a.add_documents([{"doc_id": "idem-closed",
                                                                                           "paragraphs": ["x"]}])):
            with pytest.raises(ValueError, match=f"this AsyncClient {closed}"):
                await call()
        with pytest.raises(ValueError, match=f"this AsyncClient {closed}"):
            [r async for r in a.rerank_many([(["a"], ["b"])])]
    asyncio.run(go())
    with Client(server.address, timeout=60) as c:
        with pytest.raises(NotFound):  # nothing was sent
            c.get_document("idem-closed")


def test_a_request_over_the_send_limit_is_refused_unsent_and_no_limit_means_none(server):
    from nextpara.errors import InvalidInputError

    with Client(server.address, timeout=60, options=[("grpc.max_send_message_length", 2000)]) as small:
        with pytest.raises(InvalidInputError, match="the request is [0-9,]+ bytes, over the 2,000-byte message limit"):
            small.predict_next(["A paragraph of some length. " * 100])
        assert small.predict_next(["A short paragraph."], top_k=1).predictions  # under it: sent
    with Client(server.address, timeout=60, options=[("grpc.max_send_message_length", -1)]) as unlimited:
        assert unlimited.predict_next(["A paragraph of some length. " * 100], top_k=1).predictions  # -1: no limit


def test_cli_delete_allow_missing(server, client):
    add(client, "idem-cli")
    r = run_cli("delete", "idem-cli", "idem-cli-gone", "--allow-missing", "--address", server.address, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1 documents (1 paragraphs) deleted" in r.stdout and "not stored: idem-cli-gone" in r.stdout
    r = run_cli("delete", "idem-cli", "--address", server.address, timeout=60)
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr and "'idem-cli'" in r.stderr


# ---- which calls are retried --------------------------------------------------------------------------------------

def test_every_method_has_a_retry_decision():
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["NextParagraphService"].methods}
    assert methods == set(_retry.IDEMPOTENT) | set(_retry.NOT_IDEMPOTENT)
    assert not set(_retry.IDEMPOTENT) & set(_retry.NOT_IDEMPOTENT)
    named = [(n["service"], n.get("method")) for c in json.loads(_retry.SERVICE_CONFIG)["methodConfig"] for n in c["name"]]
    assert sorted(named) == sorted((_retry.SERVICE, m) for m in _retry.IDEMPOTENT)  # never DeleteDocuments, nor health
    assert _retry.retried("GetInfo") and _retry.retried("AddDocuments")
    assert not _retry.retried("DeleteDocuments", pb.DeleteDocumentsRequest(doc_ids=["a"]))
    assert _retry.retried("DeleteDocuments", pb.DeleteDocumentsRequest(doc_ids=["a"], allow_missing=True))


class AnswerLosingProxy:
    """A TCP proxy on 127.0.0.1 in front of a real server that loses one answer: it forwards the first call, lets the
    server do the work, and closes the connection when the server's response HEADERS frame arrives, so the client
    gets UNAVAILABLE for a call that succeeded. Later connections pass through. ``calls`` counts the calls forwarded
    (HEADERS frames from the client, read from the HTTP/2 frame headers)."""

    PREFACE = 24  # the client's connection preface, before its first frame

    def __init__(self, target: str):
        self.target = target.rsplit(":", 1)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.calls, self.answers_to_lose = 0, 1
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((self.target[0], int(self.target[1])))
            pair = (downstream, upstream)
            threading.Thread(target=self._pump, args=(downstream, upstream, pair, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, downstream, pair, False), daemon=True).start()

    def _pump(self, src, dst, pair, from_client):
        buf, skip = b"", self.PREFACE if from_client else 0
        try:
            while data := src.recv(65536):
                buf += data
                if skip:
                    n = min(skip, len(buf))
                    dst.sendall(buf[:n])
                    buf, skip = buf[n:], skip - n
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                    size, kind, stream = 9 + int.from_bytes(buf[:3], "big"), buf[3], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    if kind == 1 and stream:  # HEADERS of a call
                        if from_client:
                            self.calls += 1
                        elif self.answers_to_lose:
                            self.answers_to_lose -= 1
                            raise ConnectionAbortedError("the answer is lost")
                    dst.sendall(buf[:size])
                    buf = buf[size:]
        except OSError:
            pass
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.listener.close()


def test_a_delete_whose_answer_is_lost_is_retried_only_with_allow_missing(server, client):
    """The bug: the channel retried every method on UNAVAILABLE, so a delete that succeeded but lost its answer was
    sent again and answered NOT_FOUND."""
    add(client, "lost-plain", "lost-allowed")
    proxy = AnswerLosingProxy(server.address)
    try:
        with Client(proxy.address, timeout=30) as through:
            with pytest.raises(Unavailable):
                through.delete_documents(["lost-plain"])
            assert proxy.calls == 1  # not retried
            assert client.delete_documents(["lost-plain"], allow_missing=True).missing_doc_ids == ["lost-plain"]
            proxy.answers_to_lose = 1
            r = through.delete_documents(["lost-allowed"], allow_missing=True)
            assert proxy.calls == 3  # retried once, and the retry found the work done
            assert (r.documents_deleted, r.missing_doc_ids) == (0, ["lost-allowed"])
            proxy.answers_to_lose = 1
            assert through.info().documents == client.info().documents  # reads are retried by the channel
            assert proxy.calls == 5
    finally:
        proxy.close()


# ---- AddDocuments streams that fail on the caller's side ----------------------------------------------------------

def failing_documents(n_good: int, error: Exception, prefix: str):
    for i in range(n_good):
        yield {"doc_id": f"{prefix}-{i}", "paragraphs": [f"Paragraph of document {i}. " + "Some filler words. " * 300]}
    raise error


def test_an_iterable_that_raises_surfaces_its_own_error(server, client):
    """It used to fail as UNKNOWN: Exception iterating requests! (grpc reads the iterable on its own thread)."""
    before = client.info().documents
    with Client(server.address, max_message_bytes=80 * 1024, timeout=60) as small:  # 16 KiB messages: 2 documents each
        with pytest.raises(ValueError, match="the caller's own error") as err:
            small.add_documents(failing_documents(7, ValueError("the caller's own error"), "raises"))
    assert not isinstance(err.value, InvalidArgument)
    assert err.value.documents_committed == 6  # three messages sent; the seventh document's was not
    assert client.info().documents == before + 6
    assert "6 document(s) sent before it were committed" in "".join(getattr(err.value, "__notes__", []))
    client.delete_documents([f"raises-{i}" for i in range(7)], allow_missing=True)


def test_an_iterable_that_raises_in_the_async_client(server, client):
    async def go():
        async with AsyncClient(server.address, max_message_bytes=80 * 1024, timeout=60) as c:
            await c.add_documents(failing_documents(3, KeyError("async error"), "araises"))
    with pytest.raises(KeyError, match="async error") as err:
        asyncio.run(go())
    assert err.value.documents_committed == 2
    assert client.delete_documents([f"araises-{i}" for i in range(3)], allow_missing=True).documents_deleted == 2


def test_a_document_over_the_message_limit_is_a_clear_client_error(server, client):
    before = client.info()
    docs = [{"doc_id": "fits", "paragraphs": ["A small document."]},
            {"doc_id": "too-big", "paragraphs": ["x" * 200_000]}]
    with Client(server.address, max_message_bytes=128 * 1024, timeout=60) as small:
        with pytest.raises(ValueError, match=r"document 1 \('too-big'\) is \d+ bytes encoded, over the \d+-byte") as err:
            small.add_documents(docs)
    assert err.value.documents_committed == 0
    assert client.info().index_version == before.index_version


def test_documents_are_chunked_under_the_servers_message_limit_too(trained_store, tmp_path):
    """The client chunked under its own limit (16 MiB by default) only, so a server started with --max-message-mb 1
    refused the first message whole; now the server's limit (GetInfo) counts too."""
    import shutil

    from conftest import LiveServer

    shutil.copytree(trained_store, tmp_path / "store")
    server = LiveServer(tmp_path / "store", max_message_mb=1).start()
    try:
        docs = [{"doc_id": f"big-{i}", "paragraphs": [f"Document {i}. " + "Filler words here. " * 11_000]}
                for i in range(6)]  # about 210 KB each: 1.3 MB in all
        with Client(server.address, timeout=60) as c:
            assert c.add_documents(docs).documents_added == 6
            assert c.add_documents(docs).documents_unchanged == 6

        async def go():
            async with AsyncClient(server.address, timeout=60) as c:
                return await c.add_documents([dict(d, doc_id=f"a{d['doc_id']}") for d in docs])
        assert asyncio.run(go()).documents_added == 6

        async def late_documents():  # an async generator: Python's "'async_generator' object is not iterable" before
            yield {"doc_id": "late", "paragraphs": ["Late."]}

        async def refused():
            async with AsyncClient(server.address, timeout=60) as c:
                before = (await c.info()).index_version
                with pytest.raises(TypeError, match=r"not an async iterable \(async_generator\); collect it first"):
                    await c.add_documents(late_documents())
                assert (await c.info()).index_version == before  # nothing sent
        asyncio.run(refused())
        with Client(server.address, timeout=60) as c:  # the sync client too: it sent an empty AddDocuments call first
            before = c.info().index_version
            with pytest.raises(TypeError, match=r"not an async iterable \(async_generator\); collect it first"):
                c.add_documents(late_documents())
            assert c.info().index_version == before

        async def unreachable():  # refused before any call: not UNAVAILABLE from asking the server's limit first
            async with AsyncClient("127.0.0.1:9", timeout=5) as c:
                with pytest.raises(TypeError, match="not an async iterable"):
                    await c.add_documents(late_documents())
        asyncio.run(unreachable())
        with Client("127.0.0.1:9", timeout=5) as c, pytest.raises(TypeError, match="not an async iterable"):
            c.add_documents(late_documents())
    finally:
        server.stop()


# ---- nextpara add with a bad line ------------------------------------------------------------------------------------

def write_lines(path, n_good: int, bad: str):
    lines = [json.dumps({"doc_id": f"cli-add-{i}", "paragraphs": [f"Line {i}."]}) for i in range(n_good)]
    path.write_text("\n".join(lines + [bad]) + "\n")


@pytest.mark.parametrize("bad, reason", [
    ('{"doc_id": "broken", "paragraphs": ', "not valid JSON"),
    ('{"doc_id": "empty", "paragraphs": []}', "document 'empty': paragraphs must be a non-empty list"),
    ('{"doc_id": "p", "paragraphs": "just a string"}',  # was "a non-empty list, got 'just a string'": not its fault
     "document 'p': paragraphs must be a list of strings, got a string"),
    ('["a", "list"]', "not a document"),
    ('{"doc_id": "cli-add-3", "paragraphs": ["again"]}', "duplicate doc_id 'cli-add-3' (first at "),  # one write,
    # as `nextpara build` reads a file: it was refused whole or upserted, depending on which message each landed in
    ('{"doc_id": "s", "paragraphs": ["a \\ud800"]}', "document 's': paragraph 0 holds a lone surrogate"),  # traceback
])
def test_cli_add_with_a_bad_line_500_exits_at_once(server, client, tmp_path, bad, reason):
    """It used to hang until the 30 s deadline and report DEADLINE_EXCEEDED."""
    corpus = tmp_path / "docs.jsonl"
    write_lines(corpus, 499, bad)
    before = client.info()
    t0 = time.monotonic()
    r = run_cli("add", str(corpus), "--address", server.address, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 2, r.stderr
    assert f"{corpus}:500: {reason}" in r.stderr and "0 document(s) before it were committed" in r.stderr
    assert elapsed < 2, f"took {elapsed:.1f} s"
    assert client.info().index_version == before.index_version  # the 499 documents were one message, not yet sent


def test_cli_add_reads_past_a_byte_order_mark_at_the_start(server, client, tmp_path):
    """A file saved with a BOM (as some editors do) was refused as "Unexpected UTF-8 BOM (decode using utf-8-sig)",
    while `nextpara build` of a folder read such files."""
    corpus = tmp_path / "bom.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + json.dumps({"doc_id": "cli-bom", "paragraphs": ["After a mark."]}).encode()
                       + b"\n")
    r = run_cli("add", str(corpus), "--address", server.address, timeout=60)
    assert r.returncode == 0 and "1 added" in r.stdout, r.stderr
    assert client.get_document("cli-bom").document.doc_id == "cli-bom"
    client.delete_documents(["cli-bom"])


def test_cli_add_reports_the_documents_committed_before_a_bad_line(server, client, tmp_path):
    corpus = tmp_path / "big.jsonl"  # documents of 6 MB: the client's 16 MiB messages carry two each
    texts = [f"Document {i}, one long paragraph of a single long word: " + "x" * 6_000_000 for i in range(3)]
    corpus.write_text("".join(json.dumps({"doc_id": f"cli-big-{i}", "paragraphs": [t]}) + "\n" for i, t in enumerate(texts))
                      + "not json\n")
    r = run_cli("add", str(corpus), "--address", server.address, timeout=120)
    assert r.returncode == 2 and f"{corpus}:4: not valid JSON" in r.stderr, r.stderr
    assert "2 document(s) before it were committed" in r.stderr
    assert client.delete_documents([f"cli-big-{i}" for i in range(3)], allow_missing=True).documents_deleted == 2


def test_cli_add_cut_short_says_a_rerun_is_safe(tmp_path):
    """A server that went away mid-upload left `add` saying only UNAVAILABLE: whether to send again was the user's guess."""
    corpus = tmp_path / "one.jsonl"
    corpus.write_text(json.dumps({"doc_id": "nowhere", "paragraphs": ["A paragraph."]}) + "\n")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_cli("add", str(corpus), "--address", f"127.0.0.1:{port}", "--timeout", "3", timeout=60)
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr and "the same command again is safe" in r.stderr, r.stderr


def test_a_document_the_service_refuses_is_named_by_its_line(server, client, tmp_path):
    """The service's refusal names a document by its message and its place there ("message 1, documents[1]"); add
    says the line of the file it came from, and the library the document's place in what it was given."""
    big = "x" * 6_000_000  # the client's 16 MiB messages carry two such documents each
    docs = [{"doc_id": f"cli-line-{i}", "paragraphs": [f"Document {i}: {big}"]} for i in range(3)]
    docs.append({"doc_id": "cli-line-bad", "paragraphs": ["A short one."], "vectors": [[0.5, 0.5]]})  # not 384-d
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("\n".join(json.dumps(d) for d in docs[:2]) + "\n\n" + "\n".join(json.dumps(d) for d in docs[2:])
                      + "\n")  # a blank line 3: the bad document is on line 5
    r = run_cli("add", str(corpus), "--address", server.address, timeout=120)
    assert r.returncode == 1 and f"{corpus}:5: INVALID_ARGUMENT: " in r.stderr and "dimension 2" in r.stderr, r.stderr
    with pytest.raises(InvalidArgument) as err:
        client.add_documents(docs)
    assert err.value.document_index == 3 and err.value.metadata["messageIndex"] == "1"
    assert client.delete_documents([d["doc_id"] for d in docs], allow_missing=True).documents_deleted == 2
