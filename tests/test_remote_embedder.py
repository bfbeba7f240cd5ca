"""A remote embedder (`openai:` stores) behind a real server on 127.0.0.1, its endpoint the loopback fake that
speaks OpenAI's wire format: its refusals (EMBEDDING_SERVICE_FAILED, and FAILED_PRECONDITION without its key), an
endpoint that hangs, and the queue that sends the texts of calls waiting for the endpoint together
(server/embed_ahead.py)."""

import threading
import time

import grpc
from conftest import LiveServer, refusal
from nextpara.client import Client, ServiceError
from openai_fake import FakeEmbeddingsServer, fake_vector

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
            fake.delay = 0.3  # each answer takes a while: the calls run alone are asked at once, not one by one
            later = server.release(sent)
            assert sorted(later[0]) == sorted([*fine, "Refused text."]) and sorted(map(tuple, later[1:])) == sorted(
                (text,) for text in [*fine, "Refused text."]), later  # the batch, then each call alone
            alone = fake.requests[-len(later) + 1:]
            assert max(r["started"] for r in alone[:4]) < min(r["ended"] for r in alone[:4]), alone  # 4 at once
            e = server.answers["Refused text."]
            assert isinstance(e, ServiceError) and e.reason == "EMBEDDING_SERVICE_FAILED" and "answered 400" in e.details
            server.answered_as_by_vector(server.held + fine)
        finally:
            server.close()
