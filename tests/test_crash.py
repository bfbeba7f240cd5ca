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
from conftest import write_vector_corpus
from nextpara.attention_core.data_dir import open_store

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


def kill_after_ack(corpus, data, n_acks: int, jitter: float):
    """Start a build, SIGKILL it ``jitter`` seconds after its n-th acknowledged batch; return the acks seen."""
    proc = start_build(corpus, data)
    acks = []
    if n_acks == 0:
        time.sleep(jitter)
    else:
        for line in proc.stderr:
            if m := ACK.search(line):
                acks.append(m.group(1))
                if len(acks) == n_acks:
                    break
        time.sleep(jitter)
    proc.send_signal(signal.SIGKILL)
    _, rest = proc.communicate(timeout=60)
    return acks + ACK.findall(rest)


@pytest.mark.slow
def test_sigkill_during_build_never_loses_acknowledged_documents(tmp_path):
    corpus = tmp_path / "big.jsonl"
    write_vector_corpus(corpus, N_DOCS, N_PAR, DIM, seed=5)
    n_batches = N_DOCS * N_PAR // 300
    rng = random.Random(1234)
    # kill before the first write, at random points between acknowledged batches, and during the final snapshot
    plan = [(0, 1.0)] + [(rng.randint(1, n_batches - 1), rng.uniform(0, 0.05)) for _ in range(6)] + [(n_batches, 0.0)]
    partial = 0
    for attempt, (n_acks, jitter) in enumerate(plan):
        data = tmp_path / f"store{attempt}"
        acks = kill_after_ack(corpus, data, n_acks, jitter)
        assert len(acks) >= n_acks
        if (data / "paragraphs.sqlite").exists():
            stored = check_store(data, acks[-1] if acks else None)
            partial += 0 < stored < N_DOCS
    assert partial >= 5, "too few kills landed mid-build to prove anything"
    finish = start_build(corpus, data)  # the last killed store resumes to completion
    assert finish.wait(timeout=300) == 0, finish.stderr.read()
    assert check_store(data, f"doc-{N_DOCS - 1:05d}") == N_DOCS
