"""The client commands as scripts use them, against a real server on 127.0.0.1: --json, stdin, --id, exit status,
$NEXTPARA_TIMEOUT, channel options."""

import json

import pytest
from conftest import run_cli


def cli(server, *args, **kw):
    return run_cli(*args, "--address", server.address, timeout=120, **kw)


def cli_json(server, *args, **kw):
    r = cli(server, *args, "--json", **kw)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_status_json(server, client):
    status = cli_json(server, "status")
    info = client.info()
    assert status["health"] == "SERVING"
    assert (status["documents"], status["paragraphs"], status["dim"]) == (info.documents, info.paragraphs, info.dim)
    assert status["index_version"] == info.index_version and status["model"]["version"] == info.model.version


def test_add_from_stdin_json_then_delete_json(server, client):
    docs = [{"doc_id": f"stdin-{i}", "title": f"Piped {i}", "paragraphs": [f"Piped paragraph {i}.", "And its second."]}
            for i in range(2)]
    added = cli_json(server, "add", "-", stdin="".join(json.dumps(d) + "\n" for d in docs))
    assert (added["documents_added"], added["paragraphs_written"]) == (2, 4)
    stored = client.get_document("stdin-1")
    assert stored.document.title == "Piped 1" and [p.text for p in stored.paragraphs] == docs[1]["paragraphs"]
    assert added["index_version"] == client.info().index_version
    deleted = cli_json(server, "delete", "stdin-0", "stdin-1", "stdin-gone", "--allow-missing")
    assert (deleted["documents_deleted"], deleted["paragraphs_deleted"], deleted["missing_doc_ids"]) == (2, 4, ["stdin-gone"])


def test_add_from_stdin_with_a_bad_line_names_it(server, client):
    before = client.info().index_version
    r = cli(server, "add", "-", stdin=json.dumps({"doc_id": "stdin-ok", "paragraphs": ["Fine."]}) + "\nnot json\n")
    assert r.returncode == 2 and "<stdin>:2: not valid JSON" in r.stderr, r.stderr
    assert client.info().index_version == before  # the good line was in the unsent message


def test_add_of_a_utf16_file_says_which_encoding_it_is(server, tmp_path):
    """`nextpara add` said only "not valid UTF-8 (invalid start byte at byte 0)" of a file `nextpara build` names."""
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"doc_id": "u16", "paragraphs": ["Saved as Unicode."]}) + "\n", encoding="utf-16")
    r = cli(server, "add", str(path))
    assert r.returncode == 2 and f"{path}:1: not valid UTF-8" in r.stderr, r.stderr
    assert "it is UTF-16 (its byte-order mark says so); convert it to UTF-8" in r.stderr
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "nextpara", "predict", "-", "--address", server.address],
                       input="A paragraph saved as Unicode.\n".encode("utf-16"), capture_output=True, timeout=120)
    assert r.returncode == 2 and b"<stdin>: not valid UTF-8" in r.stderr and b"it is UTF-16" in r.stderr, r.stderr


def test_add_of_a_folder_says_how_a_folder_is_stored(server, tmp_path):
    """`nextpara add notes/` said only "cannot read notes/: Is a directory"."""
    r = cli(server, "add", str(tmp_path))
    assert r.returncode == 2 and f"{tmp_path} is a folder: add reads one JSON Lines file" in r.stderr, r.stderr
    assert "nextpara build --corpus FOLDER" in r.stderr


def stored_ids(client, n=2):
    doc = client.get_document(client.list_documents(page_size=1).documents[0].doc_id)
    return [p.paragraph_id for p in doc.paragraphs[:n]]


def ranked(result: dict) -> list[int]:
    return [p["paragraph_id"] for p in result["predictions"]]


def test_predict_ids_texts_and_stdin(server, client):
    a, b = stored_ids(client)
    r = cli_json(server, "predict", "--id", str(a), "--id", str(b), "-k", "4")
    assert ranked(r) == [p.paragraph_id for p in client.predict_next([a, b], top_k=4).predictions]
    assert r["context_used"] == 2 and r["model_version"]
    r = cli_json(server, "predict", "--id", str(a), "A text after the stored paragraph.", "-k", "4")  # in order given
    assert ranked(r) == [p.paragraph_id for p in client.predict_next([a, "A text after the stored paragraph."],
                                                                     top_k=4).predictions]
    piped = ["The first piped paragraph.", "The second one, newest."]
    r = cli_json(server, "predict", "-", "-k", "3", stdin="\n".join(piped) + "\n\n")
    assert r["context_used"] == 2
    assert ranked(r) == [p.paragraph_id for p in client.predict_next(piped, top_k=3).predictions]
    # a byte-order mark (a file saved by Notepad, piped in) is no part of the first paragraph: with it, a stored
    # paragraph piped as the context was not its own text, so not excluded, and came back as the top prediction
    (stored,) = client.get_paragraphs([a])
    r = cli_json(server, "predict", "-", "-k", "3", stdin="\ufeff" + stored.text + "\n")
    assert a not in ranked(r), r


