"""Read your writes: min_index_version on a writer and a --read-only replica of one data directory (real servers on
127.0.0.1 serving a trained MiniLM store, writes embedded by the real model). A replica behind says INDEX_BEHIND; asked
to wait, it catches up with what the writer committed and answers; the clients expose the refusal and do not retry it.
"""

import asyncio
import sqlite3
import threading
import time

import grpc
import pytest
from conftest import LiveServer, unit_vectors, vector_store
from nextpara.client import AsyncClient, Client, FailedPrecondition, Reason, RerankResult


@pytest.fixture(scope="module")
def pair(server_store):
    """A writer and a read-only replica of the same data directory, started in that order."""
    writer = LiveServer(server_store).start()
    replica = LiveServer(server_store, read_only=True).start()
    yield writer, replica
    replica.stop()
    writer.stop()


def behind(call) -> FailedPrecondition:
    with pytest.raises(FailedPrecondition) as err:
        call()
    assert err.value.reason == Reason.INDEX_BEHIND == "INDEX_BEHIND" and err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    return err.value


def calls(server, method: str, code: str) -> float:
    """How many calls of ``method`` the server answered with ``code`` (its Prometheus counter)."""
    return server.metric(f'nextpara_requests_total{{code="{code}",method="{method}"}}')


def test_a_replica_behind_a_write_says_index_behind_and_catches_up_when_asked_to_wait(pair):
    writer, replica = pair
    with Client(writer.address, timeout=60) as w, Client(replica.address, timeout=60) as r:
        loaded = r.info().index_version
        added = w.add_documents([{"doc_id": "ryw-1", "title": "Read your writes",
                                  "paragraphs": ["A replica learns of this write from the database.",
                                                 "It answers once its index holds it."]}])
        version = added.index_version
        assert version > loaded and w.info(min_index_version=version).index_version == version  # the writer has it

        # without min_index_version the replica reads its SQLite, which has the write, but reports its index's
        # generation, like every read: fed back as min_index_version, that is served at once
        unasked = r.get_document("ryw-1")
        assert [p.position for p in unasked.paragraphs] == [0, 1] and unasked.index_version == loaded
        page = r.list_documents(page_size=1000)
        assert "ryw-1" in [d.doc_id for d in page.documents] and page.index_version == loaded
        assert r.list_documents(page_size=1, min_index_version=page.index_version).index_version == loaded
        assert r.get_document("ryw-1", min_index_version=unasked.index_version).index_version == loaded

        refused_before = calls(replica, "GetDocument", "FAILED_PRECONDITION")
        e = behind(lambda: r.get_document("ryw-1", min_index_version=version))
        assert calls(replica, "GetDocument", "FAILED_PRECONDITION") == refused_before + 1  # not retried by the client
        assert e.metadata["indexVersion"] == str(loaded) and e.metadata["minIndexVersion"] == str(version)
        assert e.metadata["readOnly"] == "true" and e.metadata["waitedSeconds"] == "0.000" and "wait_for_index" in e.details
        behind(lambda: r.predict_next(["A replica learns of this write."], top_k=3, min_index_version=version))
        behind(lambda: r.rerank([1], [2, 3], min_index_version=version))
        behind(lambda: r.list_documents(min_index_version=version))
        behind(lambda: r.get_paragraphs([1], min_index_version=version))
        assert r.info().index_version == loaded  # refusing did not move it; an older version is served at once
        assert r.get_paragraphs([1], min_index_version=loaded)[0].paragraph_id == 1

        doc = r.get_document("ryw-1", min_index_version=version, wait_for_index=True)
        assert [p.position for p in doc.paragraphs] == [0, 1] and doc.index_version >= version
        ids = [p.paragraph_id for p in doc.paragraphs]
        stored = r.get_paragraphs(ids, include_vectors=True, min_index_version=version)
        assert all(len(p.vector) == 384 for p in stored)  # the replica's index holds the new vectors, not only SQLite
        found = r.predict_next([ids[0]], top_k=1000, min_index_version=version, wait_for_index=True)  # every candidate:
        assert found.index_version >= version and ids[1] in [p.paragraph_id for p in found.predictions]  # FAISS finds it
        assert r.info(min_index_version=version).index_version >= version


