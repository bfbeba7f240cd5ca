"""rerank-batch: the three engines agree, a killed job resumes to the same OUTPUT, bad rows become error rows."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import LiveServer, run_cli, unit_vectors, vector_store
from nextpara.attention_core.served import CHECKPOINT, TRAIN_REPORT, describe_served
from nextpara.store.embedders import MINILM_NAME
from nextpara.store.store import open_store


def _store_rows(store_dir):
    from nextpara.attention_core.sequences import ParagraphSequences
    from nextpara.store.store import open_store

    with open_store(store_dir, readonly=True) as store:
        seq = ParagraphSequences(store)
        docs = [rows for rows in seq.doc_rows.values() if len(rows) >= 6]
        texts = {int(i): p.text for i, p in zip(seq.ids, store.get_paragraphs(seq.ids.tolist()))}
        return seq, docs, texts


def make_input(store_dir, path, n: int = 200, seed: int = 0) -> list[dict]:
    """n rows over the store: text / id / vector contexts, with and without candidates, per-row top_k."""
    seq, docs, texts = _store_rows(store_dir)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        doc = docs[rng.integers(len(docs))]
        j = int(rng.integers(3, len(doc)))
        ctx = doc[max(0, j - 8):j]  # up to L = 8 preceding paragraphs
        cands = list(rng.choice(len(seq.ids), 15, replace=False)) + [doc[j]]  # the true next among 15 others
        kind = i % 4
        if kind == 0:
            row = {"id": f"r{i}", "context": [texts[int(seq.ids[r])] for r in ctx]}
        elif kind == 1:
            row = {"id": i, "context": [int(seq.ids[r]) for r in ctx], "candidates": [int(seq.ids[r]) for r in cands]}
            if i % 8 == 5:
                row["top_k"] = 0  # every candidate, ranked
        elif kind == 2:
            row = {"id": f"r{i}", "context": seq.vectors[ctx].round(6).tolist(),
                   "candidates": seq.vectors[cands].round(6).tolist(), "top_k": 4}
        else:
            row = {"id": f"r{i}", "context": [int(seq.ids[r]) for r in ctx], "top_k": 3}
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def load(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def ranking(row: dict) -> list:
    return [r.get("paragraph_id", r.get("candidate")) for r in row.get("results", [])]


def assert_same_output(a: list[dict], b: list[dict]) -> None:
    """Same ids in the same order, same rankings, scores equal to float32 rounding of different batchings. Stored
    paragraphs of one text (the built-in docs repeat some in several documents) have one vector and tie but for
    that rounding, so they may swap places: then the ranked texts are the same (the evaluation protocol counts
    either as the same answer)."""
    assert [r["id"] for r in a] == [r["id"] for r in b]
    for x, y in zip(a, b):
        assert x.get("error") == y.get("error"), x["id"]
        if ranking(x) != ranking(y):
            texts = [[r.get("text") for r in row["results"]] for row in (x, y)]
            assert None not in texts[0] and texts[0] == texts[1], (x["id"], ranking(x), ranking(y))
        np.testing.assert_allclose([r["score"] for r in x.get("results", [])],
                                   [r["score"] for r in y.get("results", [])], rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def batch_input(trained_store, tmp_path_factory):
    path = tmp_path_factory.mktemp("batch") / "in.jsonl"
    rows = make_input(trained_store, path)
    return path, rows


@pytest.fixture(scope="module")
def in_process_output(trained_store, batch_input):
    path, _ = batch_input
    out = path.with_name("in-process.jsonl")
    r = run_cli("rerank-batch", str(path), str(out), "--data-dir", str(trained_store))
    assert r.returncode == 0, r.stderr
    assert "200 rows written (0 errors)" in r.stdout
    return load(out)


def test_in_process_output_follows_input(batch_input, in_process_output):
    _, rows = batch_input
    assert [o["id"] for o in in_process_output] == [r["id"] for r in rows]
    for row, out in zip(rows, in_process_output):
        results = out["results"]
        top_k = row.get("top_k", 10)
        assert len(results) == (min(top_k or 99, len(row["candidates"])) if "candidates" in row else top_k)
        scores = [r["score"] for r in results]
        assert scores == sorted(scores, reverse=True)
        if "candidates" in row:
            assert all(0 <= r["candidate"] < len(row["candidates"]) for r in results)
            if isinstance(row["candidates"][0], int):
                assert [r["paragraph_id"] for r in results] == [row["candidates"][r["candidate"]] for r in results]
        else:
            assert all(r["text"] for r in results)
            excluded = set(c for c in row["context"] if isinstance(c, int))
            assert not excluded & {r["paragraph_id"] for r in results}


def test_service_engine_matches_in_process(server_store, batch_input, in_process_output, tmp_path):
    path, _ = batch_input
    server = LiveServer(server_store).start()
    try:
        out = path.with_name("service.jsonl")
        r = run_cli("rerank-batch", str(path), str(out), "--address", server.address, "--in-flight", "8")
        assert r.returncode == 0, r.stderr
        assert_same_output(in_process_output, load(out))
        # a row the client cannot send (a number beyond any float) is its own error: the job went down with it
        (tmp_path / "huge.jsonl").write_bytes(b'{"id": "huge", "context": [[1' + b"0" * 400 + b', 1]]}\n'
                                              b'{"id": "ok", "context": [1]}\n')
        r = run_cli("rerank-batch", str(tmp_path / "huge.jsonl"), str(tmp_path / "o.jsonl"), "--address", server.address)
        assert r.returncode == 0, r.stderr
        huge, ok = load(tmp_path / "o.jsonl")
        assert huge["error"] == "context[0]: a value is too large for a float" and "results" in ok
    finally:
        server.stop()


def test_the_service_engine_waits_out_a_busy_server_and_a_row_too_large_is_its_error(server_store, batch_input,
                                                                                    in_process_output, tmp_path):
    """A server admitting one call at a time answered most of 32 calls in flight QUEUE_FULL, and once the client's own
    retries were spent the job stopped with no row written; a row over the message limit (grpc's RESOURCE_EXHAUSTED
    "Sent message larger than max") stopped it too, for good, as every rerun met the same row."""
    path, _ = batch_input
    rows = path.read_text().splitlines(keepends=True)[:40]
    big = json.dumps({"id": "big", "context": [1], "candidates": ["x" * 400_000] * 45}) + "\n"  # 18 MB of request
    (tmp_path / "in.jsonl").write_text("".join(rows[:20]) + big + "".join(rows[20:]))
    server = LiveServer(server_store, max_queue=1).start()
    try:
        r = run_cli("rerank-batch", str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), "--address", server.address,
                    "--in-flight", "32", "--chunk-rows", "64")
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    out = load(tmp_path / "out.jsonl")
    assert out[20]["id"] == "big" and out[20]["error"].startswith("the row's request is ") and "message limit" in out[20]["error"]
    assert_same_output(in_process_output[:40], out[:20] + out[21:])  # every other row answered as in-process


def test_a_job_through_a_service_says_why_it_stopped_in_its_own_terms(server_store, batch_input, tmp_path):
    """A call that outlasted the job's own --timeout was said to be "stopped by the service ... DEADLINE_EXCEEDED"; a
    server shut down mid-job ended it with "CANCELLED: CANCELLED"; a row over the client's message limit was told to
    "raise max_message_bytes here", an option rerank-batch does not have."""
    path, _ = batch_input
    rows = path.read_text().splitlines(keepends=True)[:30]
    big = json.dumps({"id": "big", "context": [1], "candidates": ["x" * 400_000] * 45}) + "\n"  # 18 MB of request
    (tmp_path / "in.jsonl").write_text(big + "".join(rows))
    server = LiveServer(server_store, max_wait_ms=1000).start()  # each call waits a second for others to join it
    try:
        out = tmp_path / "slow.jsonl"
        r = run_cli("rerank-batch", str(tmp_path / "in.jsonl"), str(out), "--address", server.address, "--in-flight",
                    "1", "--chunk-rows", "1", "--timeout", "0.3")
        assert r.returncode == 1 and "rerank-batch: stopped by this command's --timeout (below); the rows in " in r.stderr
        assert ("error: DEADLINE_EXCEEDED: a call had no answer within --timeout 0.3 s, this command's own deadline for "
                "each call, not the service's refusal: give a longer --timeout") in r.stderr, r.stderr
        assert "stopped by the service" not in r.stderr
        error = load(out)[0]["error"]  # the big row, refused unsent, before the call that timed out
        assert error.startswith("the row's request is ") and ("-byte message limit of rerank-batch's client: split it "
                                                              "into rows of fewer or shorter") in error, error
        assert "max_message_bytes" not in error

        out = tmp_path / "stopped.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "nextpara", "-q", "rerank-batch", str(tmp_path / "in.jsonl"),
                                 str(out), "--address", server.address, "--in-flight", "1", "--chunk-rows", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while (not out.exists() or out.read_bytes().count(b"\n") < 2) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        server.stop()  # mid-job: 29 rows to go (its calls end UNAVAILABLE here, or CANCELLED: the same message)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 1 and "the rows in " in stderr and "rerun the same command to resume" in stderr
        assert f"the server at {server.address} stopped or went away" in stderr, stderr
        assert "CANCELLED: CANCELLED" not in stderr
    finally:
        server.stop()


def test_ray_engine_matches_in_process_on_a_store_the_general_model_serves(trained_store, batch_input, tmp_path):
    """On a store without a model of its own (the general model serves it, as it serves the default store), as every
    other engine: the Ray job once refused such a store. The in-process engine on a trained store is tested above."""
    pytest.importorskip("ray", reason="Ray is the optional extra nextpara[ray]")
    path, _ = batch_input
    store = tmp_path / "store"
    shutil.copytree(trained_store, store, ignore=shutil.ignore_patterns(CHECKPOINT, TRAIN_REPORT))
    with open_store(store, readonly=True) as s:
        general = describe_served(s)
    assert general["source"] == "general"
    outputs = {}
    for engine in ("in-process", "ray"):
        out = tmp_path / f"{engine}.jsonl"
        r = run_cli("rerank-batch", str(path), str(out), "--data-dir", str(store), "--chunk-rows", "100",
                    *(["--ray"] if engine == "ray" else []))
        assert r.returncode == 0, r.stderr
        assert f"engine {engine}, model {general['model_version']} " in r.stdout
        outputs[engine] = load(out)
    assert_same_output(outputs["in-process"], outputs["ray"])


def test_resume_after_kill_gives_the_same_output(trained_store, batch_input, in_process_output):
    path, _ = batch_input
    out = path.with_name("killed.jsonl")
    cmd = [sys.executable, "-m", "nextpara", "-q", "rerank-batch", str(path), str(out), "--data-dir", str(trained_store),
           "--chunk-rows", "8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while (not out.exists() or out.read_bytes().count(b"\n") < 40) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = out.read_bytes().count(b"\n")
    assert 40 <= written < 200, f"the kill should land mid-job, {written} rows were written"
    with open(out, "ab") as f:  # as if the kill had cut a write short
        f.write(b'{"id":"r999","results":[{"candid')
    r = run_cli("rerank-batch", str(path), str(out), "--data-dir", str(trained_store))
    assert r.returncode == 0, r.stderr
    assert f"{200 - written} rows written" in r.stdout and f"{written} already in OUTPUT skipped" in r.stdout
    assert "torn last line" in r.stdout
    assert_same_output(in_process_output, load(out))
    r = run_cli("rerank-batch", str(path), str(out), "--data-dir", str(trained_store))  # nothing left to do
    assert "0 rows written" in r.stdout and "200 already in OUTPUT skipped" in r.stdout


BAD_ROWS = [
    (b'{"id": "a", "context": [1, 2}', "malformed JSON"),
    (b'{"context": [1]}', "missing id"),
    (b'{"id": true, "context": [1]}', "id must be a string or an integer"),
    (b'{"id": "b"}', "missing context"),
    (b'{"id": "c", "context": []}', "context is empty"),
    (b'{"id": "d", "context": "just a string"}', "context must be a list"),
    (b'{"id": "e", "context": [[0.5, 0.5]]}', "context[0]: vector of dimension 2"),
    (b'{"id": "f", "context": [1], "candidates": [[1, "x"]]}', "candidates[0]: a vector must be a non-empty list of numbers"),
    (b'{"id": "g", "context": [987654321]}', "context[0]: unknown paragraph id 987654321"),
    (b'{"id": "h", "context": [1], "candidates": [5, 987654321]}', "candidates[1]: unknown paragraph id 987654321"),
    (b'{"id": "i", "context": [1], "top_k": 0}', "top_k 0 (every candidate) is for a row with candidates"),
    (b'{"id": "i2", "context": [1], "candidates": [2], "top_k": -1}', "top_k must be an integer from 0 to 1000"),
    (b'{"id": "j", "context": [1], "contxt": [2]}', "unknown field 'contxt'"),
    (b'{"id": "k", "context": ["  "]}', "context[0]: empty text"),
    (b'{"id": "l", "context": [[1e999' + b', 0.0' * 383 + b']]}', "context[0]: vector has a NaN or infinite value"),
    (b'{"id": "m", "context": [1]}\xff', "not UTF-8"),
    (b'[1, 2, 3]', "expected a JSON object"),
    (b'{"id": "n", "context": [[1' + b'0' * 400 + b', 0.0]]}', "context[0]: a value is too large for a float"),
    (b'{"id": "o", "context": [1], "candidates": [[1' + b'0' * 400 + b', 0.0]]}', "candidates[0]: a value is too large"),
    (b'{"id": "ok", "context": [1]}', None),
    (b'{"id": "ok", "context": [2]}', "duplicate id (first at line 20)"),
]


def test_each_kind_of_bad_row_becomes_an_error_row(trained_store, tmp_path):
    from nextpara.batch.engines import InProcessEngine
    from nextpara.batch.job import run_job

    src = tmp_path / "bad.jsonl"
    src.write_bytes(b"\n".join(raw for raw, _ in BAD_ROWS) + b"\n\n")  # a blank line is skipped, not a row
    engine = InProcessEngine(trained_store)
    try:
        summary = run_job(src, tmp_path / "out.jsonl", engine, quiet=True)
    finally:
        engine.close()
    out = load(tmp_path / "out.jsonl")
    assert len(out) == len(BAD_ROWS) and summary.rows == len(BAD_ROWS)
    assert summary.errors == sum(reason is not None for _, reason in BAD_ROWS)
    for line, ((raw, reason), row) in enumerate(zip(BAD_ROWS, out), 1):
        if reason is None:
            assert "results" in row and row["id"] == "ok"
        else:
            assert reason in row["error"], (raw, row)
            assert row["line"] == line


def test_parquet_input(trained_store, batch_input, in_process_output, tmp_path):
    pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow (comes with nextpara[ray])")
    import pyarrow.parquet as pq

    _, rows = batch_input
    subset = [r for i, r in enumerate(rows) if i % 4 == 3][:20]  # string ids, id contexts: one Arrow type per column
    pq.write_table(pa.Table.from_pylist(subset), tmp_path / "in.parquet")
    r = run_cli("rerank-batch", str(tmp_path / "in.parquet"), str(tmp_path / "out.jsonl"), "--data-dir", str(trained_store))
    assert r.returncode == 0, r.stderr
    expected = {o["id"]: o for o in in_process_output}
    assert_same_output([expected[row["id"]] for row in subset], load(tmp_path / "out.jsonl"))


def test_cli_refuses_bad_setups(trained_store, batch_input, tmp_path):
    path, _ = batch_input
    r = run_cli("rerank-batch", str(path), str(path), "--data-dir", str(trained_store))
    assert r.returncode == 2 and "INPUT and OUTPUT are the same file" in r.stderr
    r = run_cli("rerank-batch", str(tmp_path / "nope.jsonl"), str(tmp_path / "o.jsonl"))
    assert r.returncode == 2 and "is not a file" in r.stderr
    r = run_cli("rerank-batch", str(path), str(tmp_path / "typo" / "o.jsonl"), "--data-dir", str(trained_store))
    assert r.returncode == 2 and f"the folder {tmp_path / 'typo'} does not exist; create it first" in r.stderr, r.stderr
    assert not (tmp_path / "typo").exists()  # (it was made, and the job ran)
    r = run_cli("rerank-batch", str(path), str(tmp_path / "o.jsonl"), "--address", "127.0.0.1:1", "--ray")
    assert r.returncode == 2 and "drop --data-dir / --ray" in r.stderr
    for flags, said in ((["-k", "0"], "--top-k must be an integer from 1 to 1000, got 0"), (["--ray-actors", "4"], "add --ray"), (["--ray", "--ray-cpus", "0"], "--ray-cpus must be above 0"),
                        (["--ray", "--ray-actors", "0"], "--ray-actors must be at least 1")):  # ignored; a traceback
        r = run_cli("rerank-batch", str(path), str(tmp_path / "o.jsonl"), "--data-dir", str(trained_store), *flags)
        assert r.returncode == 2 and said in r.stderr, (flags, r.stderr)
    (tmp_path / "foreign.jsonl").write_text("not json\n")
    r = run_cli("rerank-batch", str(path), str(tmp_path / "foreign.jsonl"), "--data-dir", str(trained_store))
    assert r.returncode == 2 and "holds rows but no readable foreign.jsonl.job.json" in r.stderr
    assert (tmp_path / "foreign.jsonl").read_text() == "not json\n"  # left as it was
    assert not os.path.exists(tmp_path / "o.jsonl")
    r = run_cli("rerank-batch", str(path), str(tmp_path / "foreign.jsonl"), "--overwrite", "--address", "127.0.0.1:9",
                "--timeout", "2")  # no server there: it emptied the OUTPUT it was told to overwrite, then stopped
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "foreign.jsonl").read_text() == "not json\n"


def test_ray_refuses_a_model_of_another_embedder_before_starting_ray(trained_store, batch_input, tmp_path):
    """A store whose own model was trained for another embedder: one line from the driver, as serving refuses it (it
    was found in each actor, under Ray's traceback)."""
    pytest.importorskip("ray")
    path, _ = batch_input
    (tmp_path / "other").mkdir()
    other = vector_store(tmp_path / "other", "rand8", [("d1", ["a", "b"], unit_vectors(2, 8))])
    shutil.copy(trained_store / CHECKPOINT, other / CHECKPOINT)
    # a cluster address where none listens: a check made after joining would say "cannot join the Ray cluster"
    r = run_cli("rerank-batch", str(path), str(tmp_path / "o.jsonl"), "--data-dir", str(other), "--ray", "127.0.0.1:1")
    assert r.returncode == 2 and f"was trained on embedder {MINILM_NAME!r}, the store uses 'rand8'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "cannot join" not in r.stderr


def test_ray_refuses_more_cpus_per_actor_than_the_cluster_has(trained_store, batch_input, tmp_path):
    """No actor could be placed, and the job waited for ever with an empty OUTPUT."""
    path, _ = batch_input
    r = run_cli("rerank-batch", str(path), str(tmp_path / "o.jsonl"), "--data-dir", str(trained_store), "--ray",
                "--ray-cpus", str(os.cpu_count() + 1), timeout=180)
    assert r.returncode == 2 and f"--ray-cpus {os.cpu_count() + 1} is more than the {os.cpu_count()} CPUs of the Ray " \
        "cluster's largest node: no actor could start" in r.stderr, r.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_an_output_of_another_store_or_no_job_is_refused_not_taken_over(trained_store, batch_input, tmp_path):
    """A rerun on another store was taken for a resume (stores served by the general model share its version), and an
    existing OUTPUT of other lines was resumed into: its last line cut as torn, its ids taken for rows answered."""
    path, _ = batch_input
    small = tmp_path / "in.jsonl"
    small.write_text("".join(path.read_text().splitlines(keepends=True)[:6]))
    out = tmp_path / "out.jsonl"
    assert run_cli("rerank-batch", str(small), str(out), "--data-dir", str(trained_store)).returncode == 0
    with open_store(trained_store, readonly=True) as store:
        assert json.loads((tmp_path / "out.jsonl.job.json").read_text())["store_id"] == store.store_id
    out.write_bytes(b"".join(out.read_bytes().splitlines(keepends=True)[:3]))  # as if interrupted
    (tmp_path / "other").mkdir()
    other = vector_store(tmp_path / "other", "rand8", [(f"o{i}", [f"Other {i}.{j}" for j in range(4)],
                                                        unit_vectors(4, 8, seed=i)) for i in range(3)])
    before = out.read_bytes()
    r = run_cli("rerank-batch", str(small), str(out), "--data-dir", str(other))
    with open_store(other, readonly=True) as o, open_store(trained_store, readonly=True) as t:
        said = f"the store {t.store_id!r} then, {o.store_id!r} now (its store_id: `nextpara info`)"
    assert r.returncode == 2 and "was begun with other settings (" in r.stderr and said in r.stderr, r.stderr
    assert out.read_bytes() == before
    job = tmp_path / "out.jsonl.job.json"
    settings = json.loads(job.read_text())
    for damaged in ("garbage{", None):  # rows whose settings are unknown: the other store's run went on with them
        job.unlink()
        if damaged:
            job.write_text(damaged)
        r = run_cli("rerank-batch", str(small), str(out), "--data-dir", str(other))
        assert r.returncode == 2 and "holds rows but no readable out.jsonl.job.json" in r.stderr, r.stderr
        assert out.read_bytes() == before
    job.write_text(json.dumps({k: v for k, v in settings.items() if k != "store_id"}))  # a job file from before store_id
    r = run_cli("rerank-batch", str(small), str(out), "--data-dir", str(trained_store))
    assert r.returncode == 0 and "3 already in OUTPUT skipped" in r.stdout, r.stdout + r.stderr
    assert json.loads(job.read_text()) == settings  # completed, so that the next rerun is checked for its store

    mine = tmp_path / "mydata.jsonl"
    for text in ('{"id": "a", "v": 1}\n{"id": "b", "v": 2}', '{"id": "a", "v": 1}',  # the user's own lines
                 small.read_text()):  # or INPUT and OUTPUT swapped
        mine.write_text(text)
        r = run_cli("rerank-batch", str(small), str(mine), "--data-dir", str(trained_store))
        assert r.returncode == 2 and "give another OUTPUT, or --overwrite" in r.stderr, r.stderr
        assert mine.read_text() == text
    r = run_cli("rerank-batch", str(small), str(tmp_path / "ranked.parquet"), "--data-dir", str(trained_store))
    assert r.returncode == 2 and "rows are written as JSON Lines, whatever the name" in r.stderr
    (tmp_path / "adir").mkdir()
    r = run_cli("rerank-batch", str(small), str(tmp_path / "adir"), "--data-dir", str(trained_store))
    assert r.returncode == 2 and f"OUTPUT {tmp_path / 'adir'} cannot be written: Is a directory" in r.stderr, r.stderr


def test_a_text_row_on_a_store_of_precomputed_vectors_is_its_error(tmp_path):
    """Such a store cannot embed text: the row saying one is its error, and the others are answered (the in-process
    engine embedded every text of a chunk in one call, so the one row stopped the whole job, its chunk's rows lost;
    the service engine already did this)."""
    from nextpara.attention_core.train_config import TrainConfig
    from nextpara.attention_core.train_flow import train

    vecs = unit_vectors(72, 8, seed=3, clusters=6)
    store = vector_store(tmp_path, "toy8", [(f"d{i}", [f"Doc {i} paragraph {j}." for j in range(6)], vecs[6 * i:6 * i + 6])
                                            for i in range(12)])
    train(store, cfg=TrainConfig(phase1_epochs=1, phase2_epochs=1, batch_size=16, val_queries=5, n_candidates=10),
          quiet=True, force=True)
    rows = [{"id": "a", "context": [1, 2]}, {"id": "b", "context": [3, "a text"]},
            {"id": "c", "context": [4], "candidates": [5, "another text", 6]}, {"id": "d", "context": [7]}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run_cli("rerank-batch", str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), "--data-dir", str(store))
    assert r.returncode == 0, r.stderr
    out = {o["id"]: o for o in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert "results" in out["a"] and "results" in out["d"]
    assert out["b"]["error"].startswith("context[1]: embedder 'toy8' holds precomputed vectors and cannot embed text")
    assert out["c"]["error"].startswith("candidates[1]: embedder 'toy8' holds precomputed vectors")


def test_a_rerun_with_another_input_is_refused_and_one_with_rows_appended_resumes(trained_store, batch_input, tmp_path):
    """Rows are resumed by id, so a rerun whose INPUT gives an answered id another row kept the old row's answer;
    OUTPUT.job.json now keeps the INPUT's size and sha256, and a rerun whose INPUT does not begin with those bytes is
    refused (exit 2) with OUTPUT as it was, while rows appended to the INPUT are resumed as new rows."""
    path, _ = batch_input
    lines = path.read_text().splitlines(keepends=True)[:12]
    given = tmp_path / "in.jsonl"
    given.write_text("".join(lines[:8]))
    out = tmp_path / "out.jsonl"
    base = ["rerank-batch", str(given), str(out), "--data-dir", str(trained_store)]
    assert run_cli(*base).returncode == 0
    answered = out.read_bytes()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    edited = [json.dumps({**second, "id": first["id"]}) + "\n", *lines[1:8]]  # the first id, another row
    given.write_text("".join(edited))
    r = run_cli(*base)
    assert r.returncode == 2 and f"{given} is not the INPUT {out} was begun with: its first " \
        f"{len(''.join(lines[:8]).encode())} bytes are not those its rows were made from" in r.stderr, r.stderr
    assert out.read_bytes() == answered
    given.write_text("".join(lines))  # the first 8 rows as they were, and 4 more
    r = run_cli(*base)
    assert r.returncode == 0 and "8 already in OUTPUT skipped" in r.stdout, r.stdout + r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert out.read_bytes().startswith(answered) and [row["id"] for row in rows] == [json.loads(x)["id"] for x in lines]
    cut = "".join(lines[:12])[:-1]  # a last line without its newline (being written, say), answered as it stood;
    given.write_text(cut)  # then the line grows
    r = run_cli(*base, "--overwrite")
    assert r.returncode == 0, r.stderr
    given.write_text(cut + ' \n' + lines[0])
    r = run_cli(*base)
    assert r.returncode == 2 and f"the line its first {len(cut.encode())} bytes ended in, without a newline, has grown " \
        "since" in r.stderr, r.stderr


def test_a_resume_after_the_store_was_written_says_its_rows_differ_in_generation(trained_store, batch_input, tmp_path):
    """A job resumed after a write to its store went on without a word, its later rows able to find what its earlier
    could not; now it says at which index generation the rows so far were ranked and at which it ranks the rest (a
    live store's writes are no reason to refuse), and OUTPUT.job.json keeps the first."""
    from nextpara.store.ingest import build

    path, _ = batch_input
    store = tmp_path / "store"
    shutil.copytree(trained_store, store, ignore=shutil.ignore_patterns("write.lock"))
    given = tmp_path / "in.jsonl"
    given.write_text("".join(path.read_text().splitlines(keepends=True)[:6]))
    out = tmp_path / "out.jsonl"
    assert run_cli("rerank-batch", str(given), str(out), "--data-dir", str(store)).returncode == 0
    then = json.loads((tmp_path / "out.jsonl.job.json").read_text())["index_version"]
    out.write_bytes(b"".join(out.read_bytes().splitlines(keepends=True)[:3]))  # as if interrupted
    corpus = tmp_path / "more.jsonl"
    corpus.write_text(json.dumps({"doc_id": "written-since", "paragraphs": ["A paragraph written after the job began."]})
                      + "\n")
    build(str(corpus), store, quiet=True)
    with open_store(store, readonly=True) as opened:
        now = opened.index_generation
    assert now > then
    r = run_cli("rerank-batch", str(given), str(out), "--data-dir", str(store))
    assert r.returncode == 0 and "3 already in OUTPUT skipped" in r.stdout, r.stdout + r.stderr
    assert f"were ranked at index generation {then}, and the store is at {now} now" in r.stderr, r.stderr
    assert json.loads((tmp_path / "out.jsonl.job.json").read_text())["index_version"] == then


def test_a_rerun_with_other_settings_is_refused_not_mixed(trained_store, batch_input, tmp_path):
    """Rows of -k 4 without texts, then a rerun with -k 5 and texts, went into one OUTPUT without a word: OUTPUT.job.json
    says what made its rows, and a rerun with other settings is refused (exit 2) with OUTPUT as it was."""
    path, _ = batch_input
    small = tmp_path / "in.jsonl"
    small.write_text("".join(path.read_text().splitlines(keepends=True)[:12]))
    out = tmp_path / "out.jsonl"
    base = ["rerank-batch", str(small), str(out), "--data-dir", str(trained_store)]
    assert run_cli(*base, "-k", "4", "--no-text").returncode == 0
    settings = json.loads((tmp_path / "out.jsonl.job.json").read_text())
    assert settings["top_k"] == 4 and settings["with_text"] is False and settings["model_version"]
    kept = out.read_bytes().splitlines(keepends=True)[:6]
    out.write_bytes(b"".join(kept))  # as if the job had been interrupted
    r = run_cli(*base, "-k", "5")
    assert r.returncode == 2 and "was begun with other settings (-k 4 then, -k 5 now; --no-text then, texts now; " \
        "out.jsonl.job.json): rerun with those, or --overwrite to start over" in r.stderr, r.stderr  # the flags
    assert out.read_bytes() == b"".join(kept)
    r = run_cli(*base, "-k", "4", "--no-text")  # the same settings resume
    assert r.returncode == 0 and "6 already in OUTPUT skipped" in r.stdout, r.stdout + r.stderr
    r = run_cli(*base, "-k", "5", "--overwrite")  # and --overwrite starts over, with the new settings
    assert r.returncode == 0 and json.loads((tmp_path / "out.jsonl.job.json").read_text())["top_k"] == 5