def test_predict_an_all_digit_text_is_a_text(server, client):
    r = cli_json(server, "predict", "999999999", "-k", "2")  # no such id: taken as one, it would be NOT_FOUND
    assert r["context_used"] == 1 and len(r["predictions"]) == 2
    assert ranked(r) == [p.paragraph_id for p in client.predict_next(["999999999"], top_k=2).predictions]
    r = cli(server, "predict", "--id", "999999999")
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr and "999999999" in r.stderr, r.stderr


def test_exit_status_service_error_1_usage_error_2(server, tmp_path):
    r = cli(server, "delete", "never-stored")
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr  # the service refused
    r = run_cli("status", "--address", "127.0.0.1:9", "--timeout", "2")
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr  # no service there
    r = run_cli("status", "--address", "127.0.0.1:9", "--timeout", "2", "--json")  # one document for scripts (it
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr, r.stderr  # printed none)
    shown = json.loads(r.stdout)
    assert shown["health"] is None and shown["error"]["code"] in ("UNAVAILABLE", "DEADLINE_EXCEEDED"), shown
    for args, said in [(("predict", "text", "-k", "many"), "invalid int value"),  # a bad flag
                       (("predict", "--id", "seven"), "invalid int value"),
                       (("predict",), "no context"),  # nothing to ask
                       (("predict", "text", "-k", "0"), "-k must be 1 to 1000, got 0"),  # was the service's (1)
                       (("predict", "text", "-k", "1001"), "-k must be 1 to 1000, got 1001"),
                       (("predict", "text", "--min-score", "nan"), "--min-score must be a finite number, got nan"),
                       (("predict", "text", "--max-per-document", "-1"), "--max-per-document must be 0 (no limit) or"),
                       (("add", str(tmp_path / "absent.jsonl")), "cannot read"),  # a bad input file
                       (("status", "--timeout", "-1"), "not a positive number of seconds")]:
        r = cli(server, *args)
        assert r.returncode == 2 and said in r.stderr, (args, r.stderr)


def test_nextpara_timeout_is_the_default_timeout(server):
    tiny = {"NEXTPARA_TIMEOUT": "0.0001"}
    r = cli(server, "predict", "A paragraph.", env=tiny)
    assert r.returncode == 1 and "DEADLINE_EXCEEDED" in r.stderr, r.stderr
    r = cli(server, "predict", "A paragraph.", "--timeout", "60", env=tiny)  # the flag wins
    assert r.returncode == 0, r.stderr
    r = cli(server, "status", env={"NEXTPARA_TIMEOUT": "soon"})
    assert r.returncode == 2 and "$NEXTPARA_TIMEOUT" in r.stderr


def test_rerank_batch_json_summary(server, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "context": ["A paragraph."]}) + "\n"
                    + json.dumps({"id": "b", "context": ["Another."], "candidates": ["x", "y"]}) + "\n"
                    + json.dumps({"id": "c", "context": []}) + "\n")
    summary = cli_json(server, "rerank-batch", str(rows), str(tmp_path / "out.jsonl"))
    assert (summary["rows"], summary["errors"], summary["skipped"]) == (3, 1, 0)
    assert summary["output"] == str(tmp_path / "out.jsonl") and summary["model_version"]
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 3


def test_client_channel_options(server):
    import asyncio

    from nextpara.client import AsyncClient, Client, ResourceExhausted

    option = [("grpc.max_receive_message_length", 64)]  # smaller than GetInfo's answer: the option reached the channel
    with Client(server.address, timeout=30) as c:
        assert c.info().documents > 0
    with Client(server.address, timeout=30, options=option) as c:
        with pytest.raises(ResourceExhausted):
            c.info()

    async def go():
        async with AsyncClient(server.address, timeout=30, options=option) as c:
            await c.info()
    with pytest.raises(ResourceExhausted):
        asyncio.run(go())


def test_texts_split_by_an_option_are_a_usage_error_that_says_the_rule(server):
    for args in (["A", "--id", "3", "B"], ["A", "-k", "2", "B", "C"]):
        r = cli(server, "predict", *args)
        assert r.returncode == 2 and r.stderr.startswith("nextpara predict: error: the TEXT arguments are one run"), r
        assert "`--id 3 A B` is the context 3, A, B; `A B --id 3` is A, B, 3" in r.stderr and "'B'" in r.stderr, r.stderr
    r = cli(server, "predict", "A", "--bogus")  # an unknown flag is still argparse's own refusal
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr, r.stderr


def test_a_refused_delete_says_nothing_was_deleted_and_how_to_delete_the_rest(server, client):
    client.add_documents([{"doc_id": "del-kept", "paragraphs": ["Kept by a refused delete."]}])
    r = cli(server, "delete", "del-kept", "del-never-stored")
    assert r.returncode == 1 and "NOT_FOUND: unknown doc_id(s): 'del-never-stored'" in r.stderr, r.stderr
    assert "nothing was deleted (--allow-missing deletes the stored ones and lists the others)" in r.stderr, r.stderr
    assert client.get_document("del-kept").document.doc_id == "del-kept"  # as it says
    r = cli(server, "delete", "del-never-stored")
    assert r.returncode == 1 and "nothing was deleted (--allow-missing makes a delete" in r.stderr, r.stderr
    assert cli_json(server, "delete", "del-kept", "del-never-stored", "--allow-missing")["documents_deleted"] == 1