def test_a_version_not_reached_waits_for_the_write_that_brings_it_or_refuses_before_the_deadline(pair):
    writer, replica = pair
    with Client(writer.address, timeout=60) as w, Client(replica.address, timeout=60) as r:
        now = w.info().index_version
        for client, server in ((w, writer), (r, replica)):  # nothing will bring it: refused just before the deadline
            catch_ups = server.metric("nextpara_catch_ups_total")
            started = time.monotonic()
            e = behind(lambda c=client: c.info(min_index_version=now + 1000, wait_for_index=True, timeout=5))
            waited = float(e.metadata["waitedSeconds"])  # the server's own measure: 5 s less its margin of 0.25 s,
            assert 3 < waited < 5 and waited < time.monotonic() - started  # less the time the call took to reach it
            assert e.metadata["minIndexVersion"] == str(now + 1000)
            # the replica caught up again and again, but with growing pauses (0.02 s, doubling to 0.5 s): about 14
            # times in 5 s, not back to back (each catch-up holds the write lock); the writer never catches up
            caught_up = server.metric("nextpara_catch_ups_total") - catch_ups
            assert (2 <= caught_up <= 30) if server is replica else caught_up == 0, caught_up

        answers: dict = {}

        def read(name, client):
            answers[name] = client.info(min_index_version=now + 1, wait_for_index=True, timeout=60).index_version

        readers = [threading.Thread(target=read, args=(name, c)) for name, c in (("writer", w), ("replica", r))]
        for t in readers:
            t.start()
        w.add_documents([{"doc_id": "ryw-2", "paragraphs": ["The write that the waiting reads need."]}])
        for t in readers:
            t.join(timeout=60)
        assert answers == {"writer": now + 1, "replica": now + 1}


def test_the_async_client_and_rerank_many_expose_index_behind(pair):
    writer, replica = pair
    ahead = Client(writer.address).info().index_version + 1000

    async def main():
        async with AsyncClient(replica.address, timeout=30) as c:
            with pytest.raises(FailedPrecondition) as err:
                await c.get_paragraphs([1], min_index_version=ahead)
            assert err.value.reason == "INDEX_BEHIND" and err.value.metadata["minIndexVersion"] == str(ahead)
            result = await c.rerank([1], [2, 3], min_index_version=1, wait_for_index=True)
            assert isinstance(result, RerankResult) and sorted(result.order) == [0, 1]

    asyncio.run(main())
    with Client(replica.address, timeout=30) as c:
        answers = list(c.rerank_many([([1], [2, 3])] * 2, return_errors=True, min_index_version=ahead))
        assert [a.reason for a in answers] == ["INDEX_BEHIND"] * 2 and [a.request_id for a in answers] == ["0", "1"]


def test_a_replica_opened_before_its_writer_added_the_labels_table_filters_by_labels_once_caught_up(tmp_path):
    data = vector_store(tmp_path, "rand8", [("old", ["Written before labels."], unit_vectors(1, 8, seed=3))])
    with sqlite3.connect(data / "paragraphs.sqlite") as db:  # as an older nextpara made it
        db.execute("DROP TRIGGER documents_labels_delete")
        db.execute("DROP TABLE document_labels")
    replica = LiveServer(data, read_only=True).start()  # first: it finds no labels table
    writer = LiveServer(data).start()  # its writable open adds the table
    try:
        with Client(writer.address, timeout=30) as w, Client(replica.address, timeout=30) as r:
            assert r.list_documents(labels={"tenant": "acme"}).documents == []
            added = w.add_documents([{"doc_id": "new", "paragraphs": ["Labelled."], "labels": {"tenant": "acme"},
                                      "vectors": unit_vectors(1, 8, seed=4).tolist()}])
            doc = r.get_document("new", min_index_version=added.index_version, wait_for_index=True)  # a catch-up
            assert doc.document.labels == {"tenant": "acme"} and doc.index_version == added.index_version
            page = r.list_documents(labels={"tenant": "acme"}, min_index_version=added.index_version)
            assert [d.doc_id for d in page.documents] == ["new"]
    finally:
        writer.stop()
        replica.stop()
