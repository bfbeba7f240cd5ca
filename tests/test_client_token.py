"""A client's bearer token, checked where it is given: a real server on 127.0.0.1 with tokens, both clients."""

import asyncio

import pytest
from conftest import LiveServer, unit_vectors, vector_store
from nextpara.client import AsyncClient, Client, InvalidInputError, Unauthenticated


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    vectors = unit_vectors(6, 8, seed=3)
    store = vector_store(tmp_path_factory.mktemp("tokens"), "tok8",
                         [("d0", ["One.", "Two.", "Three."], vectors[:3]), ("d1", ["Four.", "Five.", "Six."], vectors[3:])])
    s = LiveServer(store, read_tokens="reader-7", write_tokens="writer-7").start()
    yield s
    s.stop()


BAD = {"reader-\u00e9": "token has a non-ASCII character at position 7",
       "read\ner-7": "token has a control character at position 4",
       "reader\x007": "token has a control character at position 6"}


def test_a_token_a_header_cannot_hold_is_refused_by_both_clients_naming_it(token_server):
    for token, says in BAD.items():
        with pytest.raises(InvalidInputError) as err:  # it was INTERNAL "Invalid metadata" at the first call
            Client(token_server.address, token=token)
        assert says in str(err.value) and err.value.field == "token" and token not in str(err.value)

    async def aio():
        for token, says in BAD.items():
            with pytest.raises(InvalidInputError) as err:  # it was grpc's ExecuteBatchError at the first call
                AsyncClient(token_server.address, token=token)
            assert says in str(err.value) and err.value.field == "token"
    asyncio.run(aio())
    with pytest.raises(TypeError, match="token must be a string, got bytes"):
        Client(token_server.address, token=b"reader-7")


def test_a_token_read_with_its_newline_is_sent_without_it(token_server):
    with Client(token_server.address, token="reader-7\n", timeout=60) as c:  # e.g. open(path).read()
        assert c.info().documents == 2
    with Client(token_server.address, token="  \n", timeout=60) as c:  # blank: no token, as "" is
        with pytest.raises(Unauthenticated) as err:
            c.info()
        assert err.value.reason == "TOKEN_MISSING"

    async def aio():
        async with AsyncClient(token_server.address, token=" writer-7\r\n", timeout=60) as c:
            return (await c.delete_documents(["nope"], allow_missing=True)).missing_doc_ids
    assert asyncio.run(aio()) == ["nope"]


def test_blanks_around_a_raw_bearer_token_are_no_part_of_it(token_server):
    import grpc
    from nextpara.v1 import nextpara_pb2 as pb
    from nextpara.v1 import nextpara_pb2_grpc as pb_grpc

    with grpc.insecure_channel(token_server.address) as channel:  # as a client of the proto alone builds the header
        get_info = pb_grpc.NextParagraphServiceStub(channel).GetInfo
        for header in ("Bearer reader-7 ", "Bearer  reader-7 "):  # these were TOKEN_INVALID
            assert get_info(pb.GetInfoRequest(), metadata=[("authorization", header)], timeout=60).documents == 2


def test_the_command_line_says_which_flag_a_refused_token_wants(token_server, tmp_path):
    from conftest import run_cli

    env = {"NEXTPARA_TOKEN": ""}  # (not the caller's)
    none = run_cli("predict", "--address", token_server.address, "--id", "1", env=env, timeout=120)
    assert none.returncode == 1 and "(give a token: --token or $NEXTPARA_TOKEN)" in none.stderr, none.stderr
    wrong = run_cli("predict", "--address", token_server.address, "--token", "nope", "--id", "1", env=env, timeout=120)
    assert wrong.returncode == 1 and "(check --token or $NEXTPARA_TOKEN)" in wrong.stderr, wrong.stderr
    reader = run_cli("delete", "d0", "--address", token_server.address, "--token", "reader-7", env=env, timeout=120)
    assert reader.returncode == 1 and "(give a write token: --token or $NEXTPARA_TOKEN)" in reader.stderr, reader.stderr
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "q", "context": [1]}\n')
    batch = run_cli("rerank-batch", str(rows), str(tmp_path / "out.jsonl"), "--address", token_server.address, env=env,
                    timeout=120)
    assert batch.returncode == 1 and "(give a token: --token or $NEXTPARA_TOKEN)" in batch.stderr, batch.stderr
