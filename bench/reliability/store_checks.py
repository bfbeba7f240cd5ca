"""The checks a store must pass after a kill, a full disk or a backup, and the helpers that drive them.

``check_store(data, acknowledged)`` opens the data directory as a writer (a dead writer's lock must
not block it) and reports partial documents, acknowledged documents lost, whether the FAISS index
holds exactly SQLite's paragraph ids and finds a sample of stored vectors, and whether a fresh
``nextpara serve`` on it answers GetInfo with SQLite's counts. Used by fault_injection.py and the tests.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np


def write_vector_corpus(path: Path, n_docs: int, n_paragraphs: int, dim: int, seed: int = 0, prefix: str = "doc") -> list[dict]:
    """A JSONL corpus with precomputed unit vectors; returns the documents written."""
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n_docs * n_paragraphs, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    docs = []
    with open(path, "w") as f:
        for d in range(n_docs):
            doc = {"doc_id": f"{prefix}-{d:05d}", "title": f"Document {d}",
                   "paragraphs": [f"Paragraph {p} of document {d}, seed {seed}." for p in range(n_paragraphs)],
                   "vectors": vecs[d * n_paragraphs:(d + 1) * n_paragraphs].round(6).tolist()}
            f.write(json.dumps(doc) + "\n")
            docs.append(doc)
    return docs


def nextpara(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nextpara", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kwargs)


def server(data: Path, *extra: str):
    """A ``nextpara serve`` process on ``data`` (not started): free ports on 127.0.0.1, 1 s of grace at SIGTERM;
    a store without a model serves writes, so that counts as started."""
    from nextpara.server.process import ServerProcess

    return ServerProcess.local(data, "--grace-seconds", "1", *extra, require_model=False)


def check_store(data: Path, acknowledged: set[str], serve: bool = True) -> dict:
    """What a kill (or a backup) left behind: counts of partial and lost documents, and whether index and SQLite
    agree; with ``serve``, also whether a server started on it agrees (None without)."""
    from nextpara.client import Client
    from nextpara.store.store import open_store

    out = {"loadable": False, "documents": 0, "partial": 0, "lost": 0, "index_agrees": False, "getinfo_agrees": False,
           "words_agree": False}
    if not (data / "paragraphs.sqlite").exists():  # killed before the store was created: nothing was acknowledged
        out.update(loadable=True, index_agrees=True, getinfo_agrees=True, words_agree=True, lost=len(acknowledged))
        return out
    with open_store(data) as store:  # writable: the dead writer's lock must be gone
        out["loadable"] = True
        db = sqlite3.connect(data / "paragraphs.sqlite")
        try:
            docs = dict(db.execute("SELECT doc_id, n_paragraphs FROM documents"))
            per_doc = dict(db.execute("SELECT doc_id, COUNT(*) FROM paragraphs GROUP BY doc_id"))
            sql_ids = np.fromiter((r[0] for r in db.execute("SELECT id FROM paragraphs ORDER BY id")), np.int64)
        finally:
            db.close()
        out["documents"] = len(docs)
        out["partial"] = sum(per_doc.get(d, 0) != n for d, n in docs.items()) + len(set(per_doc) - set(docs))
        out["lost"] = len(acknowledged - set(docs))
        live = np.setdiff1d(store.index.ids(), np.asarray(sorted(store.index.tombstones), np.int64))
        out["words_agree"] = store.words.agrees_with_paragraphs()  # the FTS5 word index holds exactly the paragraphs
        out["index_agrees"] = bool(np.array_equal(live, sql_ids) and store.count_paragraphs() == len(sql_ids))
        if len(sql_ids):
            sample = sql_ids[:: max(1, len(sql_ids) // 50)]
            out["index_agrees"] &= bool(np.array_equal(store.search(store.vectors(sample), 1)[1][:, 0], sample))
    if not serve:
        out["getinfo_agrees"] = None
        return out
    with server(data) as s, Client(s.address, timeout=30) as c:
        info = c.info()
    out["getinfo_agrees"] = info.documents == len(docs) and info.paragraphs == len(sql_ids)
    return out
