"""RerankStream with its own messages: every request is answered in order with its result or its
error, and a bad request does not end the stream. A real server on 127.0.0.1 and both clients."""

import asyncio
import math

import grpc
import pytest
from nextpara.client import AsyncClient, InvalidArgument, NotFound, RerankResult, ServiceError
from nextpara.v1 import nextpara_pb2 as pb

BAD = {17: ("FIELD_REQUIRED", "candidates"), 99: ("UNKNOWN_IDS", "context[1].paragraph_id"),
       180: ("DIMENSION_MISMATCH", "candidates[1].vector")}


def items(n: int = 200) -> list[dict]:
    out = [{"request_id": f"r{i}", "context": [1, 2], "candidates": [3, 4, 5, 6], "top_k": 3} for i in range(n)]
    out[17]["candidates"] = []
    out[99]["context"] = [1, 10**12]
    out[180]["candidates"] = [3, [0.25] * 9]
    return out


def check(answers, expected_order):
    assert [a.request_id for a in answers] == [f"r{i}" for i in range(200)]  # in order, every one answered
    results = [a for a in answers if isinstance(a, RerankResult)]
    errors = {i: a for i, a in enumerate(answers) if isinstance(a, ServiceError)}
    assert len(results) == 197 and sorted(errors) == sorted(BAD)
    assert all(r.order == expected_order for r in results)
    for i, e in errors.items():
        assert (e.reason, e.field) == BAD[i] and e.metadata["itemIndex"] == str(i)
        assert e.details.startswith(f"request {i} ('r{i}'): ")
    assert isinstance(errors[17], InvalidArgument) and isinstance(errors[99], NotFound)


def test_200_requests_with_3_bad_ones_answer_197_results_and_3_errors_in_order(client):
    expected = client.rerank([1, 2], [3, 4, 5, 6], top_k=3).order
    check(list(client.rerank_many(items(), max_in_flight=16, return_errors=True)), expected)
    ids = [r.request_id for r in client.rerank_many([{"request_id": 7, "context": [1], "candidates": [2, 3]},
                                                      {"request_id": None, "context": [1], "candidates": [2, 3]}])]
    assert ids == ["7", "1"]  # a number as str() writes it, as before; None the item's index, not 'None'


def test_the_async_client_gets_the_same_answers(server, client):
    expected = client.rerank([1, 2], [3, 4, 5, 6], top_k=3).order

    async def go():
        async with AsyncClient(server.address, timeout=60) as c:
            return [a async for a in c.rerank_many(items(), max_in_flight=16, return_errors=True)]
    check(asyncio.run(go()), expected)


def test_without_return_errors_the_first_bad_request_is_raised(client):
    answered = []
    with pytest.raises(InvalidArgument, match=r"request 17 \('r17'\): candidates is empty") as err:
        for r in client.rerank_many(items(), max_in_flight=4):
            answered.append(r.request_id)
    assert answered == [f"r{i}" for i in range(17)] and err.value.request_id == "r17"


def test_an_item_the_client_cannot_send_is_its_error_in_its_place(server, client):
    """Made into a request on grpc's side of the stream, such an item ended the whole stream with "Exception iterating
    requests!" (the async client: a bare CancelledError), the answers before it lost; now it is a TypeError or
    InvalidInputError in its place, raised there, or with return_errors yielded there and the stream goes on."""
    from nextpara.errors import InvalidInputError

    sent = [([1, 2], [3, 4, 5]), ("not a list", [3]), {"context": [1]}, ([1, 2], [5, 4, 3]), ([1], [2**70]), 5,
            ([[10**400] * 3], [1])]  # a float() that overflows
    expected = [client.rerank([1, 2], [3, 4, 5]).order, client.rerank([1, 2], [5, 4, 3]).order]

    def kinds(answers):
        assert [a.order for a in answers if isinstance(a, RerankResult)] == expected
        assert "items[1].context must be a list of paragraphs, not a single string" in str(answers[1])
        assert "items[2] must have a context and candidates, has ['context']" in str(answers[2])
        assert str(answers[4]).startswith("items[4].candidates[0] must be -9223372036854775808 to")
        assert str(answers[6]) == "items[6].context[0]: a value is too large for a float"
        return [type(a) for a in answers]

    want = [RerankResult, TypeError, TypeError, RerankResult, InvalidInputError, TypeError, InvalidInputError]
    assert kinds(list(client.rerank_many(sent, return_errors=True))) == want

    async def go():
        async with AsyncClient(server.address, timeout=60) as c:
            return [a async for a in c.rerank_many(sent, return_errors=True)]
    assert kinds(asyncio.run(go())) == want
    answered = []
    with pytest.raises(TypeError, match=r"items\[1\]\.context"):
        for r in client.rerank_many(sent):
            answered.append(r.order)
    assert answered == expected[:1]


