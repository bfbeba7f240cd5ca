"""RerankStream with its own messages: every request is answered in order with its result or its
error, and a bad request does not end the stream. A real server on 127.0.0.1 and both clients."""

import asyncio

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
