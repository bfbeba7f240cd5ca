"""A build killed with SIGKILL at random moments leaves a store that loads, whole documents only,
with every acknowledged batch present, and the FAISS index agreeing with SQLite id for id."""

import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from nextpara.attention_core.store import open_store

from conftest import write_vector_corpus

N_DOCS, N_PAR, DIM = 1500, 20, 64
ACK = re.compile(r"stored \d+ documents through '(doc-\d+)'")


def start_build(corpus, data):
    return subprocess.Popen(
        [sys.executable, "-m", "nextpara", "build", "--corpus", str(corpus), "--data-dir", str(data),
         "--embedder", "precomputed:rand64", "--batch-paragraphs", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def check_store(data, acknowledged_through: str | None):
    with open_store(data) as store:  # writable: the dead writer's lock must be gone
        db = sqlite3.connect(data / "paragraphs.sqlite")
        docs = dict(db.execute("SELECT doc_id, n_paragraphs FROM documents"))
        per_doc = dict(db.execute("SELECT doc_id, COUNT(*) FROM paragraphs GROUP BY doc_id"))
        assert docs == per_doc, "a document is partial"
        assert all(n == N_PAR for n in docs.values())
        sql_ids = np.fromiter((r[0] for r in db.execute("SELECT id FROM paragraphs ORDER BY id")), np.int64)
        np.testing.assert_array_equal(np.setdiff1d(store.index.ids(), list(store.index.tombstones)), sql_ids)
        assert store.count_paragraphs() == len(sql_ids) == store.info()["paragraphs"]
        if acknowledged_through is not None:
            assert acknowledged_through in docs and len(docs) >= int(acknowledged_through.split("-")[1]) + 1
        if len(sql_ids):
            sample = sql_ids[:: max(1, len(sql_ids) // 50)]
            _, found = store.search(store.vectors(sample), 1)
            np.testing.assert_array_equal(found[:, 0], sample)
        db.close()
        return len(docs)


def timed_reference_run(corpus, data):
    """Seconds from start to the first acknowledged batch, and to the end, of an uninterrupted build."""
    t0 = time.monotonic()
    proc = start_build(corpus, data)
    first_ack = None
    for line in proc.stderr:
        if first_ack is None and ACK.search(line):
            first_ack = time.monotonic() - t0
    assert proc.wait(timeout=300) == 0 and first_ack is not None
    return first_ack, time.monotonic() - t0


@pytest.mark.slow
def test_sigkill_during_build_never_loses_acknowledged_documents(tmp_path):
    corpus = tmp_path / "big.jsonl"
    write_vector_corpus(corpus, N_DOCS, N_PAR, DIM, seed=5)
    first_ack, end = timed_reference_run(corpus, tmp_path / "reference")
    assert check_store(tmp_path / "reference", f"doc-{N_DOCS - 1:05d}") == N_DOCS
    rng = random.Random(1234)
    partial = 0
    for attempt in range(8):  # each a fresh store, killed somewhere between just before the first write and the end
        data = tmp_path / f"store{attempt}"
        proc = start_build(corpus, data)
        time.sleep(rng.uniform(max(0.1, first_ack - 0.5), end))
        proc.send_signal(signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
        acks = ACK.findall(stderr)
        if (data / "paragraphs.sqlite").exists():
            stored = check_store(data, acks[-1] if acks else None)
            partial += 0 < stored < N_DOCS
    assert partial >= 3, "too few kills landed mid-build to prove anything"
    finish = start_build(corpus, data)  # the last killed store resumes to completion
    assert finish.wait(timeout=300) == 0, finish.stderr.read()
    assert check_store(data, f"doc-{N_DOCS - 1:05d}") == N_DOCS