def test_an_error_after_an_item_the_client_could_not_send_names_the_callers_item(server, client):
    """The server numbers requests by their place in the stream, which an item this client could not send never
    reached: the error of items[2] said "request 1" with itemIndex 1. Its message, the description of the field at
    fault and its itemIndex now name the item's place in ``items``."""
    sent = [([1], [2, 3]), {"context": [1], "candidates": "notalist"}, ([1], [10**9]),
            {"context": [1], "candidates": [2], "request_id": "mine"}, {"context": [1], "candidates": "notalist"},
            {"context": [1], "candidates": [10**9], "request_id": "late"}]

    def numbered(answers):
        assert [type(a) for a in answers] == [RerankResult, TypeError, NotFound, RerankResult, TypeError, NotFound]
        assert answers[3].request_id == "mine"
        for i, request_id in ((2, "2"), (5, "late")):
            e = answers[i]
            assert e.request_id == request_id and e.metadata["itemIndex"] == str(i), (i, e.metadata)
            assert e.details.startswith(f"request {i} ('{request_id}'): "), e.details
            assert str(e).startswith(f"NOT_FOUND: request {i} (") and e.args[0] == e.details
            assert [v.description for v in e.field_violations] == [e.details]
    numbered(list(client.rerank_many(sent, return_errors=True)))

    async def go():
        async with AsyncClient(server.address, timeout=60) as c:
            return [a async for a in c.rerank_many(sent, return_errors=True)]
    numbered(asyncio.run(go()))


def test_arguments_are_checked_before_anything_is_sent(client):
    """A single string where a list belongs was split into its characters (a document of three one-letter
    paragraphs; a delete of documents 'n' and '1'); a number out of its field's range was protobuf's bare "Value out of
    range"; a lone surrogate was UnicodeEncodeError."""

    before = client.info().index_version
    calls = {
        "documents[0].paragraphs must be a list of texts, not a single string":
            lambda: client.add_documents([{"doc_id": "split", "paragraphs": "abc"}]),
        "doc_ids must be a list of doc_ids, not a single string": lambda: client.delete_documents("n1"),
        "exclude_doc_ids must be a list of doc_ids, not a single string":
            lambda: client.predict_next([1], exclude_doc_ids="n1"),
        "ids must be a list of paragraph ids, not a single string": lambda: client.get_paragraphs("12"),
        "filter.labels['k'] must be a string, got int": lambda: client.predict_next([1], filter={"labels": {"k": 1}}),
        "top_k must be 1 to 1000, got -1": lambda: client.predict_next([1], top_k=-1),  # (the message's range was said)
        "top_k must be 1 to 1000, got 1001": lambda: client.predict_next([1], top_k=1001),
        "top_k must be an integer, got None": lambda: client.predict_next([1], top_k=None),
        "filter.min_score must be a finite number, got nan": lambda: client.predict_next([1], filter={"min_score": math.nan}),
        "filter.min_score must be a number, got '5'": lambda: client.predict_next([1], filter={"min_score": "5"}),
        "filter.min_score must be a number, got True": lambda: client.predict_next([1], filter={"min_score": True}),
        "page_size must be 0 to 4294967295, got -1": lambda: client.list_documents(-1),
        "filter.max_per_document must be 0 to 4294967295, got -1":
            lambda: client.predict_next([1], filter={"max_per_document": -1}),
        "candidates[0] must be -9223372036854775808 to 9223372036854775807": lambda: client.rerank([1], [2**70]),
        "documents[0].doc_id holds a lone surrogate ('\\ud800' at character 1)":
            lambda: client.add_documents([{"doc_id": "s\ud800", "paragraphs": ["a"]}]),
        "context[0] holds a lone surrogate": lambda: client.predict_next(["\udcff"]),
        "doc_id must be a string, got int": lambda: client.get_document(5),
        "doc_id holds a lone surrogate": lambda: client.get_document("a\ud800"),
        "destination must be a string, got int": lambda: client.backup(5),
        "documents[0] has no doc_id": lambda: client.add_documents([{"paragraphs": ["a"]}]),
        "documents[0]: unknown field 'label' (did you mean 'labels'?)":  # stored without its labels, quietly
            lambda: client.add_documents([{"doc_id": "l", "paragraphs": ["a"], "label": {"tenant": "acme"}}]),
        "documents[1] must be a Document or a mapping of its fields, got tuple":
            lambda: client.add_documents([{"doc_id": "t0", "paragraphs": ["a"]}, ("t1", ["b"])]),
        "documents[0].vectors[0]: a vector must be a sequence of numbers, got str":
            lambda: client.add_documents([{"doc_id": "v", "paragraphs": ["a"], "vectors": ["abc"]}]),
        "context[0]: a vector must be a sequence of numbers (must be real number, not str)":
            lambda: client.predict_next([["0.1"] * 384]),
        "wait_for_index must be True or False, got 'no'": lambda: client.info(wait_for_index="no"),  # bool() took it
        "omit_text must be True or False, got 1": lambda: client.predict_next([1], omit_text=1),
        "documents[0].vectors[0]: a vector must be a sequence of numbers, and it holds a bool":  # float() took them
            lambda: client.add_documents([{"doc_id": "v", "paragraphs": ["a"], "vectors": [[True] * 384]}]),
        "candidates[0]: a value is too large for a float": lambda: client.rerank([1], [[10**400] * 384]),
        "candidates[1]: a value is beyond float32's range": lambda: client.rerank([1], [2, [1.0] * 383 + [-1e39]]),
        "candidates[0]: a value is beyond float32's range": lambda: client.rerank([1], [[1.0] * 383 + [3.4028235677973366e38]]),
        "documents[0].vectors must be a list of vectors, not a single string":
            lambda: client.add_documents([{"doc_id": "v", "paragraphs": ["a"], "vectors": "abc"}]),
        "max_in_flight must be at least 1, got 0": lambda: list(client.rerank_many([([1], [2, 3])], max_in_flight=0)),
        "timeout must be a positive number of seconds, got 0": lambda: client.info(timeout=0),
    }
    for message, call in calls.items():
        with pytest.raises((TypeError, ValueError)) as err:  # InvalidInputError is a ValueError
            call()
        assert message in str(err.value), (message, str(err.value))
    assert client.info().index_version == before  # nothing written
    from nextpara.attention_core.predictor import MAX_TOP_K
    from nextpara.client._convert import MAX_TOP_K as CLIENTS

    assert CLIENTS == MAX_TOP_K  # the client's check is the service's
    assert len(client.rerank([1], [[1.0] * 383 + [3.4028235e38]]).order) == 1  # float32's largest, as printed: sent
    # what protobuf took before stays taken: None for unset, labels as pairs, whole floats and numpy's integers for ids
    import numpy as np

    assert [p.paragraph_id for p in client.get_paragraphs([1.0, np.int64(2)])] == [1, 2]
    assert len(client.rerank([np.uint32(1)], [np.uint64(2), np.int16(3)]).order) == 2  # every kind of numpy integer
    assert client.list_documents(2, page_token=None, labels=[]).documents
    assert client.predict_next([1], top_k=2, filter={"max_per_document": None, "labels": None}).predictions
    added = client.add_documents([{"doc_id": "kept-forms", "title": None, "paragraphs": ("One.", "Two."),
                                   "labels": [("tenant", "forms")]}])
    assert added.documents_added == 1 and client.get_document("kept-forms").document.labels == {"tenant": "forms"}
    client.delete_documents(["kept-forms"])
    # a document's vectors as one numpy array (the usual container), refused here only for the store's dimension
    with pytest.raises(InvalidArgument) as err:
        client.add_documents([{"doc_id": "np", "paragraphs": ["a", "b"], "vectors": np.ones((2, 7), np.float32)}])
    assert (err.value.reason, err.value.field) == ("DIMENSION_MISMATCH", "documents[0].vectors[0]")


def test_an_exception_of_the_items_iterable_is_raised_after_the_answers_before_it(server, client):
    """grpc lost it: the sync client raised "UNKNOWN: Exception iterating requests!" with none of the answers, the
    async one a CancelledError, which `except Exception` does not catch."""
    def gen():
        for i in range(3):
            yield [1, 2], [3, 4, 5 + i]
        raise RuntimeError("my generator broke")

    answered = []
    with pytest.raises(RuntimeError, match="my generator broke"):
        for r in client.rerank_many(gen(), return_errors=True):
            answered.append(r)
    assert len(answered) == 3 and all(isinstance(r, RerankResult) for r in answered)

    async def go():
        got = []
        async with AsyncClient(server.address, timeout=60) as c:
            try:
                async for r in c.rerank_many(gen()):
                    got.append(r)
            except RuntimeError as e:
                return got, e
        return got, None
    got, error = asyncio.run(go())
    assert len(got) == 3 and str(error) == "my generator broke"


def test_a_request_that_is_not_a_message_is_answered_and_the_stream_goes_on(server):
    good = pb.RerankStreamRequest(request_id="ok", context=[pb.ContextParagraph(paragraph_id=1)],
                                  candidates=[pb.ContextParagraph(paragraph_id=2), pb.ContextParagraph(paragraph_id=3)])
    with grpc.insecure_channel(server.address) as channel:
        stream = channel.stream_stream("/nextpara.v1.NextParagraphService/RerankStream",
                                       response_deserializer=pb.RerankStreamResponse.FromString)
        answers = list(stream(iter([good.SerializeToString(), b"\xff\xff\xff", good.SerializeToString()]), timeout=60))
    assert [a.WhichOneof("outcome") for a in answers] == ["result", "error", "result"]
    assert answers[1].request_id == "" and answers[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    from nextpara.client.errors import from_status

    e = from_status(answers[1].error)
    assert e.reason == "MALFORMED_REQUEST" and e.metadata["itemIndex"] == "1" and "not a valid" in e.details
    assert answers[0].result.order == answers[2].result.order and answers[2].request_id == "ok"
